"""The run's progress: the numbers (RunProgress), the worker -> controller channel, the plain and
live displays, and real suite runs under CI (plain lines), -q (silent) and a pseudo-terminal (live)."""

from __future__ import annotations

import io
import json
import os
import re
import select
import threading
from pathlib import Path

import pytest

from swe_residual.progress import EventChannel, Progress, RunDisplay, RunProgress, bar

from .drivers import environ, run_suite, suite_command, world

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_run_progress_counts_eta_tallies_and_the_slowest_case():
    clock = Clock()
    p = RunProgress(total=4, workers=2, clock=clock)
    p.apply({"kind": "prepare", "phase": "images", "key": "demo/calc", "status": "start", "worker": "gw0"})
    assert p.phase == "images"
    p.apply({"kind": "start", "case": "A-calc-clean", "worker": "gw0"})
    p.apply({"kind": "start", "case": "A-calc-residual-s", "worker": "gw1"})
    clock.t = 4.0
    assert p.phases_text() == "images 0 ready, 1 building (demo/calc on gw0, 4.0 s)"
    p.apply({"kind": "prepare", "phase": "images", "key": "demo/calc", "status": "done", "worker": "gw0"})
    assert p.phase == "cases" and p.phases_text() == "images 1 ready"
    clock.t = 10.0
    p.apply(
        {
            "kind": "record",
            "case": "A-calc-clean",
            "agent": "A",
            "start": "clean",
            "outcome": 1,
            "valid": True,
            "flagged": True,
        }
    )
    p.apply({"kind": "end", "case": "A-calc-clean"})
    # 1 of 4 done 10 s after the first start: 3 left at 10 s each -> ETA 30 s; the other case has
    # run 10 s since t = 0
    assert p.line() == (
        "swe-residual: 1/4 cases done, 1 running, 2 left, ETA 30 s; A: Residual 0/0, "
        "Clean 1/1 (100.0%); infra 0, flagged 1; slowest running: A-calc-residual-s "
        "(gw1, 10 s); images 1 ready"
    )
    # an infra record, then the rerun's valid failure; a handoff start counts as residual
    p.apply(
        {
            "kind": "record",
            "case": "A-calc-residual-s",
            "agent": "A",
            "start": "residual",
            "outcome": None,
            "valid": False,
        }
    )
    p.apply(
        {
            "kind": "record",
            "case": "A-calc-residual-s",
            "agent": "A",
            "start": "residual",
            "outcome": 0,
            "valid": True,
        }
    )
    p.apply(
        {
            "kind": "record",
            "case": "A-calc-residual-s+summary",
            "agent": "A",
            "start": "residual+summary",
            "outcome": 1,
            "valid": True,
        }
    )
    p.apply({"kind": "end", "case": "A-calc-residual-s"})
    p.apply({"kind": "bogus"})
    p.apply({"kind": "start"})  # malformed events are ignored
    clock.t = 20.0
    assert p.tallies()["A"]["residual"].text() == "1/2 (50.0%)"
    assert p.final_line() == (
        "swe-residual: 2/4 cases done in 20 s; A: Residual 1/2 (50.0%), Clean 1/1 (100.0%); "
        "infra 1, flagged 1"
    )


def test_run_progress_counts_a_cluster_runs_cases_per_node():
    p = RunProgress(total=3, clock=Clock())
    for case, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        p.apply({"kind": "start", "case": case, "worker": node, "node": node})
    p.apply({"kind": "end", "case": "a"})
    p.apply(
        {"kind": "start", "case": "b", "worker": "n1", "node": "n1"}
    )  # b again, after an infra error on n2
    assert p.nodes_text() == "nodes: n1 2 running, 1 done, n2 0 running, 0 done"
    p.apply({"kind": "end", "case": "b"})
    p.apply({"kind": "end", "case": "b"})  # a repeated end counts once
    assert "; nodes: n1 1 running, 2 done, n2 0 running, 0 done" in p.line()
    assert p.final_line().endswith("; cases per node: n1 2, n2 0")
    assert RunProgress(total=1).nodes_text() == ""  # a local run: no nodes


def test_event_channel_keeps_lines_of_concurrent_writers_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    reader = EventChannel(path)
    assert reader.receive() == []  # nothing written yet
    writers = [EventChannel(path) for _ in range(4)]

    def send(w: EventChannel, n: int) -> None:
        for i in range(200):
            w.send({"kind": "start", "case": f"w{n}-{i}", "pad": "x" * 300})

    threads = [threading.Thread(target=send, args=(w, n)) for n, w in enumerate(writers)]
    for t in threads:
        t.start()
    got = []
    while any(t.is_alive() for t in threads):
        got += reader.receive()
    for t in threads:
        t.join()
    got += reader.receive()
    assert sorted(e["case"] for e in got) == sorted(f"w{n}-{i}" for n in range(4) for i in range(200))
    # a torn last line (a writer killed mid-write) waits; a line that is not JSON is skipped
    with open(path, "ab") as fh:
        fh.write(b'not json\n{"kind": "end", "ca')
    assert reader.receive() == []
    with open(path, "ab") as fh:
        fh.write(b'se": "x"}\n')
    assert reader.receive() == [{"kind": "end", "case": "x"}]
    EventChannel(tmp_path / "no" / "such" / "dir" / "f").send({"kind": "start"})  # never raises


