"""Git on the host, only for repositories the harness itself builds from task files.

Repositories an agent touched are never handled here: that happens inside the environment
(swe_residual/backends/workspace.py).

The base commit of a shipped repository is made with a fixed author, committer and date, so the
same files always give the same commit hash on every machine and backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from swe_residual.errors import HarnessError

BASE_IDENTITY = {
    "GIT_AUTHOR_NAME": "swe-residual",
    "GIT_AUTHOR_EMAIL": "tasks@swe-residual.invalid",
    "GIT_COMMITTER_NAME": "swe-residual",
    "GIT_COMMITTER_EMAIL": "tasks@swe-residual.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
}
BASE_MESSAGE = "Base commit"

# Neutral git environment: no user or system config leaks into task repositories.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}


def git(
    cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, **_GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, input=input, capture_output=True)
    if check and proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise HarnessError(f"git {' '.join(args[:2])} failed in {cwd}: {msg[0] if msg else proc.returncode}")
    return proc


def init_base_repo(files: Path, dest: Path) -> str:
    """Copy plain files into dest, make them one commit with the fixed identity; return the hash."""
    shutil.copytree(files, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--no-verify", "-m", BASE_MESSAGE, env=BASE_IDENTITY)
    return head(dest)


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.decode().strip()
