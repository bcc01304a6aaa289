"""Staging hostile input within limits: a tree copied (copy_tree) or a tarball extracted as a stream
(extract_tarball) into a new dir. A link, a device, an absolute name, a name climbing out with `..`,
a member too large, or one member too many stops it with one line naming the member."""

from __future__ import annotations

import gzip
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swe_residual.errors import InputError

_HEADER_DATA_BYTES = 1 << 20  # a pax or GNU long-name header's own data (names, attributes)


@dataclass(frozen=True)
class Limits:
    """What a fetched pack may hold: a real one (165 DeepSWE states with their trajectories) is a
    few tens of MiB in a few hundred files."""

    max_member_bytes: int = 128 << 20
    max_total_bytes: int = 1 << 30
    max_members: int = 10_000
    max_depth: int = 16


LIMITS = Limits()


class _Budget:
    """Counts what is staged: members, bytes; one line naming the member that goes over."""

    def __init__(self, limits: Limits, label: str):
        self.limits, self.label = limits, label
        self.members = 0
        self.total = 0

    def refuse(self, name: str, why: str) -> InputError:
        return InputError(f"states fetch: {self.label}: member {name!r}: {why}; nothing installed")

    def member(self, name: str, size: int = 0) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise self.refuse(name, f"more than {self.limits.max_members} members")
        if size > self.limits.max_member_bytes:
            raise self.refuse(
                name, f"{size} bytes, over the {self.limits.max_member_bytes} bytes a member may have"
            )
        self.total += size
        if self.total > self.limits.max_total_bytes:
            raise self.refuse(name, f"the pack grows past {self.limits.max_total_bytes} bytes in all")


def _clean_name(name: str, budget: _Budget) -> str:
    """A member name as a relative path inside the pack ("" for its top); refused when absolute,
    climbing out, or not text."""
    if "\x00" in name or "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise budget.refuse(name, "an absolute path")
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if ".." in parts:
        raise budget.refuse(name, "a path climbing out with '..'")
    if len(parts) > budget.limits.max_depth:
        raise budget.refuse(name, f"nested more than {budget.limits.max_depth} levels deep")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise budget.refuse(
            name.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "a name that is not UTF-8"
        ) from None
    return "/".join(parts)


def _safe_dest(dest_root: Path, rel: str, budget: _Budget, name: str) -> Path:
    """dest_root/rel with its parents made; no component may be a link (nothing staged is one)."""
    target = dest_root / rel
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise budget.refuse(name, "a path through a file") from None
    if not Path(os.path.realpath(target.parent)).is_relative_to(os.path.realpath(dest_root)):
        raise budget.refuse(name, f"would be written outside {dest_root}")
    return target


