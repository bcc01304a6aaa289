import os
import shutil

import pytest

from .docker_helpers import bookworm_image, docker_client  # noqa: F401  (shared fixtures)

# Test tiers (pyproject.toml registers the markers; README.md, Development, gives the commands):
# `docker`, `browser` and `harbor` name what a test needs beyond Python; each of them makes the test
# `slow` too, so `pytest -m "not slow"` is the fast tier, which needs no engine, browser or Harbor.
NEEDS = ("docker", "browser", "harbor")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers from what a test uses: the Docker fixtures or the docker side of a `backend`
    parameter (docker), the Harbor venv (harbor); then slow for every docker, browser or harbor test."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if used & {"docker_client", "bookworm_image"} or params.get("backend") == "docker":
            item.add_marker(pytest.mark.docker)
        if "harbor_python" in used:
            item.add_marker(pytest.mark.harbor)
        if any(item.get_closest_marker(name) for name in NEEDS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=["local", "docker"])
def backend(request) -> str:
    """Run a test on both backends by name (docker: skipped without an engine, failed in CI).
    test_docker_backend.py has its own `backend` fixture: a DockerBackend instance."""
    if request.param == "docker":
        from .docker_helpers import require_docker

        require_docker()
        request.getfixturevalue("bookworm_image")
    return request.param


@pytest.fixture
def require_bwrap():
    if shutil.which("bwrap") is None:
        if os.environ.get("SWE_RESIDUAL_REQUIRE_BWRAP") == "1":
            pytest.fail(
                "bubblewrap is required here (SWE_RESIDUAL_REQUIRE_BWRAP=1) but bwrap is not installed"
            )
        pytest.skip("bubblewrap (bwrap) not installed: sandbox isolation cannot be tested")
