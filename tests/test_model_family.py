"""One notion of a predecessor's `model_family`: the family sources.endings.model_family computes,
for predecessors run locally (`residualize run`) and imported alike, so Table 8 puts the runs of
one model in one group wherever they were made.

Worked example, checked by hand:

* local: `residualize run` of a `command` agent whose config names `anthropic/claude-sonnet-4-5`;
  on date-range-merge it appends a stub `merge` to daterange/ranges.py (7 of 16 hidden tests fail).
  Recorded family: claude (the provider dropped, `claude` is a known prefix). Before, Stage I
  recorded the model name without the provider, `claude-sonnet-4-5`: a group of its own.
* imported: the Harbor trial tests/fixtures/harbor-trials/.../ttl-cache__Vb7nM2c, Terminus-2 with
  `agent_info.model_info` {name: claude-sonnet-4-5, provider: anthropic} (3 of 15 tests fail).
  Recorded family: claude.
* both go through filter, review (two reviewers keep them) and build; then nop and oracle run the
  two tasks from the clean start and from the two states. Table 8 (report `predecessors`):
  families = [claude] only; the claude group holds both tasks (n_tasks 2):
  nop    clean (0 + 0)/2 = 0,  residual (0 + 0)/2 = 0
  oracle clean (1 + 1)/2 = 1,  residual (1 + 1)/2 = 1   (oracle discards inherited work)
  With two groups each would hold one task (n_tasks 1).
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import yaml

from swe_residual.agents.config import AgentSpec
from swe_residual.residualize.stage1 import agent_family
from swe_residual.sources.endings import model_family

from . import drivers
from .drivers import ON_PYTHONPATH, records, run_suite

ROOT = Path(__file__).resolve().parent.parent
TRIAL = ROOT / "tests" / "fixtures" / "harbor-trials" / "2025-11-03__14-02-11" / "ttl-cache__Vb7nM2c"
MODEL = "anthropic/claude-sonnet-4-5"
# the first step of date-range-merge: a stub, so the task's merge tests still fail
STUB = r"printf '\n\ndef merge(ranges):\n    raise NotImplementedError\n' >> daterange/ranges.py"


cli = functools.partial(drivers.cli, check=0, env=ON_PYTHONPATH)  # exit 0 asserted


def test_a_local_predecessor_is_recorded_under_its_models_family(monkeypatch):
    spec = AgentSpec(harness="command", command="true", model=MODEL)
    assert agent_family(spec, "command") == model_family(MODEL) == "claude"
    # no model known: the harness, as before
    assert agent_family(AgentSpec(harness="command", command="true"), "command") == "command"
    assert agent_family(None, "builtin") == "builtin"
    # a model named through a variable: the model the agent runs, else (unset) the harness
    monkeypatch.setenv("SWE_TEST_MODEL", "openai/gpt-5")
    assert (
        agent_family(AgentSpec(harness="mini-swe-agent", model="${SWE_TEST_MODEL}"), "mini-swe-agent")
        == "gpt"
    )
    monkeypatch.delenv("SWE_TEST_MODEL")
    assert (
        agent_family(AgentSpec(harness="mini-swe-agent", model="${SWE_TEST_MODEL}"), "mini-swe-agent")
        == "mini-swe-agent"
    )


@pytest.mark.slow
def test_local_and_imported_runs_of_one_model_are_one_table8_group(tmp_path: Path):
    work, out, run_dir = tmp_path / "work", tmp_path / "out" / "states.yaml", tmp_path / "run"
    config = tmp_path / "agents.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "agents": {
                    "sonnet-local": {
                        "harness": "command",
                        "description": "a first step at date-range-merge, by Claude Sonnet 4.5",
                        "model": MODEL,
                        "command": STUB,
                    }
                }
            }
        )
    )
    job = tmp_path / "job"
    shutil.copytree(TRIAL, job / TRIAL.name)

    # Stage I: one run made here, one imported
    cli(
        "residualize",
        "run",
        "--track",
        "demo",
        "--backend",
        "local",
        "--predecessor",
        "sonnet-local",
        "--agent-config",
        str(config),
        "--task",
        "date-range-merge",
        str(work),
    )
    cli("residualize", "import", "--format", "harbor", "--track", "demo", str(job), str(work))
    runs = [json.loads(line) for line in (work / "stage1.jsonl").read_text().splitlines()]
    assert {r["task"]: r["predecessor"] for r in runs} == {
        "date-range-merge": {"agent": "sonnet-local", "model_family": "claude"},
        "ttl-cache": {"agent": "terminus-2", "model_family": "claude"},
    }

    # Stages II-IV: both are candidates, both kept, both rebuilt as states
    cli("residualize", "filter", str(work))
    status = json.loads(cli("residualize", "status", "--format", "json", str(work)).stdout)
    assert len(status["candidates"]) == 2
    for cand in status["candidates"]:
        for reviewer in ("ana", "ben"):
            cli(
                "residualize",
                "review",
                "--reviewer",
                reviewer,
                "--candidate",
                cand["id"],
                "--task-directed",
                "yes",
                "--consistent",
                "yes",
                "--comment",
                "",
                str(work),
            )
    cli("residualize", "build", "--backend", "local", "--states", str(out), str(work))
    built = yaml.safe_load(out.read_text())["states"]
    assert sorted((s["task"], s["predecessor"]["model_family"]) for s in built) == [
        ("date-range-merge", "claude"),
        ("ttl-cache", "claude"),
    ]

    # a suite run from those states, and its Table 8
    proc = run_suite(
        "--states",
        str(out),
        "-k",
        "date-range-merge or ttl-cache",
        "-q",
        "-p",
        "no:cacheprovider",
        agents=["nop", "oracle"],
        start="both",
        run_dir=run_dir,
        workers=2,
        env=ON_PYTHONPATH,
    )
    assert (run_dir / "results.jsonl").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(run_dir)
    assert len(recs) == 8  # 2 agents x 2 tasks x (clean + the task's state)
    assert {r["predecessor"]["model_family"] for r in recs if r["start"] == "residual"} == {"claude"}

    report = json.loads(cli("report", str(run_dir), "--format", "json", "--n-boot", "20").stdout)
    t8 = report["predecessors"]
    assert t8["families"] == ["claude"]
    assert t8["agents"]["nop"]["claude"] == {"clean": 0.0, "residual": 0.0, "gap": 0.0, "n_tasks": 2}
    assert t8["agents"]["oracle"]["claude"] == {"clean": 1.0, "residual": 1.0, "gap": 0.0, "n_tasks": 2}
    for agent in ("nop", "oracle"):
        assert t8["agents"][agent]["overall"] == t8["agents"][agent]["claude"]
    text = cli("report", str(run_dir), "--n-boot", "20").stdout
    table8 = text[text.index("Table 8") :].split("\n\n")[0]
    assert "claude Clean" in table8 and "claude-sonnet-4-5" not in table8
