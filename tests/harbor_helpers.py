"""The `harbor` package from PyPI for tests that check exports against Harbor itself.

Harbor needs Python >= 3.12; the project's venv may be older. `harbor_venv_python()` makes (once, in the
cache dir, shared by xdist workers and by test runs) a venv of a CPython >= 3.12 holding
`harbor==HARBOR_VERSION` (the release `swe-residual export harbor` targets) and yields its python.
Without such a Python, or when pip cannot install Harbor, the tests that use it skip with the
reason, unless SWE_RESIDUAL_REQUIRE_HARBOR=1 (CI), which fails them instead.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from swe_residual.harbor.export import HARBOR_VERSION, harbor_slug

HARBOR_DRIVER = Path(__file__).with_name("harbor_driver.py")  # run by the venv's python, see its docstring
HARBOR_SPEC = os.environ.get("SWE_RESIDUAL_HARBOR_SPEC", f"harbor=={HARBOR_VERSION}")
REQUIRE_HARBOR = "SWE_RESIDUAL_REQUIRE_HARBOR"


def python312() -> str | None:
    """A CPython >= 3.12 on this machine: $SWE_RESIDUAL_PYTHON312, .ci/python312.sh's prefix, PATH."""
    candidates = [
        os.environ.get("SWE_RESIDUAL_PYTHON312", ""),
        os.environ.get("SWE_RESIDUAL_PYTHON312_PREFIX", "/opt/swe-residual/python3.13") + "/bin/python3.13",
        *(shutil.which(f"python3.{m}") or "" for m in (14, 13, 12)),
    ]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            ok = subprocess.run(
                [c, "-c", "import sys, venv, ssl; sys.exit(sys.version_info < (3, 12))"],
                capture_output=True,
                check=False,
            )
            if ok.returncode == 0:
                return c
    return None


def harbor_unavailable(reason: str):
    if os.environ.get(REQUIRE_HARBOR, "").strip() == "1":
        pytest.fail(f"{REQUIRE_HARBOR}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def harbor_venv_python() -> str:
    """Python of a venv holding the `harbor` package (made once, kept in the cache dir); skips or
    fails (see above) when there is none. Test modules wrap it in their `harbor_python` fixture."""
    py = python312()
    if py is None:
        harbor_unavailable("no Python >= 3.12 for the harbor package (run .ci/python312.sh)")
    version = subprocess.run(
        [py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    cache = Path(
        os.environ.get("SWE_RESIDUAL_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swe-residual"
    )
    venv = cache / f"harbor-venv-py{version}-{harbor_slug(HARBOR_SPEC)}"
    vpy = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:  # xdist workers: one of them makes the venv
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").is_file():
            _make_harbor_venv(py, venv)
    return str(vpy)


def _make_harbor_venv(py: str, venv: Path) -> None:
    vpy = venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([py, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    pip = made.returncode == 0 and subprocess.run(
        [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check", HARBOR_SPEC],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if made.returncode != 0 or pip.returncode != 0:
        err = (made.stderr if made.returncode else pip.stderr).strip().splitlines()
        shutil.rmtree(venv, ignore_errors=True)
        harbor_unavailable(f"cannot install {HARBOR_SPEC} with {py}: {err[-1] if err else 'no output'}")
    (venv / ".complete").write_text(HARBOR_SPEC + "\n")
