"""Drive headless Chromium through the DevTools protocol over a pipe (standard library only).

`--remote-debugging-pipe` makes Chromium read JSON commands from fd 3 and write answers and
events to fd 4, each message ended by a NUL byte: no websocket client is needed. Pages type text
and click with real input events, so forms are submitted by the browser itself (cookies, Origin
header, redirects) exactly as for a reviewer.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, exe: str, user_data_dir: str):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # runs in the child before exec: the pipes become fd 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--no-proxy-server",
                "--disable-quic",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                f"--user-data-dir={user_data_dir}",
                "about:blank",
            ],
            preexec_fn=fds,  # noqa: PLW1509  (only async-signal-safe dup2 calls)
            pass_fds=(3, 4),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next = 0
        self._answers: dict[int, dict] = {}
        self.events: list[dict] = []

    def _pump(self, deadline: float) -> None:
        ready, _, _ = select.select([self._from_child], [], [], max(0.0, deadline - time.time()))
        if not ready:
            raise TimeoutError("no message from chromium in time")
        data = os.read(self._from_child, 1 << 16)
        if not data:
            raise CDPError(f"chromium closed the pipe (exit {self.proc.poll()})")
        self._buf += data
        while b"\0" in self._buf:
            raw, self._buf = self._buf.split(b"\0", 1)
            msg = json.loads(raw)
            if "id" in msg:
                self._answers[msg["id"]] = msg
            else:
                self.events.append(msg)

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30
    ) -> dict:
        self._next += 1
        msg: dict = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise CDPError(f"{method}: chromium is gone (exit {self.proc.poll()})") from None
        deadline = time.time() + timeout
        while self._next not in self._answers:
            self._pump(deadline)
        answer = self._answers.pop(self._next)
        if "error" in answer:
            raise CDPError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def wait_event(self, method: str, session: str, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method and ev.get("sessionId") == session:
                    return self.events.pop(i)
            self._pump(deadline)

    def new_page(self) -> Page:
        """A page in a browser context of its own (its own cookies: one reviewer per page)."""
        ctx = self.call("Target.createBrowserContext")["browserContextId"]
        target = self.call("Target.createTarget", {"url": "about:blank", "browserContextId": ctx})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=session)
        return Page(self, session)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (CDPError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def _forget_loads(self) -> None:
        self.browser.events = [
            e
            for e in self.browser.events
            if not (e.get("sessionId") == self.session and e.get("method") == "Page.loadEventFired")
        ]

    def goto(self, url: str) -> None:
        self._forget_loads()
        self.browser.call("Page.navigate", {"url": url}, self.session)
        self.browser.wait_event("Page.loadEventFired", self.session)

    def eval(self, expression: str):
        res = self.browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session
        )
        if "exceptionDetails" in res:
            raise CDPError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def click(self, selector: str, navigates: bool = False) -> None:
        """A mouse click in the middle of the element (pressed and released, like a user)."""
        self._forget_loads()
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.browser.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
                self.session,
            )
        if navigates:
            self.browser.wait_event("Page.loadEventFired", self.session)

    def type(self, selector: str, text: str) -> None:
        """Click into a field, then type text into it as keyboard input."""
        self.click(selector)
        self.browser.call("Input.insertText", {"text": text}, self.session)
