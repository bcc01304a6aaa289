"""Copying and removing trees an environment made, without trusting them.

Both backends hand what an environment produced (logs, reports, artifacts) to the host through
extract_tar and copy_tree: regular files and directories only (symlinks, devices and fifos are
skipped, never followed or opened), every path stays inside the destination, and the total size,
the number of entries and the depth are bounded. tarfile's own `filter="data"` exists only from
Python 3.11.4; this works on 3.11.2. remove_tree removes a tree of any depth and breadth (an
agent's scratch dir, a dead run's leftovers) in seconds, without following links and without
opening anything but directories. disk_usage measures such a tree (a storage limit's meter).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import subprocess
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import IO

from swe_residual.errors import HarnessError

MAX_ENTRIES = 200_000  # files and directories copy_tree takes from one tree at most
MAX_DEPTH = 256  # directory levels below the copied root; deeper ones are left out

_UNHOLDABLE = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ELOOP}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _inside(dest: Path, rel: str) -> Path | None:
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] == "/" or any(p in ("..", "") for p in parts):
        return None
    return dest.joinpath(*parts)


def extract_tar(fileobj: IO[bytes], dest: Path, *, strip: int, limit: int, what: str) -> None:
    """Extract regular files and directories of a tar stream into dest, dropping the first
    `strip` path components (the archived directory's own name)."""
    total = entries = 0
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts[strip:]
            if not parts or len(parts) > MAX_DEPTH + 1:
                continue  # the root itself, or deeper than copy_tree would go
            entries += 1
            if entries > MAX_ENTRIES:
                raise HarnessError(f"{what}: more than {MAX_ENTRIES} files and directories; copy stopped")
            target = _inside(dest, "/".join(parts))
            if target is None:
                continue
            try:
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isreg():
                    continue  # symlinks, hard links, devices: never materialized on the host
                total += member.size
                if total > limit:
                    raise HarnessError(f"{what}: more than {limit >> 20} MiB; copy stopped")
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                with open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(target, 0o644 | (0o111 if member.mode & 0o100 else 0))
            except OSError as exc:
                if exc.errno not in _UNHOLDABLE:
                    raise
                continue  # a name the host cannot hold (too long, a directory where a file was)


def copy_tree(src: Path, dest: Path, *, limit: int, what: str) -> None:
    """Copy the regular files and directories under src to dest without following symlinks or
    opening special files; iterative, at most MAX_DEPTH levels deep and MAX_ENTRIES entries."""
    total = entries = 0
    dest.mkdir(parents=True, exist_ok=True)
    stack: list[tuple[Path, Path, int]] = [(Path(src), dest, 0)]
    while stack:
        here, there, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                listing = list(it)
        except OSError:
            continue  # gone, not a directory any more, or unreadable
        for entry in listing:
            entries += 1
            if entries > MAX_ENTRIES:
                raise HarnessError(f"{what}: more than {MAX_ENTRIES} files and directories; copy stopped")
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH:
                        (there / entry.name).mkdir(exist_ok=True)
                        stack.append((Path(entry.path), there / entry.name, depth + 1))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue  # symlinks, fifos, sockets, devices
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a symlink (ELOOP), a name too long, or something unreadable
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > limit:
                    raise HarnessError(f"{what}: more than {limit >> 20} MiB; copy stopped")
                with open(there / entry.name, "wb") as out:
                    shutil.copyfileobj(fh, out)


RM_TIMEOUT_S = 600.0


def remove_tree(path: str | os.PathLike) -> None:
    """Remove `path` and everything below it, whatever its depth and breadth, never following a
    symlink, never leaving its file system and never opening a fifo or device; what cannot be
    removed is left (never an error). GNU rm does the bulk (300,000 empty directories in about a
    second); what it left (a directory the agent made unreadable) is removed by _remove_walk."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=RM_TIMEOUT_S,
        )
    if os.path.lexists(path):
        _remove_walk(path)


DISCARDED = ".discarded-"  # the name a tree gets while it is removed off the caller's path
_discarding: dict[threading.Thread, Path] = {}  # the threads removing trees set aside, and the trees
_discarding_lock = threading.Lock()


def discard_tree(path: str | os.PathLike) -> None:
    """remove_tree off the caller's path: `path` is renamed aside in its own directory (the same
    file system: at once, whatever the tree holds) to DISCARDED<name>-<token>, then removed on a
    background thread, so a hostile tree (300,000 empty directories: a minute on ext4) costs the
    caller nothing. Where the rename fails it is removed here. A process killed meanwhile leaves
    the tree in its own scratch dir, which the next run's sweep removes whole (owners.sweep_dirs)."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    aside = path.parent / f"{DISCARDED}{path.name}-{secrets.token_hex(4)}"
    try:
        os.rename(path, aside)
    except OSError:
        remove_tree(path)
        return
    thread = threading.Thread(target=_remove_aside, args=(aside,), name="swe-residual-discard", daemon=True)
    with _discarding_lock:
        _discarding[thread] = aside
    thread.start()


def _remove_aside(aside: Path) -> None:
    try:
        remove_tree(aside)
    finally:
        with _discarding_lock:
            _discarding.pop(threading.current_thread(), None)


def wait_discarded(under: Path, timeout: float | None = None) -> bool:
    """Wait until the trees discard_tree set aside below `under` are gone (at most `timeout`
    seconds in all); whether they are."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _discarding_lock:
            pending = [t for t, aside in _discarding.items() if aside.is_relative_to(under)]
        if not pending:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        pending[0].join(left)


def _remove_walk(path: str) -> None:
    """remove_tree without rm: no recursion, no path longer than one name (every step is relative
    to an open directory), each directory listed once, unreadable directories made readable."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    names: list[str] = []  # the directories below `path` that fd is in, in order
    pending = [_unlink_files(fd)]  # per level: the subdirectories still to remove
    try:
        while True:
            if pending[-1]:
                child = pending[-1].pop()
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700, dir_fd=fd)  # a directory the agent made unreadable
                try:
                    nfd = os.open(child, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # cannot enter it: leave it
                os.close(fd)
                fd = nfd
                names.append(child)
                pending.append(_unlink_files(fd))
                continue
            pending.pop()
            if not names:
                break
            try:
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            except OSError:
                return
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _unlink_files(fd: int) -> list[str]:
    """Unlink everything but directories in the directory open as fd; its subdirectories' names."""
    dirs: list[str] = []
    with contextlib.suppress(OSError), os.scandir(fd) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
                continue
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=fd)
    return dirs


DU_TIMEOUT_S = 60.0


def disk_usage(path: str | os.PathLike, timeout: float = DU_TIMEOUT_S) -> int | None:
    """Bytes of disk the tree at path holds (allocated blocks: a sparse file counts what it uses,
    a hard link once), by GNU du, which takes any depth and follows nothing; None when it cannot
    tell (no such tree, unreadable, or not done within timeout)."""
    try:
        proc = subprocess.run(
            ["du", "-s", "-x", "-B1", "--", os.fspath(path)],
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return int(proc.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
