"""Replaying a machine state's interactions into a fresh task environment (Stage IV).

Commands run one after another through Environment.execute under their recorded time limit;
keystrokes go to a terminal (swe_residual/backends/machine/terminal.py) followed by their recorded wait. A
command whose exit status differs from the recorded one, or that runs over its limit, means the
replay did not reproduce the predecessor's run: ReplayError (Stage IV's rebuild_failed), naming
the interaction. Output digests are only compared and counted: output often carries times and
pids that differ from run to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from swe_residual.backends.base import Environment
from swe_residual.backends.machine.snapshot import ReplaySummary
from swe_residual.backends.machine.terminal import TmuxTerminal
from swe_residual.errors import ReplayError
from swe_residual.interactions import Interaction, output_digest

DEFAULT_COMMAND_TIMEOUT_S = 600.0


def replay(
    env: Environment,
    interactions: list[Interaction],
    *,
    label: str,
    after: Callable[[int], None] | None = None,
) -> ReplaySummary:
    """Replay every interaction into env; the summary, or ReplayError on the first divergence.
    `after(n)` is called once the n-th interaction (1-based) is done."""
    started = time.monotonic()
    summary = ReplaySummary(interactions=len(interactions))
    terminal: TmuxTerminal | None = None
    for n, it in enumerate(interactions, 1):
        where = f"{label}: interaction {n} ({it.kind} {it.input.strip()[:60]!r})"
        if it.kind == "command":
            summary.commands += 1
            res = env.execute(it.input, timeout=it.timeout or DEFAULT_COMMAND_TIMEOUT_S)
            if res.timed_out:
                raise ReplayError(
                    f"{where} ran over its {it.timeout or DEFAULT_COMMAND_TIMEOUT_S:g}s limit on replay"
                )
            if it.exit_status is not None and res.exit_code != it.exit_status:
                tail = (res.output.strip().splitlines() or ["no output"])[-1][:160]
                raise ReplayError(
                    f"{where} exited {res.exit_code} on replay, {it.exit_status} when recorded "
                    f"(last output line: {tail})"
                )
            output = res.output
        else:
            summary.keys += 1
            if terminal is None:
                terminal = TmuxTerminal(env, session="replay")
            terminal.send(it.input)
            terminal.wait(it.wait)
            output = terminal.screen()
        if it.output_sha256 is not None and output_digest(output) != it.output_sha256:
            summary.output_mismatches += 1
        if after is not None:
            after(n)
    if terminal is not None:
        # a predecessor declared done once its last command had returned; keystrokes only wait their
        # recorded duration, so what was still running (a build, an install) is let finish here
        terminal.settle(cap=DEFAULT_COMMAND_TIMEOUT_S)
    summary.duration_s = round(time.monotonic() - started, 3)
    return summary
