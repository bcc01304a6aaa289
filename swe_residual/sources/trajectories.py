"""Foreign trajectories into the normalized form (swe_residual/trajectory.py): mini-swe-agent's
own trajectory files, and ATIF through atif.py; import_trajectory recognizes which one it is."""

from __future__ import annotations

from swe_residual.sources.atif import from_atif, kind_of
from swe_residual.trajectory import Action, Trajectory, clip, litellm_usage

__all__ = ["from_atif", "from_mini_swe_agent", "import_trajectory"]


def from_mini_swe_agent(data: dict, agent: str = "mini-swe-agent") -> Trajectory:
    """Import a mini-swe-agent trajectory (format mini-swe-agent-1.x): one step per assistant turn.
    ValueError when what holds the run is of the wrong type (messages not a list); parts of a
    message of the wrong type are left out."""
    messages = data.get("messages", [])
    if not isinstance(messages, list):
        raise ValueError(f"messages: {kind_of(messages)} where a list belongs")
    traj = Trajectory(agent=agent, harness="mini-swe-agent")
    pending: list[Action] = []
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        extra = msg.get("extra") if isinstance(msg.get("extra"), dict) else {}
        if role == "assistant":
            content = msg.get("content")
            text = content if isinstance(content, str) else None
            actions = extra.get("actions") if isinstance(extra.get("actions"), list) else []
            pending = [
                Action(command=a["command"] if isinstance(a.get("command"), str) else "")
                for a in actions
                if isinstance(a, dict)
            ]
            stamp = extra.get("timestamp")
            stamp = float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None
            step = traj.add_step(message=text, actions=pending, started_at=stamp)
            step.prompt_tokens, step.completion_tokens, step.cost_usd = litellm_usage(extra)
        elif role in ("tool", "user") and traj.steps and "raw_output" in extra:
            for action in traj.steps[-1].actions:
                if action.exit_code is None and not action.output:
                    action.output = clip(str(extra.get("raw_output", "")))
                    rc = extra.get("returncode")
                    action.exit_code = rc if isinstance(rc, int) and not isinstance(rc, bool) else None
                    break
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    traj.exit_status = _str(info.get("exit_status"))
    traj.submission = _str(info.get("submission"))
    return traj


def import_trajectory(data: dict, agent: str) -> Trajectory | None:
    """Recognize and import an ATIF or mini-swe-agent trajectory; None if neither. ValueError
    naming the part when the trajectory is not an object or what holds its steps is of the wrong
    type (the caller names the file)."""
    if not isinstance(data, dict):
        raise ValueError(f"{kind_of(data)} where the trajectory object belongs")
    if str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return from_mini_swe_agent(data, agent)
    if str(data.get("schema_version", "")).startswith("ATIF"):
        return from_atif(data, agent)
    return None


def _str(value) -> str | None:
    return value if isinstance(value, str) and value else None
