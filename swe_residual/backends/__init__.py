"""Backends: where starting states are materialized and verified.

Which backends there are is said once, in swe_residual/registry.py; backend_class imports a
backend's module only when it is used, so option parsing (`pytest --help`) and the bootstrap stay
light.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from swe_residual.registry import BACKEND_CLASSES, BACKENDS

if TYPE_CHECKING:
    from swe_residual.backends.base import Backend


HOSTS_ENV = "SWE_RESIDUAL_DOCKER_HOSTS"


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered as `name`; InputError naming the known ones."""
    from swe_residual.errors import InputError

    if name not in BACKEND_CLASSES:
        raise InputError(f"--backend: unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    module, cls = BACKEND_CLASSES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_backend(
    name: str, work_root: Path | None = None, run_id: str | None = None, host: str | None = None
) -> Backend:
    return backend_class(name).create(work_root=work_root, run_id=run_id, host=host)


def docker_hosts(given: list[str] | None = None) -> list[str | None]:
    """The Docker engines cases are spread over: --docker-host URLs, else $SWE_RESIDUAL_DOCKER_HOSTS
    (comma or space separated), else [None] (DOCKER_HOST or the default socket)."""
    hosts = [h for h in given or [] if h] or os.environ.get(HOSTS_ENV, "").replace(",", " ").split()
    return list(dict.fromkeys(hosts)) or [None]


__all__ = ["BACKEND_CLASSES", "BACKENDS", "backend_class", "get_backend", "docker_hosts"]
