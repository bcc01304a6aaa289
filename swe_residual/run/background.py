"""Work on a thread while the harness goes on (class Background).

Verification overlaps what it can: a verifier instance starts while the agent works, inputs are
copied into it while the final state is read, the hardened re-grade runs beside the grade. Each of
these is one Background job, so that starting a thread, keeping what it gave and waiting for it is
written once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """fn() on a daemon thread named `name`, started at once; what it returned or raised is kept
    for whoever asks (the harness never waits for a job it does not ask about)."""

    def __init__(self, fn: Callable[[], T], name: str):
        self._future: Future[T] = Future()
        threading.Thread(target=self._run, args=(fn,), daemon=True, name=name).start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - kept for the one who asks
            self._future.set_exception(exc)

    def failure(self) -> BaseException | None:
        """Waits for the job; what it raised, None when it returned."""
        return self._future.exception()

    def result(self) -> T:
        """Waits for the job; what it returned (re-raises what it raised)."""
        return self._future.result()
