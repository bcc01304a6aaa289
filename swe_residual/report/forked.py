"""Work split with one forked child, where that is safe and pays: the report's two CPUs.

A fork is safe where no other thread runs in the process (a thread holding a lock at the fork
would leave it held in the child) and pays where there are two CPUs and enough work: the child
computes its share, sends it back pickled through a pipe and exits without any cleanup; the
parent computes the rest meanwhile. A child that fails (or dies) leaves its share to the parent,
so the result never depends on the fork.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any


def may_fork() -> bool:
    """No other thread runs here, and this process may use two CPUs (its affinity: `taskset`
    and container CPU sets count)."""
    import threading

    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus >= 2


def in_child(work: Callable[[], Any]) -> Callable[[], tuple[bool, Any]]:
    """Start work() in a forked child; returns the function that waits for it: (True, its
    result), or (False, None) when it failed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, exit without cleanup
        try:
            os.close(r)
            try:
                payload = pickle.dumps((True, work()), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001 - the parent does it itself
                payload = pickle.dumps((False, None))
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view) :]
        finally:
            os._exit(0)
    os.close(w)

    def wait() -> tuple[bool, Any]:
        try:
            with os.fdopen(r, "rb", buffering=1 << 20) as fh:  # unpickled as it streams in: no copy
                return pickle.load(fh)
        except Exception:  # noqa: BLE001 - a child that died half way
            return False, None
        finally:
            os.waitpid(pid, 0)

    return wait


def fork_map(fn: Callable[[Sequence], list], items: Sequence, min_items: int) -> list:
    """fn(items), the second half computed by a forked child meanwhile when there are at least
    min_items and may_fork()."""
    if len(items) < min_items or not may_fork():
        return fn(items)
    half = len(items) // 2
    wait = in_child(lambda: fn(items[half:]))
    try:
        first = fn(items[:half])
    finally:
        ok, second = wait()
    return first + (second if ok else fn(items[half:]))


def meanwhile(fn: Callable[[], Any], fork: bool) -> Callable[[], Any]:
    """fn's result, asked for later: computed by a forked child in the meantime when `fork` and
    may_fork(), else (or when the child failed) here, when asked."""
    if not (fork and may_fork()):
        return fn
    wait = in_child(fn)

    def result() -> Any:
        ok, value = wait()
        return value if ok else fn()

    return result
