"""Spend limits through real suite runs: mini-swe-agent + LiteLLM against the scripted model server,
whose replies state their token usage, so the spend crosses a limit at a known step.

Every call here costs the same: 1,000 prompt tokens at $0.00001 and 100 completion tokens at
$0.0001 (the agents' price_per_token) = $0.01 + $0.01 = $0.02.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from swe_residual.agents.model_server import load_script

from .drivers import ON_PYTHONPATH, cli, environ, records, run_suite, world
from .taskfactory import CALC_SOLVED

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
PRICE = {"prompt": 0.00001, "completion": 0.0001}
CALL_USD = 1000 * 0.00001 + 100 * 0.0001  # 0.02
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def script(path: Path, *commands: str) -> Path:
    """A scripted model that answers with `commands` in order, each reply with USAGE."""
    replies = [{"message": f"step {i + 1}", "command": c, "usage": USAGE} for i, c in enumerate(commands)]
    path.write_text(yaml.safe_dump({"replies": replies}, sort_keys=False))
    return path


def msa(server: Path, **fields) -> dict:
    return {"harness": "mini-swe-agent", "model": "openai/scripted", "scripted_server": str(server), **fields}


# budgets far above what the runs take, so that only the cost limit can stop them on a loaded machine
SLACK = {"agent_timeout": 900, "verifier_timeout": 600}


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# step 1 solves the task (the hidden tests would pass from here on), step 3 leaves a mark, step 4 submits
SOLVE = f"cat > calc.py <<'EOF'\n{CALC_SOLVED}EOF"
MARK = "touch past-the-limit"


@pytest.mark.slow
def test_max_case_cost_stops_the_agent_at_the_crossing_step_from_both_starts(tmp_path):
    server = script(tmp_path / "solve.yaml", SOLVE, "cat calc.py", MARK, SUBMIT)
    world(
        tmp_path,
        agents={
            # its own config's limit: $0.02, $0.04, then $0.06 >= $0.05 at step 3
            "capped": msa(server, price_per_token=PRICE, max_case_cost=0.05),
            "uncapped": msa(server, price_per_token=PRICE),
        },
        **SLACK,
    )
    proc = run_suite(world=tmp_path, agents=["capped", "uncapped"], workers=2, env=ON_PYTHONPATH)
    recs = records(tmp_path / "run", by=lambda r: (r["agent"], r["start"]))
    assert len(recs) == 4, proc.stdout[-3000:]
    for start in ("clean", "residual"):
        capped, uncapped = recs["capped", start], recs["uncapped", start]
        # without a limit the same replies solve the task: 4 calls, $0.08, outcome 1
        assert (uncapped["termination"], uncapped["outcome"], uncapped["steps"]) == ("submitted", 1, 4)
        assert uncapped["cost_usd"] == pytest.approx(4 * CALL_USD)
        # with it, the final state passes the hidden tests too, yet the run is the agent's failure
        assert (capped["termination"], capped["rule"], capped["outcome"], capped["verdict"]) == (
            "cost_limit",
            "cost_limit",
            0,
            "fail",
        )
        assert capped["tests"] and all(s == "passed" for s in capped["tests"].values()), capped
        assert capped["steps"] == 3 and capped["cost_usd"] == pytest.approx(3 * CALL_USD)
        assert capped["error"].startswith("cost limit $0.05 reached at step 3: $0.06 spent")
        # the crossing call is paid and recorded; its command never ran
        traj = json.loads((tmp_path / "run" / capped["artifacts"]["trajectory"]).read_text())
        assert [bool(s["actions"]) for s in traj["steps"]] == [True, True, False]
        assert [s["cost_usd"] for s in traj["steps"]] == pytest.approx([CALL_USD] * 3)
        assert "past-the-limit" not in (tmp_path / "run" / capped["artifacts"]["patch"]).read_text()
    same = {k: v for k, v in recs["capped", "clean"].items() if k in ("termination", "steps", "cost_usd")}
    assert same == {k: recs["capped", "residual"][k] for k in same}  # equal for both starts
    assert summary(tmp_path / "run")["rules"]["cost_limit"] == {"records": 2, "counted": True}

    # --max-case-cost on the command line sets the limit of an agent whose config has none: step 2
    again = run_suite(
        "--max-case-cost",
        "0.03",
        world=tmp_path,
        run_dir=tmp_path / "cli",
        agents=["uncapped"],
        workers=2,
        env=ON_PYTHONPATH,
    )
    cli = records(tmp_path / "cli", by="start")
    assert {s: (r["termination"], r["outcome"], r["steps"]) for s, r in cli.items()} == {
        "clean": ("cost_limit", 0, 2),
        "residual": ("cost_limit", 0, 2),
    }, again.stdout[-3000:]
    assert again.returncode == 1


@pytest.mark.slow
def test_max_run_cost_ends_the_run_like_an_interrupt_and_resume_completes_it(tmp_path):
    server = script(tmp_path / "quick.yaml", "ls", SUBMIT)  # $0.04 a case
    world(tmp_path, "calc", "calc2", agents={"priced": msa(server, price_per_token=PRICE)}, **SLACK)
    run_dir = tmp_path / "run"
    # one case at a time: $0.04 after the first, $0.08 >= $0.06 after the second; 2 of 4 not started
    proc = run_suite("--max-run-cost", "0.06", world=tmp_path, agents=["priced"], env=ON_PYTHONPATH)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert len(records(run_dir)) == 2
    stopped = summary(run_dir)["interrupted"]
    assert (stopped["recorded"], stopped["not_run"], stopped["collected"]) == (2, 2, 4)
    assert stopped["reason"].startswith("--max-run-cost 0.06: $0.08 recorded by this run")
    assert summary(run_dir)["cost"] == {"total_usd": pytest.approx(4 * CALL_USD), "records_unknown": 0}
    lines = proc.stdout.splitlines()
    assert f"stopped: {stopped['reason']}" in lines
    resume = next(line for line in lines if line.startswith("continue it with: "))
    args = shlex.split(resume.removeprefix("continue it with: "))
    assert args[0] == "pytest" and args[-2:] == ["--resume", str(run_dir)]
    assert "--max-run-cost" in args  # the same limit again: each invocation may spend it

    # the printed command completes the run: its two cases cost $0.08, but none is left to stop
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=environ(ON_PYTHONPATH), capture_output=True, text=True
    )
    assert done.returncode == 1, done.stdout[-3000:]  # the agent submits unsolved work: failures
    assert len(records(run_dir)) == 4
    final = summary(run_dir)
    assert "interrupted" not in final and final["cases"]["missing"] == []
    assert final["tracks"]["demo"]["priced"]["cost_usd"] == pytest.approx(8 * CALL_USD)


@pytest.mark.slow
def test_max_run_cost_with_xdist_workers_starts_no_case_past_the_limit(tmp_path):
    server = script(tmp_path / "quick.yaml", "ls", SUBMIT)  # $0.04 a case
    world(tmp_path, "calc", "calc2", agents={"priced": msa(server, price_per_token=PRICE)}, **SLACK)
    run_dir = tmp_path / "run"
    # two cases at a time: the limit is reached once two are recorded ($0.08); a case a worker
    # started before that finishes, the others never start
    proc = run_suite(
        "--max-run-cost", "0.06", world=tmp_path, agents=["priced"], workers=2, env=ON_PYTHONPATH
    )
    assert proc.returncode == 2, proc.stdout[-3000:]
    recorded, out = len(records(run_dir)), proc.stdout[-3000:]
    stopped = summary(run_dir)["interrupted"]
    assert recorded in (2, 3) and (stopped["recorded"], stopped["not_run"]) == (recorded, 4 - recorded), out
    # the reason gives the spend when the run stopped ($0.08: two records); what then finished adds to it
    assert re.fullmatch(
        r"--max-run-cost 0\.06: \$0\.(08|12) recorded by this run; no further case started", stopped["reason"]
    ), out
    assert summary(run_dir)["cost"]["total_usd"] == pytest.approx(recorded * 2 * CALL_USD), out
    resume = [x for x in proc.stdout.splitlines() if x.startswith("continue it with: ")]
    assert resume, out
    args = shlex.split(resume[0].removeprefix("continue it with: "))
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=environ(ON_PYTHONPATH), capture_output=True, text=True
    )
    assert done.returncode == 1 and len(records(run_dir)) == 4, done.stdout[-3000:]
    assert "interrupted" not in summary(run_dir)


@pytest.mark.slow
def test_a_case_of_unknown_cost_makes_every_total_unknown_never_zero(tmp_path):
    server = script(tmp_path / "quick.yaml", "ls", SUBMIT)
    # the same replies; LiteLLM's price table has no `openai/scripted`, and one config gives no price
    world(tmp_path, agents={"priced": msa(server, price_per_token=PRICE), "unpriced": msa(server)}, **SLACK)
    run_dir = tmp_path / "run"
    proc = run_suite(
        world=tmp_path, agents=["priced", "unpriced", "nop"], start="clean", workers=2, env=ON_PYTHONPATH
    )
    recs = records(run_dir, by="agent")
    assert recs["unpriced"]["cost_usd"] is None and recs["unpriced"]["prompt_tokens"] == 2000
    assert recs["nop"]["cost_usd"] is None  # calls no model: spends nothing, known
    rows = summary(run_dir)["tracks"]["demo"]
    assert rows["priced"]["cost_usd"] == pytest.approx(2 * CALL_USD)
    assert rows["nop"]["cost_usd"] == 0.0
    assert rows["unpriced"]["cost_usd"] == "unknown"
    assert summary(run_dir)["cost"] == {"total_usd": "unknown", "records_unknown": 1}
    # the terminal, tables.md, results.csv and the run page say so, and never $0 for it
    assert "cost: unknown (1 attempt(s) without a known cost; never counted as $0)" in proc.stdout
    table = (run_dir / "tables.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| demo | unpriced |"))
    assert row.rstrip(" |").endswith("unknown")
    assert next(line for line in table.splitlines() if line.startswith("| demo | priced |")).endswith(
        "| $0.0400 |"
    )
    rows_csv = csv.DictReader(io.StringIO((run_dir / "results.csv").read_text()))
    assert [r["cost_usd"] for r in rows_csv if r["agent"] == "unpriced"] == ["unknown"]
    page = (run_dir / "report.html").read_text()
    assert '<div class="kpi"><b>unknown</b>model cost</div>' in page
    # the same from the run dir alone
    report = json.loads(cli("report", str(run_dir), "--format", "json", check=0).stdout)
    assert report["cost"] == {"total_usd": "unknown", "records_unknown": 1}


def test_a_cost_limit_on_a_model_without_a_price_stops_before_any_case(tmp_path):
    server = script(tmp_path / "quick.yaml", "ls", SUBMIT)
    world(tmp_path, agents={"unpriced": msa(server)})
    proc = run_suite(
        "--max-case-cost", "1", world=tmp_path, agents=["unpriced"], env=ON_PYTHONPATH, timeout=300
    )
    assert proc.returncode == 4
    [line] = [x for x in (proc.stdout + proc.stderr).splitlines() if "price_per_token" in x]
    assert "--max-case-cost: --agent unpriced: model openai/scripted has no price" in line
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_scripted_usage_must_be_token_counts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"replies": [{"command": "ls", "usage": {"prompt_tokens": -1}}]}))
    with pytest.raises(ValueError, match=r"replies\[0\]: usage: .*counts >= 0"):
        load_script(bad)
    assert load_script(script(tmp_path / "ok.yaml", "ls"))["replies"][0]["usage"] == USAGE


@pytest.mark.docker
def test_terminus_stops_at_the_crossing_step_on_a_machine_task_from_every_start(
    tmp_path, docker_client, bookworm_image
):
    # the kv-service repair, each answer now priced: $0.02, then $0.04 >= $0.03 at step 2, whose
    # keystrokes (the fix) are never typed
    fixture = yaml.safe_load((ROOT / "fixtures" / "scripted" / "terminus-kv-service.yaml").read_text())
    for reply in fixture["replies"]:
        reply["usage"] = USAGE
    (tmp_path / "kv.yaml").write_text(yaml.safe_dump(fixture))
    agents = {
        "priced-terminus": {
            "harness": "terminus",
            "model": "openai/scripted",
            "scripted_server": "kv.yaml",
            "price_per_token": PRICE,
            "max_case_cost": 0.03,
        }
    }
    (tmp_path / "agents.yaml").write_text(yaml.safe_dump({"agents": agents}))
    run = tmp_path / "run"
    proc = run_suite(
        "-q",
        "--agent-config",
        str(tmp_path / "agents.yaml"),
        "-k",
        "kv-service",
        "-n",
        "2",
        suite=ROOT / "suites" / "terminal_bench",
        backend="docker",
        agents=["priced-terminus"],
        run_dir=run,
        timeout=1800,
    )
    recs = records(run, missing_ok=True)
    assert len(recs) == 3 and {r["start"] for r in recs} == {"clean", "residual"}, proc.stdout[-3000:]
    for r in recs:
        assert (r["termination"], r["rule"], r["outcome"], r["steps"]) == ("cost_limit", "cost_limit", 0, 2)
        assert r["cost_usd"] == pytest.approx(2 * CALL_USD)
        typed = [json.loads(line)["input"] for line in (run / r["artifacts"]["interactions"]).open()]
        assert len(typed) == 1 and typed[0].startswith("cat /etc/kvstore")  # step 1's keys only
