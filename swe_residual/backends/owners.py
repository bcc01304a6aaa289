"""Which process owns a leftover: scratch dirs and containers are named or labelled with the pid
and start time of the process that made them, so a later run can sweep those of dead processes
(a pid reused by another process does not keep them alive)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from swe_residual.backends.safecopy import remove_tree


def pid_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return fields[19]
    except (OSError, IndexError):
        return None


def owner_alive(pid_label: str | None, start_label: str | None) -> bool:
    try:
        pid = int(pid_label or "")
    except ValueError:
        return True  # not a label we understand: leave it alone
    start = pid_start(pid)
    if start is None:
        return False
    return not start_label or start_label == start


def owner_name() -> str:
    """<host>--<pid>--<start>: the name of this process's scratch dirs."""
    return f"{socket.gethostname()}--{os.getpid()}--{pid_start(os.getpid()) or ''}"


def sweep_dirs(parent: Path) -> list[Path]:
    """Remove the scratch dirs under parent whose owner process on this host is gone."""
    removed = []
    for d in parent.glob(f"{socket.gethostname()}--*--*") if parent.is_dir() else []:
        _, pid, start = d.name.rsplit("--", 2)
        if not owner_alive(pid, start):
            remove_tree(d)
            removed.append(d)
    return removed
