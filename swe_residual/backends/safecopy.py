"""Copying files out of an environment without trusting it.

Both backends hand what an environment produced (logs, reports, artifacts) to the host through
these two functions: regular files and directories only (symlinks, devices and fifos are
skipped, never followed), every path stays inside the destination, and the total is bounded.
tarfile's own `filter="data"` exists only from Python 3.11.4; this works on 3.11.2.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from swe_residual.errors import HarnessError


def _inside(dest: Path, rel: str) -> Path | None:
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] == "/" or any(p in ("..", "") for p in parts):
        return None
    return dest.joinpath(*parts)


def extract_tar(fileobj: IO[bytes], dest: Path, *, strip: int, limit: int, what: str) -> None:
    """Extract regular files and directories of a tar stream into dest, dropping the first
    `strip` path components (the archived directory's own name)."""
    total = 0
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            rel = "/".join(PurePosixPath(member.name).parts[strip:])
            if not rel:
                continue
            target = _inside(dest, rel)
            if target is None:
                continue
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


def copy_tree(src: Path, dest: Path, *, limit: int, what: str) -> None:
    """Copy the regular files and directories under src to dest without following symlinks."""
    total = 0
    dest.mkdir(parents=True, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel_dir = Path(dirpath).relative_to(src)
        for name in dirnames:
            if not os.path.islink(os.path.join(dirpath, name)):
                (dest / rel_dir / name).mkdir(exist_ok=True)
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a symlink (ELOOP) or something unreadable
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > limit:
                    raise HarnessError(f"{what}: more than {limit >> 20} MiB; copy stopped")
                with open(dest / rel_dir / name, "wb") as out:
                    shutil.copyfileobj(fh, out)
