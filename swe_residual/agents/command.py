"""Agents that are shell commands: an inline CLI agent, and a replay of recorded commands.

The command agent runs inside the environment with the request in $TASK_INSTRUCTION and in
$TASK_DIR/instruction.md (outside the workspace); exit status 0 declares completion. If it writes
an ATIF or mini-swe-agent trajectory to $AGENT_TRAJECTORY, that trajectory becomes the run's, and
its terminal inputs become the run's interactions (what a machine state is rebuilt from) in place
of the one command that started the agent.
"""

from __future__ import annotations

from swe_residual.agents.base import Agent, AgentContext, AgentResult
from swe_residual.agents.config import AgentSpec
from swe_residual.errors import InputError
from swe_residual.interactions import from_atif, from_trajectory_actions
from swe_residual.safe_read import Unsafe, parse_json
from swe_residual.sources.trajectories import import_trajectory


class CommandAgent(Agent):
    harness = "command"

    def __init__(self, name: str, spec: AgentSpec):
        super().__init__(name)
        self.spec = spec
        self.timeout_sec, self.step_limit = spec.timeout_sec, spec.step_limit

    def run(self, ctx: AgentContext) -> AgentResult:
        traj_path = self.spec.trajectory_path or f"{ctx.env.tmp_dir}/agent-trajectory.json"
        env = {**self.spec.env, "TASK_INSTRUCTION": ctx.request, "AGENT_TRAJECTORY": traj_path}
        res = ctx.shell(self.spec.command or "", message="inline command agent", env=env)
        raw = ctx.env.read_file(traj_path)
        if raw:
            try:  # the agent's own file: depth-limited, every string made valid
                data = parse_json(raw, traj_path)
                imported = import_trajectory(data, self.name) if isinstance(data, dict) else None
            except (Unsafe, ValueError, TypeError):
                imported = None
            if imported is not None and imported.steps:
                ctx.trajectory.steps = imported.steps
                ctx.trajectory.exit_status = imported.exit_status
                ctx.trajectory.submission = imported.submission
                try:
                    inputs = (
                        from_atif(data)
                        if str(data.get("schema_version", "")).startswith("ATIF")
                        else from_trajectory_actions(imported.steps)
                    )
                except InputError:  # more inputs than an interactions file holds: keep ours
                    inputs = []
                if inputs:
                    ctx.interactions[:] = inputs
        declared = res.exit_code == 0
        ctx.trajectory.exit_status = ctx.trajectory.exit_status or (
            "submitted" if declared else "agent_error"
        )
        return AgentResult(
            declared_complete=declared,
            termination="submitted" if declared else "agent_error",
            steps=len(ctx.trajectory.steps),
            message=None if declared else f"agent command exited {res.exit_code}",
        )


class ReplayAgent(Agent):
    """Replays a recorded list of commands, one step each, then declares completion. A replay
    recorded per task (task_commands) gives up, without declaring completion, on other tasks."""

    harness = "replay"

    def __init__(self, name: str, spec: AgentSpec):
        super().__init__(name)
        self.spec = spec
        self.timeout_sec, self.step_limit = spec.timeout_sec, spec.step_limit

    def run(self, ctx: AgentContext) -> AgentResult:
        commands = self.spec.task_commands.get(ctx.task.id, self.spec.commands)
        if not commands:
            ctx.trajectory.exit_status = "agent_error"
            return AgentResult(
                declared_complete=False,
                termination="agent_error",
                steps=0,
                message=f"no recorded commands for task {ctx.task.id}",
            )
        for command in commands:
            ctx.shell(command, env=dict(self.spec.env) or None)
        if self.spec.final_message:
            ctx.trajectory.add_step(message=self.spec.final_message)
        ctx.trajectory.exit_status = "submitted"
        ctx.trajectory.submission = self.spec.final_message
        return AgentResult(declared_complete=True, termination="submitted", steps=len(ctx.trajectory.steps))
