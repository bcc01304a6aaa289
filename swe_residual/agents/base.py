"""The agent interface: one `run(ctx)` that works through ctx.shell and returns an AgentResult.

ctx.shell is the one place where commands are executed, timed, clipped to the budget and
recorded in the normalized trajectory, so every agent's steps are measured the same way. Every
command (and every keystroke a terminal harness sends, through ctx.record_keys) is also recorded
in order as an Interaction: a machine-track state is rebuilt by replaying them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from swe_residual.backends.base import Environment, ExecResult
from swe_residual.errors import BudgetExhausted, CostLimitExhausted, HarnessError, InfraError
from swe_residual.interactions import Interaction, output_digest
from swe_residual.results import Termination
from swe_residual.tasks import Task
from swe_residual.trajectory import Action, Trajectory, clip


@dataclass
class Budget:
    wall_s: float
    max_steps: int | None = None
    max_cost_usd: float | None = None  # --max-case-cost / max_case_cost: model-loop harnesses
    started: float = field(default_factory=time.monotonic)
    spent_usd: float = 0.0  # the model calls' cost so far, as far as it is known

    @property
    def remaining_s(self) -> float:
        return self.wall_s - (time.monotonic() - self.started)

    def charge(self, cost: float | None, step: int) -> None:
        """Add one model call's cost (None: unknown, adds nothing); the call that makes the spend
        reach the limit ends the run there, before its reply is acted on (CostLimitExhausted)."""
        if cost is not None:
            self.spent_usd += cost
        if self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd:
            raise CostLimitExhausted(
                f"cost limit ${self.max_cost_usd:g} reached at step {step}: "
                f"${self.spent_usd:.6g} spent on model calls"
            )


@dataclass
class AgentResult:
    declared_complete: bool
    termination: Termination  # submitted, budget, cost_limit, context_exhausted, storage_limit, agent_error
    steps: int
    message: str | None = None


@dataclass
class AgentContext:
    request: str
    env: Environment
    task: Task
    budget: Budget
    trajectory: Trajectory
    artifacts_dir: Path
    interactions: list[Interaction] = field(default_factory=list)

    def record_keys(self, keys: str, wait: float | None, screen: str | None = None) -> None:
        """A terminal harness sent `keys` and waited `wait` seconds (the screen after it, digested)."""
        self.interactions.append(
            Interaction(
                kind="keys",
                input=keys,
                wait=wait,
                output_sha256=output_digest(screen) if screen is not None else None,
            )
        )

    def shell(
        self,
        command: str,
        *,
        message: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        new_step: bool = True,
    ) -> ExecResult:
        """Run one command as one agent step (or as one more action of the last step)."""
        if (
            new_step
            and self.budget.max_steps is not None
            and len(self.trajectory.steps) >= self.budget.max_steps
        ):
            raise BudgetExhausted(f"step limit {self.budget.max_steps} reached")
        remaining = self.budget.remaining_s
        if remaining <= 0:
            raise BudgetExhausted(f"wall-time budget {self.budget.wall_s:g}s used up")
        limit = min(timeout, remaining) if timeout else remaining
        started = time.time()
        try:
            res = self.env.execute(command, timeout=limit, env=env)
        except InfraError:
            raise
        except Exception as exc:  # the backend broke, not the agent
            raise HarnessError(f"running an agent command: {type(exc).__name__}: {exc}") from exc
        action = Action(
            command=command,
            output=clip(res.output),
            exit_code=res.exit_code,
            duration_s=round(res.duration_s, 4),
        )
        self.interactions.append(
            Interaction(
                kind="command",
                input=command,
                timeout=round(limit, 3),
                exit_status=res.exit_code,
                output_sha256=output_digest(res.output),
                duration_s=round(res.duration_s, 4),
            )
        )
        if new_step or not self.trajectory.steps:
            self.trajectory.add_step(
                message=message, actions=[action], started_at=started, duration_s=round(res.duration_s, 4)
            )
        else:
            self.trajectory.steps[-1].actions.append(action)
        if res.timed_out and limit >= remaining:
            raise BudgetExhausted(f"wall-time budget {self.budget.wall_s:g}s used up during: {command[:80]}")
        if res.limit:  # a limit the task declares stopped the agent (the runner records it as that limit)
            raise BudgetExhausted(res.limit)
        return res


class Agent(ABC):
    """An agent under evaluation (or a reference agent such as nop/oracle)."""

    harness: ClassVar[str] = "builtin"
    option: str = "--agent"  # the option the name came from (--agent, --predecessor): errors say it
    timeout_sec: float | None = None  # budget overrides from the agent's config
    step_limit: int | None = None
    max_case_cost: float | None = None  # USD; only harnesses that call a model themselves enforce it

    def __init__(self, name: str):
        self.name = name

    def check(self) -> None:
        """Raise InputError before the first case when the agent cannot run (missing key, package)."""

    def check_spend(self, option: str | None) -> None:
        """Raise InputError before the first case when a cost limit (its own max_case_cost, or the
        run's `option`) needs prices this agent's calls do not have. Agents that call no model
        themselves have nothing to check."""

    def unsupported(self, task: Task) -> str | None:
        """Why this agent cannot work on `task` (a usage error before any case), None when it can."""
        return None

    @abstractmethod
    def run(self, ctx: AgentContext) -> AgentResult:
        """Work on ctx.request in ctx.env until done or out of budget."""
