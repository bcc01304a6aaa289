"""`swe-residual regrade RUN`: a recorded run graded again with a changed verifier, from real suite
runs. The verdicts move where the new tests say, no agent runs again, the original run stays byte
for byte what it was, and `compare` lists the cases that moved; a machine final state says why it
cannot be graded again."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from .drivers import ROOT, cli, records, run_suite

pytestmark = pytest.mark.slow

TASK = "invoice-rounding"
SECRET = "tracer-key-value-never-written"
# an agent that leaves a trace no second run could repeat: a fresh uuid in its final state
TRACER = {
    "tracer": {
        "harness": "command",
        "command": "python3 -c 'import uuid; print(uuid.uuid4())' > run-trace.txt",
        "api_key_env": ["TRACER_KEY"],
    }
}


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under root: its kind and, for a file, the sha256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link " + str(p.readlink())
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    """A real demo run (local backend) of one task: oracle and the tracer, from clean and both states."""
    root = tmp_path_factory.mktemp("regrade")
    tasks = root / "tasks"
    shutil.copytree(ROOT / "suites" / "demo" / "tasks" / TASK, tasks / TASK)
    agents = root / "agents.yaml"
    agents.write_text(json.dumps({"agents": TRACER}))
    run = root / "run"
    proc = run_suite(
        "--tasks-dir",
        str(tasks),
        agents=["oracle", "tracer"],
        agent_config=agents,
        run_dir=run,
        workers=2,
        env={"TRACER_KEY": SECRET},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the tracer's cases fail
    return {"root": root, "tasks": tasks, "run": run}


def test_regrade_with_a_changed_verifier_moves_verdicts_without_running_an_agent(recorded, tmp_path):
    run, tasks = recorded["run"], tmp_path / "tasks"
    shutil.copytree(recorded["tasks"], tasks)
    before = tree_hash(run)
    old = records(run, by="case_id")
    assert {cid: r["outcome"] for cid, r in old.items()} == {
        "oracle-invoice-rounding-clean": 1,
        "oracle-invoice-rounding-residual-invoice-rounding--bankers-default": 1,
        "oracle-invoice-rounding-residual-invoice-rounding--cli-not-wired": 1,
        "tracer-invoice-rounding-clean": 0,
        "tracer-invoice-rounding-residual-invoice-rounding--bankers-default": 0,
        "tracer-invoice-rounding-residual-invoice-rounding--cli-not-wired": 0,
    }
    # the new verifier version: a test every state now fails (it redefines a p2p test)
    with open(tasks / TASK / "tests" / "hidden" / "test_money.py", "a") as fh:
        fh.write("\n\ndef test_format_money_unknown_currency():\n    assert False, 'new verifier version'\n")
    new = tmp_path / "new"
    proc = cli("regrade", str(run), "--tasks-dir", str(tasks), "--out", str(new), check=0)
    assert "regrade: 6 of 6 case(s) re-graded, 3 moved, 0 not re-gradable; no agent ran" in proc.stdout
    assert "re-graded: oracle-invoice-rounding-clean: pass -> fail" in proc.stdout

    assert tree_hash(run) == before  # the original run: not one byte changed, nothing added
    now = records(new, by="case_id")
    assert {cid: r["outcome"] for cid, r in now.items()} == dict.fromkeys(old, 0)
    assert (
        now["oracle-invoice-rounding-clean"]["tests"]["tests.test_money.test_format_money_unknown_currency"]
        == "failed"
    )
    for cid, rec in now.items():
        # no agent ran: the tracer's uuid in the graded final state is the recorded one (a second run
        # of it would write another), and what the agent did is the original record's
        graded = (new / rec["artifacts"]["patch"]).read_bytes()
        assert graded == (run / old[cid]["artifacts"]["patch"]).read_bytes()
        if cid.startswith("tracer"):
            assert b"+++ b/run-trace.txt" in graded
        for key in ("steps", "agent_duration_s", "declared_complete", "termination", "attempt"):
            assert rec[key] == old[cid][key], (cid, key)
        assert rec["verdict"] == "fail" and rec["rule"] == "verdict"

    # provenance: the new task digest, the one it replaced, the agents as recorded
    first = json.loads((run / "provenance.json").read_text())
    second = json.loads((new / "provenance.json").read_text())
    key = f"demo/{TASK}"
    assert second["regrade"]["tasks_before"][key] == first["tasks"][key] != second["tasks"][key]
    assert second["agents"] == first["agents"] and second["regrade"]["cases"] == dict.fromkeys(
        old, "re-graded"
    )
    assert first["agents"]["tracer"]["api_key_env"] == ["TRACER_KEY"]
    assert SECRET not in (run / "provenance.json").read_text()

    out = cli("compare", str(run), str(new), check=0).stdout
    assert "flipped cases (3):" in out
    for cid in [c for c in old if c.startswith("oracle")]:
        assert f"pass -> fail  {cid}" in out
    assert f"warning: task dir {key}: digest {first['tasks'][key][:12]} -> {second['tasks'][key][:12]}" in out
    assert tree_hash(run) == before


def test_regrade_says_why_a_case_cannot_be_graded_again(recorded, tmp_path):
    """A hostile copy of the run: a final patch that is a link out of the run dir, one that is
    missing, a task the tasks dir lacks: one line each, the others re-graded."""
    run = tmp_path / "run"
    shutil.copytree(recorded["run"], run, symlinks=True)
    rows = records(run)
    secret = tmp_path / "outside.patch"
    secret.write_text("not the run's\n")
    link = run / rows[0]["artifacts"]["patch"]
    link.unlink()
    link.symlink_to(secret)
    (run / rows[1]["artifacts"]["patch"]).unlink()
    rows[2]["task"] = "no-such-task"
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"case_id": [1]}\n')
    new = tmp_path / "new"
    proc = cli("regrade", str(run), "--tasks-dir", str(recorded["tasks"]), "--out", str(new), check=0)
    lines = proc.stdout.splitlines()
    assert any(ln.startswith(f"not re-gradable: {rows[0]['case_id']}: artifacts.patch") for ln in lines)
    assert (
        f"not re-gradable: {rows[1]['case_id']}: artifacts.patch ({rows[1]['artifacts']['patch']}): missing"
        in lines[1]
    )
    assert (
        f"not re-gradable: {rows[2]['case_id']}: task 'no-such-task' of track 'demo' is not in the tasks dir"
        in proc.stdout
    )
    assert "regrade: 3 of 6 case(s) re-graded, 0 moved, 3 not re-gradable; no agent ran" in proc.stdout
    assert "not the run's" not in "".join(
        p.read_text(errors="replace") for p in new.rglob("*") if p.is_file()
    )
    # a run that is not one, and an --out that holds something: one line each, exit 2
    assert cli("regrade", str(tmp_path), "--out", str(tmp_path / "x"), check=2).stderr.startswith("error: ")
    assert "not empty" in cli("regrade", str(run), "--out", str(new), check=2).stderr


@pytest.mark.docker
def test_a_machine_final_state_says_why_it_is_not_regraded(tmp_path, docker_client):
    """suites/terminal_bench on Docker: its final states were graded in the agent's own container,
    which no snapshot kept: regrade lists each with that reason and grades nothing."""
    tasks = tmp_path / "tasks"
    shutil.copytree(ROOT / "suites" / "terminal_bench" / "tasks" / "sales-report", tasks / "sales-report")
    run = tmp_path / "run"
    proc = run_suite(
        "--tasks-dir", str(tasks), suite="suites/terminal_bench", agents=["nop"], start="clean", run_dir=run
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # nop fails the task
    before = tree_hash(run)
    new = tmp_path / "new"
    out = cli("regrade", str(run), "--tasks-dir", str(tasks), "--out", str(new), check=0).stdout
    assert (
        "not re-gradable: nop-sales-report-clean: a machine final state is graded in place, in the agent's own "
        "container, which is removed after grading: no snapshot of it was kept" in out
    )
    assert "regrade: 0 of 1 case(s) re-graded, 0 moved, 1 not re-gradable; no agent ran" in out
    assert records(new) == [] and tree_hash(run) == before
    prov = json.loads((new / "provenance.json").read_text())
    assert prov["backend"] == "docker" and prov["regrade"]["cases"]["nop-sales-report-clean"].startswith(
        "not re-gradable: a machine final state"
    )
