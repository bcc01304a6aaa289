"""The live display of a run's progress (swe_residual.progress), drawn by the controller alone:
LiveView, registered by the controller's configure step when --progress is not off."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from swe_residual.progress import EventChannel, RunDisplay, RunProgress
from swe_residual.run.session import RunSession


class _TerminalOut:
    """Progress lines to the terminal pytest writes to, past pytest's output capture: the display
    draws from its own thread while a case runs (without xdist, with fd 1 captured), so it writes
    to a copy of fd 1 taken at configure time, when nothing is captured."""

    def __init__(self) -> None:
        try:
            self.stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")
            self._own = True
        except (AttributeError, OSError, ValueError):  # no real stdout (an embedding runner)
            self.stream, self._own = sys.stdout, False
        self.tw = None  # pytest's terminal writer, once it exists: where its current line ends
        self._mark: int | None = None

    def write_line(self, text: str) -> None:
        """`text` on a line of its own, also when pytest's progress letters left a line open."""
        width = self.tw.width_of_current_line if self.tw is not None else 0
        prefix = "\n" if width and width != self._mark else ""
        self._mark = width
        try:
            self.stream.write(prefix + text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._own:
            try:
                self.stream.close()
            except OSError:
                pass


class LiveView:
    """The run's progress on the controller (swe_residual.progress). Workers send their events
    through a channel file in a private temp dir; the controller's own session (every case without
    xdist, crash records with it) applies them directly. Only the controller draws; with the live
    display pytest's progress letters are left out (the display counts the cases instead)."""

    def __init__(self, config: pytest.Config, session: RunSession, mode: str):
        self.config, self.session, self.mode = config, session, mode
        self.dir = Path(tempfile.mkdtemp(prefix="swe-residual-progress-"))
        self.channel = EventChannel(self.dir / "events.jsonl")
        self.progress = RunProgress(workers=int(getattr(config.option, "numprocesses", 0) or 0))
        self.out = _TerminalOut()
        self.display = RunDisplay(
            self.progress,
            mode,
            stream=self.out.stream,
            write_line=self.out.write_line,
            interval=config.getoption("swe_progress_interval"),
            poll=self.channel.receive,
        )
        session.events = self.progress.apply
        self.shown = False

    def cases(self, collected: list[str]) -> None:
        """The cases this run will run (after -k, --resume): the display's total."""
        self.progress.total = len(collected)
        self.progress.kept = len(self.session.valid_before)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        if self.shown:
            return
        self.shown = True  # the first case starts: pytest's header and xdist's worker lines are out
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        self.out.tw = self.config.get_terminal_writer() if reporter is not None else None
        if self.display.mode == "plain":
            cluster = self.session.cluster
            workers = (
                f" on the cluster at {cluster}"
                if cluster
                else f" on {self.progress.workers} workers"
                if self.progress.workers
                else ""
            )
            self.out.write_line(
                f"swe-residual: running {self.progress.total} cases{workers}; a progress line "
                f"every {self.display.interval:g} s"
            )
        self.display.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report, config):
        result = yield
        if self.display.mode == "live" and self.display.started and result:
            return result[0], "", ""  # no letter tears the live display; the category is kept
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        try:
            return (yield)
        finally:
            self.stop()

    def stop(self) -> None:
        """The display ends (the live one is erased) and the final line says what ran."""
        if self.display.started:
            self.display.stop()
            self.out.write_line(self.progress.final_line())

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.display.stop()
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)
