"""`swe-residual validate`: prove that every Residual State of a track is a valid benchmark state.

For each state (Stage IV, docs/protocol.md): the oracle succeeds from clean and from the state,
nop fails it with a valid verdict, the state passes at least half of the task's hidden tests, and
the failing set recorded in states.yaml matches a fresh verification. Cases run through the same
run session as a suite run.

A machine state is checked first as a machine (docs/machine-track.md): its snapshot builds (the
interactions replay), two replays agree (deterministic), a restored instance has every recorded
process running and answering on its ports and every declared live process, and a command runs
in it. Snapshot method, build and restore times are reported per state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.errors import InfraError
from swe_residual.progress import Progress
from swe_residual.results import Record
from swe_residual.run.attempt import Case
from swe_residual.run.session import RunSession
from swe_residual.tracks import load_track_config, suite_dir


@dataclass
class StateCheck:
    state: str
    problems: list[str] = field(default_factory=list)
    pass_fraction: float | None = None
    passed: tuple[int, int] | None = None  # (hidden tests the state passes, graded)
    machine: dict | None = None  # machine states: snapshot method, times, processes

    @property
    def ok(self) -> bool:
        return not self.problems

    def passes(self) -> str:
        """ "350 of 351, 99.7%": a share is never rounded up to 100% nor down to 0%."""
        if self.passed is None:
            return "n/a"
        part, whole = self.passed
        pct = 100 * part / whole
        if 0 < part < whole:
            pct = min(max(math.floor(pct * 10) / 10, 0.1), 99.9)
        return f"{part} of {whole}, {pct:.1f}%"


def solve_log_tail(record: Record, run_dir: Path, lines: int = 5) -> str:
    """The last lines solve.sh printed in the oracle's run (why a reference solution failed)."""
    path = record.artifacts.get("trajectory")
    try:
        steps = json.loads((run_dir / path).read_text(encoding="utf-8")).get("steps", []) if path else []
    except (OSError, ValueError):
        return ""
    for step in steps:
        for action in step.get("actions") or []:
            if "solve.sh" in (action.get("command") or ""):
                out = [ln for ln in (action.get("output") or "").splitlines() if ln.strip()]
                return " | ".join(out[-lines:]) or "(solve.sh printed nothing)"
    return ""


def _run(session: RunSession, case: Case) -> Record | str:
    # nop's final state is the state itself: grade its (uncommitted) content, not only commits
    try:
        return session.run(case, grade_uncommitted=case.agent == "nop")
    except InfraError as exc:
        return f"{case.id}: infra error: {exc}"


USABLE = "echo swe-residual-usable"


def machine_check(session: RunSession, state) -> tuple[dict | None, list[str]]:
    """Snapshot and restore one machine state: (facts, problems), each problem one line."""
    case = next(c for c in session.plan.cases if c.state is not None and c.state.id == state.id)
    backend = session.backend
    if not backend.supports_machine_states:
        return None, [f"the {backend.name} backend cannot hold machine states; use --backend docker"]
    try:
        snap = backend.snapshot(case.task, state)
    except InfraError as exc:
        return None, [f"the state could not be rebuilt: {exc}"]
    facts = {
        "method": snap.method,
        "snapshot_s": snap.snapshot_s,
        "replay_s": snap.replay.duration_s,
        "processes": len(snap.processes),
        "stages": len(snap.stages),
        "deterministic": snap.deterministic,
        "criu_probe": snap.criu_probe,
    }
    problems = []
    if not snap.deterministic:
        problems.append(
            "two replays differ (non-deterministic state; declare volatile_paths if they may): "
            + "; ".join(snap.differences[:3])
        )
    try:
        env = backend.materialize(case.task, state)
    except InfraError as exc:
        return facts, problems + [str(exc)]
    try:
        facts["restore_s"] = (env.report or {}).get("restore_s")
        res = env.execute(USABLE, timeout=60)
        if res.exit_code != 0 or "swe-residual-usable" not in res.output:
            problems.append(f"a command does not run in the restored state (exit {res.exit_code})")
    finally:
        env.close()
    return facts, problems


def _machine_line(facts: dict) -> str:
    restore = facts.get("restore_s")
    return (
        f"snapshot {facts['method']}: built in {facts['snapshot_s']:.1f} s (replay {facts['replay_s']:.1f} s), "
        f"restore {'n/a' if restore is None else f'{restore:.1f} s'}, {facts['processes']} live process(es)"
        + (f" in {facts['stages']} stages" if facts["stages"] else "")
        + (", deterministic" if facts["deterministic"] else "")
    )


