"""Handoff views (--handoff-view summary|trace): a residual start whose request also shows what the
predecessor did, beyond the paper's blind protocol. Reported as its own start condition
(residual+summary, residual+trace), so informed numbers are never mixed with blind ones.

summary: a deterministic digest of the predecessor's trajectory (steps, files touched, commands in
order, first and final message) - the notes a colleague leaves; trace: the whole trajectory, step by
step, bounded. Both come from the state's artifact.trajectory.
"""

from __future__ import annotations

from swe_residual.digest import digest_lines, trace_text
from swe_residual.errors import InputError
from swe_residual.states import LoadedState
from swe_residual.trajectory import Trajectory

TRACE_LIMIT = 100_000  # characters of a trace view; the middle is elided past it
HEADER = (
    "## Handoff from the previous attempt\n\n"
    "Another agent worked on this request in this repository before you and declared it complete; "
    "its work is in the repository as it is now, uncommitted. "
)


def read_trajectory(state: LoadedState) -> Trajectory:
    if state.trajectory_path is None:
        raise InputError(
            f"state {state.id}: no artifact.trajectory: --handoff-view needs the predecessor's "
            "trajectory (states built by `swe-residual residualize build` carry it)"
        )
    try:
        return Trajectory.read(state.trajectory_path)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"state {state.id}: artifact.trajectory {state.trajectory_path}: not a readable "
            f"swe-residual-trajectory-1 file ({str(exc).splitlines()[0][:200]})"
        ) from None


def handoff_notes(state: LoadedState, view: str) -> str:
    traj = read_trajectory(state)
    final = traj.submission or next((s.message for s in reversed(traj.steps) if s.message), None)
    if view == "summary":
        body = "\n".join(digest_lines(traj, state.changed_files, final, len(traj.steps)))
        return HEADER + "A digest of its session:\n\n" + body + "\n"
    if view == "trace":
        return HEADER + "Its session, step by step:\n\n" + trace_text(traj, final, TRACE_LIMIT) + "\n"
    raise InputError(f"--handoff-view: unknown view {view!r} (summary or trace)")