def _write_member(src, target: Path, size: int, budget: _Budget, name: str) -> None:
    """Copy at most `size` bytes (the declared size; more is refused) into a new file."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        left = size
        while True:
            chunk = src.read(min(1 << 20, left + 1))
            if not chunk:
                break
            left -= len(chunk)
            if left < 0:
                raise budget.refuse(name, "more bytes than it declared")
            out.write(chunk)


def copy_tree(src: Path, dest: Path, limits: Limits = LIMITS, *, label: str) -> None:
    """Copy the regular files and dirs of `src` (its top-level .git left out) into the new dir
    `dest`; a link, fifo, socket or device anywhere is refused by name."""
    budget = _Budget(limits, label)
    dest.mkdir()
    stack: list[tuple[Path, str]] = [(src, "")]
    while stack:
        here, rel = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError as exc:
            raise InputError(
                f"states fetch: {label}: {here}: cannot be read ({exc.strerror or exc})"
            ) from None
        for e in entries:
            name = f"{rel}/{e.name}" if rel else e.name
            if not rel and e.name == ".git":
                continue
            _clean_name(name, budget)
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise budget.refuse(
                    name, f"a symlink (-> {os.readlink(e.path)}); a states pack holds only files"
                )
            if stat.S_ISDIR(st.st_mode):
                budget.member(name)
                if name.count("/") + 1 > limits.max_depth:
                    raise budget.refuse(name, f"nested more than {limits.max_depth} levels deep")
                (dest / name).mkdir()
                stack.append((Path(e.path), name))
            elif stat.S_ISREG(st.st_mode):
                budget.member(name, st.st_size)
                fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                with os.fdopen(fd, "rb") as fh:
                    _write_member(fh, _safe_dest(dest, name, budget, name), st.st_size, budget, name)
            else:
                raise budget.refuse(name, f"a {_kind(st.st_mode)}; a states pack holds only files")


def _kind(mode: int) -> str:
    return (
        "fifo"
        if stat.S_ISFIFO(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "device file"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "special file"
    )


class _CappedReader:
    """A stream that stops (InputError) once more than `cap` bytes came out of it: the bound on
    what a small compressed archive may expand to."""

    def __init__(self, inner, cap: int, label: str):
        self.inner, self.cap, self.label, self.seen = inner, cap, label, 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > (1 << 20):
            n = 1 << 20
        data = self.inner.read(n)
        self.seen += len(data)
        if self.seen > self.cap:
            raise InputError(
                f"states fetch: {self.label}: the archive expands past {self.cap} bytes; nothing installed"
            )
        return data


class _BoundedInfo(tarfile.TarInfo):
    """Refuses, before reading it, a pax or GNU long-name header whose own data is large (tarfile
    would read it whole into memory) and sparse members."""

    def _proc_member(self, tarfile_):
        if (
            self.type
            in (
                tarfile.XHDTYPE,
                tarfile.XGLTYPE,
                tarfile.SOLARIS_XHDTYPE,
                tarfile.GNUTYPE_LONGNAME,
                tarfile.GNUTYPE_LONGLINK,
            )
            and self.size > _HEADER_DATA_BYTES
        ):
            raise InputError(
                f"states fetch: member {self.name!r}: a {self.size} byte extended header; nothing installed"
            )
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise InputError(f"states fetch: member {self.name!r}: a sparse file; nothing installed")
        return super()._proc_member(tarfile_)


def extract_tarball(path: Path, dest: Path, limits: Limits = LIMITS, *, label: str) -> None:
    """Extract the regular files and dirs of the (gzipped) tarball `path` into the new dir
    `dest`, read as a stream: every member is judged from its header before a byte of it is
    written, and the first one refused stops the extraction."""
    budget = _Budget(limits, label)
    dest.mkdir()
    seen: set[str] = set()
    cap = limits.max_total_bytes + limits.max_members * 2048 + (16 << 20)
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        inner = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        stream = _CappedReader(inner, cap, label)
        try:
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedInfo) as tf:
                for m in tf:
                    rel = _clean_name(m.name, budget)
                    if m.issym() or m.islnk():
                        what = "symlink" if m.issym() else "hard link"
                        raise budget.refuse(
                            m.name, f"a {what} (-> {m.linkname}); a states pack holds only files"
                        )
                    if m.ischr() or m.isblk():
                        raise budget.refuse(m.name, "a device file; a states pack holds only files")
                    if m.isfifo():
                        raise budget.refuse(m.name, "a fifo; a states pack holds only files")
                    if m.isdir():
                        budget.member(m.name)
                        if rel:
                            d = _safe_dest(dest, rel, budget, m.name)
                            if d.exists() and not d.is_dir():
                                raise budget.refuse(m.name, "a directory where a file is")
                            d.mkdir(exist_ok=True)
                        continue
                    if not m.isreg():
                        raise budget.refuse(m.name, "not a regular file or directory")
                    if not rel or rel in seen:
                        raise budget.refuse(
                            m.name, "a file name given twice" if rel else "a file without a name"
                        )
                    budget.member(m.name, m.size)
                    seen.add(rel)
                    target = _safe_dest(dest, rel, budget, m.name)
                    if target.exists():
                        raise budget.refuse(m.name, "a file where a directory is")
                    fh = tf.extractfile(m)
                    _write_member(fh, target, m.size, budget, m.name)
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(
                f"states fetch: {label}: not a readable tarball ({' '.join(str(exc).split())[:200]}); "
                "nothing installed"
            ) from None
        except InputError as exc:
            msg = str(exc)
            if not msg.startswith(f"states fetch: {label}"):
                msg = msg.replace("states fetch: ", f"states fetch: {label}: ", 1)
            raise InputError(msg) from None
