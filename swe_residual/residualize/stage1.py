"""Stage I: predecessor runs from the clean state, through the same run session as a suite run.

Each attempt number gets its own run dir (WORKDIR/stage1-runs/<agent>-r<k>); every finished case
becomes one PredecessorRun line. Re-running the command skips runs already recorded, so an
interrupted Stage I resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swe_residual.agents import AgentRegistry
from swe_residual.agents.config import AgentSpec
from swe_residual.errors import InfraError, InputError
from swe_residual.residualize.records import PredecessorRun
from swe_residual.residualize.status import write_construction
from swe_residual.residualize.workdir import STAGE1, WorkDir
from swe_residual.results import RESULTS, Record
from swe_residual.run.attempt import Case
from swe_residual.run.plan import Plan, Track
from swe_residual.run.session import RunSession, SessionOptions
from swe_residual.sources.endings import model_family
from swe_residual.trajectory import Trajectory


def agent_family(spec: AgentSpec | None, harness: str) -> str:
    """The `model_family` a local predecessor is recorded under: the family of the model its config
    names, as sources.endings.model_family computes it for imported runs (so Table 8 puts local and
    imported runs of one model in one group), with `${VAR}`s expanded as the model agents expand
    them; without a model (or with a variable left unset) its harness."""
    model = os.path.expandvars(spec.model) if spec is not None and spec.model else ""
    if model.strip() and "$" not in model:
        return model_family(model)
    return harness


def _final_message(traj_path: Path | None) -> str | None:
    if traj_path is None or not traj_path.is_file():
        return None
    try:
        traj = Trajectory.read(traj_path)
    except (OSError, ValueError):
        return None
    if traj.submission:
        return traj.submission[:2000]
    messages = [s.message for s in traj.steps if s.message]
    return messages[-1][:2000] if messages else None


def to_run(
    wd: WorkDir, run_id: str, record: Record, run_dir: Path, predecessor: dict, source: str
) -> PredecessorRun:
    """A Stage I line from the record of a finished predecessor case (artifacts stay in its run dir)."""
    from swe_residual.tracks import track_kind

    art = {k: run_dir / v for k, v in record.artifacts.items()}
    patch, traj = art.get("patch"), art.get("trajectory")
    # a machine track's state is rebuilt from the run's terminal interactions, not a patch
    steps = art.get("interactions") if track_kind(record.track) == "machine" else None
    return PredecessorRun(
        id=run_id,
        track=record.track,
        task=record.task,
        predecessor=predecessor,
        source={
            "format": "run",
            "path": wd.rel(run_dir),
            "case": record.case_id,
            "attempt": str(record.attempt),
            "agent": source,
            "backend": record.backend or "",
        },
        termination=record.termination,
        declared_complete=record.declared_complete,
        verdict=record.verdict,
        outcome=record.outcome,
        tests=record.tests,
        rule=record.rule,
        error=record.error,
        patch=wd.rel(patch) if patch is not None and patch.is_file() else None,
        trajectory=wd.rel(traj) if traj is not None and traj.is_file() else None,
        interactions=wd.rel(steps) if steps is not None and steps.is_file() else None,
        final_message=_final_message(traj),
        steps=record.steps,
        duration_s=record.agent_duration_s,
    )


def run_predecessors(wd: WorkDir, args: argparse.Namespace) -> int:
    from swe_residual.run.plan import default_backend

    if args.attempts < 1:
        raise InputError("--attempts: must be at least 1")
    tasks = wd.tasks(args.track, args.tasks_dir)
    unknown = sorted(set(args.task) - set(tasks))
    if unknown:
        raise InputError(
            f"--task: unknown task(s) {', '.join(unknown)} in track {args.track!r} "
            f"(known: {', '.join(sorted(tasks))})"
        )
    registry = AgentRegistry([Path(p) for p in args.agent_config], option="--predecessor")
    agent = registry.get(args.predecessor)
    probe = Case(args.predecessor, next(iter(tasks.values())), "clean")
    predecessor = {
        "agent": probe.agent_label,
        "model_family": args.model_family or agent_family(registry.spec(args.predecessor), agent.harness),
    }
    backend = args.backend or default_backend(args.track)
    chosen = args.task or sorted(tasks)
    recorded = wd.runs()
    failures = 0
    for k in range(1, args.attempts + 1):
        ids = {t: f"{probe.agent_label}-{t}-r{k}" for t in chosen}
        cases = [Case(args.predecessor, tasks[t], "clean") for t in chosen if ids[t] not in recorded]
        if not cases:
            print(f"attempt {k}: every run already recorded")
            continue
        run_dir = wd.path / "stage1-runs" / f"{probe.agent_label}-r{k}"
        plan = Plan(
            tracks={args.track: Track(args.track, None, tasks)}, states=[], cases=cases, registry=registry
        )
        session = RunSession.open(
            plan,
            run_dir,
            SessionOptions(
                backend=backend, agent_timeout=args.agent_timeout, run_id=f"residualize-{run_dir.name}"
            ),
            resume=(run_dir / RESULTS).is_file(),
        )
        print(
            f"attempt {k}: {len(cases)} predecessor runs of {predecessor['agent']} on the {backend} backend "
            f"(run dir {run_dir})",
            flush=True,
        )

        def one(case: Case, session: RunSession = session) -> tuple[Case, Record | None, str | None]:
            try:
                return case, session.run(case), None
            except InfraError as exc:
                return case, getattr(exc, "record", None), str(exc)

        try:
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                for case, record, problem in pool.map(one, cases):
                    if record is None:
                        failures += 1
                        print(f"  {ids[case.task.id]}: not recorded: {problem}", flush=True)
                        continue
                    run = to_run(wd, ids[case.task.id], record, run_dir, predecessor, args.predecessor)
                    wd.append(STAGE1, run)
                    print(
                        f"  {run.id}: {run.termination}, declared complete {run.declared_complete}, "
                        f"verdict {run.verdict}" + (f" ({problem})" if problem else ""),
                        flush=True,
                    )
        finally:
            session.close()
    write_construction(wd)
    print(f"stage I: {len(wd.runs())} predecessor runs recorded in {wd.path / STAGE1}")
    return 1 if failures else 0
