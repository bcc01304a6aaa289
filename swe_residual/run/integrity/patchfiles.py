"""The final patch, file by file: its hunks and the content of binary sections (git's base85 + zlib)."""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, field

from swe_residual.patches import ADD, CTX, DEL, HEAD, HUNK, FileDiff, split_patch

LITERAL_LIMIT = 4 << 20          # bytes of a binary literal decoded


@dataclass
class PatchFile:
    path: str
    diff: FileDiff
    new: bool = False
    deleted: bool = False
    mode: str | None = None
    hunks: list[list[tuple[str, str]]] = field(default_factory=list)   # (ADD|CTX|DEL, text) per hunk
    literal: bytes | None = None      # a binary section's new content, where git wrote it whole
    delta: bool = False               # a binary section git wrote as a delta (content unknown)

    @property
    def added(self) -> list[str]:
        return self.diff.added

    @property
    def content(self) -> str | None:
        """The whole new text where the patch has it (a new file), else None."""
        if self.literal is not None:
            return self.literal.decode("utf-8", "surrogateescape")
        if self.new and not self.diff.binary:
            return "\n".join(self.diff.added) + ("\n" if self.diff.added else "")
        return None


def patch_files(patch: bytes) -> list[PatchFile]:
    out = []
    for fd in split_patch(patch):
        if not fd.path:
            continue
        f = PatchFile(fd.path, fd, new=fd.old_path is None)
        hunk: list[tuple[str, str]] | None = None
        literal: list[str] | None = None
        size = 0
        for line, kind in zip(fd.lines, fd.kinds):
            if kind == HUNK:
                hunk = []
                f.hunks.append(hunk)
            elif kind in (ADD, CTX, DEL):
                if hunk is not None:
                    hunk.append((kind, line[1:]))
            elif kind == HEAD:
                if literal is not None:
                    if line:
                        literal.append(line)
                        continue
                    f.literal = _git_literal(literal, size)
                    literal = None
                    size = -1            # the reverse section follows: not read
                elif line.startswith("new file mode "):
                    f.new, f.mode = True, line[14:].strip()
                elif line.startswith("deleted file mode "):
                    f.deleted = True
                elif line.startswith("new mode "):
                    f.mode = line[9:].strip()
                elif line.startswith("literal ") and fd.binary and size == 0 and f.literal is None:
                    size = int(line[8:].strip() or 0) if line[8:].strip().isdigit() else 0
                    literal = []
                elif line.startswith("delta ") and fd.binary and size == 0:
                    f.delta = True
                    size = -1
        if literal is not None:
            f.literal = _git_literal(literal, size)
        out.append(f)
    return out


def _git_literal(lines: list[str], size: int) -> bytes | None:
    """The content of a `GIT binary patch` literal: base85 lines (the first character tells the
    line's byte count), zlib-compressed. None if it is not one."""
    raw = bytearray()
    try:
        for line in lines:
            c = line[0]
            n = ord(c) - 64 if "A" <= c <= "Z" else ord(c) - 96 + 26 if "a" <= c <= "z" else -1
            if n <= 0:
                return None
            raw += base64.b85decode(line[1:])[:n]
        out = zlib.decompressobj().decompress(bytes(raw), min(max(size, 0), LITERAL_LIMIT) or LITERAL_LIMIT)
    except (ValueError, zlib.error, IndexError):
        return None
    return out
