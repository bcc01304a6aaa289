"""Builds small but real Harbor task directories and states files for the project's tests."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import yaml

from swe_residual.backends import repo

TEST_SH = """#!/bin/bash
set -u
APP_DIR="${APP_DIR:-/app}"; TESTS_DIR="${TESTS_DIR:-/tests}"; LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
cd "$APP_DIR" || exit 2
mkdir -p tests
cp -r "$TESTS_DIR"/hidden/. tests/
python3 -m pytest -p no:cacheprovider -q -o junit_family=xunit1 --junitxml="$LOGS_DIR/junit.xml" tests
"""

SOLVE_SH = """#!/bin/bash
set -eu
cd "${APP_DIR:-/app}"
git apply --binary "${SOLUTION_DIR:-/solution}/solution.patch"
"""

CALC = """\
def add(a, b):
    return a + b


def mul(a, b):
    return a * b
"""
CALC_SOLVED = (
    CALC
    + """

def sub(a, b):
    return a - b


def div(a, b):
    if b == 0:
        raise ZeroDivisionError("calc: division by zero")
    return a / b
"""
)
CALC_PARTIAL = (
    CALC
    + """

def sub(a, b):
    return a - b


def div(a, b):
    return a / b if b else 0
"""
)
EXISTING_TESTS = """\
from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""
NEW_TESTS = """\
import pytest

from calc import div, sub


def test_sub():
    assert sub(5, 3) == 2


def test_div():
    assert div(6, 3) == 2


def test_div_by_zero():
    with pytest.raises(ZeroDivisionError):
        div(1, 0)
"""
F2P = ["tests.test_new.test_sub", "tests.test_new.test_div", "tests.test_new.test_div_by_zero"]
P2P = ["tests.test_calc.test_add", "tests.test_calc.test_mul"]


def make_patch(base_files: Path, edit) -> bytes:
    """Diff (binary, incl. new files) produced by `edit(workdir)` on a fresh base repository."""
    work = base_files.parent / f".patch-work-{hashlib.sha1(str(base_files).encode()).hexdigest()[:6]}"
    shutil.rmtree(work, ignore_errors=True)
    base = repo.init_base_repo(base_files, work)
    edit(work)
    repo.git(work, "add", "-A")  # a scratch repository: its own index may change
    data = repo.git(work, "diff", "--cached", "--binary", base).stdout
    shutil.rmtree(work)
    return data


def make_task(
    root: Path,
    task_id: str = "calc",
    test_sh: str = TEST_SH,
    verifier_timeout: float = 60,
    agent_timeout: float = 60,
) -> Path:
    task = root / "tasks" / task_id
    (task / "environment" / "repo" / "tests").mkdir(parents=True)
    (task / "tests" / "hidden").mkdir(parents=True)
    (task / "solution").mkdir(parents=True)
    (task / "instruction.md").write_text(
        "Add `sub(a, b)` and `div(a, b)` to calc.py; dividing by zero must raise ZeroDivisionError.\n"
    )
    (task / "task.toml").write_text(
        textwrap.dedent(f"""\
        schema_version = "1.1"
        [metadata]
        task_id = "{task_id}"
        repository_dir = "environment/repo"
        custom_field = "kept"
        [agent]
        timeout_sec = {agent_timeout}
        [verifier]
        timeout_sec = {verifier_timeout}
        """)
    )
    repo_dir = task / "environment" / "repo"
    (repo_dir / "calc.py").write_text(CALC)
    (repo_dir / "tests" / "__init__.py").write_text("")
    (repo_dir / "tests" / "test_calc.py").write_text(EXISTING_TESTS)
    (task / "tests" / "hidden" / "__init__.py").write_text("")
    (task / "tests" / "hidden" / "test_calc.py").write_text(EXISTING_TESTS)
    (task / "tests" / "hidden" / "test_new.py").write_text(NEW_TESTS)
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "tests" / "config.json").write_text(json.dumps({"f2p_node_ids": F2P, "p2p_node_ids": P2P}))
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    (task / "solution" / "solution.patch").write_bytes(
        make_patch(repo_dir, lambda w: (w / "calc.py").write_text(CALC_SOLVED))
    )
    return task


def partial_state_patch(task: Path) -> bytes:
    """A state that adds sub/div and notes claiming completion, but div(1, 0) returns 0."""

    def edit(w: Path) -> None:
        (w / "calc.py").write_text(CALC_PARTIAL)
        (w / "NOTES.md").write_text("Implemented sub and div. All tests pass.\n")
        (w / "logo.bin").write_bytes(bytes(range(256)))

    return make_patch(task / "environment" / "repo", edit)


def write_states(root: Path, entries: list[dict]) -> Path:
    path = root / "states.yaml"
    path.write_text(yaml.safe_dump({"states": entries}, sort_keys=False))
    return path


def state_entry(root: Path, task: Path, patch: bytes, state_id: str = "calc--partial", **over) -> dict:
    p = root / "states" / f"{state_id}.patch"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(patch)
    entry = {
        "id": state_id,
        "track": "demo",
        "task": task.name,
        "predecessor": {"agent": "handwritten", "model_family": "handwritten"},
        "artifact": {"patch": str(p.relative_to(root)), "sha256": hashlib.sha256(patch).hexdigest()},
        "initial_verdict": {"failing_tests": ["tests.test_new.test_div_by_zero"]},
    }
    entry.update(over)
    return entry


def git_out(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


# Same first RUN as the demo tasks' Dockerfiles, so the layer is shared; the repository becomes one
# commit with the fixed identity of swe_residual.backends.repo, so its hash is known.
CALC_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pytest git ca-certificates && rm -rf /var/lib/apt/lists/*
COPY repo /app
WORKDIR /app
RUN git init -q -b main && git add -A && GIT_AUTHOR_NAME=swe-residual GIT_AUTHOR_EMAIL=tasks@swe-residual.invalid GIT_COMMITTER_NAME=swe-residual GIT_COMMITTER_EMAIL=tasks@swe-residual.invalid GIT_AUTHOR_DATE=2024-01-01T00:00:00+00:00 GIT_COMMITTER_DATE=2024-01-01T00:00:00+00:00 git commit -q -m "Base commit"
"""
CALC_ENV = '\n[environment]\ncpus = 1\nmemory_mb = 512\nnetwork_mode = "no-network"\n'


def docker_task(root: Path, **kw) -> Path:
    task = make_task(root, **kw)
    (task / "environment" / "Dockerfile").write_text(CALC_DOCKERFILE)
    with open(task / "task.toml", "a") as fh:
        fh.write(CALC_ENV)
    return task


def run_one(case, agent, backend, run_dir: Path, **kw):
    """One attempt of a case through the engine's runner, as a session runs it."""
    from swe_residual.run.attempt import RunSettings, run_case
    from swe_residual.run.reference import ReferenceChecks

    return run_case(case, RunSettings(run_dir, ReferenceChecks(run_dir), **kw), agent=agent, backend=backend)
