"""What a predecessor's trajectory did, in plain text: for review packets (Stage III) and for the
handoff views (--handoff-view summary|trace) that show a continuation its predecessor's work.

Trajectories come from environments: every string is clipped here and escaped by whoever shows it.
"""

from __future__ import annotations

from swe_residual.trajectory import Trajectory

MAX_COMMAND_CHARS = 300
MAX_COMMANDS = 80  # first and last half of them when there are more
MAX_MESSAGE_CHARS = 4000


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more characters]"


def one_line(text: str, limit: int = MAX_COMMAND_CHARS) -> str:
    lines = text.strip().splitlines() or [""]
    first = lines[0] + (f" ... [+{len(lines) - 1} lines]" if len(lines) > 1 else "")
    return clip(first, limit)


def commands_of(traj: Trajectory | None) -> list[str]:
    if traj is None:
        return []
    return [f"[step {s.index}] {one_line(a.command)}" for s in traj.steps for a in s.actions]


def elide(items: list[str], keep: int = MAX_COMMANDS) -> list[str]:
    if len(items) <= keep:
        return items
    half = keep // 2
    return items[:half] + [f"... {len(items) - 2 * half} more commands ..."] + items[-half:]


def digest_lines(
    traj: Trajectory | None,
    files: list[str],
    final: str | None,
    steps: int | None,
    why_not: str | None = None,
) -> list[str]:
    """Steps, files touched, commands in order (elided past MAX_COMMANDS), first and final message."""
    commands = commands_of(traj)
    first = next((s.message for s in traj.steps if s.message and s.message.strip()), None) if traj else None
    lines = [f"Trajectory: {why_not}."] if why_not else []
    lines.append(
        f"Steps: {steps if steps is not None else 'unknown'}"
        + (f" (exit status {traj.exit_status})" if traj is not None and traj.exit_status else "")
    )
    lines.append(
        f"Files touched ({len(files)}): "
        + (", ".join(files[:50]) or "none")
        + (f", ... {len(files) - 50} more" if len(files) > 50 else "")
    )
    lines.append(f"Commands run, in order ({len(commands)}):")
    lines += [f"  {c}" for c in elide(commands)] or ["  none"]
    if first:
        lines.append("First message: " + clip(first.strip(), MAX_MESSAGE_CHARS))
    lines.append("Final message: " + (clip(final.strip(), MAX_MESSAGE_CHARS) if final else "none"))
    return lines


def trace_text(
    traj: Trajectory | None,
    final: str | None,
    limit: int,
    *,
    why_not: str | None = None,
    message_chars: int = 1500,
    command_chars: int = 500,
    output_chars: int = 300,
) -> str:
    """The trajectory step by step (messages, commands, exit codes, outputs), its middle elided
    past `limit` characters."""
    if traj is None:
        return f"(no trajectory: {why_not})\nFinal message: {final or 'none'}"
    parts = []
    for s in traj.steps:
        part = [f"Step {s.index}:"]
        if s.message:
            part.append("Message: " + clip(s.message.strip(), message_chars))
        for a in s.actions:
            part.append(f"$ {clip(a.command.strip(), command_chars)}")
            if a.exit_code is not None:
                part.append(f"(exit code {a.exit_code})")
            if a.output:
                part.append("Output: " + clip(a.output.strip(), output_chars))
        parts.append("\n".join(part))
    parts.append(f"Final message: {final or traj.submission or 'none'}")
    text = "\n\n".join(parts)
    if len(text) > limit:
        half = limit // 2
        text = (
            text[:half]
            + f"\n\n[... {len(text) - 2 * half} characters of the middle elided ...]\n\n"
            + text[-half:]
        )
    return text
