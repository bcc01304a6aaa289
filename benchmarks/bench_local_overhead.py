"""Per-case overhead of the local backend: a whole `nop` case against the floor.

The floor is what any harness must pay: run the task's test command on a copy of the residual
state. A `nop` case adds materializing the workspace (copy + git apply), the sandbox, the final
diff and grading. Run: pytest benchmarks/bench_local_overhead.py --benchmark-only
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from swe_residual.agents import AgentRegistry
from swe_residual.backends import repo
from swe_residual.backends.local import LocalBackend
from swe_residual.run.attempt import Case, RunSettings, run_case
from swe_residual.run.reference import ReferenceChecks
from swe_residual.states import load_states
from swe_residual.tasks import load_tasks

ROOT = Path(__file__).resolve().parent.parent
TASK = "invoice-rounding"


@pytest.fixture(scope="module")
def demo():
    tasks = load_tasks(ROOT / "suites" / "demo" / "tasks", "demo")
    state = [
        s for s in load_states(ROOT / "states.yaml", {"demo": tasks}, tracks={"demo"}) if s.task == TASK
    ][0]
    return tasks[TASK], state


def test_floor_test_command_on_state_copy(benchmark, demo, tmp_path):
    task, state = demo
    base = tmp_path / "base"
    repo.init_base_repo(task.repository_dir, base)
    repo.git(base, "apply", "--binary", str(state.patch_path))

    def floor():
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        shutil.copytree(base, work / "app")
        (work / "logs").mkdir()
        subprocess.run(
            ["bash", str(task.tests_dir / "test.sh")],
            capture_output=True,
            env={
                **os.environ,
                "APP_DIR": str(work / "app"),
                "TESTS_DIR": str(task.tests_dir),
                "LOGS_DIR": str(work / "logs"),
            },
        )
        shutil.rmtree(work)

    benchmark.pedantic(floor, rounds=5, warmup_rounds=1)


def test_nop_case_local_backend(benchmark, demo, tmp_path):
    task, state = demo
    backend = LocalBackend(work_root=tmp_path / "work")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    counter = iter(range(1, 10_000))

    def case():
        rec = run_case(
            Case("nop", task, "residual", state),
            RunSettings(run_dir, ReferenceChecks(run_dir)),
            agent=AgentRegistry().get("nop"),
            backend=backend,
            attempt=next(counter),
        )
        assert rec.verdict == "fail"

    benchmark.pedantic(case, rounds=5, warmup_rounds=1)
    backend.close()
