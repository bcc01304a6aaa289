"""Progress of long steps: a reporter for loops (downloads, imports, builds, validation, export)
with counts, rate and ETA, and the live view of a suite run (RunProgress, RunDisplay, EventChannel).

On a terminal a loop's progress is one line with a bar, redrawn in place (at most 10 times a
second); anywhere else (a log, CI - the CI variable set - or a pipe) it is a plain line every
`interval` seconds, so a log stays readable and a stalled step still shows it is alive. Messages
printed through `note()` never tear the live line. Thread safe: workers may call `advance()` and
`note()` concurrently. Standard library only (the run's live display draws with rich, imported
only when it is shown).

    with Progress(len(todo), "trials", label="download") as p:
        for item in todo:
            ...
            p.advance(absent=n_absent)       # extra counters are shown after the rate
    # the last line: "download: 2000/2000 trials in 18.4 s (108.7/s); absent 12"
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

LIVE_REFRESH = 0.1
BAR_WIDTH = 20


def on_ci() -> bool:
    """A CI job (the CI variable most CI systems set, or Jenkins' BUILD_NUMBER): plain lines only."""
    return bool(os.environ.get("CI") or os.environ.get("BUILD_NUMBER"))


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """`[########------------]`: the share done as a text bar."""
    n = 0 if total <= 0 else min(width, int(width * done / total))
    return "[" + "#" * n + "-" * (width - n) + "]"


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 07 min`: short and unambiguous."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """Counts done out of `total` (None: unknown), with a rate and an ETA.

    live: None decides from `stream.isatty()`. clock: injectable for tests."""

    def __init__(
        self,
        total: int | None,
        what: str = "items",
        *,
        label: str = "",
        stream: TextIO | None = None,
        live: bool | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.what, self.label = total, what, label
        self.stream = stream if stream is not None else sys.stderr
        if live is None:
            live = bool(getattr(self.stream, "isatty", lambda: False)()) and not on_ci()
        self.live = live
        self.interval, self.clock = interval, clock
        self.done = 0
        self.counts: dict[str, int] = {}
        self.started = clock()
        self._last_draw = -1e18
        self._drawn = False  # a live line is on the screen
        self._closed = False
        self._lock = threading.RLock()

    # -- numbers ------------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return max(0.0, self.clock() - self.started)

    @property
    def rate(self) -> float | None:
        """Items per second since the start (None before the first one)."""
        e = self.elapsed
        return self.done / e if self.done and e > 0 else None

    @property
    def eta(self) -> float | None:
        r = self.rate
        if r is None or self.total is None:
            return None
        return max(0, self.total - self.done) / r

    def line(self) -> str:
        """The current state as one line."""
        head = f"{self.label}: " if self.label else ""
        if self.total is not None:
            pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            text = f"{head}{self.done}/{self.total} {self.what}{pct}"
        else:
            text = f"{head}{self.done} {self.what}"
        r = self.rate
        if self._closed:
            text += f" in {duration(self.elapsed)}" + (f" ({r:.1f}/s)" if r else "")
        elif r is not None:
            text += f", {r:.1f}/s"
            eta = self.eta
            if eta is not None and self.done < (self.total or 0):
                text += f", ETA {duration(eta)}"
        extra = [f"{k} {v}" for k, v in self.counts.items() if v]
        return text + ("; " + ", ".join(extra) if extra else "")

    # -- updates ------------------------------------------------------------------------------
    def advance(self, n: int = 1, **counts: int) -> None:
        """n more items done; `counts` add to the named counters (absent=2, failed=1, ...)."""
        with self._lock:
            self.done += n
            for k, v in counts.items():
                self.counts[k] = self.counts.get(k, 0) + v
            self._maybe_draw()

    def count(self, **counts: int) -> None:
        """Add to named counters without an item being done."""
        self.advance(0, **counts)

    def note(self, text: str, stream: TextIO | None = None) -> None:
        """Print a message line (to `stream`, default stdout) without breaking the live line."""
        with self._lock:
            self._clear()
            out = stream if stream is not None else sys.stdout
            out.write(text + "\n")
            out.flush()
            if self.live and not self._closed:
                self._draw()

    def close(self) -> str:
        """Print the final line (also when not live) and return it."""
        with self._lock:
            if self._closed:
                return self.line()
            self._closed = True
            self._clear()
            text = self.line()
            self.stream.write(text + "\n")
            self.stream.flush()
            return text

    def abandon(self) -> None:
        """Stop without a final line (the step failed and says why itself); a live line is cleared."""
        with self._lock:
            self._closed = True
            self._clear()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- drawing ------------------------------------------------------------------------------
    def _maybe_draw(self) -> None:
        if self._closed:
            return
        now = self.clock()
        if now - self._last_draw >= (LIVE_REFRESH if self.live else self.interval):
            self._last_draw = now
            self._draw()

    def _draw(self) -> None:
        text = self.line()
        if self.live:
            if self.total:
                text = f"{bar(self.done, self.total)} {text}"
            width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
            self.stream.write("\r\x1b[K" + text[:width])
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


# -- a suite run: what its processes report, and the display on the controller -------------------


class EventChannel:
    """Events of a run's worker processes for the controller's display: one JSON object per line,
    appended with a single write (O_APPEND keeps lines of concurrent writers whole) and read back
    by offset. Sending never fails a case: a channel that cannot be written drops the event."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._offset = 0

    def send(self, event: dict[str, Any]) -> None:
        line = (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode("utf-8", "replace")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            pass

    def receive(self) -> list[dict[str, Any]]:
        """The events appended since the last call (complete lines only)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        events = []
        for raw in data[:end].splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


PHASES = ("images", "snapshots")


@dataclass
class _Tally:
    """Successes and valid outcomes of one agent from one kind of start, so far."""

    success: int = 0
    n: int = 0

    def text(self) -> str:
        return f"{self.success}/{self.n} ({100 * self.success / self.n:.1f}%)" if self.n else "0/0"


@dataclass
class RunProgress:
    """What a suite run has done so far, from the events its processes send (RunSession.events):

    - `prepare` {phase: images|snapshots, key, status: start|done|failed}: a task's environment
      (image, base repository) or a state's (machine snapshot, state image) being made;
    - `start` {case}, `end` {case}: a case begins and ends (after its reruns);
    - `record` {case, agent, start, outcome, valid, flagged}: a record was appended.

    Every event may carry `worker`; a cluster run's `start` carries `node` (the node the attempt
    was placed on). Times are the controller's own clock at `apply`. Shown: cases done / running /
    left with an ETA, success so far per agent from each kind of start (valid outcomes, not yet
    task-weighted), `infra` (records without a valid verdict, one per attempt), `flagged` (valid
    runs with integrity flags), the case running longest and, on a cluster, the cases per node."""

    total: int = 0
    kept: int = 0  # --resume: cases with a valid verdict already, not run again
    workers: int = 0
    clock: Callable[[], float] = time.monotonic
    first_start: float | None = None
    running: dict[str, tuple[float, str]] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    outcomes: dict[str, tuple[str, str, int]] = field(
        default_factory=dict
    )  # case -> agent, start kind, outcome
    infra: int = 0
    flagged: set[str] = field(default_factory=set)
    preparing: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    ready: dict[str, set[str]] = field(default_factory=lambda: {p: set() for p in PHASES})
    failed: dict[str, set[str]] = field(default_factory=lambda: {p: set() for p in PHASES})
    node_of: dict[str, str] = field(default_factory=dict)  # case -> the node of its latest attempt
    node_done: dict[str, int] = field(default_factory=dict)  # node -> cases that ended there

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self.opened = self.clock()

    # -- events -----------------------------------------------------------------------------------
    def apply(self, event: dict[str, Any]) -> None:
        """Take one event into account (unknown or malformed events are ignored)."""
        with self._lock:
            kind, case, worker = event.get("kind"), str(event.get("case", "")), str(event.get("worker") or "")
            now = self.clock()
            if kind == "start" and case:
                self.first_start = now if self.first_start is None else self.first_start
                self.running[case] = (now, worker)
                if event.get("node"):
                    self.node_of[case] = str(event["node"])
                    self.node_done.setdefault(self.node_of[case], 0)
            elif kind == "end" and case:
                self.running.pop(case, None)
                if case not in self.ended and case in self.node_of:
                    node = self.node_of[case]
                    self.node_done[node] = self.node_done.get(node, 0) + 1
                self.ended.add(case)
            elif kind == "record" and case:
                if event.get("valid") and event.get("outcome") in (0, 1):
                    start = "clean" if event.get("start") == "clean" else "residual"
                    self.outcomes[case] = (str(event.get("agent", "?")), start, int(event["outcome"]))
                    if event.get("flagged"):
                        self.flagged.add(case)
                else:
                    self.infra += 1
            elif kind == "prepare" and event.get("phase") in PHASES:
                phase, key, status = event["phase"], str(event.get("key", "")), event.get("status")
                if status == "start":
                    self.preparing.setdefault((phase, key), (now, worker))
                else:
                    self.preparing.pop((phase, key), None)
                    (self.ready if status == "done" else self.failed)[phase].add(key)

    # -- numbers ----------------------------------------------------------------------------------
    @property
    def done(self) -> int:
        return len(self.ended)

    @property
    def elapsed(self) -> float:
        return max(0.0, self.clock() - self.opened)

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate cases have ended since the first one started."""
        if not self.done or self.first_start is None or self.done >= self.total:
            return None
        spent = self.clock() - self.first_start
        return (self.total - self.done) * spent / self.done if spent > 0 else None

    def tallies(self) -> dict[str, dict[str, _Tally]]:
        out: dict[str, dict[str, _Tally]] = {}
        for agent, start, outcome in self.outcomes.values():
            t = out.setdefault(agent, {"residual": _Tally(), "clean": _Tally()})[start]
            t.n += 1
            t.success += outcome
        return dict(sorted(out.items()))

    @property
    def phase(self) -> str:
        """What the run is busy with: preparing images or snapshots, or running cases."""
        busy = {phase for phase, _ in self.preparing}
        return next((p for p in PHASES if p in busy), "cases")

    def slowest(self) -> tuple[str, str, float] | None:
        """The case running longest: (case, worker, seconds)."""
        if not self.running:
            return None
        case, (since, worker) = min(self.running.items(), key=lambda kv: kv[1][0])
        return case, worker, self.clock() - since

    # -- text -------------------------------------------------------------------------------------
    def phases_text(self) -> str:
        parts = []
        now = self.clock()
        for phase in PHASES:
            busy = [(since, key, w) for (p, key), (since, w) in self.preparing.items() if p == phase]
            if not busy and not self.ready[phase] and not self.failed[phase]:
                continue
            text = f"{phase} {len(self.ready[phase])} ready"
            if self.failed[phase]:
                text += f", {len(self.failed[phase])} failed"
            if busy:
                since, key, w = min(busy)
                verb = "taking" if phase == "snapshots" else "building"
                text += f", {len(busy)} {verb} ({key}{' on ' + w if w else ''}, {duration(now - since)})"
            parts.append(text)
        return ", ".join(parts)

    def counts_text(self) -> str:
        left = max(0, self.total - self.done - len(self.running))
        text = f"{self.done}/{self.total} cases done, {len(self.running)} running, {left} left"
        eta = self.eta
        if eta is not None:
            text += f", ETA {duration(eta)}"
        if self.kept:
            text += f" ({self.kept} kept from the earlier run)"
        return text

    def agent_texts(self) -> list[str]:
        return [
            f"{agent}: Residual {t['residual'].text()}, Clean {t['clean'].text()}"
            for agent, t in self.tallies().items()
        ]

    def problems_text(self) -> str:
        text = f"infra {self.infra}, flagged {len(self.flagged)}"
        slow = self.slowest()
        if slow is not None:
            case, worker, seconds = slow
            text += f"; slowest running: {case} ({worker + ', ' if worker else ''}{duration(seconds)})"
        return text

    def nodes_text(self, running: bool = True) -> str:
        """A cluster run's cases per node (`n1 2 running, 5 done`); empty for a local run."""
        if not self.node_done:
            return ""
        busy: dict[str, int] = {}
        for case in self.running:
            if case in self.node_of:
                busy[self.node_of[case]] = busy.get(self.node_of[case], 0) + 1
        parts = [
            f"{node} {busy.get(node, 0)} running, {done} done" if running else f"{node} {done}"
            for node, done in sorted(self.node_done.items())
        ]
        return ("nodes: " if running else "cases per node: ") + ", ".join(parts)

    def line(self) -> str:
        """The state as one plain line (logs, CI)."""
        with self._lock:
            parts = [self.counts_text(), *self.agent_texts(), self.problems_text()]
            for extra in (self.nodes_text(), self.phases_text()):
                if extra:
                    parts.append(extra)
            return "swe-residual: " + "; ".join(parts)

    def final_line(self) -> str:
        """The line after the last case: how many ran, in how long, the running rates."""
        with self._lock:
            parts = [
                f"{self.done}/{self.total} cases done in {duration(self.elapsed)}",
                *self.agent_texts(),
                f"infra {self.infra}, flagged {len(self.flagged)}",
            ]
            nodes = self.nodes_text(running=False)
            return "swe-residual: " + "; ".join([*parts, nodes] if nodes else parts)

    def renderable(self, width: int = 100):
        """The live display (rich): phase, a bar with counts and ETA, a line per agent, problems."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            head = Text.assemble(("SWE-Residual ", "bold"), (f"phase: {self.phase}", "cyan"))
            phases = self.phases_text()
            if phases:
                head.append(f"   {phases}")
            grid = Table.grid(padding=(0, 1))
            grid.add_row(
                ProgressBar(total=max(self.total, 1), completed=self.done, width=min(40, width // 3)),
                Text(self.counts_text(), no_wrap=True, overflow="ellipsis"),
            )
            lines = [Text("  " + t, no_wrap=True, overflow="ellipsis") for t in self.agent_texts()]
            nodes = self.nodes_text()
            if nodes:
                lines.append(Text("  " + nodes, no_wrap=True, overflow="ellipsis"))
            tail = Text(
                self.problems_text(), style="yellow" if self.infra else "", no_wrap=True, overflow="ellipsis"
            )
            head.no_wrap, head.overflow = True, "ellipsis"
            return Group(head, grid, *lines, tail)


class RunDisplay:
    """Shows a RunProgress: `live` (rich, redrawn 4 times a second on a terminal), `plain` (a line
    every `interval` seconds, for logs and CI) or `off`. `poll` brings the events other processes
    sent; `write_line` prints a plain line. Both modes stop with `stop()` (the live display is erased,
    the final line follows from the caller)."""

    def __init__(
        self,
        progress: RunProgress,
        mode: str,
        *,
        stream: TextIO | None = None,
        write_line: Callable[[str], None] | None = None,
        interval: float = 30.0,
        poll: Callable[[], list[dict[str, Any]]] | None = None,
    ):
        self.progress, self.mode = progress, mode
        self.stream = stream if stream is not None else sys.stdout
        self.write_line = write_line or (lambda text: (self.stream.write(text + "\n"), self.stream.flush()))
        self.interval = max(0.1, interval)
        self.poll = poll
        self._live: Any = None  # a rich Live while the display runs on a terminal
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.started = False

    def pump(self) -> None:
        """Apply what the other processes sent since the last look."""
        if self.poll is not None:
            for event in self.poll():
                self.progress.apply(event)

    def start(self) -> None:
        if self.started or self.mode == "off":
            return
        self.started = True
        if self.mode == "live":
            try:
                from rich.console import Console
                from rich.live import Live
            except ImportError:  # rich is a dependency; an install without it still shows plain lines
                self.mode = "plain"
                self.started = False
                return self.start()

            console = Console(file=self.stream, force_terminal=True)
            live = Live(
                console=console,
                refresh_per_second=4,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
                get_renderable=self._render,
            )
            live.start()
            self._live = live
        else:
            self._thread = threading.Thread(target=self._plain, name="swe-residual-progress", daemon=True)
            self._thread.start()

    def _render(self):
        self.pump()
        if self._live is not None:
            self._width = self._live.console.width
        return self.progress.renderable(getattr(self, "_width", 100))

    def _plain(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(min(1.0, self.interval)):
            self.pump()
            if time.monotonic() - last >= self.interval:
                last = time.monotonic()
                self.write_line(self.progress.line())

    def stop(self) -> None:
        """Stop drawing (idempotent); the live display leaves nothing behind."""
        if not self.started:
            return
        self.started = False
        self._stop.set()
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.pump()
