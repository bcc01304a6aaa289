"""Foreign trajectories into the normalized form (swe_residual/trajectory.py): mini-swe-agent's
own trajectory files, and ATIF through atif.py; import_trajectory recognizes which one it is."""

from __future__ import annotations

from swe_residual.sources.atif import from_atif
from swe_residual.trajectory import Action, Trajectory, clip, litellm_usage

__all__ = ["from_atif", "from_mini_swe_agent", "import_trajectory"]


def from_mini_swe_agent(data: dict, agent: str = "mini-swe-agent") -> Trajectory:
    """Import a mini-swe-agent trajectory (format mini-swe-agent-1.x): one step per assistant turn."""
    traj = Trajectory(agent=agent, harness="mini-swe-agent")
    pending: list[Action] = []
    for msg in data.get("messages", []):
        role = msg.get("role")
        extra = msg.get("extra") or {}
        if role == "assistant":
            content = msg.get("content")
            text = content if isinstance(content, str) else None
            pending = [Action(command=a.get("command", "")) for a in extra.get("actions", [])]
            step = traj.add_step(message=text, actions=pending, started_at=extra.get("timestamp"))
            step.prompt_tokens, step.completion_tokens, step.cost_usd = litellm_usage(extra)
        elif role in ("tool", "user") and traj.steps and "raw_output" in extra:
            for action in traj.steps[-1].actions:
                if action.exit_code is None and not action.output:
                    action.output = clip(str(extra.get("raw_output", "")))
                    rc = extra.get("returncode")
                    action.exit_code = rc if isinstance(rc, int) else None
                    break
    info = data.get("info") or {}
    traj.exit_status = info.get("exit_status") or None
    traj.submission = info.get("submission") or None
    return traj


def import_trajectory(data: dict, agent: str) -> Trajectory | None:
    """Recognize and import an ATIF or mini-swe-agent trajectory; None if neither."""
    if str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return from_mini_swe_agent(data, agent)
    if str(data.get("schema_version", "")).startswith("ATIF"):
        return from_atif(data, agent)
    return None
