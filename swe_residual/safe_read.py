"""Reading files someone else produced (imported runs, trial dirs) without trusting them.

Every path is opened component by component below a root the user named, with O_NOFOLLOW, so
a symlink anywhere inside (file or directory) is never followed; only regular files are read
(no fifos or devices), and never more than a bound. What cannot be read safely raises Unsafe
with a short reason; a missing file is simply None.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from swe_residual.errors import InputError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Unsafe(Exception):
    """A file that is there but is not read: a symlink, not a regular file, over its bound,
    or not the JSON it should be. str() is the one-line reason, naming the path."""


def _parts(rel: str) -> tuple[str, ...]:
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] == "/" or any(p in ("..", ".", "") for p in parts):
        raise ValueError(f"not a relative path inside the root: {rel!r}")
    return parts


def _open(root: Path, rel: str, flags: int) -> int | None:
    """An fd for root/rel opened without following any symlink below root; None if missing."""
    parts = _parts(rel)
    try:
        dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                fd = os.open(part, flags if last else _DIR, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                where = root / Path(*parts[:i + 1])
                if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(part, dfd):
                    raise Unsafe(f"{where}: a symlink; not followed") from None
                if exc.errno == errno.ENOTDIR:
                    raise Unsafe(f"{where}: not a directory") from None
                raise Unsafe(f"{where}: cannot be opened: {exc.strerror}") from None
            os.close(dfd)
            dfd = fd
        fd, dfd = dfd, -1
        return fd
    finally:
        if dfd >= 0:
            os.close(dfd)


def _is_link(name: str, dfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_bytes(root: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of root/rel (a regular file of at most `limit` bytes), None if it is missing."""
    fd = _open(Path(root), rel, _FILE)
    if fd is None:
        return None
    path = Path(root) / rel
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"{path}: not a regular file; not read")
        if st.st_size > limit:
            raise Unsafe(f"{path}: {st.st_size} bytes, over the {_size(limit)} bound; not read")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew while being read
            raise Unsafe(f"{path}: over the {_size(limit)} bound; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(root: Path, rel: str, limit: int) -> Any:
    """The parsed JSON of root/rel, None if it is missing; Unsafe if it is not JSON."""
    data = read_bytes(root, rel, limit)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise Unsafe(f"{Path(root) / rel}: invalid JSON{where}: {getattr(exc, 'msg', exc)}") from None


def is_dir(root: Path, rel: str) -> bool:
    """root/rel is a real directory (not a symlink to one)."""
    try:
        fd = _open(Path(root), rel, _DIR)
    except Unsafe:
        return False
    if fd is None:
        return False
    os.close(fd)
    return True


def list_dir(root: Path, rel: str = "") -> list[tuple[str, str]]:
    """(name, kind) of the entries of a real directory below root, kind in file/dir/symlink/other;
    sorted by name; [] when it is missing or not a real directory."""
    if rel:
        try:
            fd = _open(Path(root), rel, _DIR)
        except Unsafe:
            return []
        if fd is None:
            return []
    else:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return []
    out = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                kind = ("symlink" if e.is_symlink() else "dir" if e.is_dir(follow_symlinks=False)
                        else "file" if e.is_file(follow_symlinks=False) else "other")
                out.append((e.name, kind))
    finally:
        os.close(fd)
    return sorted(out)


def walk_files(root: Path, *, max_depth: int = 8, max_entries: int = 200_000) -> Iterator[str]:
    """Relative paths of the regular files below root, depth-first in name order, never entering
    a symlinked directory; stops after max_entries entries."""
    seen = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        entries = list_dir(root, rel)
        subdirs = []
        for name, kind in entries:
            seen += 1
            if seen > max_entries:
                return
            child = f"{rel}/{name}" if rel else name
            if kind == "file":
                yield child
            elif kind == "dir" and child.count("/") < max_depth:
                subdirs.append(child)
        stack.extend(reversed(subdirs))


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_yaml(path, what: str):
    """Parse a YAML input file; a missing file or bad syntax is a one-line InputError."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} does not exist")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from None
