"""The terminal harness (terminus): Terminus-2's reply parsing, and real runs - tmux in a task
container, LiteLLM against the scripted model server - with its budgets, model errors, recording
(trajectory, interactions, ATIF that the importer reads back) and its refusal of repository
tasks; mini-swe-agent on a machine task in the same run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from swe_residual.agents.terminus import DEFAULT_DURATION_S, limit_output, parse_reply
from swe_residual.interactions import from_atif, read_interactions

from .drivers import records, run_suite

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent
TB = ROOT / "suites" / "terminal_bench"


def test_replies_in_terminus_2_shape_parse_and_broken_ones_say_why():
    r = parse_reply(
        'Sure! {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 0.1}, '
        '{"keystrokes": "C-c"}, {"keystrokes": "", "duration": 500}], "task_complete": "true"} thanks'
    )
    assert (r.error, r.analysis, r.plan, r.task_complete) == (None, "a", "p", True)
    # no duration: Terminus-2's default; over 60 s: capped
    assert [(c.keystrokes, c.duration) for c in r.commands] == [
        ("ls\n", 0.1),
        ("C-c", DEFAULT_DURATION_S),
        ("", 60.0),
    ]
    assert parse_reply('{"analysis": "a", "plan": "p", "commands": []}').task_complete is False
    assert parse_reply("I will run ls").error == "no JSON object in the answer"
    assert parse_reply('{"analysis": "a", "commands": []}').error == "missing field(s): plan"
    assert parse_reply('{"analysis": "a", "plan": "p", "commands": "ls"}').error == "commands must be a list"
    assert (
        parse_reply('{"analysis": "a", "plan": "p", "commands": [{"duration": 1}]}').error
        == "commands[0] needs a keystrokes string"
    )
    assert (
        parse_reply(
            '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x", "duration": "soon"}]}'
        ).error
        == "commands[0].duration is not a number"
    )
    assert (
        parse_reply('{"analysis": "a", "plan": }').error
        == "invalid JSON (Expecting value at line 1 column 27)"
    )


def test_long_screens_keep_head_and_tail():
    text = "a" * 8000 + "b" * 8000
    out = limit_output(text, 10_000)
    assert out.startswith("a" * 5000) and out.endswith("b" * 5000)
    assert "[... output limited to 10000 bytes; 6000 interior bytes omitted ...]" in out
    assert limit_output("short") == "short"


def _agents(tmp_path: Path) -> Path:
    """Scripted terminus agents: one that never answers in JSON, one whose service fails, one whose
    context overflows, one that closes its own terminal."""
    say = lambda keys, done=False: {
        "json": {
            "analysis": "a",
            "plan": "p",
            "task_complete": done,
            "commands": [{"keystrokes": k, "duration": 0.3} for k in keys],
        }
    }
    scripts = {
        "exits": {"replies": [say(["exit\n"]), say(["echo back-again\n"]), say([], True), say([], True)]},
        "garbled": {"replies": [{"message": "I will look around first."}], "after_last": "repeat"},
        "down": {"replies": [{"error": 503}]},
        "overflow": {"replies": [{"error": "context_window"}]},
    }
    agents = {}
    for name, script in scripts.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(script))
        agents[f"terminus-{name}"] = {
            "harness": "terminus",
            "model": "openai/scripted",
            "scripted_server": f"{name}.yaml",
            "step_limit": 3 if name == "garbled" else 6,
        }
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump({"agents": agents}))
    return path


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The terminal-bench suite on docker into tmp_path/run, and its records by case."""
    run = tmp_path / "run"
    proc = run_suite(
        "-q", "--infra-retries", "0", *args, suite=TB, backend="docker", run_dir=run, timeout=1800
    )
    return proc, records(run, by="case_id", missing_ok=True)


