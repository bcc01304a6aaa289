"""Does each Residual State's patch apply at its task's base commit? Checked before any case runs.

The check builds a base repository from the task's files and runs `git apply --check` (three git
processes per task and one per state: about 0.6 s for the demo suite's 17 states). A state that
applied once is remembered in the cache dir under a key of everything the answer depends on (the
task's files as the base repository copies them, the patch bytes, the git version), so a run
checks again only what changed. Only successes are kept: a failing patch is checked each time, and
its message is always fresh.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

from swe_residual.tracks import cache_root

CHECK_VERSION = b"patch-applies-1"
SKIPPED = {"__pycache__", ".git"}  # what repo.init_base_repo leaves out of the base


def cache_dir() -> Path:
    return cache_root() / "checks" / "patch-applies"


@cache
def _git_version() -> bytes:
    import subprocess

    try:
        return subprocess.run(["git", "--version"], capture_output=True, check=False, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return b""


def files_digest(root: Path) -> str:
    """sha256 over the relative path, kind, executable bit and content (a symlink: its target) of
    every file under `root` that the base repository copies; directories are walked without
    following links."""
    h = hashlib.sha256()
    stack = [Path(root)]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            h.update(f"unreadable {d}: {exc.errno}\0".encode())
            continue
        for e in entries:
            if e.name in SKIPPED:
                continue
            rel = os.path.relpath(e.path, root).encode("utf-8", "surrogateescape")
            try:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    h.update(b"L\0" + rel + b"\0" + os.fsencode(os.readlink(e.path)) + b"\0")
                elif stat.S_ISDIR(st.st_mode):
                    h.update(b"D\0" + rel + b"\0")
                    stack.append(Path(e.path))
                elif stat.S_ISREG(st.st_mode):
                    with open(e.path, "rb") as fh:
                        content = hashlib.file_digest(fh, "sha256").digest()
                    h.update(b"F\0" + rel + (b"\0x\0" if st.st_mode & 0o111 else b"\0-\0") + content)
                else:
                    h.update(b"O\0" + rel + b"\0")
            except OSError as exc:
                h.update(b"E\0" + rel + f"{exc.errno}".encode())
    return h.hexdigest()


def _key(base_digest: str, patch: Path) -> str | None:
    try:
        data = patch.read_bytes()
    except OSError:
        return None
    h = hashlib.sha256(CHECK_VERSION + b"\0" + _git_version() + b"\0" + base_digest.encode() + b"\0")
    h.update(data)
    return h.hexdigest()


def _remember(key: str) -> None:
    """A marker file for a patch that applied; a cache that cannot be written only costs time."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / key).touch()
    except OSError:
        pass


def state_patch_problems(states: Iterable, task_of: Callable) -> dict[str, str]:
    """state id -> why its patch does not apply at the base commit of its task (`git apply
    --check` on a base built from the task's files); tasks without a repository dir are checked
    when their residual image is built instead."""
    from swe_residual.backends import repo

    by_task: dict[str, list] = {}
    for s in states:
        by_task.setdefault(f"{s.track}/{s.task}", []).append(s)
    problems: dict[str, str] = {}
    known = cache_dir()
    with tempfile.TemporaryDirectory(prefix="swe-residual-check-") as tmp:
        for key, group in by_task.items():
            task = task_of(group[0])
            if task.repository_dir is None:
                continue
            digest = files_digest(task.repository_dir)
            keys = {s.id: _key(digest, Path(s.patch_path)) for s in group}
            todo = [s for s in group if (k := keys[s.id]) is None or not (known / k).is_file()]
            if not todo:
                continue
            base = Path(tmp) / key.replace("/", "--")
            repo.init_base_repo(task.repository_dir, base)
            for s in todo:
                proc = repo.git(
                    base,
                    "apply",
                    "--check",
                    "--binary",
                    "--whitespace=nowarn",
                    str(s.patch_path),
                    check=False,
                )
                if proc.returncode != 0:
                    why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["git apply failed"])[
                        0
                    ]
                    problems[s.id] = (
                        f"patch {s.patch_path} does not apply at the base commit of task {s.task}: "
                        f"{why.removeprefix('error: ')}"
                    )
                elif (k := keys[s.id]) is not None:
                    _remember(k)
    return problems
