"""Stage IV: rebuild every kept candidate from the clean state and validate it.

A candidate becomes a state only if its patch applies at the task's base commit (else
rebuild_failed), the rebuilt environment is usable - it starts and runs a command, and the
verifier runs (else env_unusable) - and the original verifier gives it a valid 0 with failing
tests (else no_valid_verdict, or no_longer_failing when it passes). Included states are added to
the states file with their patch beside it and the failing tests just measured.

A machine-track candidate is rebuilt from its interactions: replayed twice into fresh task
containers and snapshotted (docs/machine-track.md). A replay that does not reproduce the
recording, or two replays that differ, is rebuild_failed; a restore whose processes do not come
back is env_unusable. The snapshot method used is kept in the state's provenance.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from swe_residual.agents import AgentRegistry
from swe_residual.backends.base import Backend
from swe_residual.errors import InfraError, InputError, PatchApplyError, ReplayError
from swe_residual.patches import parse_patch
from swe_residual.residualize.filter import candidates
from swe_residual.residualize.records import BuildOutcome, PredecessorRun
from swe_residual.residualize.status import write_construction
from swe_residual.residualize.workdir import STAGE4, WorkDir
from swe_residual.results import RESULTS
from swe_residual.run.plan import Plan, Track
from swe_residual.run.runner import Case
from swe_residual.run.session import RunSession, state_patch_problems
from swe_residual.safe_read import read_yaml
from swe_residual.states import (
    Artifact,
    InitialVerdict,
    LoadedState,
    Predecessor,
    ResidualState,
    load_states,
    sha256_file,
)
from swe_residual.tasks import Task

USABLE_PROBE = 'cd "$SWE_APP" && git status --porcelain >/dev/null && echo swe-residual-usable'
PENDING_TESTS = ["(not validated yet)"]


def state_id(run: PredecessorRun) -> str:
    name = run.id if run.task in run.id else f"{run.task}--{run.id}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:120]


def _loaded(run: PredecessorRun, wd: WorkDir, states_path: Path, machine: bool = False) -> LoadedState:
    """The candidate as a state entry, its patch (or interactions) copied beside the states file."""
    sid = state_id(run)
    rel = Path("states") / run.track / run.task / (f"{sid}.interactions.jsonl" if machine else f"{sid}.patch")
    dest = states_path.parent / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(wd.interactions_bytes(run) if machine else wd.patch_bytes(run))
    traj_rel, traj_dest = None, None
    source = wd.file(run.trajectory)
    if source is not None and source.is_file():     # what --handoff-view shows the continuation
        traj_rel = rel.with_name(f"{sid}.trajectory.json")
        traj_dest = states_path.parent / traj_rel
        shutil.copyfile(source, traj_dest)
    traj = str(traj_rel) if traj_rel else None
    artifact = (Artifact(interactions=str(rel), sha256=sha256_file(dest), trajectory=traj) if machine
                else Artifact(patch=str(rel), sha256=sha256_file(dest), trajectory=traj))
    entry = ResidualState(
        id=sid, track=run.track, task=run.task, predecessor=Predecessor(**run.predecessor.model_dump()),
        artifact=artifact,
        provenance={"source_run": run.id, **{f"source_{k}": v for k, v in run.source.items()},
                    "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")},
        initial_verdict=InitialVerdict(failing_tests=PENDING_TESTS))
    return LoadedState(entry, dest, traj_dest)


def _usable(backend: Backend, task: Task, state: LoadedState) -> str | None:
    """Why the rebuilt state cannot be used (None when it starts and runs a command)."""
    env = backend.materialize(task, state)
    try:
        probe = "echo swe-residual-usable" if task.kind == "machine" else USABLE_PROBE
        res = env.execute(probe, timeout=120, env={"SWE_APP": env.app_dir})
        if res.exit_code != 0 or "swe-residual-usable" not in res.output:
            return f"a command in the rebuilt environment failed (exit {res.exit_code}): {res.output.strip()[-300:]}"
        return None
    finally:
        env.close()


def validate_candidate(session: RunSession, case: Case, run: PredecessorRun) -> BuildOutcome | None:
    """The Stage IV outcome of one candidate; None when the harness itself failed (try again later)."""
    state = case.state
    out = lambda result, detail="", **kw: BuildOutcome(candidate=run.id, result=result, detail=detail[:1000], **kw)
    try:
        session.backend.prepare(case.task, [state])
        if state.kind == "machine":
            snap = session.backend.snapshot(case.task, state)
            state.entry.provenance = {**(state.entry.provenance or {}), "snapshot": snap.method}
            if not snap.deterministic:
                return out("rebuild_failed", "two replays of its interactions differ: " + "; ".join(snap.differences))
        problem = _usable(session.backend, case.task, state)
    except (PatchApplyError, ReplayError) as exc:
        return out("rebuild_failed", str(exc))
    except InfraError as exc:
        return out("env_unusable", f"the rebuilt state does not start: {exc}")
    if problem:
        return out("env_unusable", problem)
    try:
        record = session.run(case, grade_uncommitted=True)
    except InfraError as exc:
        rec = getattr(exc, "record", None)
        if rec is not None and rec.rule == "infra_verifier":
            return out("no_valid_verdict", f"the verifier gave no valid verdict: {exc}")
        print(f"  {run.id}: harness failure, not decided (run build again): {exc}", flush=True)
        return None
    failing = sorted(t for t, s in record.tests.items() if s != "passed")
    if record.outcome == 1:
        return out("no_longer_failing", "every hidden test passes on the rebuilt state")
    if record.rule != "verdict" or not failing:
        return out("no_valid_verdict", f"outcome 0 without failing hidden tests (rule {record.rule}"
                   + (f"; {record.verdict_note}" if record.verdict_note else "") + ")")
    if set(record.missing_tests) >= set(record.tests):
        return out("no_valid_verdict", "the verifier wrote no per-test report on the rebuilt state (only a reward "
                   "of 0): no failing tests to record")
    return out("included", f"{len(failing)} of {len(record.tests)} hidden tests fail", state=state.id,
               failing_tests=failing,
               # without a graded test list (Terminal-Bench), the passing ones make the pass rate countable
               passing_tests=sorted(t for t, s in record.tests.items() if s == "passed")
               if case.task.grading is None else [])


def write_states(states_path: Path, included: list[tuple[LoadedState, BuildOutcome]]) -> None:
    """Add (or replace, by id) the included states in the states file, keeping its other entries."""
    raw = read_yaml(states_path, "states file") if states_path.is_file() else None
    raw = raw if isinstance(raw, dict) else {}
    entries = [e for e in raw.get("states") or [] if isinstance(e, dict)]
    ids = {s.id for s, _ in included}
    entries = [e for e in entries if e.get("id") not in ids]
    for s, outcome in included:
        entry = s.entry.model_copy(update={"initial_verdict": InitialVerdict(failing_tests=outcome.failing_tests,
                                                                             passing_tests=outcome.passing_tests)})
        dumped = entry.model_dump(mode="json", exclude_none=True)
        if not dumped["initial_verdict"].get("passing_tests"):
            dumped["initial_verdict"].pop("passing_tests", None)    # repository states: as before
        entries.append(dumped)
    raw["states"] = entries
    tmp = states_path.with_name(f".{states_path.name}.tmp")
    tmp.write_text("# Residual States (swe-residual states-schema prints the schema); paths are relative to this "
                   "file.\n" + yaml.safe_dump(raw, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8")
    tmp.replace(states_path)


def build_track(wd: WorkDir, track: str, runs: list[PredecessorRun], args: argparse.Namespace) -> dict[str, int]:
    from swe_residual.run.plan import default_backend

    tasks = wd.tasks(track, args.tasks_dir)
    states_path = Path(args.states).resolve()
    counts: dict[str, int] = {}

    def record(outcome: BuildOutcome) -> None:
        wd.append(STAGE4, outcome)
        counts[outcome.result] = counts.get(outcome.result, 0) + 1
        print(f"  {outcome.candidate}: {outcome.result}" + (f" - {outcome.detail}" if outcome.detail else ""),
              flush=True)

    loaded: dict[str, tuple[PredecessorRun, LoadedState]] = {}
    for run in runs:
        if run.task not in tasks:
            raise InputError(f"candidate {run.id}: task {run.task!r} is not in the tasks dir of track {track!r}")
        machine = tasks[run.task].kind == "machine"
        if machine and not wd.interactions_bytes(run).strip():
            record(BuildOutcome(candidate=run.id, result="rebuild_failed",
                                detail="no interactions to rebuild the state from"))
            continue
        if not machine and not parse_patch(wd.patch_bytes(run)):
            record(BuildOutcome(candidate=run.id, result="rebuild_failed", detail="no patch to rebuild the state from"))
            continue
        loaded[run.id] = (run, _loaded(run, wd, states_path, machine))
    problems = state_patch_problems([s for _, s in loaded.values()], lambda s: tasks[s.task])
    for run_id, (run, s) in list(loaded.items()):
        if s.id in problems:
            record(BuildOutcome(candidate=run_id, result="rebuild_failed", detail=problems[s.id]))
            del loaded[run_id]
    if not loaded:
        return counts
    cases = {run_id: Case("nop", tasks[run.task], "residual", s) for run_id, (run, s) in loaded.items()}
    plan = Plan(tracks={track: Track(track, None, tasks)}, states=[s for _, s in loaded.values()],
                cases=list(cases.values()), registry=AgentRegistry())
    n = len(list((wd.path / "stage4-runs").glob("build-*"))) + 1
    run_dir = wd.path / "stage4-runs" / f"build-{n}"
    backend = args.backend or default_backend(track)
    session = RunSession.open(plan, run_dir, resume=(run_dir / RESULTS).is_file(), backend=backend,
                              infra_retries=1, run_id=f"residualize-{run_dir.name}")
    print(f"stage IV: rebuilding {len(cases)} candidates of track {track} on the {backend} backend "
          f"(runs: {run_dir})", flush=True)
    included: list[tuple[LoadedState, BuildOutcome]] = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {run_id: pool.submit(validate_candidate, session, cases[run_id], loaded[run_id][0])
                       for run_id in cases}
            for run_id, fut in futures.items():
                outcome = fut.result()
                if outcome is None:
                    continue
                if outcome.result == "included":
                    included.append((loaded[run_id][1], outcome))
                else:
                    dropped = loaded[run_id][1]
                    dropped.artifact_path.unlink(missing_ok=True)
                    if dropped.trajectory_path is not None:
                        dropped.trajectory_path.unlink(missing_ok=True)
                record(outcome)
    finally:
        session.close()
    if included:
        write_states(states_path, included)
        load_states(states_path, {track: tasks}, tracks={track})   # what we wrote loads back
    return counts


def build_command(wd: WorkDir, args: argparse.Namespace) -> int:
    from swe_residual.residualize.review import review_outcomes

    outcomes, built = review_outcomes(wd), wd.builds()
    kept = [r for r in candidates(wd) if outcomes.get(r.id) == "kept" and r.id not in built
            and (args.track is None or r.track == args.track)]
    if not kept:
        pending = sum(1 for v in outcomes.values() if v == "pending")
        print("stage IV: nothing to build" + (f" ({pending} candidates still wait for two reviews)" if pending else ""))
        write_construction(wd)
        return 0
    by_track: dict[str, list[PredecessorRun]] = {}
    for r in kept:
        by_track.setdefault(r.track, []).append(r)
    for track, runs in by_track.items():
        counts = build_track(wd, track, runs, args)
        print(f"track {track}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    write_construction(wd)
    print(f"states file: {Path(args.states).resolve()}")
    return 0
