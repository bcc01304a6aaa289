"""States packs: Residual States made shareable.

`swe-residual states pack` copies what one track's states need into one self-contained pack
(a directory, or a deterministic .tar.gz), so a states file built in one checkout runs in another:

    PACK/
      states.yaml         the track's entries, artifact paths rewritten to the files below
      artifacts/<id>.patch (or <id>.interactions.jsonl)
      trajectories/<id>.json      the predecessor's trajectory, when the entry names one
      pack.json           provenance: track, state ids, who/when, source states file and work
                          dir, harness version, the task repository commit the states were
                          checked against ("unknown" when not known)
      checksums.sha256    sha256 of every other file (`sha256sum -c checksums.sha256` reads it)

`swe-residual states fetch SOURCE` installs one into the cache (<cache>/states/<track>/, next to
the fetched tasks) from a dir, a .tar.gz, an http(s) URL of one, or a git repository. Everything
fetched is hostile input: an archive member that is a link, a device, absolute, climbs out with
`..`, is too large, or comes after too many members stops the fetch with one line naming it;
nothing is written outside a staging dir in the cache, and the install is renamed into place
whole only after every checksum and the states file checked out.
"""

from __future__ import annotations

import getpass
import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from swe_residual import __version__
from swe_residual.errors import InputError
from swe_residual.safe_read import Unsafe, parse_json, read_bytes, read_yaml
from swe_residual.states import LoadedState, load_states, sha256_file
from swe_residual.tasks import load_tasks
from swe_residual.tracks import (
    PACK_SOURCE,
    SUITES_ROOT,
    cache_root,
    clone_dir,
    known_tracks,
    locked,
    read_source,
    states_cache_dir,
    suite_dir,
    tasks_dir_for,
)

FORMAT = "swe-residual-states-pack-1"
STATES_FILE, INFO_FILE, CHECKSUMS = "states.yaml", "pack.json", "checksums.sha256"
PROJECT = SUITES_ROOT.parent
GIT_TIMEOUT_S = 900.0
HTTP_TIMEOUT_S = 120.0
_TAR_SUFFIXES = (".tar.gz", ".tgz")
_CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  (.+)")
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


@dataclass
class PackResult:
    out: Path
    track: str
    n_states: int
    digest: str  # sha256 of checksums.sha256: one value names the pack's content
    tasks: dict[str, Any]
    tasks_checked: bool  # the entries were cross-checked against the track's tasks


@dataclass
class Installed:
    track: str
    path: Path
    source: dict[str, Any]
    info: dict[str, Any]
    n_states: int
    digest: str
    problem: str | None = None  # why the installed copy no longer checks out (None: checksums ok)
    notes: list[str] = field(default_factory=list)


# -- pack ------------------------------------------------------------------------------------------


