"""A terminal inside an environment: a tmux session the harness types into and reads the screen of.

The terminal harness (Terminus) and the replay of recorded keystrokes both use it. Keystrokes go
to `tmux send-keys` as Terminus-2 sends them: a string that is a tmux key name (`C-c`, `Escape`)
is that key, anything else is typed literally, a newline being Enter. Literal text is sent as
hex key codes (`send-keys -H`), so the text never appears in a command line inside the machine
(an agent typing `pkill -f server` must not hit the harness's own tmux call).
The tmux server runs on its own socket (`-L swe-residual`), so a state's snapshot never mistakes
it for one of the machine's processes, and an agent's own tmux sessions do not collide with it.
Every tmux call is one command through the environment (Environment.execute), so the terminal
works on any backend whose processes outlive a command.
"""

from __future__ import annotations

import re
import shlex
import time

from swe_residual.backends.base import Environment
from swe_residual.backends.machine.snapshot import TMUX_SOCKET
from swe_residual.errors import HarnessError

TMUX_INSTALL = (
    "command -v tmux >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq tmux) "
    ">/dev/null 2>&1 || (apk add --no-cache tmux) >/dev/null 2>&1; }; command -v tmux"
)
SHELLS = ("bash", "sh", "dash", "zsh")
IDLE_CAP_S = 30.0  # waiting for an unknown duration stops here
KEY_NAME = re.compile(
    r"((C|M|S)-)+\S|((C|M|S)-)*(Enter|Escape|Tab|BTab|BSpace|Space|Up|Down|Left|Right|Home|End|"
    r"PageUp|PageDown|PPage|NPage|DC|IC|F[1-9]|F1[0-2])"
)  # whole strings: fullmatch
HEX_CHUNK = 2048  # key codes per send-keys call


class TmuxTerminal:
    def __init__(self, env: Environment, *, session: str = "main", width: int = 160, height: int = 40):
        self.env = env
        self.session = session
        self.width, self.height = width, height
        self.started = False
        self._previous: str | None = None

    def _tmux(self, *args: str, timeout: float = 30.0, _again: bool = True) -> str:
        cmd = shlex.join(["tmux", "-L", TMUX_SOCKET, *args])
        res = self.env.execute(cmd, timeout=timeout, env={"TERM": "xterm-256color"})
        gone = "no server running" in res.output or "can't find session" in res.output
        if res.exit_code != 0 and gone and _again and self.started and args[0] != "new-session":
            # what runs in the terminal killed the terminal (`pkill tmux`, `exit`): a new session,
            # as a user would open a new terminal, and the call again
            self.started, self._previous = False, None
            self.start()
            return self._tmux(*args, timeout=timeout, _again=False)
        if res.exit_code != 0:
            raise HarnessError(
                f"terminal: `tmux {args[0]}` failed (exit {res.exit_code}): "
                f"{(res.output.strip().splitlines() or ['no output'])[-1][:200]}"
            )
        return res.output

    def start(self) -> None:
        """Start the session (installing tmux when the image has none, as Terminus does)."""
        if self.started:
            return
        res = self.env.execute(TMUX_INSTALL, timeout=300)
        if res.exit_code != 0 or "tmux" not in res.output:
            raise HarnessError(
                "terminal: tmux is not installed in the environment and could not be installed "
                "(apt-get/apk failed or no network)"
            )
        self._tmux(
            "new-session",
            "-d",
            "-s",
            self.session,
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            "bash",
            "--login",
        )
        self._tmux("set-option", "-g", "history-limit", "100000")
        self.started = True

    def send(self, keys: str) -> None:
        """Type `keys` (nothing for an empty string: a pure wait)."""
        self.start()
        if not keys:
            return
        if KEY_NAME.fullmatch(keys):
            self._tmux("send-keys", "-t", self.session, keys)
            return
        codes = [f"{b:02x}" for b in keys.encode("utf-8", "surrogateescape")]
        for i in range(0, len(codes), HEX_CHUNK):
            self._tmux("send-keys", "-t", self.session, "-H", *codes[i : i + HEX_CHUNK])

    def busy(self) -> bool:
        """Is something other than the shell running in the foreground of the pane?"""
        out = self._tmux("display-message", "-p", "-t", self.session, "#{pane_current_command}").strip()
        return out not in SHELLS

    def wait(self, seconds: float | None, cap: float = IDLE_CAP_S) -> None:
        """Wait `seconds`; None: until the shell is idle again (at most `cap` seconds)."""
        if seconds is not None:
            time.sleep(max(0.0, seconds))
            return
        deadline = time.monotonic() + cap
        time.sleep(0.1)
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.2)

    def settle(self, cap: float, polls: int = 3) -> bool:
        """Wait until the shell is in the foreground for `polls` looks in a row (0.2 s apart): what
        was typed ahead has run, not just its first command. False when `cap` seconds passed first."""
        deadline, idle = time.monotonic() + cap, 0
        while time.monotonic() < deadline:
            idle = 0 if self.busy() else idle + 1
            if idle >= polls:
                return True
            time.sleep(0.2)
        return False

    def screen(self) -> str:
        """The visible screen."""
        self.start()
        return self._tmux("capture-pane", "-p", "-t", self.session).rstrip() + "\n"

    def history(self) -> str:
        """Everything the pane showed (without the empty rows below the cursor)."""
        self.start()
        return self._tmux("capture-pane", "-p", "-S", "-", "-t", self.session).rstrip() + "\n"

    def incremental(self) -> str:
        """What appeared since the last call (Terminus-2's observation), else the current screen."""
        current = self.history()
        previous, self._previous = self._previous, current
        if previous is not None:
            old = previous.rstrip()
            if old and old in current:
                new = current[current.index(old) + len(old) :]
                if new.strip():
                    return "New Terminal Output:\n" + new.lstrip("\n")
        return "Current Terminal Screen:\n" + self.screen()
