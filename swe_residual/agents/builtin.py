"""Reference agents: `nop` declares completion at once; `oracle` applies the reference solution.

The oracle works the way Harbor's does - the task's solution/ uploaded to /solution and
`bash /solution/solve.sh` run in /app - after discarding any inherited work (git reset + clean),
and commits what solve.sh left uncommitted, as a user finishing the task would. On a machine task
there is no repository to reset or commit: solve.sh runs on the machine as it is (its reference
solution must cope with whatever a residual state left, as a human's would).
"""

from __future__ import annotations

from swe_residual.agents.base import Agent, AgentContext, AgentResult
from swe_residual.backends.base import SOLUTION_DIR, Environment, ExecResult
from swe_residual.tasks import Task

DISCARD = "git reset -q --hard HEAD && git clean -q -fdx"
COMMIT = 'git add -A && git commit -q --no-verify -m "Solve task" || true'


def solve_command(env: Environment) -> str:
    return f'bash "{env.path(SOLUTION_DIR)}/solve.sh"'


def apply_reference_solution(env: Environment, task: Task, *, timeout: float) -> ExecResult:
    """The reference solution on a clean environment (used to check a task's verifier)."""
    env.copy_in(task.solution_dir, SOLUTION_DIR)
    res = env.execute(solve_command(env), timeout=timeout, env={"SOLUTION_DIR": env.path(SOLUTION_DIR)})
    if task.kind != "machine":
        env.execute(COMMIT, timeout=timeout)
    return res


class NopAgent(Agent):
    def run(self, ctx: AgentContext) -> AgentResult:
        ctx.trajectory.add_step(message="Nothing to do; submitting.")
        ctx.trajectory.exit_status = "submitted"
        return AgentResult(declared_complete=True, termination="submitted", steps=1)


class OracleAgent(Agent):
    def run(self, ctx: AgentContext) -> AgentResult:
        machine = ctx.task.kind == "machine"
        if not machine:
            ctx.shell(DISCARD, message="Discard inherited work.")
        ctx.env.copy_in(ctx.task.solution_dir, SOLUTION_DIR)
        res = ctx.shell(
            solve_command(ctx.env),
            message="Apply the reference solution.",
            env={"SOLUTION_DIR": ctx.env.path(SOLUTION_DIR)},
        )
        if res.exit_code != 0:
            ctx.trajectory.exit_status = "agent_error"
            return AgentResult(
                declared_complete=False,
                termination="agent_error",
                steps=len(ctx.trajectory.steps),
                message=f"solve.sh exited {res.exit_code}: {res.output[-300:]}",
            )
        if not machine:
            ctx.shell(COMMIT, message="Commit the work.")
        ctx.trajectory.exit_status = "submitted"
        return AgentResult(declared_complete=True, termination="submitted", steps=len(ctx.trajectory.steps))
