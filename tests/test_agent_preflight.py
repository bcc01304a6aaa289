"""Agent preflight: a command agent's program is looked up where it will run before the first
case; the documented way in (`install:`) works on every backend; an agent that never started is
named in the terminal summary."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from swe_residual.agents.preflight import program_of

from .drivers import ROOT, cli, records, run_suite, world

PROGRAM = '#!/bin/sh\necho "my-agent ran in $(pwd): $(head -c 40 "$2")"\n'


def _readme_command_agent() -> str:
    """The README's `command:` example, as its pytest command line passes it to --agent."""
    text = (ROOT / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if "--agent 'command:" in ln)
    words = shlex.split(line)
    return next(w for w in words if w.startswith("command:"))


def _docs_config(dest: Path) -> Path:
    """docs/running.md's `install:` example written to dest/my-agents.yaml, with the program it
    names placed as the docs say (dest/my-agent/bin/my-agent)."""
    text = (ROOT / "docs" / "running.md").read_text()
    section = text.split("### Your agent's program", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    config = dest / "my-agents.yaml"
    config.write_text(block.group(1))
    program = dest / "my-agent" / "bin" / "my-agent"
    program.parent.mkdir(parents=True)
    program.write_text(PROGRAM)
    program.chmod(0o755)
    return config


def test_program_of_names_the_first_program_of_a_command_line():
    assert program_of('my-agent --task-file "$TASK_DIR/instruction.md"') == "my-agent"
    assert program_of("A=1 B='x y' /opt/tool/run --x") == "/opt/tool/run"
    # shell syntax and variables are left to the case (not guessed)
    for line in ("$HOME/bin/agent", "(sleep 3) & wait", "cd sub && agent", "echo hi", ""):
        assert program_of(line) is None, line


@pytest.mark.slow
def test_readme_command_example_without_its_program_exits_4_before_any_case(tmp_path):
    agent = _readme_command_agent()
    assert agent.startswith("command:my-agent ")
    proc = run_suite(run_dir=tmp_path / "run", agents=["oracle", agent], backend="local")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR:")]
    assert line.startswith(f"ERROR: --agent {agent}: program `my-agent` not found in the local environment")
    assert "`install: DIR` in the agent's config" in line and "docs/running.md#your-agents-program" in line
    assert not (tmp_path / "run").exists()  # no case ran, no run dir was made


@pytest.mark.slow
def test_agent_program_placed_as_the_docs_say_runs(tmp_path, backend):
    world(tmp_path, backend="docker")  # the calc task, runnable on either backend
    config = _docs_config(tmp_path)
    run_suite(
        world=tmp_path, agent_config=config, agents=["my-agent"], backend=backend, start="clean", check=1
    )
    (rec,) = records(tmp_path / "run")
    assert (rec["termination"], rec["declared_complete"], rec["error"]) == ("submitted", True, None)
    traj = json.loads((tmp_path / "run" / rec["artifacts"]["trajectory"]).read_text())
    output = traj["steps"][0]["actions"][0]["output"]
    assert output.startswith("my-agent ran in /app: "), output  # it read the request file it was given
    assert len(output) > len("my-agent ran in /app: ") + 10


@pytest.mark.slow
def test_docker_preflight_looks_in_the_container(tmp_path):
    """A program on the host's PATH is not in the image: the docker preflight says so."""
    world(tmp_path, backend="docker")
    proc = run_suite(world=tmp_path, agents=["command:swe-residual --help"], backend="docker")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "program `swe-residual` not found in the docker environment" in proc.stderr


@pytest.mark.slow
def test_an_agent_that_never_started_has_no_outcome_and_is_named_in_the_summary(tmp_path):
    """A program the preflight cannot name (behind a variable) that is not there: no attempt, so
    no outcome (in no denominator) and no retry; the terminal summary gives the first error line."""
    world(tmp_path)
    proc = run_suite(world=tmp_path, agents=["command:$HOME/bin/my-agent"], start="clean")
    assert proc.returncode == 1  # never passes (and --gate-max-infra makes it an invalid run)
    (rec,) = records(tmp_path / "run")  # one attempt: rerunning cannot help
    assert (rec["rule"], rec["verdict"], rec["outcome"], rec["termination"]) == (
        "agent_not_started",
        "infra_error",
        None,
        "infra",
    )
    assert rec["error"].startswith("agent did not start (exit 127): "), rec["error"]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("agent ")]
    assert len(lines) == 1, proc.stdout[-3000:]
    assert re.fullmatch(
        r"agent command-(?:[\w.-]+-)?[0-9a-f]{8} did not start in 1 case\(s\) \(exit 127\): "
        r".*my-agent: No such file or directory",
        lines[0],
    ), lines[0]


