"""What the agent changed in the inherited work: the diff from the residual state to the final
state, worked out from the two patches a run dir keeps (the state's and the final one, both
against the same base commit), without the base repository.

Both patches show some base lines (context and '-' lines) at their line numbers. Per file, a
stand-in base is made of those lines, every line neither patch shows standing in as a unique
placeholder; both patches are applied to it and the results compared. A line either patch
changes is always shown by that patch, so every '+' and '-' line of the result is real text; a
placeholder can only be unchanged context, shown as a count of lines the patches do not show.
When the patches disagree about a base line (not made against the same base), or a file is
binary, the file is reported as not comparable instead of guessed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from swe_residual.patches import ADD, CTX, DEL, HEAD, HUNK, NOTE, FileDiff

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
CONTEXT = 3


class _Gap:
    """A base line neither patch shows (unique: never equal to another line)."""

    __slots__ = ("at",)

    def __init__(self, at: int):
        self.at = at


@dataclass
class _Side:
    """One patch's view of one file: where it came from, where it went, its hunks."""

    old: str | None  # the base path (None: the patch creates the file)
    new: str | None  # the path afterwards (None: the patch deletes the file)
    hunks: list[tuple[int, int, list[tuple[str, str]]]] = field(default_factory=list)  # (start, count, lines)
    binary: bool = False


@dataclass
class Interdiff:
    """The inherited -> final diff: changed files (FileDiff sections for kit.diff_block), files
    left exactly as inherited, and files that could not be compared (path -> why)."""

    files: list[FileDiff]
    unchanged: list[str]
    not_comparable: dict[str, str]


def _sides(files: list[FileDiff]) -> dict[str, _Side]:
    """{path: side} keyed by every path the patch names (old and new)."""
    out: dict[str, _Side] = {}
    for f in files:
        if not f.path:
            continue
        heads = [line for line, kind in zip(f.lines, f.kinds) if kind == HEAD]
        created = any(h.startswith("new file mode") or h == "--- /dev/null" for h in heads)
        deleted = any(h.startswith("deleted file mode") or h == "+++ /dev/null" for h in heads)
        side = _Side(
            old=None if created else (f.old_path or f.path), new=None if deleted else f.path, binary=f.binary
        )
        hunk: list[tuple[str, str]] | None = None
        for line, kind in zip(f.lines, f.kinds):
            if kind == HUNK:
                m = _HUNK.match(line)
                if m is None:
                    side.binary = True  # unreadable: not compared rather than guessed
                    break
                start, count = int(m.group(1)), int(m.group(2)) if m.group(2) is not None else 1
                hunk = []
                side.hunks.append((start if count == 0 else start - 1, count, hunk))
            elif kind in (ADD, DEL, CTX) and hunk is not None:
                hunk.append((kind, line[1:]))
        for p in (side.old, side.new):
            if p is not None:
                out[p] = side
    return out


def _known(sides: list[_Side], path: str) -> dict[int, str] | str:
    """Base lines of `path` both patches show {0-based line: text}, or why they disagree."""
    known: dict[int, str] = {}
    for side in sides:
        if side.old != path:
            continue
        for start, _, lines in side.hunks:
            at = start
            for kind, text in lines:
                if kind == ADD:
                    continue
                if known.setdefault(at, text) != text:
                    return f"the two patches disagree about line {at + 1} of the base version"
                at += 1
    return known


def _apply(base: list, side: _Side) -> list:
    out, at = [], 0
    for start, count, lines in sorted(side.hunks, key=lambda h: h[0]):
        out += base[at:start]
        out += [text for kind, text in lines if kind != DEL]
        at = start + count
    return out + base[at:]


