"""Agent registry: built-in reference agents, named configs from agents.yaml, inline agents."""

from __future__ import annotations

from pathlib import Path

from swe_residual.agents.base import Agent, AgentContext, AgentResult, Budget, BudgetExhausted
from swe_residual.agents.builtin import NopAgent, OracleAgent
from swe_residual.agents.config import AgentSpec, inline_spec, load_agents_file
from swe_residual.errors import InputError

BUILTIN: dict[str, type[Agent]] = {"nop": NopAgent, "oracle": OracleAgent}
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "agents.yaml"
INLINE_FORMS = {"command:<shell command>": "command", "replay:<commands file>": "replay"}


class AgentRegistry:
    """Every agent selectable with --agent: built-ins, the project's agents.yaml, user files."""

    def __init__(self, config_paths: list[Path] | None = None):
        self.specs: dict[str, AgentSpec] = {}
        paths = [DEFAULT_CONFIG] if DEFAULT_CONFIG.is_file() else []
        for path in paths + [Path(p) for p in (config_paths or [])]:
            self.specs.update(load_agents_file(path))

    def available(self) -> dict[str, str]:
        """{name: harness}"""
        names = {name: cls.harness for name, cls in BUILTIN.items()}
        names.update({name: spec.harness for name, spec in self.specs.items()})
        names.update(INLINE_FORMS)
        return names

    def spec(self, name: str) -> AgentSpec | None:
        return self.specs.get(name) or inline_spec(name)

    def get(self, name: str) -> Agent:
        if name in BUILTIN:
            return BUILTIN[name](name)
        spec = self.spec(name)
        if spec is None:
            known = ", ".join(sorted(n for n in self.available() if ":" not in n))
            raise InputError(f"--agent: unknown agent {name!r} (available: {known}; or command:<shell>, "
                             "replay:<file>; add configs with --agent-config PATH)")
        if spec.harness == "command":
            from swe_residual.agents.command import CommandAgent
            return CommandAgent(name, spec)
        if spec.harness == "replay":
            from swe_residual.agents.command import ReplayAgent
            return ReplayAgent(name, spec)
        if spec.harness == "terminus":
            from swe_residual.agents.terminus import TerminusAgent
            return TerminusAgent(name, spec)
        from swe_residual.agents.msa import MiniSweAgent
        return MiniSweAgent(name, spec)


__all__ = ["Agent", "AgentContext", "AgentResult", "AgentRegistry", "AgentSpec", "Budget", "BudgetExhausted"]