def validate_track(
    session: RunSession, jobs: int = 2, log: Callable[[str], None] | None = None
) -> list[StateCheck]:
    """Check every state of the plan (its oracle and nop cases, machine checks) with `jobs` at once;
    one line per state through `log` (default: printed above a progress bar of the states)."""
    with Progress(len(session.plan.states), "states", label="validate") as progress:
        return _validate(session, jobs, log or progress.note, progress)


def _validate(
    session: RunSession, jobs: int, log: Callable[[str], None], progress: Progress
) -> list[StateCheck]:
    plan = session.plan
    min_pass = {
        name: load_track_config(suite_dir(name)).min_state_pass_fraction
        for name in {s.track for s in plan.states}
    }
    clean_cases = {c.task.id: c for c in plan.cases if c.agent == "oracle" and c.start == "clean"}
    by_state: dict[str, dict[str, Case]] = {}
    for c in plan.cases:
        if c.state is not None:
            by_state.setdefault(c.state.id, {})[c.agent] = c
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        machines = {s.id: pool.submit(machine_check, session, s) for s in plan.states if s.kind == "machine"}
        clean = {t: pool.submit(_run, session, c) for t, c in clean_cases.items()}
        runs = [
            (
                s,
                pool.submit(_run, session, by_state[s.id]["oracle"]),
                pool.submit(_run, session, by_state[s.id]["nop"]),
            )
            for s in plan.states
            if s.id in by_state
        ]
        progress.total = len(runs)
        checks: list[StateCheck] = []
        for s, oracle_f, nop_f in runs:
            check = StateCheck(s.id)
            if s.id in machines:
                check.machine, problems = machines[s.id].result()
                check.problems.extend(problems)
            from_clean = clean[s.task].result()
            o: Record | str | None = oracle_f.result()
            n: Record | str | None = nop_f.result()
            if s.id in machines and problems:
                o = o if not isinstance(o, str) else None  # the restore problem is said once
                n = n if not isinstance(n, str) else None
            for label, r in (("oracle from clean", from_clean), ("oracle from state", o)):
                if r is None:
                    continue
                if isinstance(r, str):
                    check.problems.append(r)
                elif r.outcome != 1:
                    failing = [t for t, st in r.tests.items() if st != "passed"]
                    tail = solve_log_tail(r, session.run_dir)
                    check.problems.append(
                        f"{label} failed: {', '.join(failing[:3]) or r.termination}"
                        + (f"; solve.sh output ends: {tail}" if tail else "")
                    )
            if isinstance(n, str):
                check.problems.append(n)
            elif n is not None:
                failing = sorted(t for t, st in n.tests.items() if st != "passed")
                total = len(n.tests)
                check.pass_fraction = (total - len(failing)) / total if total else None
                check.passed = (total - len(failing), total) if total else None
                if n.outcome != 0:
                    check.problems.append("the state passes every hidden test (nop succeeds from it)")
                if check.pass_fraction is not None and check.pass_fraction < min_pass[s.track]:
                    check.problems.append(
                        f"the state passes only {check.passes()} hidden tests "
                        f"(needs >= {100 * min_pass[s.track]:g}%: min_state_pass_fraction of track {s.track})"
                    )
                recorded = s.initial_verdict.failing_tests
                passing = sorted(t for t, st in n.tests.items() if st == "passed")
                if s.initial_verdict.passing_tests and passing != s.initial_verdict.passing_tests:
                    check.problems.append(
                        f"recorded passing tests differ from a fresh verification: now "
                        f"{passing}, recorded {s.initial_verdict.passing_tests}"
                    )
                if failing != recorded:
                    extra = sorted(set(failing) - set(recorded))
                    gone = sorted(set(recorded) - set(failing))
                    check.problems.append(
                        f"recorded failing tests differ from a fresh verification: "
                        f"now failing but not recorded {extra}, recorded but passing {gone}"
                    )
            progress.advance(**({"ok": 1} if check.ok else {"failed": 1}))
            status = "ok  " if check.ok else "FAIL"
            log(f"{status} {s.id}  (hidden tests passing on the state: {check.passes()})")
            if check.machine:
                log(f"     {_machine_line(check.machine)}")
            for p in check.problems:
                log(f"     - {p}")
            checks.append(check)
    return checks
