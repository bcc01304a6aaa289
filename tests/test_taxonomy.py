"""One test per row of the error taxonomy (swe_residual/errors.py, docs/errors.md), through real
parts: real pytest runs of the suite, real sandboxes and verifiers, the real mini-swe-agent and
LiteLLM against the scripted model server, the real Docker engine.

The row decides the denominator: counted rows must appear in Table 3 as outcomes, infra rows
must not.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from swe_residual.agents import AgentRegistry
from swe_residual.agents.config import AgentSpec
from swe_residual.agents.msa import MiniSweAgent
from swe_residual.backends.local import LocalBackend
from swe_residual.errors import InfraError
from swe_residual.results import iter_records
from swe_residual.run.attempt import Case
from swe_residual.tasks import load_task, load_tasks

from .drivers import records, run_suite, world
from .taskfactory import docker_task, make_task, run_one

ROOT = Path(__file__).resolve().parent.parent
SCRIPTED = ROOT / "fixtures" / "scripted"


NO_MODEL_RETRY = {"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}


def summary(tmp: Path) -> dict:
    return json.loads((tmp / "run" / "summary.json").read_text())


# ---------------------------------------------------------------------------------------- counted


@pytest.mark.slow
def test_context_overflow_is_the_agents_failure_and_counted(tmp_path):
    # the scripted model answers one turn, then rejects the next request as too long for its
    # context window (HTTP 400 context_length_exceeded -> litellm.ContextWindowExceededError)
    world(
        tmp_path,
        agents={
            "overflow": {
                "harness": "mini-swe-agent",
                "model": "openai/scripted",
                "scripted_server": str(SCRIPTED / "context-overflow.yaml"),
            }
        },
    )
    proc = run_suite(
        "--infra-retries", "2", world=tmp_path, agents=["overflow"], start="both", env=NO_MODEL_RETRY
    )
    assert (
        proc.returncode == 1
        and "2 failed" in proc.stdout
        and " error" not in proc.stdout.split("summary")[-1]
    )
    recs = records(tmp_path / "run", by="case_id")
    assert len(recs) == 2, recs  # one attempt each: never retried as infra
    for r in recs.values():
        assert (r["termination"], r["rule"], r["outcome"], r["verdict"]) == (
            "context_exhausted",
            "context_exhausted",
            0,
            "fail",
        )
        assert (
            r["steps"] == 1 and r["tests"]
        )  # one answered turn; verified anyway: per-test statuses for the bias metrics
    # counted in Table 3: 0 % from both starts on 1 task (not "n/a", which an infra error would give)
    row = summary(tmp_path)["tracks"]["demo"]["overflow"]
    assert (row["clean"], row["residual"], row["n_tasks"]) == (0.0, 0.0, 1)
    assert summary(tmp_path)["rules"]["context_exhausted"] == {"records": 2, "counted": True}


# Code under test that breaks the verifier. Each is appended to calc.py, which the hidden tests import.
BREAKERS = {
    # importing calc hangs: the test run times out
    "hang": "import time; time.sleep(600)",
    # importing calc writes a reward file that is not a number
    "garbage-reward": "import os; open(os.environ.get('LOGS_DIR', '/logs/verifier') + '/reward.txt', 'w').write('garbage')",
    # after pytest wrote its JUnit report, the process overwrites it with a malformed one
    "malformed-report": (
        "import atexit, os; atexit.register(lambda: open(os.environ.get('LOGS_DIR', '/logs/verifier')"
        " + '/junit.xml', 'w').write('<testsuite><testcase'))"
    ),
}
CAUSES = {
    "hang": "verifier timed out after 4s",
    "garbage-reward": "unreadable reward file",
    "malformed-report": "unreadable JUnit report",
}


@pytest.mark.slow
def test_agent_code_that_breaks_the_verifier_is_a_counted_failure(tmp_path):
    agents = {
        name: {"harness": "command", "command": f"printf '%s\\n' \"{code}\" >> calc.py"}
        for name, code in BREAKERS.items()
    }
    world(tmp_path, agents=agents, verifier_timeout=4)
    # this verifier declares that it reads a reward file too (else a stray reward.txt is ignored)
    toml = tmp_path / "tasks" / "calc" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nreports = ["junit", "reward"]\n'))
    started = time.monotonic()
    proc = run_suite(world=tmp_path, agents=BREAKERS, start="clean", workers=2, env=NO_MODEL_RETRY)
    assert proc.returncode == 1 and "3 failed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    recs = records(tmp_path / "run", by="case_id")
    assert sorted(recs) == sorted(f"{n}-calc-clean" for n in BREAKERS)  # one attempt each, no retry
    for name, cause in CAUSES.items():
        r = recs[f"{name}-calc-clean"]
        assert (r["rule"], r["verdict"], r["outcome"], r["attempt"]) == (
            "verifier_agent_caused",
            "fail",
            0,
            1,
        ), r
        # the saved final state was verified twice, then the verifier was tried on the reference solution
        assert r["verdict_note"].startswith("the agent's state breaks the verifier: " + cause), r[
            "verdict_note"
        ]
        assert "(twice); the verifier works on the reference solution's state" in r["verdict_note"]
        assert set(r["tests"].values()) == {"failed"}
    # the reference check ran once per task for the whole run and is shared through the run dir
    assert [p.name for p in (tmp_path / "run" / "reference").glob("*.json")] == ["demo--calc.json"]
    # counted in Table 3 as failures
    s = summary(tmp_path)
    for name in BREAKERS:
        assert s["tracks"]["demo"][name]["clean"] == 0.0
    assert s["rules"]["verifier_agent_caused"] == {"records": 3, "counted": True}
    assert time.monotonic() - started < 120


# ---------------------------------------------------------------------------------------- infra


@pytest.mark.slow
def test_verifier_broken_on_the_reference_too_is_infra_and_not_counted(tmp_path):
    world(tmp_path, agents={}, test_sh="#!/bin/bash\nsleep 600\n", verifier_timeout=1)
    proc = run_suite(
        "--infra-retries", "0", world=tmp_path, agents=["oracle"], start="residual", env=NO_MODEL_RETRY
    )
    assert proc.returncode == 1 and "1 error" in proc.stdout
    (r,) = records(tmp_path / "run", by="case_id").values()
    assert (r["rule"], r["verdict"], r["outcome"], r["termination"]) == (
        "infra_verifier",
        "infra_error",
        None,
        "submitted",
    )
    assert "the verifier fails on the reference solution's state too" in r["error"]
    s = summary(tmp_path)
    assert s["tracks"]["demo"]["oracle"]["residual"] is None  # not in any denominator
    assert s["rules"]["infra_verifier"] == {"records": 1, "counted": False}


def test_backend_error_during_materialization_is_infra_not_agent_error(
    tmp_path, docker_client, bookworm_image
):
    from swe_residual.backends.docker.backend import DockerBackend

    task_dir = docker_task(tmp_path)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 512", "memory_mb = 1"))  # the engine refuses 1 MiB
    task = load_task(task_dir, "demo")
    backend = DockerBackend(run_id=f"taxonomy-{os.getpid()}", work_root=tmp_path / "work")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        with pytest.raises(InfraError) as err:
            run_one(Case("oracle", task, "clean"), AgentRegistry().get("oracle"), backend, run_dir)
    finally:
        backend.close()
    (r,) = iter_records(run_dir)
    assert (r.rule, r.verdict, r.outcome, r.termination) == ("infra_harness", "infra_error", None, "infra")
    assert "Docker: cannot create the container" in r.error and "memory" in r.error.lower()
    assert str(err.value) == r.error


@pytest.mark.slow
def test_model_service_down_is_infra_and_retried(tmp_path, backend):
    world(
        tmp_path,
        agents={
            "down": {
                "harness": "mini-swe-agent",
                "model": "openai/scripted",
                "scripted_server": str(SCRIPTED / "service-down.yaml"),
            }
        },
        backend=backend,
    )
    proc = run_suite(
        "--infra-retries",
        "1",
        world=tmp_path,
        agents=["down"],
        start="clean",
        backend=backend,
        env=NO_MODEL_RETRY,
    )
    assert proc.returncode == 1 and "1 error" in proc.stdout
    recs = records(tmp_path / "run")
    assert [(r["attempt"], r["rule"], r["verdict"]) for r in recs] == [
        (1, "infra_model_service", "infra_error"),
        (2, "infra_model_service", "infra_error"),
    ]
    assert summary(tmp_path)["tracks"]["demo"]["down"]["clean"] is None


@pytest.mark.slow
def test_context_overflow_in_process_leaves_the_environment_as_it_was(tmp_path):
    # the adapter sets what mini-swe-agent and LiteLLM read only while they run
    make_task(tmp_path)
    task = load_tasks(tmp_path / "tasks", "demo")["calc"]
    spec = AgentSpec(
        harness="mini-swe-agent",
        model="openai/scripted",
        scripted_server=str(SCRIPTED / "context-overflow.yaml"),
    )
    before = dict(os.environ)
    backend = LocalBackend(work_root=tmp_path / "work")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        rec = run_one(Case("overflow", task, "clean"), MiniSweAgent("overflow", spec), backend, run_dir)
    finally:
        backend.close()
    assert (rec.termination, rec.rule, rec.outcome) == ("context_exhausted", "context_exhausted", 0)
    assert dict(os.environ) == before


# ------------------------------------------------------------------------- configuration: usage errors


@pytest.mark.slow
def test_missing_api_key_is_one_usage_error_before_any_case(tmp_path):
    world(
        tmp_path,
        agents={
            "keyed": {
                "harness": "mini-swe-agent",
                "model": "openai/x",
                "api_key_env": ["SWE_RESIDUAL_TEST_NO_SUCH_KEY"],
            }
        },
    )
    proc = run_suite(world=tmp_path, agents=["keyed"], workers=2, env={"SWE_RESIDUAL_TEST_NO_SUCH_KEY": None})
    assert proc.returncode == 4, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "SWE_RESIDUAL_TEST_NO_SUCH_KEY" in errors[0] and "is not set" in errors[0]
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_unreachable_engine_is_one_usage_error_naming_the_endpoint(tmp_path):
    world(tmp_path, agents={})
    dead = f"unix://{tmp_path}/no-engine.sock"
    started = time.monotonic()
    proc = run_suite(
        world=tmp_path, agents=["nop"], backend="docker", env={**NO_MODEL_RETRY, "DOCKER_HOST": dead}
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and dead in errors[0] and "swe-residual images bootstrap" in errors[0], errors
    assert time.monotonic() - started < 30 and not (tmp_path / "run" / "results.jsonl").exists()


@pytest.mark.slow
def test_existing_run_dir_without_resume_is_a_usage_error(tmp_path):
    world(tmp_path, agents={})
    nop_clean = dict(world=tmp_path, agents=["nop"], start="clean", env=NO_MODEL_RETRY)
    assert run_suite(**nop_clean).returncode == 1
    before = (tmp_path / "run" / "results.jsonl").read_bytes()
    proc = run_suite(**nop_clean)
    assert proc.returncode == 4
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert "--run-dir" in error and "--resume" in error
    assert (tmp_path / "run" / "results.jsonl").read_bytes() == before
