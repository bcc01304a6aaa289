"""A progress reporter for long loops (downloads, imports, builds): counts, rate and ETA.

On a terminal it is one line redrawn in place (at most 10 times a second); anywhere else (a log,
CI, a pipe) it is a plain line every `interval` seconds, so a log stays readable and a stalled
step still shows it is alive. Messages printed through `note()` never tear the live line. Thread
safe: workers may call `advance()` and `note()` concurrently. Standard library only.

    with Progress(len(todo), "trials", label="download") as p:
        for item in todo:
            ...
            p.advance(absent=n_absent)       # extra counters are shown after the rate
    # the last line: "download: 2000/2000 trials in 18.4 s (108.7/s); absent 12"
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

LIVE_REFRESH = 0.1


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

    def __init__(self, total: int | None, what: str = "items", *, label: str = "", stream: TextIO | None = None,
                 live: bool | None = None, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.total, self.what, self.label = total, what, label
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) if live is None else live
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
