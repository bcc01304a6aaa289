"""`swe-residual states fetch SOURCE`: a pack from a dir, a .tar.gz, an http(s) URL of one or a git
repository, staged in the cache, checked, and renamed into place whole (nothing is installed
when a check fails)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from swe_residual import __version__
from swe_residual.errors import InputError
from swe_residual.packs.installed import Installed, tasks_notes
from swe_residual.packs.pack import CHECKSUMS, INFO_FILE, TAR_SUFFIXES, git_out, utc_now
from swe_residual.packs.safecopy import LIMITS, Limits, copy_tree, extract_tarball
from swe_residual.packs.verify import verify_pack
from swe_residual.safe_read import (
    GIT_LOW_SPEED,
    DeadlinePassed,
    body_chunks,
    download_deadline,
    open_within,
)
from swe_residual.states import sha256_file
from swe_residual.tracks import PACK_SOURCE, cache_root, locked, states_cache_dir, suite_dir

GIT_TIMEOUT_S = 900.0
HTTP_TIMEOUT_S = 120.0


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
        record.update(track=track, n_states=n, digest=digest, fetched_at=utc_now())
        (pack / PACK_SOURCE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        dest = states_cache_dir(track)
        _install(pack, dest)
    except OSError as exc:
        raise InputError(
            f"states fetch: {source}: cannot be installed into {root} ({exc.strerror or exc})"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Installed(track, dest, record, info, n, digest, notes=tasks_notes(track, info))


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
        if path.endswith(TAR_SUFFIXES):
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
        if path.name.endswith((*TAR_SUFFIXES, ".tar")):
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


def _download(url: str, dest: Path, limits: Limits) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": f"swe-residual/{__version__}"})
    seconds = download_deadline()
    deadline = time.monotonic() + seconds
    try:
        with open_within(req, deadline, HTTP_TIMEOUT_S) as resp, open(dest, "wb") as out:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limits.max_total_bytes:
                raise InputError(
                    f"states fetch: {url}: {length} bytes, over the {limits.max_total_bytes} bytes "
                    "a pack may have; nothing installed"
                )
            total = 0
            for chunk in body_chunks(resp, deadline):
                total += len(chunk)
                if total > limits.max_total_bytes:
                    raise InputError(
                        f"states fetch: {url}: more than {limits.max_total_bytes} bytes; nothing installed"
                    )
                out.write(chunk)
    except DeadlinePassed:
        raise InputError(
            f"states fetch: {url}: not downloaded within {seconds:g} s (the deadline of one download, "
            "$SWE_RESIDUAL_DOWNLOAD_DEADLINE); check the URL and your network; nothing installed"
        ) from None
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
    env = {**os.environ, **GIT_LOW_SPEED, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
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
    return git_out(dest, "rev-parse", "HEAD") or "unknown"
