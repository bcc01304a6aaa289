"""Named agent configs (agents.yaml) and inline agents (`command:<shell>`, `replay:<file>`).

A config names its harness and the harness's settings. Secrets never live here: a config names
the environment variables that hold its API keys (`api_key_env`), and those values are read from
the environment at run time only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swe_residual.errors import InputError, validation_line
from swe_residual.safe_read import read_yaml


class TokenPrice(BaseModel):
    """USD per token of a model, where LiteLLM's price table does not have it (or to override it)."""

    model_config = ConfigDict(extra="forbid")
    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    harness: Literal["command", "replay", "mini-swe-agent", "terminus", "scripted"]
    description: str | None = None
    # command harness
    command: str | None = None
    trajectory_path: str | None = Field(default=None, description="where the agent writes ATIF / msa JSON")
    install: str | None = Field(
        default=None,
        description="command: a host file or directory copied into the environment at /opt/agent "
        "before the agent starts (/opt/agent/bin and /opt/agent first on PATH)",
    )
    # replay harness
    commands: list[str] = Field(default_factory=list)
    task_commands: dict[str, list[str]] = Field(
        default_factory=dict, description="replay: commands per task id"
    )
    final_message: str | None = Field(default=None, description="replay: the message declaring completion")
    # mini-swe-agent and terminus harnesses
    model: str | None = None
    model_kwargs: dict = Field(default_factory=dict)
    api_key_env: list[str] = Field(default_factory=list)
    scripted_server: str | None = Field(
        default=None, description="script for the local scripted model server"
    )
    system_template: str | None = None
    instance_template: str | None = None
    command_timeout_sec: float = 120.0
    # budget (task.toml's [agent] timeout_sec applies when unset)
    timeout_sec: float | None = Field(default=None, gt=0)
    step_limit: int | None = Field(default=None, gt=0)
    max_case_cost: float | None = Field(
        default=None, gt=0, description="USD the model calls of one case may cost (--max-case-cost)"
    )
    price_per_token: TokenPrice | None = Field(
        default=None, description="USD per prompt and completion token (else LiteLLM's price table)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="non-secret variables for the agent")
    source: str | None = Field(default=None, exclude=True)


class AgentsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agents: dict[str, AgentSpec] = Field(default_factory=dict)


def load_agents_file(path: Path) -> dict[str, AgentSpec]:
    path = Path(path)
    raw = read_yaml(path, "agent config file")
    try:
        parsed = AgentsFile.model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"{path}: {validation_line(exc, AgentsFile)}") from None
    for name, spec in parsed.agents.items():
        spec.source = str(path)
        base = path.parent
        if spec.scripted_server and not Path(spec.scripted_server).is_absolute():
            spec.scripted_server = str((base / spec.scripted_server).resolve())
        if spec.install:
            spec.install = str((base / Path(spec.install).expanduser()).resolve())
            if not Path(spec.install).exists():
                raise InputError(
                    f"{path}: agents.{name}.install: {spec.install} does not exist (a file or "
                    "directory on this machine, relative to the config file)"
                )
        if spec.harness == "command" and not spec.command:
            raise InputError(f"{path}: agents.{name}.command: required for harness 'command'")
        if spec.harness == "replay" and not (spec.commands or spec.task_commands):
            raise InputError(
                f"{path}: agents.{name}.commands: required for harness 'replay' "
                "(or task_commands: {task id: [commands]})"
            )
    return parsed.agents


def agent_label(name: str) -> str:
    """A short, path-safe label for an agent name (inline agents carry whole commands)."""
    import hashlib

    if name.startswith("command:"):
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        program = _program_name(name[len("command:") :])
        return f"command-{program}-{digest}" if program else f"command-{digest}"
    if name.startswith("replay:"):
        return "replay-" + Path(name[len("replay:") :]).stem[:40]
    return name


_INTERPRETERS = {"sh", "bash", "env", "python", "python3", "node", "uv", "uvx", "exec"}


def _program_name(command: str) -> str:
    """The program a command runs, for its label: the first word that is not an interpreter or a
    variable assignment (`python3 /opt/agent/bin/my-agent.py --x` -> my-agent), path-safe, at
    most 24 characters ("" when there is none)."""
    for word in command.split():
        if "=" in word or word.startswith("-"):
            continue
        stem = Path(word).stem
        if stem in _INTERPRETERS:
            continue
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")[:24]
    return ""


def inline_spec(name: str) -> AgentSpec | None:
    """`command:<shell>` runs that command as the agent; `replay:<file>` replays one command per line."""
    if name.startswith("command:"):
        cmd = name[len("command:") :].strip()
        if not cmd:
            raise InputError("--agent command:<shell command>: the command is empty")
        return AgentSpec(harness="command", command=cmd, source="inline")
    if name.startswith("replay:"):
        path = Path(name[len("replay:") :]).expanduser()
        if not path.is_file():
            raise InputError(
                f"--agent {name}: {path} does not exist (one shell command per line, or a "
                "YAML file with commands: [...] or task_commands: {task: [...]})"
            )
        if path.suffix in (".yaml", ".yml"):
            return _replay_yaml(path)
        cmds = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        return AgentSpec(harness="replay", commands=cmds, source=str(path))
    return None


class ReplayFile(BaseModel):
    """A recorded run to replay: multi-line commands, per task or for any task."""

    model_config = ConfigDict(extra="forbid")
    description: str | None = None
    commands: list[str] = Field(default_factory=list)
    task_commands: dict[str, list[str]] = Field(default_factory=dict)
    final_message: str | None = None


def _replay_yaml(path: Path) -> AgentSpec:
    try:
        parsed = ReplayFile.model_validate(read_yaml(path, "replay file") or {})
    except ValidationError as exc:
        raise InputError(f"{path}: {validation_line(exc, ReplayFile)}") from None
    if not (parsed.commands or parsed.task_commands):
        raise InputError(f"{path}: commands: a replay file needs commands or task_commands")
    return AgentSpec(
        harness="replay",
        description=parsed.description,
        commands=parsed.commands,
        task_commands=parsed.task_commands,
        final_message=parsed.final_message,
        source=str(path),
    )
