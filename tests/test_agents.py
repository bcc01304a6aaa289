"""Agents end to end: the real mini-swe-agent + LiteLLM against a scripted local model server,
inline command agents, replay, budgets, model-service failures, secrets and trajectory importers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swe_residual.sources.trajectories import from_atif, from_mini_swe_agent, import_trajectory

from .drivers import cli, records, run_suite, world

ROOT = Path(__file__).resolve().parent.parent
CANARY = "sk-canary-7f3a9c1e5b2d4f60"

FIX_SCRIPT = """
replies:
  - {message: "What did the previous work leave?", command: "git status --short"}
  - {message: "Read the module.", command: "cat calc.py"}
  - {message: "Division by zero must raise.", command: "sed -i 's/return a \\\\/ b if b else 0/return a \\\\/ b/' calc.py && python3 -c 'import calc; calc.div(1, 0)' ; true"}
  - {message: "Commit.", command: "git add -A && git commit -q -m 'Raise on division by zero'"}
  - {message: "Submit.", command: "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
"""


def _world(tmp: Path, scripts: dict[str, str]) -> None:
    """The calc task (with its Dockerfile: either backend) and its state; an agents file of
    mini-swe-agents, each against the scripted model server playing its script, and `two-steps`."""
    agents = {}
    for name, script in scripts.items():
        (tmp / f"{name}.yaml").write_text(textwrap.dedent(script))
        agents[name] = {
            "harness": "mini-swe-agent",
            "model": "openai/scripted",
            "scripted_server": f"{name}.yaml",
        }
    agents["two-steps"] = {"harness": "replay", "commands": ["git status", "true"], "step_limit": 1}
    world(tmp, backend="docker", agents=agents)


NO_MODEL_RETRY = {"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}
RESIDUAL = dict(start="residual", env=NO_MODEL_RETRY)  # the residual cases, the scripted model tried once
AGENT_ATTEMPT = lambda r: (r["agent"], r["attempt"])  # noqa: E731


def _agents_json(env: dict) -> dict[str, dict]:
    out = cli("agents", "--format", "json", env=env, check=0).stdout
    return {a["name"]: a for a in json.loads(out)}


def test_agents_command_shows_descriptions_needs_and_whether_each_runs_now():
    env = {"MOONSHOT_API_KEY": None, "MSWEA_MODEL_NAME": None}  # unset
    agents = _agents_json(env)
    assert agents["nop"]["harness"] == "builtin" and agents["oracle"]["ready"]
    assert {
        "scripted-msa",
        "mini-swe-agent",
        "kimi",
        "command:<shell command>",
        "replay:<commands file>",
    } <= set(agents)
    # descriptions come from agents.yaml
    import yaml

    declared = yaml.safe_load((ROOT / "agents.yaml").read_text())["agents"]
    for name, spec in declared.items():
        assert agents[name]["description"] == spec["description"], name
    kimi = agents["kimi"]
    assert kimi["needs"] == ["$MOONSHOT_API_KEY", "the `agents` extra"]
    assert (kimi["ready"], kimi["problems"]) == (False, ["$MOONSHOT_API_KEY is not set"])
    assert agents["mini-swe-agent"]["problems"] == [
        "$MSWEA_MODEL_NAME is not set"
    ]  # the variable its model names
    assert agents["scripted-msa"]["ready"] and agents["scripted-msa"]["needs"] == ["the `agents` extra"]
    assert _agents_json({**env, "MOONSHOT_API_KEY": CANARY})["kimi"]["ready"]
    text = cli("agents", env=env, check=0).stdout
    assert "kimi  [mini-swe-agent]  not ready: $MOONSHOT_API_KEY is not set" in text
    assert "    needs: $MOONSHOT_API_KEY, the `agents` extra" in text
    assert CANARY not in text


def _site_without_the_agents_extra(tmp: Path) -> dict[str, str]:
    """An environment whose Python has every installed package except mini-swe-agent and LiteLLM (the
    `agents` extra): this venv's site-packages linked one entry at a time, run with -S."""
    import site

    sp = Path(next(p for p in site.getsitepackages() if Path(p, "pydantic").is_dir()))
    out = tmp / "site"
    out.mkdir()
    for entry in sp.iterdir():
        name = entry.name
        if (
            name in ("minisweagent", "litellm", "litellm_cli", "__pycache__")
            or name.endswith(".pth")
            or name.startswith(("mini_swe_agent-", "litellm-", "__editable__"))
        ):
            continue
        (out / name).symlink_to(entry.resolve())
    return {**os.environ, "PYTHONPATH": str(out)}


def test_missing_agents_extra_names_the_option_the_user_typed(tmp_path):
    env = _site_without_the_agents_extra(tmp_path)
    probe = subprocess.run(
        [sys.executable, "-S", "-c", "import minisweagent"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert probe.returncode == 1 and "No module named 'minisweagent'" in probe.stderr
    proc = run_suite(run_dir=tmp_path / "run", agents=["scripted-msa"], python_flags=["-S"], env=env)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR:")]
    assert line == (
        "ERROR: --agent scripted-msa: the mini-swe-agent harness needs the `agents` extra (mini-swe-agent "
        "and LiteLLM), which is not installed: No module named 'minisweagent'; install it with "
        "pip install -e '.[agents]'"
    ), line
    proc = cli(
        "residualize",
        "run",
        "--track",
        "demo",
        "--predecessor",
        "scripted-predecessor",
        str(tmp_path / "work"),
        python_flags=["-S"],
        env=env,
    )
    assert proc.returncode == 2 and proc.stderr.startswith(
        "error: --predecessor scripted-predecessor: the mini-swe-agent harness needs the `agents` extra"
    ), proc.stderr
    agents = json.loads(cli("agents", "--format", "json", python_flags=["-S"], env=env, check=0).stdout)
    msa = next(a for a in agents if a["name"] == "scripted-msa")
    assert msa["problems"] == ["mini-swe-agent and LiteLLM not installed (pip install -e '.[agents]')"]
    # a misspelt predecessor gets the close match, under the option typed
    proc = cli(
        "residualize",
        "run",
        "--track",
        "demo",
        "--predecessor",
        "scripted-predecesor",
        str(tmp_path / "work2"),
    )
    assert proc.returncode == 2 and proc.stderr.startswith(
        "error: --predecessor scripted-predecesor: unknown agent 'scripted-predecesor' (did you mean "
        "'scripted-predecessor'? known: "
    ), proc.stderr


@pytest.mark.slow
def test_litellm_prints_no_provider_banner(tmp_path):
    # the scripted predecessor's model name is unknown to LiteLLM's cost lookup: before, a red
    # "Provider List: https://docs.litellm.ai/docs/providers" line per model call (4 on this task)
    proc = cli(
        "residualize",
        "run",
        "--track",
        "demo",
        "--predecessor",
        "scripted-predecessor",
        "--task",
        "rate-limiter-burst",
        str(tmp_path / "work"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scripted-predecessor-rate-limiter-burst-r1: submitted, declared complete True" in proc.stdout
    assert (
        "Provider List" not in proc.stdout + proc.stderr and "Give Feedback" not in proc.stdout + proc.stderr
    )


@pytest.mark.slow
def test_mini_swe_agent_fixes_residual_state_through_scripted_model(tmp_path, backend):
    _world(tmp_path, {"fixer": FIX_SCRIPT})
    proc = run_suite(
        world=tmp_path,
        agents=["fixer"],
        backend=backend,
        start="residual",
        env={**NO_MODEL_RETRY, "OPENAI_API_KEY": CANARY, "MY_SERVICE_TOKEN": CANARY + "x"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rec = records(tmp_path / "run", by=AGENT_ATTEMPT)[("fixer", 1)]
    assert (rec["verdict"], rec["outcome"], rec["termination"], rec["steps"]) == ("pass", 1, "submitted", 5)
    run = tmp_path / "run"
    traj = json.loads((run / rec["artifacts"]["trajectory"]).read_text())
    commands = [a["command"] for s in traj["steps"] for a in s["actions"]]
    assert (
        commands[0] == "git status --short" and commands[-1] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    )
    first = traj["steps"][0]["actions"][0]
    assert first["exit_code"] == 0 and "M calc.py" in first["output"] and "?? NOTES.md" in first["output"]
    assert "def div(a, b):" in traj["steps"][1]["actions"][0]["output"]
    patch = (run / rec["artifacts"]["patch"]).read_text()
    assert "+    return a / b\n" in patch and "NOTES.md" in patch
    # no file of the run dir contains the API key or other secrets of the harness's environment
    leaked = [p for p in run.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaked == []


@pytest.mark.slow
def test_model_service_failure_is_infra_error_retried_from_fresh_state(tmp_path):
    _world(tmp_path, {"flaky": "replies:\n  - {error: 503}\n"})
    proc = run_suite("--infra-retries", "1", world=tmp_path, agents=["flaky"], **RESIDUAL)
    assert proc.returncode == 1 and "1 error" in proc.stdout
    recs = records(tmp_path / "run", by=AGENT_ATTEMPT, missing_ok=True)
    assert sorted(recs) == [("flaky", 1), ("flaky", 2)]
    for r in recs.values():
        assert r["verdict"] == "infra_error" and r["outcome"] is None
        assert r["error"].startswith("model service error (")


@pytest.mark.slow
def test_model_that_never_submits_ends_on_budget_as_failure(tmp_path):
    _world(tmp_path, {"looper": "replies:\n  - {message: 'again', command: 'ls'}\n"})
    agents = json.loads((tmp_path / "agents.yaml").read_text())
    agents["agents"]["looper"]["step_limit"] = 4
    (tmp_path / "agents.yaml").write_text(json.dumps(agents))
    proc = run_suite(world=tmp_path, agents=["looper"], **RESIDUAL)
    rec = records(tmp_path / "run", by=AGENT_ATTEMPT, missing_ok=True)[("looper", 1)]
    assert (rec["termination"], rec["outcome"], rec["verdict"], rec["steps"]) == ("budget", 0, "fail", 4)
    assert "1 failed" in proc.stdout


@pytest.mark.slow
def test_budget_exhaustion_kills_the_whole_process_tree(tmp_path, backend):
    _world(tmp_path, {})
    marker = f"swe-residual-budget-probe-{backend}-{os.getpid()}"
    agent = f"command:(sleep 300; echo {marker}) & sleep 400 # {marker}"
    run = tmp_path / f"budget-tree-{backend}"  # containers are found below by the run dir's name
    run_suite(
        "--agent-timeout", "2", world=tmp_path, agents=[agent], backend=backend, run_dir=run, **RESIDUAL
    )
    rec = next(iter(records(run, missing_ok=True)))
    assert (rec["termination"], rec["outcome"], rec["declared_complete"]) == ("budget", 0, False)
    assert rec["duration_s"] < 30
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == []
    if backend == "docker":  # and no container of the run is left
        from .docker_helpers import left_behind

        assert left_behind(run.name) == []


@pytest.mark.slow
def test_inline_command_agent_cannot_find_hidden_tests(tmp_path, backend, request):
    if backend == "local":
        request.getfixturevalue("require_bwrap")
    _world(tmp_path, {})
    # everything outside the system directories, by name and by content; calc.py is the positive control
    search = (
        "find / \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o \\( -name 'test_new.py' "
        "-o -name 'solution.patch' -o -name solve.sh -o -name states.yaml -o -name results.jsonl "
        "-o -name 'calc.py' \\) -print 2>/dev/null > /tmp/found.txt; "
        "grep -rls test_div_by_zero / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null "
        '>> /tmp/found.txt; cat /tmp/found.txt; test "$(cat /tmp/found.txt)" = /app/calc.py'
    )
    run_suite(world=tmp_path, agents=[f"command:{search}"], backend=backend, **RESIDUAL)
    rec = next(iter(records(tmp_path / "run", missing_ok=True)))
    traj = json.loads((tmp_path / "run" / rec["artifacts"]["trajectory"]).read_text())
    output = traj["steps"][0]["actions"][0]["output"]
    assert output.split() == ["/app/calc.py"], output  # only the positive control is found
    assert rec["declared_complete"] is True and rec["termination"] == "submitted"


@pytest.mark.slow
def test_replay_agent_respects_step_limit(tmp_path):
    _world(tmp_path, {})
    run_suite(world=tmp_path, agents=["two-steps"], **RESIDUAL)
    rec = records(tmp_path / "run", by=AGENT_ATTEMPT, missing_ok=True)[("two-steps", 1)]
    assert (rec["termination"], rec["steps"], rec["outcome"]) == ("budget", 1, 0)


def test_importers_normalize_msa_and_atif():
    msa = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"exit_status": "Submitted", "submission": ""},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "look", "extra": {"actions": [{"command": "cat a.py"}]}},
            {"role": "tool", "content": "x", "extra": {"raw_output": "print(1)\n", "returncode": 0}},
            {
                "role": "assistant",
                "content": "done",
                "extra": {"actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]},
            },
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
    }
    t = import_trajectory(msa, "a")
    assert [s.message for s in t.steps] == ["look", "done"]
    assert (t.steps[0].actions[0].command, t.steps[0].actions[0].output, t.steps[0].actions[0].exit_code) == (
        "cat a.py",
        "print(1)\n",
        0,
    )
    assert t.exit_status == "Submitted" and t == from_mini_swe_agent(msa, "a")
    atif = {
        "schema_version": "ATIF-v1.4",
        "agent": {"name": "terminus"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "task"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "inspect",
                "tool_calls": [{"function_name": "bash", "arguments": {"command": "git diff"}}],
                "observation": {"results": [{"content": "diff --git a/x b/x"}]},
            },
        ],
    }
    t2 = from_atif(atif, "b")
    assert len(t2.steps) == 1 and t2.steps[0].actions[0].output == "diff --git a/x b/x"
    assert import_trajectory({"other": 1}, "c") is None


@pytest.mark.slow
def test_command_agent_trajectory_file_is_imported(tmp_path):
    _world(tmp_path, {})
    atif = {
        "schema_version": "ATIF-v1.4",
        "agent": {"name": "my-cli"},
        "steps": [
            {
                "step_id": 1,
                "source": "agent",
                "message": "look",
                "tool_calls": [{"function_name": "bash", "arguments": {"command": "git status"}}],
                "observation": {"results": [{"content": "M calc.py"}]},
            },
            {"step_id": 2, "source": "agent", "message": "done", "tool_calls": []},
        ],
    }
    script = tmp_path / "agent.sh"
    script.write_text(f"cat > \"$AGENT_TRAJECTORY\" <<'JSON'\n{json.dumps(atif)}\nJSON\n")
    run_suite(world=tmp_path, agents=[f"command:{script.read_text()}"], **RESIDUAL)
    rec = next(iter(records(tmp_path / "run", missing_ok=True)))
    traj = json.loads((tmp_path / "run" / rec["artifacts"]["trajectory"]).read_text())
    assert rec["steps"] == 2 and [s["message"] for s in traj["steps"]] == ["look", "done"]
    assert traj["steps"][0]["actions"][0] == {
        "command": "git status",
        "output": "M calc.py",
        "exit_code": None,
        "duration_s": None,
        "kind": "shell",
        "path": None,
        "cwd": None,
    }
    # what the agent typed (not the command that started it) is the run's interactions.jsonl
    typed = [
        json.loads(line)
        for line in (tmp_path / "run" / rec["artifacts"]["interactions"]).read_text().splitlines()
    ]
    assert [(i["kind"], i["input"]) for i in typed] == [("command", "git status")]


DEMO_FIX_SCRIPT = """
replies:
  - {message: "What did the previous work leave?", command: "git status --short"}
  - {message: "Read the cache module.", command: "cat memokit/cache.py"}
  - {message: "The request says no expiry unless a ttl is given.", command: "sed -i 's/^DEFAULT_TTL = 300 .*/DEFAULT_TTL = None/' memokit/cache.py"}
  - {message: "Commit.", command: "git add -A && git commit -q -m 'No expiry by default'"}
  - {message: "Submit.", command: "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
"""


@pytest.mark.slow
def test_scripted_mini_swe_agent_repairs_a_demo_residual_state(tmp_path, backend):
    # the demo state ttl-cache--five-minute-default defaults ttl to 300 s instead of None
    (tmp_path / "fix.yaml").write_text(DEMO_FIX_SCRIPT)
    (tmp_path / "agents.yaml").write_text(
        json.dumps(
            {
                "agents": {
                    "demo-fixer": {
                        "harness": "mini-swe-agent",
                        "model": "openai/scripted",
                        "scripted_server": "fix.yaml",
                    }
                }
            }
        )
    )
    proc = run_suite(
        "-k",
        "ttl-cache-residual-ttl-cache--five-minute-default",
        agents=["demo-fixer"],
        agent_config=tmp_path / "agents.yaml",
        backend=backend,
        run_dir=tmp_path / "run",
        env=NO_MODEL_RETRY,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    (rec,) = records(tmp_path / "run")
    assert (rec["verdict"], rec["steps"], rec["termination"]) == ("pass", 5, "submitted")
    assert rec["tests"]["tests.test_ttl.test_no_ttl_by_default"] == "passed"
    traj = json.loads((tmp_path / "run" / rec["artifacts"]["trajectory"]).read_text())
    status = traj["steps"][0]["actions"][0]["output"]
    assert " M memokit/cache.py" in status  # the inherited, uncommitted work was visible
    assert "DEFAULT_TTL = 300" in traj["steps"][1]["actions"][0]["output"]
    patch = (tmp_path / "run" / rec["artifacts"]["patch"]).read_text()
    assert "+DEFAULT_TTL = None\n" in patch and "+def check_ttl(ttl):" in patch  # kept the inherited work


def test_a_command_agent_is_labelled_by_its_program():
    """`command:` agents carry whole commands: the label names the program, the hash keeps it unique."""
    from swe_residual.agents.config import agent_label

    assert re.fullmatch(
        r"command-my-agent-[0-9a-f]{8}", agent_label("command:python3 /opt/agent/bin/my-agent.py -v")
    )
    assert re.fullmatch(r"command-run-[0-9a-f]{8}", agent_label("command:A=1 bash run.sh"))
    assert agent_label("command:true") != agent_label("command:true ")
    assert re.fullmatch(r"command-[0-9a-f]{8}", agent_label("command:A=1 -v"))