@pytest.mark.slow
def test_agents_list_says_not_ready_for_a_program_that_cannot_be_found(tmp_path):
    missing = tmp_path / "missing.yaml"
    missing.write_text("agents:\n  lost-agent:\n    harness: command\n    command: lost-agent-xyz --go\n")
    out = json.loads(cli("agents", "--format", "json", "--agent-config", str(missing), check=0).stdout)
    (lost,) = [a for a in out if a["name"] == "lost-agent"]
    assert lost["ready"] is False
    assert lost["problems"][0].startswith("program `lost-agent-xyz` not found on the environment's PATH")
    placed = _docs_config(tmp_path)
    out = json.loads(cli("agents", "--format", "json", "--agent-config", str(placed), check=0).stdout)
    (mine,) = [a for a in out if a["name"] == "my-agent"]
    assert (mine["ready"], mine["problems"]) == (True, [])


@pytest.mark.slow
def test_missing_key_is_found_before_the_model_libraries_are_imported():
    """The key check needs no import: a model agent without its key fails at once, not after
    LiteLLM's import (13 s on a loaded machine)."""
    script = (
        "import sys\n"
        "from swe_residual.agents import AgentRegistry\n"
        "from swe_residual.errors import InputError\n"
        "try:\n"
        "    AgentRegistry().get('kimi').check()\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
        "print(sorted(m for m in ('litellm', 'minisweagent') if m in sys.modules))\n"
    )
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if k != "MOONSHOT_API_KEY"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith("--agent kimi: environment variable MOONSHOT_API_KEY"), out
    assert out[1] == "[]", out


@pytest.mark.parametrize(
    ("name", "where"),
    [("oracle", "a built-in agent"), ("scripted-trust", "already defined in ")],
)
def test_a_config_may_not_reuse_an_agent_name(tmp_path, name, where):
    from swe_residual.agents import AgentRegistry
    from swe_residual.errors import InputError

    config = tmp_path / "mine.yaml"
    config.write_text(f"agents:\n  {name}:\n    harness: command\n    command: echo mine\n")
    with pytest.raises(InputError) as err:
        AgentRegistry([config])
    message = str(err.value)
    assert message.startswith(f"{config}: agents.{name}: `{name}` is {where}"), message
    assert message.endswith(f"rename the entry (e.g. my-{name})")
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(f"agents:\n  my-{name}:\n    harness: command\n    command: echo mine\n")
    assert AgentRegistry([renamed]).spec(f"my-{name}").command == "echo mine"
    twice = AgentRegistry([renamed, renamed])  # the same file named twice is one config
    assert f"my-{name}" in twice.specs


def test_the_documented_scripted_reply_format_is_what_the_server_answers(tmp_path):
    """docs/formats.md's example script, loaded and served: each reply as the doc says."""
    import urllib.error
    import urllib.request

    from swe_residual.agents.model_server import ScriptedModelServer, load_script

    text = (ROOT / "docs" / "formats.md").read_text().split("### Scripted model replies", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    (tmp_path / "script.yaml").write_text(block.group(1))
    script = load_script(tmp_path / "script.yaml")

    def ask(server: ScriptedModelServer, turn: int) -> tuple[int, dict]:
        messages = [{"role": "user", "content": "task"}]
        for _ in range(turn):
            messages += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "out"}]
        req = urllib.request.Request(
            server.url + "/chat/completions",
            data=json.dumps({"model": "scripted", "messages": messages}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    script["replies"][2]["delay"] = 0  # the doc's 5 s wait, not needed here
    with ScriptedModelServer(script) as server:
        status, first = ask(server, 0)
        choice = first["choices"][0]
        call = choice["message"]["tool_calls"][0]["function"]
        assert (status, choice["finish_reason"], call["name"]) == (200, "tool_calls", "bash")
        assert json.loads(call["arguments"]) == {"command": "git status"}
        assert first["usage"]["prompt_tokens"] >= 1
        plain = ask(server, 1)[1]["choices"][0]
        assert plain["finish_reason"] == "stop" and "tool_calls" not in plain["message"]
        usage = ask(server, 3)[1]["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (1000, 100)
        assert ask(server, 4)[1]["choices"][0]["finish_reason"] == "length"
        assert json.loads(ask(server, 5)[1]["choices"][0]["message"]["content"])["task_complete"] is False
        assert ask(server, 6)[0] == 503
        status, body = ask(server, 7)
        assert (status, body["error"]["code"]) == (400, "context_length_exceeded")
        for turn in (8, 20):  # the last reply, and past the end: the last reply again (repeat)
            with pytest.raises((urllib.error.URLError, ConnectionError)):
                ask(server, turn)


def test_only_the_shells_own_refusal_is_an_agent_that_never_started():
    from swe_residual.agents.command import never_ran

    assert never_ran(127, "bash: line 1: my-agent: command not found\n")
    assert never_ran(126, "bash: line 1: ./agent.sh: Permission denied\n")
    # a program that ran and then ended with 127 (its own subprocess missing) did start
    assert not never_ran(127, "reading the task...\nbash: line 1: helper: command not found\n")
    assert not never_ran(1, "bash: line 1: my-agent: command not found\n")