@pytest.mark.docker
def test_terminus_budgets_model_errors_and_mini_swe_agent_on_a_machine_task(
    tmp_path, docker_client, bookworm_image
):
    proc, recs = _run(
        tmp_path,
        "--agent-config",
        str(_agents(tmp_path)),
        "--agent",
        "terminus-garbled",
        "--agent",
        "terminus-down",
        "--agent",
        "terminus-overflow",
        "--agent",
        "terminus-exits",
        "--agent",
        "scripted-msa-machine",
        "--agent",
        "scripted-terminus",
        "-k",
        "sales-report-clean",
    )
    out = {
        cid.rsplit("-sales-report", 1)[0]: (r["outcome"], r["rule"], r["termination"], r["steps"])
        for cid, r in recs.items()
    }
    # three answers that are no JSON use up the step limit of 3: a counted failure
    assert out["terminus-garbled"] == (0, "budget", "budget", 3)
    # a 503 is the model service's fault: no outcome (rerun); a context overflow is the agent's
    assert out["terminus-down"][:3] == (None, "infra_model_service", "infra")
    assert out["terminus-overflow"][:3] == (0, "context_exhausted", "context_exhausted")
    # typing `exit` closes the terminal; the harness opens a new one and the run goes on
    assert out["terminus-exits"] == (0, "verdict", "submitted", 4)
    exits = recs["terminus-exits-sales-report-clean"]
    traj = json.loads((tmp_path / "run" / exits["artifacts"]["trajectory"]).read_text())
    assert "back-again" in traj["steps"][1]["actions"][0]["output"]
    # mini-swe-agent works on a machine through the same shell: it reruns the job, and it passes
    assert out["scripted-msa-machine"] == (1, "verdict", "submitted", 3)
    # the kv-service script does not solve this task: a valid failure after a confirmed submission
    assert out["scripted-terminus"] == (0, "verdict", "submitted", 4)
    garbled = recs["terminus-garbled-sales-report-clean"]
    traj = json.loads((tmp_path / "run" / garbled["artifacts"]["trajectory"]).read_text())
    assert [s["message"] for s in traj["steps"]] == ["I will look around first."] * 3
    assert proc.returncode == 1


@pytest.mark.docker
def test_terminus_repairs_a_machine_state_and_records_what_it_typed(tmp_path, docker_client, bookworm_image):
    proc, recs = _run(tmp_path, "--agent", "scripted-terminus", "-k", "kv-service", "-n", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(recs) == [
        "scripted-terminus-kv-service-clean",
        "scripted-terminus-kv-service-residual-kv-service--config-not-reloaded",
        "scripted-terminus-kv-service-residual-kv-service--tmp-data-dir",
    ]
    r = recs["scripted-terminus-kv-service-residual-kv-service--config-not-reloaded"]
    assert (r["outcome"], r["declared_complete"], r["steps"], r["harness"]) == (1, True, 4, "terminus")
    run = tmp_path / "run"
    typed = read_interactions(run / r["artifacts"]["interactions"])
    assert [(i.kind, i.input.split()[0], i.wait) for i in typed] == [
        ("keys", "cat", 0.3),
        ("keys", "sed", 0.2),
        ("keys", "pkill", 1.5),
        ("keys", "python3", 0.5),
    ]
    # the ATIF trajectory it wrote imports back to the same keystrokes and waits (Stage I)
    atif = json.loads(
        (run / Path(r["artifacts"]["interactions"]).parent / "terminus.trajectory.json").read_text()
    )
    assert [(i.input, i.wait) for i in from_atif(atif)] == [(i.input, i.wait) for i in typed]
    assert atif["steps"][-1]["tool_calls"] == [
        {"tool_call_id": "call_3_task_complete", "function_name": "mark_task_complete", "arguments": {}}
    ]
    # the confirmation turn: asked once after the first task_complete
    assert "Are you sure the task is complete?" in atif["steps"][-2]["observation"]["results"][0]["content"]


@pytest.mark.slow
def test_terminus_refuses_repository_tasks_before_any_case(tmp_path):
    proc = run_suite(
        "-q", suite=ROOT / "suites" / "demo", agents=["scripted-terminus"], run_dir=tmp_path / "run"
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (
        "--agent scripted-terminus: the terminal harness runs machine-track tasks (a container whose processes "
        "outlive a command); task " in proc.stderr
    )
