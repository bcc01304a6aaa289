"""Backends: where starting states are materialized and verified."""

from __future__ import annotations

import os
from pathlib import Path

from swe_residual.backends.base import Backend, Environment, ExecResult
from swe_residual.errors import InputError

BACKENDS = ("local", "docker")


HOSTS_ENV = "SWE_RESIDUAL_DOCKER_HOSTS"


def get_backend(name: str, work_root: Path | None = None, run_id: str | None = None,
                host: str | None = None) -> Backend:
    if name == "local":
        from swe_residual.backends.local import LocalBackend
        return LocalBackend(work_root=work_root)
    if name == "docker":
        from swe_residual.backends.docker import DockerBackend
        return DockerBackend(run_id=run_id, host=host)
    raise InputError(f"--backend: unknown backend {name!r} (choose from {', '.join(BACKENDS)})")


def docker_hosts(given: list[str] | None = None) -> list[str | None]:
    """The Docker engines cases are spread over: --docker-host URLs, else $SWE_RESIDUAL_DOCKER_HOSTS
    (comma or space separated), else [None] (DOCKER_HOST or the default socket)."""
    hosts = [h for h in given or [] if h] or os.environ.get(HOSTS_ENV, "").replace(",", " ").split()
    return list(dict.fromkeys(hosts)) or [None]


__all__ = ["Backend", "Environment", "ExecResult", "get_backend", "docker_hosts", "BACKENDS"]
