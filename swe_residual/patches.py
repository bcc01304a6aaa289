"""The one reader of git patches: which files a patch touches, the lines it adds, and (for pages
that show a patch) each file's section with every line's kind.

Handles what `git diff --binary` writes: C-quoted unusual paths, renames, binary sections and
content lines that look like headers inside hunks.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

# What a line of a patch is: a header line, a hunk's "@@" line, a hunk's added, deleted or context
# line, or git's "\ No newline at end of file".
HEAD, HUNK, ADD, DEL, CTX, NOTE = "head", "hunk", "add", "del", "ctx", "note"


@dataclass
class FileDiff:
    """One file of a git patch: its '+' lines in order, the count of '-' lines.

    From split_patch also the section as written: its lines and each line's kind (HEAD, ...)."""

    path: str
    old_path: str | None = None
    added: list[str] = field(default_factory=list)
    deleted: int = 0
    binary: bool = False
    lines: list[str] = field(default_factory=list, compare=False, repr=False)
    kinds: list[str] = field(default_factory=list, compare=False, repr=False)

    def body(self) -> str:
        """The section without its index line (blob ids), to compare two patches' versions of a file."""
        return "\n".join(
            line
            for line, kind in zip(self.lines, self.kinds)
            if not (kind == HEAD and line.startswith("index "))
        )


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _unquote(path: str) -> str:
    """Undo git's C-style quoting of unusual paths ("a/t\\303\\251st")."""
    if len(path) >= 2 and path[0] == path[-1] == '"':
        raw = codecs.escape_decode(path[1:-1].encode("utf-8", "surrogateescape"))[0]
        return raw.decode("utf-8", "surrogateescape")
    return path


def strip_prefix(path: str) -> str:
    path = _unquote(path.split("\t", 1)[0])
    return path[2:] if path[:2] in ("a/", "b/") else path


def git_header_path(rest: str) -> str:
    """The path of a `diff --git a/P b/P` line (used when no ---/+++ lines follow, e.g. binary)."""
    if rest.startswith('"'):
        m = re.match(r'("(?:[^"\\]|\\.)*")\s+(.*)$', rest)
        return strip_prefix(m.group(2)) if m else strip_prefix(rest)
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half] == " " and rest[2:half] == rest[half + 3 :]:
        return rest[2:half]
    m = re.match(r"a/(.+?) b/(.+)$", rest)
    return m.group(2) if m else rest


def parse_patch(patch: bytes | str) -> dict[str, FileDiff]:
    """Files of a git (or plain unified) diff keyed by their new path (old path if deleted).

    Hunk line counts decide where a hunk ends, so content lines such as "+++ x" or "--- y"
    inside a hunk are read as content, not headers. Binary sections have no lines.
    """
    return _read(patch, keep=False)[0]


def split_patch(patch: bytes | str) -> list[FileDiff]:
    """The file sections of a patch in order, each with its lines and their kinds, read as
    parse_patch reads them; text before the first file (a commit message, say) is a section
    of its own with path "". Sections of nothing but empty lines are left out."""
    return [f for f in _read(patch, keep=True)[1] if any(f.lines)]


def _read(patch: bytes | str, keep: bool) -> tuple[dict[str, FileDiff], list[FileDiff]]:
    """{path: file} as parse_patch returns it, and the sections in order: first the lines before
    the first file (path ""), then every file; with `keep` each holds its lines and their kinds."""
    text = patch.decode("utf-8", "surrogateescape") if isinstance(patch, bytes) else patch
    files: dict[str, FileDiff] = {}
    order = [FileDiff(path="")]
    cur: FileDiff | None = None
    old_left = new_left = 0

    def start(path: str, old: str | None) -> FileDiff:
        fd = FileDiff(path=path, old_path=old)
        files[path] = fd
        order.append(fd)
        return fd

    lines = text.split("\n")
    if lines[-1] == "":  # the end of the last line, not a line
        lines.pop()
    for line in lines:
        kind = HEAD
        if (old_left > 0 or new_left > 0) and cur is not None:  # (a hunk is counted only in a file)
            tag = line[:1]
            if tag == "+":
                cur.added.append(line[1:])
                new_left -= 1
                kind = ADD
            elif tag == "-":
                cur.deleted += 1
                old_left -= 1
                kind = DEL
            elif tag == " " or line == "":
                old_left -= 1
                new_left -= 1
                kind = CTX
            elif tag == "\\":
                kind = NOTE
            else:
                old_left = new_left = 0  # malformed hunk: read the line as a header
        if kind == HEAD:
            if line.startswith("diff --git "):
                path = git_header_path(line[len("diff --git ") :])
                cur = start(path, path)
            elif line.startswith("--- "):
                old = line[4:]
                old_path = None if old.startswith("/dev/null") else strip_prefix(old)
                if cur is None or cur.added or cur.deleted:
                    cur = start(old_path or "", old_path)
                else:
                    cur.old_path = old_path
            elif line.startswith("+++ ") and cur is not None:
                new = line[4:]
                new_path = cur.old_path if new.startswith("/dev/null") else strip_prefix(new)
                if new_path and new_path != cur.path:
                    files.pop(cur.path, None)
                    cur.path = new_path
                    files[new_path] = cur
            elif line.startswith("rename to ") and cur is not None:
                files.pop(cur.path, None)
                cur.path = _unquote(line[len("rename to ") :])
                files[cur.path] = cur
            elif line.startswith("rename from ") and cur is not None:
                cur.old_path = _unquote(line[len("rename from ") :])
            elif (
                line.startswith("GIT binary patch") or line.startswith("Binary files ")
            ) and cur is not None:
                cur.binary = True
            elif line.startswith("@@") and cur is not None:
                kind = HUNK
                m = _HUNK.match(line)
                if m:
                    old_left = int(m.group(1)) if m.group(1) is not None else 1
                    new_left = int(m.group(2)) if m.group(2) is not None else 1
        if keep:
            section = order[0] if cur is None else cur
            section.lines.append(line)
            section.kinds.append(kind)
    files.pop("", None)
    return files, order


def patch_files(patch: bytes) -> list[str]:
    """Paths a git patch touches (both sides of renames), in order of appearance."""
    files: dict[str, None] = {}
    for fd in parse_patch(patch).values():
        if fd.old_path:
            files[fd.old_path] = None
        files[fd.path] = None
    return list(files)