def interdiff(inherited: list[FileDiff], final: list[FileDiff]) -> Interdiff:
    """The diff from the state (inherited) to the final state, per file in path order."""
    s_sides, f_sides = _sides(inherited), _sides(final)
    files, unchanged, bad = [], [], {}
    for path in sorted(set(s_sides) | set(f_sides)):
        s, f = s_sides.get(path), f_sides.get(path)
        both = [x for x in (s, f) if x is not None]
        if any(x.binary for x in both):
            bad[path] = "binary (or unreadable) in a patch"
            continue
        # which base file each side's version of `path` comes from, and whether it exists at all
        bases = {x.old for x in both if x.old} | ({path} if any(x.old == path for x in both) else set())
        known: dict[str, dict[int, str]] = {}
        why = None
        for base in bases:
            lines_or_why = _known(both, base)
            if isinstance(lines_or_why, str):
                why = lines_or_why
                break
            known[base] = lines_or_why
        if why:
            bad[path] = why
            continue

        made: dict[str, list] = {}

        def base_of(p: str | None) -> list | None:
            """The stand-in base of `p`, one list per path (its placeholders are shared by both sides)."""
            if p is None:
                return []
            lines = known.get(p)
            if lines is None:
                return None
            if p not in made:
                n = (
                    max(
                        [*lines, *(st + c - 1 for x in both if x.old == p for st, c, _ in x.hunks)],
                        default=-1,
                    )
                    + 1
                )
                made[p] = [lines.get(i, _Gap(i)) for i in range(n)]
            return made[p]

        def version(side: _Side | None) -> list | None:
            """The file at `path` after this side's patch (None: it does not exist there)."""
            if side is None:  # untouched by this patch: the base file, if `path` is one
                other = s if f is side else f
                if other is not None and other.old is None and other.new == path:
                    return None  # the other patch created it: not in the base
                return base_of(path)
            if side.new != path:
                return None  # deleted, or renamed away from `path`
            return _apply(base_of(side.old) or [], side)

        a, b = version(s), version(f)
        if a == b:
            if a is not None:
                unchanged.append(path)
            continue
        files.append(_section(path, a, b))
    return Interdiff(files, unchanged, bad)


def _section(path: str, a: list | None, b: list | None) -> FileDiff:
    """One file's diff (inherited a -> final b) as a FileDiff with lines and kinds."""
    fd = FileDiff(path=path, old_path=path if a is not None else None)
    head = [f"diff --git a/{path} b/{path}"]
    if a is None:
        head.append("new file (not in the inherited state)")
    elif b is None:
        head.append("deleted by the agent")
    head += [
        f"--- {'a/' + path if a is not None else '/dev/null'}",
        f"+++ {'b/' + path if b is not None else '/dev/null'}",
    ]
    fd.lines += head
    fd.kinds += [HEAD] * len(head)
    a, b = a or [], b or []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(CONTEXT):
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        fd.lines.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        fd.kinds.append(HUNK)
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                _context(fd, a[x1:x2])
                continue
            for line in a[x1:x2]:
                fd.lines.append("-" + _text(line))
                fd.kinds.append(DEL)
                fd.deleted += 1
            for line in b[y1:y2]:
                fd.lines.append("+" + _text(line))
                fd.kinds.append(ADD)
                fd.added.append(_text(line))
    return fd


def _text(line: str | _Gap) -> str:
    """A changed line's text (a placeholder there would mean hunks that do not add up)."""
    return (
        f"(line {line.at + 1} of the base version, not shown by either patch)"
        if isinstance(line, _Gap)
        else line
    )


def _context(fd: FileDiff, lines: list) -> None:
    """Context lines; a run of lines neither patch shows becomes one note."""
    gap = 0
    for line in [*lines, None]:
        if isinstance(line, _Gap):
            gap += 1
            continue
        if gap:
            fd.lines.append(f"\u22ef {gap} unchanged line{'s' if gap != 1 else ''} neither patch shows")
            fd.kinds.append(NOTE)
            gap = 0
        if line is not None:
            fd.lines.append(" " + line)
            fd.kinds.append(CTX)
