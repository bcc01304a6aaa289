"""Stage III at scale: 200 candidates on the review page, driven in headless Chromium with the keys
a reviewer uses (u next undecided, y/n, c comment, Esc, s save and next, j/k), the task filter and
the progress per reviewer. SWE_RESIDUAL_REQUIRE_CHROMIUM=1 makes a missing Chromium a failure."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from swe_residual.residualize.review import agreement, review_outcomes
from swe_residual.residualize.workdir import REVIEWS, WorkDir

from .test_html_report import chromium
from .test_residualize_review import TASKS, PageServer, small_patch, trajectory, write_run

N = 200
DEMO_TASKS = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())


def many_candidates(tmp_path: Path) -> Path:
    """N candidates c000..c199 over the demo tasks in turn (c000 on the first task, c001 on the
    second, ...), every tenth with a trajectory; written straight into the stage files."""
    wd = tmp_path / "wd"
    wd.mkdir()
    for i in range(N):
        traj = (
            trajectory([f"cat f{i}.py", "python -m pytest -q"], f"attempt {i}", "done")
            if i % 10 == 0
            else None
        )
        write_run(
            wd, f"c{i:03d}", DEMO_TASKS[i % len(DEMO_TASKS)], small_patch(f"gen/f{i:03d}.py", i), traj=traj
        )
    return wd


class Keys:
    """Key presses as real input events (Input.dispatchKeyEvent), as a reviewer's keyboard sends them."""

    CODES = {"Escape": ("Escape", 27)}

    def __init__(self, page):
        self.page = page

    def press(self, key: str, navigates: bool = False) -> None:
        b, s = self.page.browser, self.page.session
        if navigates:
            self.page._forget_loads()
        code, vk = self.CODES[key] if key in self.CODES else (f"Key{key.upper()}", ord(key.upper()))
        text = {} if key in self.CODES else {"text": key, "unmodifiedText": key}
        b.call(
            "Input.dispatchKeyEvent",
            {"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk, **text},
            s,
        )
        b.call(
            "Input.dispatchKeyEvent",
            {"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk},
            s,
        )
        if navigates:
            b.wait_event("Page.loadEventFired", s)


def timed_get(url: str, cookie: str) -> tuple[float, str]:
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Cookie": cookie}), timeout=60) as resp:
        body = resp.read().decode()
    return time.perf_counter() - t, body


@pytest.fixture
def big_server(tmp_path):
    wd = many_candidates(tmp_path)
    t = time.perf_counter()
    server = PageServer(wd)
    started = time.perf_counter() - t
    yield wd, server, started
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.communicate()


@pytest.mark.browser
def test_two_hundred_candidates_keyboard_flow_in_chromium(big_server, tmp_path, record_property):
    wd, server, started = big_server
    exe = chromium()
    from .chromium_cdp import Browser

    assert f"packets: {N} written" in "".join(server.printed)
    assert len(list((wd / "packets").iterdir())) == N
    # server-side time of the list (200 rows) and of one candidate page, as a reviewer's browser asks
    list_s, body = timed_get(server.url, "swe_residual_reviewer=alice")
    assert body.count("<tr data-candidate=") == N
    page_s, body = timed_get(server.url + "c/c100", "swe_residual_reviewer=alice")
    assert 'id="position">101 of 200<' in body
    record_property(
        "review_timings",
        json.dumps(
            {
                "serve_with_packets_s": round(started, 2),
                "list_200_s": round(list_s, 3),
                "candidate_s": round(page_s, 3),
            }
        ),
    )
    print(
        f"review --serve with {N} packets written: {started:.2f} s; list page: {list_s * 1000:.0f} ms; "
        f"candidate page: {page_s * 1000:.0f} ms"
    )
    assert list_s < 5 and page_s < 5  # generous: two busy CPUs

    browser = Browser(exe, str(tmp_path / "chromium"))
    try:
        page = browser.new_page()
        keys = Keys(page)
        text = lambda sel: page.eval(f"(document.querySelector({json.dumps(sel)}) || {{}}).textContent")
        here = lambda: page.eval("location.pathname")
        task_param = lambda: page.eval("new URLSearchParams(location.search).get('task')")

        page.goto(server.url)
        page.type("#name", "alice")
        t = time.perf_counter()
        page.click("#name-submit", navigates=True)
        browser_list_s = time.perf_counter() - t
        assert page.eval("document.querySelectorAll('#candidates tr[data-candidate]').length") == N
        assert page.eval("document.querySelector('.reviewer-progress').dataset.decided") == "0"
        assert text("#left") == f"{N} left for you"

        keys.press("u", navigates=True)  # the first undecided: c000
        assert here() == "/c/c000"
        # the decision form comes before the candidate's material, the keys are listed
        assert (
            page.eval(
                "document.getElementById('decision').compareDocumentPosition("
                "document.getElementById('request')) & Node.DOCUMENT_POSITION_FOLLOWING"
            )
            > 0
        )
        assert "y / n keep / reject the highlighted criterion" in text("#shortcuts")
        assert page.eval("document.getElementById('fs-task_directed').classList.contains('focus')") is True
        keys.press("y")  # task-directed: keep, then consistent is highlighted
        assert page.eval("document.getElementById('fs-consistent').classList.contains('focus')") is True
        keys.press("y")
        keys.press("c")
        browser.call("Input.insertText", {"text": "jk: letters typed in the comment are text"}, page.session)
        keys.press("Escape")
        t = time.perf_counter()
        keys.press("s", navigates=True)  # saved; on to the next undecided
        browser_save_s = time.perf_counter() - t
        assert here() == "/c/c001" and text("#saved") == "Decision on c000 saved."
        assert text("#position") == "2 of 200"
        assert (
            page.eval("document.querySelector('.reviewer-progress[data-reviewer=alice]').dataset.decided")
            == "1"
        )

        keys.press("j", navigates=True)
        assert here() == "/c/c002"
        keys.press("k", navigates=True)
        assert here() == "/c/c001"
        keys.press("y")
        keys.press("n")  # consistent: reject
        keys.press("s", navigates=True)
        assert here() == "/c/c002"

        # s without both criteria chosen: the server says so, nothing is recorded
        keys.press("n")
        keys.press("s", navigates=True)
        assert text("#error") == "choose keep or reject for both criteria" and here() == "/c/c002"

        # the filter by task: the keys stay inside it
        page.goto(server.url)
        task = f"demo/{DEMO_TASKS[1]}"
        page.eval(f"document.getElementById('task-filter').value = {json.dumps(task)}")
        page.click("#filter-submit", navigates=True)
        shown = page.eval(
            "[...document.querySelectorAll('#candidates tr[data-candidate]')].map(r => r.dataset.candidate)"
        )
        assert shown == [f"c{i:03d}" for i in range(1, N, len(DEMO_TASKS))]  # c001, c009, c017, ...
        keys.press("u", navigates=True)  # c001 is decided: the first undecided of the task is c009
        assert here() == "/c/c009" and task_param() == task
        assert text("#position") == f"2 of {len(shown)} in {task}"
        keys.press("j", navigates=True)
        assert here() == "/c/c017" and task_param() == task
        keys.press("y")
        keys.press("y")
        keys.press("s", navigates=True)  # next undecided within the task after c017
        assert here() == "/c/c025" and task_param() == task and text("#saved") == "Decision on c017 saved."

        # a second reviewer in their own browser context: progress per reviewer
        bob = browser.new_page()
        bob.goto(server.url)
        bob.type("#name", "bob")
        bob.click("#name-submit", navigates=True)
        bkeys = Keys(bob)
        bkeys.press("u", navigates=True)
        assert bob.eval("location.pathname") == "/c/c000"
        bkeys.press("y")
        bkeys.press("y")
        bkeys.press("s", navigates=True)
        progress = bob.eval(
            "[...document.querySelectorAll('.reviewer-progress')].map(e => [e.dataset.reviewer,"
            " e.dataset.decided, e.dataset.total])"
        )
        assert progress == [["bob", "1", "200"], ["alice", "3", "200"]]
        bob.goto(server.url + "c/c000")
        assert (
            "alice: task-directed yes, consistent yes - jk: letters typed in the comment are text"
            in bob.eval("document.getElementById('decisions').textContent")
        )
    finally:
        browser.close()
    print(
        f"chromium: list of {N} after sign-in {browser_list_s * 1000:.0f} ms; save and next {browser_save_s * 1000:.0f} ms"
    )

    lines = [json.loads(x) for x in (wd / REVIEWS).read_text().splitlines()]
    assert [(r["reviewer"], r["candidate"], r["task_directed"], r["consistent"]) for r in lines] == [
        ("alice", "c000", True, True),
        ("alice", "c001", True, False),
        ("alice", "c017", True, True),
        ("bob", "c000", True, True),
    ]
    assert lines[0]["comment"] == "jk: letters typed in the comment are text"
    w = WorkDir(wd)
    outcomes = review_outcomes(w)
    assert outcomes["c000"] == "kept" and sum(v == "pending" for v in outcomes.values()) == N - 1
    assert agreement(w)["candidates"] == 1
    code, _ = server.stop()
    assert code == 0
