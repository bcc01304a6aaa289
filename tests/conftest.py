import os
import shutil

import pytest

from .docker_helpers import bookworm_image, docker_client  # noqa: F401  (shared fixtures)


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
