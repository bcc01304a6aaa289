"""The local backend against real git repositories, real bwrap sandboxes and real pytest runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swe_residual.agents import AgentRegistry
from swe_residual.backends import repo
from swe_residual.backends.local import LocalBackend
from swe_residual.backends.workspace import final_state
from swe_residual.errors import InfraError, InputError
from swe_residual.results import iter_records
from swe_residual.run.attempt import Case
from swe_residual.states import load_states
from swe_residual.tasks import load_task, load_tasks

from . import drivers
from .taskfactory import git_out, make_task, run_one, state_entry, write_states

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def world(tmp_path):
    w = drivers.world(tmp_path)
    patch = (tmp_path / "states" / "calc--partial.patch").read_bytes()
    tasks = load_tasks(tmp_path / "tasks", "demo")
    states = load_states(w.states, {"demo": tasks})
    backend = LocalBackend(work_root=tmp_path / "work")
    yield tmp_path, tasks["calc"], states[0], patch, backend
    backend.close()


@pytest.mark.slow
def test_residual_workspace_has_clean_history_and_uncommitted_patch(world):
    _, task, state, patch, backend = world
    with backend.materialize(task, None) as clean, backend.materialize(task, state) as res:
        clean_ws, res_ws = clean.workspace, res.workspace
        assert git_out(res_ws, "log", "--format=%H %an %ad %s") == git_out(
            clean_ws, "log", "--format=%H %an %ad %s"
        )
        assert git_out(clean_ws, "status", "--porcelain") == ""
        assert git_out(res_ws, "status", "--porcelain").splitlines() == [
            " M calc.py",
            "?? NOTES.md",
            "?? logo.bin",
        ]
        # the whole working tree differs from the base by exactly the state's patch (binary file included),
        # as the harness computes a final patch (an environment nothing ran in is taken to be its start:
        # one no-op command makes final_state diff the tree)
        assert res.execute("true", timeout=60).exit_code == 0
        assert final_state(res).patch == patch
        # and `git diff` shows the tracked part of it, uncommitted
        assert "+def div(a, b):" in git_out(res_ws, "diff")
        assert res.base_commit == clean.base_commit == repo.head(res_ws)


def test_base_commit_hash_is_stable_across_builds(tmp_path):
    task_dir = make_task(tmp_path)
    hashes = {repo.init_base_repo(task_dir / "environment" / "repo", tmp_path / f"b{i}") for i in range(2)}
    assert len(hashes) == 1


@pytest.mark.slow
def test_agent_in_sandbox_cannot_find_hidden_tests_solution_or_project(world, require_bwrap):
    root, task, state, _, backend = world
    with backend.materialize(task, state) as env:
        # search everything the sandbox shows outside system dirs, by name and by content
        # (calc.py is the positive control: the search must find the workspace's own file)
        search = (
            "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( -name test_new.py "
            "-o -name solution.patch -o -name solve.sh -o -name results.jsonl -o -name taskfactory.py "
            "-o -name residual.py -o -name calc.py \\) -print 2>/dev/null; "
            # contents only the hidden tests, the solution, states.yaml or the checkout's code hold
            "grep -rlsI -e test_div_by_zero -e 'calc: division by zero' -e initial_verdict "
            "-e 'The SWE-Residual pytest plugin' /app /tmp /run /root /home /work /opt /srv /mnt /var "
            "2>/dev/null | grep -v '^/app/' ; "
            f"cat {task.tests_dir}/hidden/test_new.py {ROOT}/pyproject.toml 2>&1 | head -2; "
            f"ls {root} {ROOT} 2>&1; echo searched"
        )
        res = env.execute(search, timeout=60)
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert lines[-1] == "searched"
        found = [line for line in lines[:-1] if "No such file or directory" not in line]
        assert found == ["/app/calc.py"], found
        # the harness's Python with pytest runs the tasks' tests inside
        py = env.execute("python3 -c 'import sys, pytest; print(sys.prefix)'", timeout=30)
        assert py.exit_code == 0, py.output
        # the workspace and the request are there; the network is not
        assert env.execute("ls /app/calc.py && cat /run/task/instruction.md", timeout=10).exit_code == 0
        net = env.execute(
            "python3 -c \"import socket; socket.create_connection(('8.8.8.8', 53), timeout=2)\"", timeout=20
        )
        assert net.exit_code != 0


@pytest.mark.slow
def test_sandboxed_processes_die_with_the_command(world, require_bwrap):
    _, task, _, _, backend = world
    with backend.materialize(task, None) as env:
        res = env.execute("(sleep 30; touch /app/survived) & sleep 0.2; echo started", timeout=10)
        assert res.exit_code == 0 and "started" in res.output
        import time

        time.sleep(0.5)
        assert not (env.workspace / "survived").exists()
        timed = env.execute("sleep 30", timeout=1)
        assert timed.timed_out and timed.exit_code is None and timed.duration_s < 5


@pytest.mark.slow
def test_oracle_and_nop_records(world):
    tmp, task, state, _, backend = world
    run_dir = tmp / "run"
    run_dir.mkdir()
    for agent, start, st, outcome in [
        ("oracle", "clean", None, 1),
        ("oracle", "residual", state, 1),
        ("nop", "residual", state, 0),
        ("nop", "clean", None, 0),
    ]:
        rec = run_one(Case(agent, task, start, st), AgentRegistry().get(agent), backend, run_dir)
        assert rec.outcome == outcome, rec
    records = list(iter_records(run_dir))
    assert [r.case_id for r in records] == [
        "oracle-calc-clean",
        "oracle-calc-residual-calc--partial",
        "nop-calc-residual-calc--partial",
        "nop-calc-clean",
    ]
    nop_res = records[2]
    # the state fails exactly its recorded test; the other 4 hidden tests pass
    assert nop_res.verdict == "fail" and nop_res.termination == "submitted" and nop_res.declared_complete
    assert sorted(t for t, s in nop_res.tests.items() if s != "passed") == ["tests.test_new.test_div_by_zero"]
    assert len(nop_res.tests) == 5 and nop_res.state == "calc--partial"
    assert nop_res.predecessor == {"agent": "handwritten", "model_family": "handwritten"}
    for r in records:
        for key in ("patch", "trajectory", "verifier_log"):
            assert (run_dir / r.artifacts[key]).is_file()
    # the nop's final state is the state itself: its final patch is the state's patch
    assert (run_dir / nop_res.artifacts["patch"]).read_bytes() == state.patch
    oracle_clean = json.loads((run_dir / records[0].artifacts["trajectory"]).read_text())
    assert [len(s["actions"]) for s in oracle_clean["steps"]] == [1, 1, 1]
    assert records[0].steps == 3


def _infra(tmp, task, state, backend):
    run_dir = tmp / "run"
    run_dir.mkdir(exist_ok=True)
    with pytest.raises(InfraError) as err:
        run_one(
            Case("nop", task, "residual" if state else "clean", state),
            AgentRegistry().get("nop"),
            backend,
            run_dir,
        )
    records = list(iter_records(run_dir))
    assert len(records) == 1 and records[0].outcome is None and records[0].verdict == "infra_error"
    assert records[0].error == str(err.value) and "\n" not in str(err.value)
    return str(err.value)


def test_patch_that_does_not_apply_is_an_infra_error_without_outcome(world):
    tmp, task, _, _, backend = world
    bad = state_entry(
        tmp,
        task.path,
        b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
        b"@@ -1,2 +1,2 @@\n-def nothing_like_this():\n+def x():\n     return a + b\n",
        state_id="bad",
    )
    state = load_states(write_states(tmp, [bad]), {"demo": {"calc": task}})[0]
    msg = _infra(tmp, task, state, backend)
    assert msg.startswith("state bad: patch ") and "does not apply" in msg


@pytest.mark.slow
def test_hanging_test_runner_is_an_infra_error(tmp_path):
    task_dir = make_task(tmp_path, test_sh="#!/bin/bash\nsleep 600\n", verifier_timeout=1.5)
    task = load_task(task_dir, "demo")
    backend = LocalBackend(work_root=tmp_path / "work")
    msg = _infra(tmp_path, task, None, backend)
    # it hangs on the reference solution's state too: the verifier is broken, not the agent's work
    assert msg.startswith(
        "verifier timed out after 1.5s running tests/test.sh (twice; the verifier fails on the "
        "reference solution's state too"
    ), msg


@pytest.mark.slow
def test_missing_report_is_an_infra_error(tmp_path):
    task_dir = make_task(tmp_path, test_sh="#!/bin/bash\necho no report\n")
    task = load_task(task_dir, "demo")
    msg = _infra(tmp_path, task, None, LocalBackend(work_root=tmp_path / "work"))
    assert "wrote no test report" in msg


def test_task_without_tests_is_rejected(tmp_path):
    task_dir = make_task(tmp_path)
    (task_dir / "tests" / "test.sh").unlink()
    with pytest.raises(InputError, match=r"tests/test.sh: missing \(a task needs hidden tests"):
        load_task(task_dir, "demo")


def test_task_toml_keeps_unknown_fields_and_names_bad_fields(tmp_path):
    task_dir = make_task(tmp_path)
    task = load_task(task_dir, "demo")
    assert task.config.metadata.model_extra == {"custom_field": "kept"}
    (task_dir / "task.toml").write_text('[verifier]\ntimeout_sec = "soon"\n')
    with pytest.raises(InputError) as err:
        load_task(task_dir, "demo")
    assert str(err.value).startswith(f"{task_dir / 'task.toml'}: verifier.timeout_sec: ")


@pytest.mark.slow
def test_without_bwrap_the_same_cases_run_unsandboxed_on_host_paths(world):
    # a fresh machine has no bubblewrap: commands then run on host paths given in $APP_DIR,
    # $SOLUTION_DIR, $TESTS_DIR and $LOGS_DIR (the demo tasks use them), with the same outcomes
    tmp, task, state, patch, backend = world
    backend.bwrap = None
    run_dir = tmp / "run-unsandboxed"
    run_dir.mkdir()
    outcomes = {}
    for agent, start, st in [
        ("oracle", "clean", None),
        ("oracle", "residual", state),
        ("nop", "residual", state),
    ]:
        rec = run_one(Case(agent, task, start, st), AgentRegistry().get(agent), backend, run_dir)
        outcomes[(agent, start)] = rec.outcome
        assert rec.rule == "verdict", rec
    assert outcomes == {("oracle", "clean"): 1, ("oracle", "residual"): 1, ("nop", "residual"): 0}
    nop = list(iter_records(run_dir))[-1]
    assert (run_dir / nop.artifacts["patch"]).read_bytes() == patch
    with backend.materialize(task, None) as env:
        assert env.app_dir == str(env.workspace) and env.path("/solution") == str(env.root / "solution")


def test_grading_reads_only_the_report_kinds_the_task_declares(tmp_path):
    from swe_residual.verdicts import grade

    task = load_task(make_task(tmp_path), "demo")
    assert task.reports == frozenset({"junit"})  # its test.sh writes JUnit only
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "junit.xml").write_text(
        '<testsuite><testcase classname="tests.test_new" name="test_sub"><failure/></testcase></testsuite>'
    )
    # code under test wrote a ctrf.json and a reward claiming success: neither is this task's report
    (logs / "ctrf.json").write_text(
        json.dumps({"results": {"tests": [{"name": t, "status": "passed"} for t in task.grading.required]}})
    )
    (logs / "reward.txt").write_text("1")
    verdict = grade(task, logs)
    assert verdict.outcome == 0 and verdict.tests["tests.test_new.test_sub"] == "failed"
    toml = task.path / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nreports = ["ctrf"]\n'))
    assert load_task(task.path, "demo").reports == frozenset({"ctrf"})
    toml.write_text(toml.read_text().replace('reports = ["ctrf"]', 'reports = ["xml"]'))
    with pytest.raises(InputError, match="verifier.reports: a non-empty list of ctrf, junit, reward"):
        load_task(task.path, "demo")


def test_malformed_ctrf_reports_are_verifier_problems_not_crashes(tmp_path):
    from swe_residual.errors import VerifierError
    from swe_residual.verdicts import parse_ctrf

    for body in (
        {"results": {"tests": [{"status": "passed"}]}},  # a test without a name
        {"results": {"tests": None}},  # tests: null
        {"results": {"tests": ["x"]}},  # not an object
        {"results": []},
    ):
        path = tmp_path / "ctrf.json"
        path.write_text(json.dumps(body))
        with pytest.raises(VerifierError, match="unreadable CTRF report ctrf.json"):
            parse_ctrf(path)
