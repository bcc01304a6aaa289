"""Tests for swe_residual.backends.docker.bootstrap against the real Docker engine (no mocks)."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

try:
    from docker_helpers import (  # noqa: F401
        BASE_IMAGE,
        bookworm_image,
        docker_client,
        engine_problem,
        images,
        require_root,
        run_in,
    )
except ImportError:  # tests/ became a package
    from tests.docker_helpers import (  # noqa: F401
        BASE_IMAGE,
        bookworm_image,
        docker_client,
        engine_problem,
        images,
        require_root,
        run_in,
    )


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


# --------------------------------------------------------------------------- base_images_of


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_base_images_of_simple_and_multistage(tmp_path):
    simple = _write(
        tmp_path,
        "Dockerfile.simple",
        """
        # syntax=docker/dockerfile:1
        FROM debian:bookworm-slim
        RUN apt-get update
    """,
    )
    multi = _write(
        tmp_path,
        "Dockerfile.multi",
        """
        FROM python:3.11-slim AS builder
        RUN pip wheel -w /w .
        from --platform=linux/amd64 debian:bookworm-slim as Runtime
        COPY --from=builder /w /w
        FROM builder AS test
        FROM runtime
        FROM scratch AS export
        COPY --from=runtime / /
    """,
    )
    continued = _write(
        tmp_path,
        "Dockerfile.cont",
        """
        FROM \\
          node:20-bookworm
        RUN echo FROM not-an-image
    """,
    )
    assert images.base_images_of([simple]) == ["debian:bookworm-slim"]
    assert images.base_images_of([multi]) == ["python:3.11-slim", "debian:bookworm-slim"]
    assert images.base_images_of([simple, multi, continued]) == [
        "debian:bookworm-slim",
        "python:3.11-slim",
        "node:20-bookworm",
    ]
    assert images.base_images_of([]) == []


def test_base_images_of_stage_name_only_counts_after_definition(tmp_path):
    # A stage alias only shadows an image name for *later* FROM lines, and per file.
    a = _write(tmp_path, "a", "FROM base AS first\nFROM first\n")
    b = _write(tmp_path, "b", "FROM first\n")
    assert images.base_images_of([a]) == ["base"]
    assert images.base_images_of([a, b]) == ["base", "first"]


def test_base_images_of_global_args(tmp_path):
    df = _write(
        tmp_path,
        "Dockerfile",
        """
        ARG PY=3.12
        ARG DISTRO
        FROM python:${PY}-slim
        FROM debian:${DISTRO:-bookworm}
        FROM ${UNKNOWN}
    """,
    )
    assert images.base_images_of([df]) == ["python:3.12-slim", "debian:bookworm"]


# --------------------------------------------------------------------------- engine


@pytest.mark.docker
def test_docker_available_and_daemon_noop(docker_client):
    assert engine_problem() is None  # the docker backend's own check: the engine answers
    t0 = time.monotonic()
    images.ensure_docker_daemon(timeout=10)  # already running: just a ping
    assert time.monotonic() - t0 < 5


@pytest.mark.docker
def test_bootstrap_runs_python_git_and_apt(docker_client):
    require_root()
    built = images.bootstrap_base_images([BASE_IMAGE], log=_log)
    assert built in ([], [BASE_IMAGE])  # [] when an earlier run already built it
    image = docker_client.images.get(BASE_IMAGE)
    if built:
        assert image.labels.get(images.BOOTSTRAP_LABEL) == "1"
        assert image.attrs["Config"]["Cmd"] == ["bash"]

    code, out = run_in(docker_client, BASE_IMAGE, ["python3", "-c", "print(1)"])
    assert (code, out.strip()) == (0, "1")
    code, out = run_in(docker_client, BASE_IMAGE, ["git", "--version"])
    assert code == 0 and out.startswith("git version"), out
    code, out = run_in(docker_client, BASE_IMAGE, ["apt-get", "update"], timeout=600)
    assert code == 0, out[-2000:]
    assert "bookworm" in out

    # Second call: nothing to do.
    assert images.bootstrap_base_images([BASE_IMAGE], log=_log) == []


@pytest.mark.docker
def test_bootstrap_extra_name_reuses_rootfs_image(docker_client, bookworm_image):
    alias = f"swe-residual-test/alias:{os.getpid()}"
    try:
        t0 = time.monotonic()
        assert images.bootstrap_base_images([bookworm_image, alias], log=_log) == [alias]
        if docker_client.images.get(bookworm_image).labels.get(images.BOOTSTRAP_LABEL) == "1":
            assert time.monotonic() - t0 < 30  # tagged, not bootstrapped again
        assert docker_client.images.get(alias).labels.get(images.BOOTSTRAP_LABEL) == "1"
        assert images.bootstrap_base_images([alias, bookworm_image], log=_log) == []
    finally:
        try:
            docker_client.images.remove(alias)  # untag only
        except Exception:
            pass


@pytest.mark.docker
def test_pip_in_venv_trusts_host_ca(docker_client, bookworm_image):
    """pip (also a venv's, which uses certifi) reaches PyPI through the copied CA bundle."""
    script = (
        "python3 -m venv /tmp/v && "
        "/tmp/v/bin/pip download --no-deps --disable-pip-version-check -q -d /tmp/d six && ls /tmp/d"
    )
    code, out = run_in(docker_client, bookworm_image, ["bash", "-c", script], timeout=300)
    assert code == 0, out[-2000:]
    assert "six-" in out


@pytest.mark.docker
def test_bootstrap_skips_digest_names(docker_client):
    logged: list[str] = []
    assert images.bootstrap_base_images(["debian@sha256:" + "0" * 64], log=logged.append) == []
    assert logged and "digest" in logged[0]