def test_plain_display_prints_lines_at_its_interval_and_stops():
    p = RunProgress(total=2)
    lines: list[str] = []
    queue = [[{"kind": "start", "case": "a"}], [{"kind": "end", "case": "a"}]]
    d = RunDisplay(
        p, "plain", write_line=lines.append, interval=0.2, poll=lambda: queue.pop(0) if queue else []
    )
    d.start()
    threading.Event().wait(1.0)
    d.stop()
    assert lines and all(line.startswith("swe-residual: ") for line in lines)
    assert "1/2 cases done" in lines[-1] and not d.started
    off = RunDisplay(RunProgress(total=1), "off", write_line=lines.append)
    off.start()
    assert not off.started


def test_loop_progress_bar_on_a_terminal_only():
    assert bar(5, 20, width=10) == "[##--------]" and bar(0, 0, width=4) == "[----]"
    live, clock = io.StringIO(), Clock()
    p = Progress(4, "states", label="validate", stream=live, live=True, clock=clock)
    p.advance()
    p.close()
    assert live.getvalue().startswith("\r\x1b[K[#####---------------] validate: 1/4 states (25%)")
    plain = io.StringIO()
    p = Progress(4, "states", label="validate", stream=plain, live=False, clock=clock)
    p.advance()
    p.abandon()  # a failed step: no final line
    assert plain.getvalue() == "validate: 1/4 states (25%)\n"


# -- real suite runs --------------------------------------------------------------------------------


def _env(**over: str) -> dict[str, str | None]:
    """No CI, BUILD_NUMBER or PYTEST_ADDOPTS of this process; `over` set."""
    return {"CI": None, "BUILD_NUMBER": None, "PYTEST_ADDOPTS": None, **over}


@pytest.mark.slow
def test_plain_progress_lines_under_ci_with_xdist(tmp_path):
    world(tmp_path)
    proc = run_suite(
        "--progress-interval", "0.2", world=tmp_path, agents=["oracle", "nop"], workers=2, env=_env(CI="1")
    )
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    lines = [line for line in out.splitlines() if line.startswith("swe-residual: ")]
    assert lines[0] == "swe-residual: running 4 cases on 2 workers; a progress line every 0.2 s"
    # the workers' events reach the controller: running cases, the running success per agent
    assert any(re.search(r"cases done, [12] running", line) for line in lines[1:-1]), lines
    assert any("slowest running: " in line and "(gw" in line for line in lines[1:-1]), lines
    assert re.fullmatch(
        r"swe-residual: 4/4 cases done in \S+ s; nop: Residual 0/1 \(0\.0%\), Clean 0/1 \(0\.0%\); "
        r"oracle: Residual 1/1 \(100\.0%\), Clean 1/1 \(100\.0%\); infra 0, flagged 0",
        lines[-1],
    ), lines[-1]
    assert "\x1b[" not in out  # no live drawing in a log


@pytest.mark.slow
def test_quiet_run_prints_no_progress(tmp_path):
    world(tmp_path)
    proc = run_suite("-q", world=tmp_path, agents=["oracle", "nop"], env=_env(CI="1"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "swe-residual: " not in proc.stdout and "Table 3" in proc.stdout


def _run_in_pty(cmd: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, bytes]:
    """Run cmd with a pseudo-terminal (120 x 40) as its stdout and controlling terminal."""
    import fcntl
    import pty
    import struct
    import termios
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: no Python-level cleanup may run here
        try:
            os.chdir(ROOT)
            os.execve(cmd[0], cmd, env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            out += data
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


@pytest.mark.slow
def test_live_display_on_a_terminal(tmp_path):
    world(tmp_path)
    code, raw = _run_in_pty(
        suite_command(world=tmp_path, agents=["oracle", "nop"], workers=2),
        environ(_env(COLUMNS="120", LINES="40", TERM="xterm")),
    )
    out = raw.decode("utf-8", "replace")
    assert code == 1, out[-3000:]
    # the display is redrawn in place (cursor up, erase line) with the phase, counts and ETA
    assert "\x1b[1A\x1b[2K" in out and "phase: cases" in out and "cases done" in out
    assert re.search(r"ETA \d", out) and "slowest running: " in out and "nop: Residual" in out
    # it is erased at the end; the final line, the nop lines and the tables follow as plain text
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out).replace("\r\n", "\n")
    final = [line for line in text.splitlines() if line.startswith("swe-residual: 4/4 cases done in ")]
    assert len(final) == 1, text[-3000:]
    tail = text.split(final[0], 1)[1]
    assert "Table 3 - success by track" in tail
    assert "expected failures of the built-in nop agent (it submits the starting state unchanged): 2" in tail
    # pytest's progress letters stay out of the display's way
    assert not re.search(r"^[.F]{2,}", text, re.M), text[:3000]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cases"]["recorded"] == 4
