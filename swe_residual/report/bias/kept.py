"""Patches: what a state or a run changed, and how much of the predecessor's work is kept.

The predecessor's added lines (P) are matched against a final patch's added lines per file, in
order (longest common subsequence), so moved or reordered lines are not counted as kept.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence

from swe_residual.patches import FileDiff, git_header_path, parse_patch, strip_prefix  # noqa: F401  (re-exported)


def read_regular_file(path: str) -> bytes | None:
    """The bytes of `path` if os.path.isfile(path), else None (an unreadable file still raises).

    One open and one fstat instead of stat + open(): reports read a patch per state, thousands.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO must not hang
    except OSError:
        if os.path.isfile(path):
            raise
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        first = os.read(fd, st.st_size + 1)
        if len(first) <= st.st_size:  # a short read of a regular file is its end: one read, not two
            return first
        parts = [first]
        while chunk := os.read(fd, st.st_size + 1):  # it grew meanwhile
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def changed_paths(files: Mapping[str, FileDiff]) -> set[str]:
    """Every path a patch touches, both sides of renames."""
    out = set(files)
    out.update(f.old_path for f in files.values() if f.old_path)
    return out


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two line lists.

    Bit-parallel (Hyyro 2004): one big-int add/or per line of `a`, so thousands of lines cost
    microseconds; exact, unlike a set lookup or difflib's heuristic matching.
    """
    lo = 0
    while lo < len(a) and lo < len(b) and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < len(a) - lo and hi < len(b) - lo and a[-1 - hi] == b[-1 - hi]:
        hi += 1
    a, b = a[lo : len(a) - hi], b[lo : len(b) - hi]
    if not a or not b:
        return lo + hi
    masks: dict[str, int] = {}
    for j, line in enumerate(b):
        masks[line] = masks.get(line, 0) | (1 << j)
    full = (1 << len(b)) - 1
    v = full
    for line in a:
        m = masks.get(line)
        if m:
            u = v & m
            v = ((v + u) | (v - u)) & full
    return lo + hi + len(b) - v.bit_count()


def kept_fraction(predecessor: Mapping[str, FileDiff], final: Mapping[str, FileDiff]) -> float | None:
    """Share of the predecessor's added/replaced lines (P) still '+' lines of the final diff.

    Matched per file (same path), in order: reordered lines count once via the LCS, lines moved
    to another file are gone, and a duplicated line is kept only as often as it still occurs.
    None when P is empty.
    """
    total = kept = 0
    for path, fd in predecessor.items():
        if not fd.added:
            continue
        total += len(fd.added)
        other = final.get(path)
        if other is not None and other.added:
            kept += lcs_length(fd.added, other.added)
    return kept / total if total else None