def pack_states(
    states_path: Path | str, out: Path | str, *, track: str | None = None, tasks_dir: str | None = None
) -> PackResult:
    """Write the pack of `track`'s states (the only track of the file when None) to `out`: a new
    or empty directory, or a .tar.gz file (replaced when it exists)."""
    states_path = Path(states_path).absolute()
    out = Path(out).absolute()
    track = track or _only_track(states_path)
    suite = suite_dir(track)
    tdir = tasks_dir_for(suite, tasks_dir)
    # a state of a misspelt track is an error, never silently left out of the pack
    tasks = {track: load_tasks(tdir, track)} if tdir is not None else None
    states = load_states(states_path, tasks, tracks={track}, known_tracks=known_tracks())
    if not states:
        raise InputError(f"states pack: {states_path} lists no states of track {track!r}; nothing to pack")
    tarball = out.name.endswith(_TAR_SUFFIXES)
    if not tarball and (out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir())))):
        raise InputError(
            f"states pack: --out {out}: exists and is not an empty directory; choose a new path "
            "(or one ending in .tar.gz for a tarball)"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"states pack: {out.parent}: cannot be created ({exc.strerror or exc})") from None
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    tasks = _tasks_origin(track, tdir)
    try:
        partial.mkdir()
        digest = _write_tree(partial, states, track, states_path, tasks)
        if tarball:
            tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
            try:
                write_tarball(partial, tmp)
                os.replace(tmp, out)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            if out.is_dir():
                out.rmdir()  # empty (checked above)
            os.rename(partial, out)
    except OSError as exc:
        raise InputError(f"states pack: --out {out}: cannot be written ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return PackResult(out, track, len(states), digest, tasks, tasks_checked=tdir is not None)


def _only_track(states_path: Path) -> str:
    load_states(states_path, None, tracks=set())  # schema and ids only: reads no artifact
    found = sorted({str(e["track"]) for e in read_yaml(states_path, "states file").get("states") or []})
    if len(found) != 1:
        which = f"states of {len(found)} tracks ({', '.join(map(str, found))})" if found else "no states"
        raise InputError(
            f"states pack: {states_path} holds {which}; pass --track TRACK (a pack holds one track)"
        )
    return str(found[0])


def _artifact_name(state: LoadedState) -> str:
    return (
        f"artifacts/{state.id}.patch" if state.kind == "patch" else f"artifacts/{state.id}.interactions.jsonl"
    )


def _write_tree(
    root: Path, states: list[LoadedState], track: str, states_path: Path, tasks: dict[str, Any]
) -> str:
    """The pack's files in `root`; returns the pack digest."""
    entries = []
    for s in states:
        entry = s.entry.model_dump(mode="json", exclude_defaults=True)
        art = _artifact_name(s)
        _copy_file(s.artifact_path, root / art)
        entry["artifact"]["patch" if s.kind == "patch" else "interactions"] = art
        if s.trajectory_path is not None:
            traj = f"trajectories/{s.id}.json"
            _copy_file(s.trajectory_path, root / traj)
            entry["artifact"]["trajectory"] = traj
        entries.append(entry)
    header = (
        f"# Residual States of track {track!r}, from a states pack ({INFO_FILE} says where from).\n"
        "# Paths are relative to this file.\n"
    )
    (root / STATES_FILE).write_text(
        header
        + yaml.dump({"states": entries}, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=120),
        encoding="utf-8",
    )
    work_dir = states_path.parent if (states_path.parent / "stage1.jsonl").is_file() else None
    info = {
        "format": FORMAT,
        "track": track,
        "n_states": len(states),
        "states": [s.id for s in states],
        "created_at": _now(),
        "created_by": _author(),
        "harness": {"name": "swe-residual", "version": __version__, "commit": _git_head(PROJECT)},
        "source": {"states_file": str(states_path), "work_dir": str(work_dir) if work_dir else None},
        "tasks": tasks,
    }
    (root / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    lines = "".join(f"{sha256_file(root / rel)}  {rel}\n" for rel in files)
    (root / CHECKSUMS).write_text(lines, encoding="utf-8")
    return hashlib.sha256(lines.encode()).hexdigest()


class _NoAliases(yaml.SafeDumper):
    """A states file someone else reads: no anchors (fetch refuses aliases, a YAML bomb's tool)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _copy_file(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)


def write_tarball(root: Path, out: Path) -> None:
    """root's files as a .tar.gz that is the same bytes for the same files: sorted names, fixed
    mtime, owner and modes, no gzip name or time."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    with (
        open(out, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf,
    ):
        for rel in files:
            info = tarfile.TarInfo(rel)
            info.size = (root / rel).stat().st_size
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = 0, 0o644, 0, 0, "", ""
            with open(root / rel, "rb") as fh:
                tf.addfile(info, fh)


def _tasks_origin(track: str, tdir: Path | None) -> dict[str, Any]:
    """The task repository commit the states were checked against: from the `tasks fetch` record
    of the clone holding the tasks, else that git checkout's HEAD, else "unknown"."""
    if tdir is None:
        return {"commit": "unknown", "why": f"no tasks of track {track!r} were found when packing"}
    tdir = tdir.resolve()
    top = _git_out(tdir, "rev-parse", "--show-toplevel")
    if top is None:
        return {"commit": "unknown", "tasks_dir": str(tdir), "why": "the tasks dir is in no git checkout"}
    top_path = Path(top).resolve()
    rel = str(tdir.relative_to(top_path)) if tdir != top_path else "."
    record = read_source(top_path)
    if record is not None and isinstance(record.get("commit"), str):
        return {
            "commit": record["commit"],
            "url": record.get("url"),
            "ref": record.get("ref"),
            "subdir": rel,
            "from": "tasks fetch record",
        }
    head = _git_out(top_path, "rev-parse", "HEAD")
    dirty = bool(_git_out(top_path, "status", "--porcelain", "--", rel))
    return {
        "commit": head or "unknown",
        "url": _git_out(top_path, "remote", "get-url", "origin"),
        "subdir": rel,
        "dirty": dirty,
        "from": "git checkout",
    }


def _git_out(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _git_head(path: Path) -> str | None:
    return _git_out(path, "rev-parse", "HEAD")


def _author() -> str:
    name = _git_out(PROJECT, "config", "user.name")
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _now() -> str:
    """UTC now, or $SOURCE_DATE_EPOCH (reproducible packs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    t = int(epoch) if epoch.isdigit() else time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# -- fetch -----------------------------------------------------------------------------------------


def fetch_states(
    source: str, *, track: str | None = None, ref: str | None = None, limits: Limits = LIMITS
) -> Installed:
    """Install the pack at `source` (dir, .tar.gz, http(s) URL of one, git URL) into the cache."""
    if not source or source.startswith("-"):
        raise InputError(f"states fetch: {source!r} is no pack source (a dir, a .tar.gz, a URL or a git URL)")
    if track is not None:
        suite_dir(track)
    kind, where = classify_source(source)
    root = cache_root() / "states"
    shown = where if kind in ("dir", "tarball") else source
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"states fetch: {root}: cannot be created ({exc.strerror or exc})") from None
    staging = root / f".incoming-{os.getpid()}-{time.monotonic_ns()}"
    record: dict[str, Any] = {"source": shown, "kind": kind, "ref": ref}
    try:
        staging.mkdir()
        unpacked = staging / "pack"
        if kind == "dir":
            copy_tree(Path(where), unpacked, limits, label=source)
        elif kind == "tarball":
            record["sha256"] = sha256_file(Path(where))
            extract_tarball(Path(where), unpacked, limits, label=source)
        elif kind == "url":
            download = staging / "download.tar.gz"
            _download(where, download, limits)
            record["sha256"] = sha256_file(download)
            extract_tarball(download, unpacked, limits, label=source)
        else:
            clone = staging / "clone"
            record["commit"] = _git_clone(where, clone, ref)
            copy_tree(clone, unpacked, limits, label=source)
        pack = _pack_root(unpacked, source)
        info, n = verify_pack(pack, label=source)
        if track is not None and info["track"] != track:
            raise InputError(
                f"states fetch: {source}: the pack holds states of track {info['track']!r}, not {track!r}"
            )
        track = info["track"]
        suite_dir(track)
        digest = hashlib.sha256((pack / CHECKSUMS).read_bytes()).hexdigest()
        record.update(track=track, n_states=n, digest=digest, fetched_at=_now())
        (pack / PACK_SOURCE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        dest = states_cache_dir(track)
        _install(pack, dest)
    except OSError as exc:
        raise InputError(
            f"states fetch: {source}: cannot be installed into {root} ({exc.strerror or exc})"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Installed(track, dest, record, info, n, digest, notes=_tasks_notes(track, info))


def classify_source(source: str) -> tuple[str, str]:
    """(kind, where): kind dir | tarball (a local file) | url (http(s) of a tarball) | git."""
    if source.startswith("git+"):
        return "git", source[4:]
    if re.match(r"^[\w.-]+@[\w.-]+:", source):  # scp-like: git@host:owner/repo
        return "git", source
    parsed = urllib.parse.urlparse(source)
    scheme = parsed.scheme.lower()
    if scheme in ("git", "ssh"):
        return "git", source
    if scheme in ("http", "https"):
        path = parsed.path.rstrip("/")
        if path.endswith(_TAR_SUFFIXES):
            return "url", source
        if path.endswith(".git"):
            return "git", source
        raise InputError(
            f"states fetch: {source}: a URL must name a .tar.gz (a pack tarball) or end in .git "
            "(a git repository; or write git+URL)"
        )
    if scheme == "file":
        local = Path(urllib.request.url2pathname(parsed.path))
        if local.is_dir() and _is_git_repo(local):
            return "git", source
        return _local(local, source)
    if scheme and len(scheme) > 1:
        raise InputError(
            f"states fetch: {source}: unsupported URL scheme {scheme!r} (http, https, file, git, ssh)"
        )
    return _local(Path(source).expanduser().absolute(), source)


def _local(path: Path, source: str) -> tuple[str, str]:
    if path.is_dir():
        if not (path / INFO_FILE).exists() and _is_git_repo(path) and not (path / ".git").exists():
            return "git", str(path)  # a bare repository
        return "dir", str(path)
    if path.is_file():
        if path.name.endswith((*_TAR_SUFFIXES, ".tar")):
            return "tarball", str(path)
        raise InputError(
            f"states fetch: {source}: not a .tar.gz (a file pack is the tarball `states pack "
            "--out PACK.tar.gz` writes)"
        )
    raise InputError(f"states fetch: {source}: no such file or directory")


def _is_git_repo(path: Path) -> bool:
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _pack_root(unpacked: Path, source: str) -> Path:
    """The pack's top: the unpacked dir, or its one subdirectory (a tarball with a top dir)."""
    if (unpacked / INFO_FILE).is_file():
        return unpacked
    children = list(unpacked.iterdir()) if unpacked.is_dir() else []
    if len(children) == 1 and children[0].is_dir() and (children[0] / INFO_FILE).is_file():
        return children[0]
    raise InputError(
        f"states fetch: {source}: no {INFO_FILE} at its top: not a states pack (make one with "
        "`swe-residual states pack --states S --out PACK`)"
    )


def _install(pack: Path, dest: Path) -> None:
    """Replace the track's installed pack by `pack` (same filesystem: two renames)."""
    with locked(dest):
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise InputError(f"states fetch: {dest} is not a directory; remove it")
        if dest.is_dir() and not (dest / PACK_SOURCE).is_file() and any(dest.iterdir()):
            raise InputError(
                f"states fetch: {dest} exists and was not made by `swe-residual states fetch`; remove it"
            )
        old = dest.parent / f".{dest.name}.old-{os.getpid()}"
        if dest.is_dir():
            os.rename(dest, old)
        try:
            os.rename(pack, dest)
        except OSError:
            if old.is_dir():
                os.rename(old, dest)
            raise
        shutil.rmtree(old, ignore_errors=True)


def _tasks_notes(track: str, info: dict[str, Any]) -> list[str]:
    """What the user should know about the tasks these states were checked against."""
    tasks = info.get("tasks") if isinstance(info.get("tasks"), dict) else {}
    # a commit of the track's task repository (from a `tasks fetch` record) is one `--ref` can pin
    want = tasks.get("commit") if tasks.get("from") == "tasks fetch record" else None
    if (SUITES_ROOT / track / "tasks").is_dir():
        return []
    have = read_source(clone_dir(track))
    if have is None:
        return [
            f"the tasks of track {track!r} are not fetched yet: `swe-residual tasks fetch {track}`"
            + (f" (the states were checked against commit {want}: add --ref {want})" if want else "")
        ]
    if want and have.get("commit") != want:
        return [
            f"the states were checked against task commit {want}; your fetched tasks are at "
            f"{have.get('commit')} (`swe-residual tasks fetch {track} --ref {want}` pins them)"
        ]
    return []


# -- staging: copying a tree, extracting a tarball, downloading, cloning ---------------------------


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


def _download(url: str, dest: Path, limits: Limits) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": f"swe-residual/{__version__}"})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp, open(dest, "wb") as out:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limits.max_total_bytes:
                raise InputError(
                    f"states fetch: {url}: {length} bytes, over the {limits.max_total_bytes} bytes "
                    "a pack may have; nothing installed"
                )
            total = 0
            while chunk := resp.read(1 << 20):
                total += len(chunk)
                if total > limits.max_total_bytes:
                    raise InputError(
                        f"states fetch: {url}: more than {limits.max_total_bytes} bytes; nothing installed"
                    )
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise InputError(f"states fetch: {url}: HTTP {exc.code} {exc.reason}; check the URL") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise InputError(
            f"states fetch: {url}: cannot be downloaded ({reason}); check the URL and your network"
        ) from None


def _git_clone(url: str, dest: Path, ref: str | None) -> str:
    """A shallow clone of `url` (at `ref`: a branch or tag); returns its commit."""
    if url.startswith("-") or (ref is not None and (not ref.strip() or ref.startswith("-"))):
        raise InputError(f"states fetch: {url} {ref or ''}: not a repository URL and ref")
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    cmd = [
        "git",
        "clone",
        "-q",
        "--depth",
        "1",
        "--no-tags",
        *(["--branch", ref] if ref else []),
        "--",
        url,
        str(dest),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env, check=False
        )
    except FileNotFoundError:
        raise InputError("states fetch: git is not installed; install it (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise InputError(
            f"states fetch: `git clone {url}` did not finish within {GIT_TIMEOUT_S:.0f} s"
        ) from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        raise InputError(f"states fetch: cannot clone {url}{f' at {ref}' if ref else ''}: {why[:300]}")
    return _git_out(dest, "rev-parse", "HEAD") or "unknown"


# -- checking a pack -------------------------------------------------------------------------------


def verify_pack(root: Path, *, label: str) -> tuple[dict[str, Any], int]:
    """(pack.json, number of states) of the pack at `root`, after every check: its format, the
    checksum of every file (and no file missing from or added to the list), the states file (no
    YAML aliases; schema, ids and artifacts as load_states checks them; one track)."""
    info = _read_info(root, label)
    problem = checksum_problem(root)
    if problem:
        raise InputError(f"states fetch: {label}: {problem}; nothing installed")
    text = (root / STATES_FILE).read_text(encoding="utf-8", errors="replace")
    try:
        if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise InputError(
                f"states fetch: {label}: {STATES_FILE} uses YAML aliases (a states pack never does); "
                "nothing installed"
            )
    except yaml.YAMLError:
        pass  # load_states names the line
    try:
        states = load_states(root / STATES_FILE, None)
    except InputError as exc:
        raise InputError(f"states fetch: {label}: {exc}; nothing installed") from None
    others = sorted({s.track for s in states} - {info["track"]})
    if others:
        raise InputError(
            f"states fetch: {label}: {STATES_FILE} holds states of track {others[0]!r}, but "
            f"{INFO_FILE} says the pack is of track {info['track']!r}; nothing installed"
        )
    if not states:
        raise InputError(f"states fetch: {label}: {STATES_FILE} lists no states; nothing installed")
    return info, len(states)


def _read_info(root: Path, label: str) -> dict[str, Any]:
    try:
        data = read_bytes(root, INFO_FILE, 1 << 20)
        info = parse_json(data, INFO_FILE) if data is not None else None
    except Unsafe as exc:
        raise InputError(f"states fetch: {label}: {exc}; nothing installed") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise InputError(
            f"states fetch: {label}: {INFO_FILE}: format is not {FORMAT!r} (not a states pack of "
            "this version); nothing installed"
        )
    track = info.get("track")
    if not isinstance(track, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", track):
        raise InputError(
            f"states fetch: {label}: {INFO_FILE}: track: {track!r} is no track name; nothing installed"
        )
    return info


def checksum_problem(root: Path) -> str | None:
    """None when checksums.sha256 lists exactly the pack's files (the source record aside) with
    their sha256; else the first problem, naming the file."""
    try:
        data = read_bytes(root, CHECKSUMS, 16 << 20)
    except Unsafe as exc:
        return str(exc)
    if data is None:
        return f"no {CHECKSUMS}"
    listed: dict[str, str] = {}
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        m = _CHECKSUM_LINE.fullmatch(line)
        rel = m.group(2) if m else ""
        if not m or rel.startswith("/") or ".." in PurePosixPath(rel).parts or rel in listed:
            return f"{CHECKSUMS}:{n}: not '<sha256>  <relative path>' of a file listed once"
        listed[rel] = m.group(1)
    present = set()
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if p.is_symlink() or (not p.is_file() and not p.is_dir()):
            return f"{rel}: not a regular file"
        if p.is_file() and rel not in (CHECKSUMS, PACK_SOURCE):
            present.add(rel)
    for rel in sorted(present - set(listed)):
        return f"{rel}: not listed in {CHECKSUMS}"
    for rel in sorted(set(listed) - present):
        return f"{CHECKSUMS} lists {rel}, which is not in the pack"
    for rel in sorted(listed):
        actual = sha256_file(root / rel)
        if actual != listed[rel]:
            return f"{rel}: sha256 {actual} does not match {CHECKSUMS} ({listed[rel]}): the file was changed"
    return None


# -- what is installed -----------------------------------------------------------------------------


def installed_packs() -> list[Installed]:
    """Every pack `states fetch` installed in the cache, each with its checksums checked again."""
    root = cache_root() / "states"
    out: list[Installed] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if d.name.startswith(".") or d.is_symlink() or not d.is_dir():
            continue
        try:
            src = parse_json(read_bytes(d, PACK_SOURCE, 1 << 20) or b"null", d / PACK_SOURCE)
            info = parse_json(read_bytes(d, INFO_FILE, 1 << 20) or b"null", d / INFO_FILE)
        except Unsafe as exc:
            out.append(Installed(d.name, d, {}, {}, 0, "", problem=str(exc)))
            continue
        src, info = (src if isinstance(src, dict) else {}), (info if isinstance(info, dict) else {})
        problem = None if src else f"no {PACK_SOURCE} (an install that did not complete)"
        problem = problem or checksum_problem(d)
        n = src.get("n_states") if isinstance(src.get("n_states"), int) else 0
        out.append(
            Installed(
                d.name,
                d,
                src,
                info,
                n,
                str(src.get("digest", "")),
                problem=problem,
                notes=_tasks_notes(d.name, info) if (SUITES_ROOT / d.name).is_dir() else [],
            )
        )
    return out
