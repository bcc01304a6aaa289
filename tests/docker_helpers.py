"""Reusable skip/require logic for tests that need the real Docker engine.

Usage in a test module (tests/ is on sys.path under pytest's default import mode)::

    from docker_helpers import docker_client, bookworm_image, require_docker  # noqa: F401

    def test_x(docker_client): ...          # skipped (or failed, see below) without Docker
    def test_y(bookworm_image): ...         # also bootstraps debian:bookworm-slim if missing

Without Docker the tests skip with a one-line reason, unless SWE_RESIDUAL_REQUIRE_DOCKER=1,
in which case they fail (CI sets it after running .ci/docker-setup.sh).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys

import pytest

try:
    import swe_residual.backends.docker.bootstrap as images
except ImportError:  # plain `pytest` from elsewhere: make the repo root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    import swe_residual.backends.docker.bootstrap as images

REQUIRE_ENV = "SWE_RESIDUAL_REQUIRE_DOCKER"
BASE_IMAGE = "debian:bookworm-slim"


def docker_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() == "1"


def engine_problem() -> str | None:
    """Why no Docker engine answers (the check the docker backend makes), None when one does."""
    try:
        from swe_residual.backends.docker.engine import check_engine
    except ImportError as exc:  # the docker SDK is not installed
        return f"cannot import the docker backend: {exc}"
    from swe_residual.errors import InputError

    try:
        check_engine()
    except InputError as exc:
        return str(exc)
    return None


def require_docker() -> None:
    """Skip the calling test when the engine is unreachable, or fail if Docker is required."""
    reason = engine_problem()
    if reason is None:
        return
    if docker_required():
        pytest.fail(f"Docker required ({REQUIRE_ENV}=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Docker unavailable: {reason}")


def require_root() -> None:
    """Bootstrapping (debootstrap) needs root: skip, or fail when Docker is required."""
    if os.geteuid() == 0:
        return
    if docker_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but not root: cannot bootstrap base images", pytrace=False)
    pytest.skip("not root: cannot bootstrap base images")


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client for the real engine (skips/fails as described above)."""
    require_docker()
    import docker

    client = docker.from_env(timeout=300)
    yield client
    client.close()


@pytest.fixture(scope="session")
def bookworm_image(docker_client) -> str:
    """Name of the (bootstrapped if missing) ``debian:bookworm-slim`` image."""
    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:
        require_root()
        images.bootstrap_base_images([BASE_IMAGE], log=lambda m: print(m, file=sys.stderr))
    return BASE_IMAGE


def run_in(client, image: str, command: list[str], *, timeout: float = 300) -> tuple[int, str]:
    """Run ``command`` in a fresh container of ``image``; return (exit code, combined output)."""
    container = client.containers.run(image, command, detach=True)
    try:
        result = container.wait(timeout=timeout)
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return int(result.get("StatusCode", -1)), output
    finally:
        container.remove(force=True)


@contextlib.contextmanager
def private_dockerd():
    """A second Docker engine of our own (its own socket, data root and network namespace, so
    nothing it does to bridges or iptables touches the host's engine). Yields (host, start, stop):
    a test may stop and restart it."""
    import shutil
    import signal
    import subprocess
    import tempfile
    import time

    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("unshare") is None:
        pytest.skip("needs root, dockerd and unshare to run a private engine")
    d = pathlib.Path(tempfile.mkdtemp(prefix="swed-", dir="/tmp"))  # short: socket paths are limited
    host = f"unix://{d}/d.sock"
    state: dict = {}

    def start() -> None:
        state["proc"] = subprocess.Popen(
            [
                "unshare",
                "--net",
                "dockerd",
                "--host",
                host,
                "--data-root",
                str(d / "data"),
                "--exec-root",
                str(d / "x"),
                "--pidfile",
                str(d / "d.pid"),
                "--bridge",
                "none",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=open(d / "log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(120):
            if subprocess.run(["docker", "-H", host, "info"], capture_output=True).returncode == 0:
                return
            time.sleep(0.25)
        raise RuntimeError(f"private dockerd did not start: {(d / 'log').read_text()[-2000:]}")

    def stop() -> None:
        proc = state.get("proc")
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)

    start()
    try:
        yield host, start, stop
    finally:
        stop()
        subprocess.run(
            ["sh", "-c", f"grep -o ' {d}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l"],
            capture_output=True,
        )
        shutil.rmtree(d, ignore_errors=True)


def left_behind(run_name: str, host: str | None = None) -> list[str]:
    """Containers of a run named `run_name` whose owning process has ended: what the run left on
    the engine. Other tests' runs may be live on the same engine at the same time (xdist): a
    container whose owner still runs is not ours to judge."""
    import docker

    from swe_residual.backends.docker.engine import LABEL_PID, LABEL_PIDSTART, LABEL_RUN
    from swe_residual.backends.owners import owner_alive

    # containers are labelled with the run dir's name alone: a name many tests share would find
    # what another test's killed run left behind (its owner gone too)
    assert run_name != "run", "give the run dir a name of its own where left_behind reads it"
    client = docker.DockerClient(base_url=host) if host else docker.from_env()
    try:
        # one listing with the labels in it (containers.list inspects each one afterwards: a
        # container another live run removes in between would fail the check)
        rows = client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_name}"})
        return [
            r["Id"]
            for r in rows
            if not owner_alive(
                (r.get("Labels") or {}).get(LABEL_PID), (r.get("Labels") or {}).get(LABEL_PIDSTART)
            )
        ]
    finally:
        client.close()
