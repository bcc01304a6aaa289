"""Stage I from real runs: `swe-residual residualize import` (docs/residualization.md, "Importing
predecessor runs").

Every predecessor run found in the SOURCES becomes one PredecessorRun line in stage1.jsonl, its
artifacts in runs/<id>/: final.patch (the run's patch, byte for byte), trajectory.json (our
normalized trajectory) and source/ (the files its verdict came from, kept as evidence). On a
machine track a run's state is rebuilt from its terminal interactions instead: interactions.jsonl,
taken from the ATIF trajectory (Terminus keystrokes and their durations) or the mini-swe-agent
commands of a Harbor trial; a Terminal-Bench 1 run's commands.txt (the keys its agent sent, in order) is its interactions.jsonl. Ids are
derived from the source itself, so importing the same run again adds nothing. A source that cannot
be read is one line naming the file; the others are still imported (exit status 1 if any failed).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.errors import InputError
from swe_residual.interactions import FILE_NAME as INTERACTIONS_FILE
from swe_residual.interactions import (
    Interaction,
    from_tb1_commands,
    from_trajectory_actions,
    write_interactions,
)
from swe_residual.residualize.records import PredecessorRun
from swe_residual.residualize.workdir import STAGE1, WorkDir
from swe_residual.safe_read import valid_text
from swe_residual.sources.atif import replayable
from swe_residual.sources.endings import (
    SUBMITTED,
    graded_tests,
    harbor_ending,
    model_family,
    msa_ending,
    outcome_of_reward,
    settle,
    tb1_ending,
)
from swe_residual.sources.harbor_trials import HarborTrial, read_trial, trial_dirs
from swe_residual.sources.swebench import (
    MsaTrajectory,
    Prediction,
    Sources,
    collect,
    sibling_trajectory,
)
from swe_residual.sources.tb1_runs import TB1Trial, read_tb1_trial, tb1_trial_dirs
from swe_residual.sources.trajectories import import_trajectory
from swe_residual.states import Predecessor
from swe_residual.tasks import Task
from swe_residual.trajectory import Trajectory

MAX_FINAL_MESSAGE = 4000


@dataclass
class Imported:
    """One converted run, before its files and line are written."""

    run: PredecessorRun
    patch: bytes | None
    trajectory: Trajectory | None
    evidence: dict[str, bytes] = field(default_factory=dict)  # relative path under runs/<id>/source/
    interactions: list[Interaction] | None = None  # machine tracks: what rebuilds the state


@dataclass
class Failed:
    reason: str  # one line naming the file


class Context:
    """What every conversion needs: the track's tasks (matched by name) and the model family rule."""

    def __init__(self, track: str, tasks: dict[str, Task], default_family: str | None):
        self.track, self.tasks, self.default_family = track, tasks, default_family
        self._names: dict[str, set[str]] = {}
        self._lower: dict[str, set[str]] = {}
        for tid, task in tasks.items():
            names = {tid, task.path.name}
            declared = (task.config.model_extra or {}).get("task")  # Harbor's [task] name = "org/name"
            if isinstance(declared, dict) and isinstance(declared.get("name"), str):
                names.add(declared["name"])
            for n in names:
                self._names.setdefault(n, set()).add(tid)
                self._lower.setdefault(n.lower(), set()).add(tid)

    def task(self, refs: list[str], where: str) -> Task:
        """The task a run names (its recorded task names in order; never a folder name)."""
        for table, fold in ((self._names, str), (self._lower, str.lower)):
            for ref in refs:
                for key in dict.fromkeys((ref, ref.rsplit("/", 1)[-1])):
                    hits = table.get(fold(key), set())
                    if len(hits) == 1:
                        return self.tasks[next(iter(hits))]
        named = refs[0] if refs else "(none)"
        raise InputError(
            f"{where}: task {named!r} is not a task of track {self.track!r} "
            f"({len(self.tasks)} tasks); pass --tasks-dir with the tasks these runs are of"
        )

    def family(self, model: str | None, where: str) -> str:
        """--model-family when given (it applies to every run imported), else from the model named."""
        if self.default_family:
            return self.default_family
        if model:
            return model_family(model)
        raise InputError(f"{where}: names no model; pass --model-family FAMILY")


# -- the verdict of a run ---------------------------------------------------------------------------


def steps_and_message(traj: Trajectory | None) -> tuple[int | None, str | None]:
    if traj is None:
        return None, None
    message = next((s.message for s in reversed(traj.steps) if s.message and s.message.strip()), None)
    return len(traj.steps), (message[-MAX_FINAL_MESSAGE:] if message else None)


def run_id(label: str, key: str) -> str:
    """A stable id: the source's own name (sanitized, bounded) and a hash of what identifies the run."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).lstrip("-._")[:60].rstrip("-._") or "run"
    return f"{safe}-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"


def error_text(*parts: str | None) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text[:2000] or None


def _first_line(text: str | None) -> str:
    return ((text or "").strip().splitlines() or [""])[0][:300]


# -- Harbor / Pier ----------------------------------------------------------------------------------


def harbor_runs(sources: list[str], ctx: Context) -> Iterator[Imported | Failed]:
    for src in sources:
        try:
            dirs = trial_dirs(Path(src))
        except InputError as exc:
            yield Failed(str(exc))
            continue
        for d in dirs:
            try:
                yield from_trial(read_trial(d), ctx)
            except InputError as exc:
                yield Failed(str(exc))


def from_trial(t: HarborTrial, ctx: Context) -> Imported:
    where = str(t.path / "result.json")
    if t.multi_step:
        raise InputError(f"{where}: step_results: multi-step trials are not supported")
    task = ctx.task(t.task_refs, f"{where}: task_name")
    if not t.agent_name:
        raise InputError(f"{where}: agent_info.name: missing")
    family = ctx.family(t.model_name, f"{where}: agent_info.model_info")
    traj, raw_traj = own_trajectory(t.trajectory, t.agent_name, t.path / (t.trajectory_file or ""), t.notes)
    ending = harbor_ending(t.exception_type)
    if ending is None or ending.rule == "infra_verifier":
        # the agent finished normally, unless its own record says it stopped otherwise
        own = msa_ending(t.agent_exit_status) if t.agent_exit_status is not None else None
        ending = own if own is not None and own.termination != "submitted" else ending or SUBMITTED
    outcome, bad_reward = outcome_of_reward(t.reward)
    if outcome is None and bad_reward is None:
        if t.rewards:
            bad_reward = f"verifier_result.rewards has no `reward` among {sorted(t.rewards)}"
        elif t.verifier_disabled:
            bad_reward = "the verifier was disabled for this trial"
        else:
            bad_reward = "result.json has no verifier_result reward"
    verdict, no_verdict = settle(
        ending, outcome, None if t.verifier_disabled else "infra_verifier", bad_reward
    )
    tests, tests_note = graded_tests(task, t.tests)
    exc = f"{t.exception_type}: {_first_line(t.exception_message)}" if t.exception_type else None
    steps, message = steps_and_message(traj)
    notes = t.notes + ([tests_note] if tests_note else [])
    interactions, unreplayable = machine_interactions(task, raw_traj, traj)
    source = {
        "format": "harbor",
        "path": str(t.path),
        "trial": t.trial_name,
        "task_name": t.task_name,
        "trial_id": t.trial_id,
        "agent_version": t.agent_version,
        "model": t.model_name,
        "exception": t.exception_type,
        "reward": None if t.reward is None else f"{t.reward:g}",
        "patch_file": t.patch_file,
        "trajectory_file": t.trajectory_file,
        "exit_status": t.agent_exit_status,
        UNREPLAYABLE: unreplayable,
        "notes": "; ".join(notes)[:4000] or None,
    }
    run = PredecessorRun(
        id=run_id(t.trial_name, f"harbor\0{t.trial_id or t.result_sha256}"),
        track=ctx.track,
        task=task.id,
        predecessor=Predecessor(agent=t.agent_name, model_family=family),
        source={k: v for k, v in source.items() if v is not None},
        termination=ending.termination,
        tests=tests,
        error=error_text(exc, no_verdict),
        steps=steps,
        duration_s=t.agent_duration_s,
        final_message=message,
        **verdict,
    )
    return Imported(run, t.patch, traj, dict(t.evidence), interactions=interactions)


def own_trajectory(
    data: dict | None, agent: str, path: Path, notes: list[str]
) -> tuple[Trajectory | None, dict | None]:
    """The normalized trajectory of a run's own (and the raw one, for its interactions); a
    trajectory of the wrong shape is left out with a note naming its file."""
    if data is None:
        return None, None
    try:
        return import_trajectory(data, agent), data
    except ValueError as exc:
        notes.append(f"{path}: {_first_line(str(exc))}; trajectory not imported")
        return None, None


def machine_interactions(
    task: Task, raw: dict | None, traj: Trajectory | None
) -> tuple[list[Interaction] | None, str | None]:
    """A machine task's run rebuilds from its terminal inputs: the ATIF tool calls (keystrokes with
    durations, shell commands, whole-file writes), else the commands of its normalized trajectory;
    and the first call no replay can reproduce (Stage IV then refuses the run, naming its step).
    (None, None) elsewhere."""
    if task.kind != "machine":
        return None, None
    if isinstance(raw, dict) and str(raw.get("schema_version", "")).startswith("ATIF"):
        got = replayable(raw)
        return got.inputs, got.unreplayable
    return (from_trajectory_actions(traj.steps) if traj is not None else None), None


#: PredecessorRun.source key: the trajectory step no replay can reproduce (Stage IV: rebuild_failed)
UNREPLAYABLE = "unreplayable"


# -- SWE-bench and mini-swe-agent -------------------------------------------------------------------


def _report_verdict(
    src: Sources, iid: str, model: str | None, task: Task
) -> tuple[int | None, dict[str, str] | None, dict[str, bytes], str | None]:
    """outcome, per-test statuses and evidence from the instance's report.json (None: no report)."""
    report = src.report_for(iid, model)  # ValueError when ambiguous
    if report is None:
        return None, None, {}, None
    entry, where = report.entry, f"{report.path}: {iid}"
    resolved = entry.get("resolved")
    if not isinstance(resolved, bool):
        raise InputError(f"{where}.resolved: {resolved!r} is not true or false")
    tests: dict[str, str] = {}
    status = entry.get("tests_status") if isinstance(entry.get("tests_status"), dict) else {}
    for bucket in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        b = status.get(bucket) if isinstance(status.get(bucket), dict) else {}
        for key, st in (("failure", "failed"), ("success", "passed")):
            for name in b.get(key) if isinstance(b.get(key), list) else []:
                if isinstance(name, str) and tests.get(name) != "failed":
                    tests[name] = st
    note = None if entry.get("patch_successfully_applied", True) else "the patch did not apply (report.json)"
    return int(resolved), tests, report.evidence, note


def _msa_facts(data: dict) -> tuple[str | None, str | None, str | None, float | None]:
    """model, version, exit_status and the run's duration from a mini-swe-agent trajectory."""
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
    model_cfg = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    model = model_cfg.get("model_name") if isinstance(model_cfg.get("model_name"), str) else None
    version = info.get("mini_version") if isinstance(info.get("mini_version"), str) else None
    status = info.get("exit_status") if isinstance(info.get("exit_status"), str) else None
    messages = data.get("messages") if isinstance(data.get("messages"), list) else []
    stamps = [
        m["extra"]["timestamp"]
        for m in messages
        if isinstance(m, dict)
        and isinstance(m.get("extra"), dict)
        and isinstance(m["extra"].get("timestamp"), (int, float))
    ]
    duration = round(max(stamps) - min(stamps), 3) if len(stamps) >= 2 else None
    return model, version, status, duration


NO_REPORT = (
    "no verdict: no report.json for this instance among the SOURCES (evaluation missing or "
    "failed); pass the SWE-bench logs dir with the predictions"
)
NO_VERDICT_MSA = (
    "no verdict: a mini-swe-agent trajectory holds none; pass the instance's SWE-bench "
    "report.json (or the logs dir) as a SOURCE too"
)


def swebench_runs(sources: list[str], ctx: Context) -> Iterator[Imported | Failed]:
    src = collect(sources, want_predictions=True, want_trajectories=False)
    yield from (Failed(p) for p in src.problems)
    if not src.predictions and not src.problems:
        yield Failed(f"{', '.join(sources)}: no predictions file among the SOURCES")
    for pred in src.predictions:
        try:
            yield from_prediction(pred, src, ctx)
        except (InputError, ValueError) as exc:
            yield Failed(str(exc))


def from_prediction(pred: Prediction, src: Sources, ctx: Context) -> Imported:
    task = ctx.task([pred.instance_id], f"{pred.where}: instance_id")
    patch = pred.patch.encode("utf-8", "surrogateescape") if pred.patch is not None else None
    msa = sibling_trajectory(pred)
    shape: list[str] = []
    traj, _ = own_trajectory(
        msa.data if msa is not None else None, pred.model, msa.path if msa else Path(), shape
    )
    if shape:
        msa = None  # a sibling trajectory of the wrong shape: as if there were none, noted
    ending = (
        msa_ending(_msa_facts(msa.data)[2]) if msa is not None else SUBMITTED
    )  # a prediction is a submission
    outcome, tests, evidence, note = _report_verdict(src, pred.instance_id, pred.model, task)
    why = NO_REPORT
    if outcome is None and not (pred.patch or "").strip():
        # SWE-bench does not evaluate empty patches: the FAIL_TO_PASS tests fail on the base commit
        outcome, why, note = 0, None, "empty model_patch: not resolved by definition (SWE-bench skips it)"
    verdict, no_verdict = settle(ending, outcome, None, why)
    steps, message = steps_and_message(traj)
    evidence = {
        **evidence,
        "prediction.json": _json_bytes(
            {"instance_id": pred.instance_id, "model_name_or_path": pred.model, "model_patch": pred.patch}
        ),
    }
    if msa is not None:
        evidence[msa.path.name] = msa.raw
    note = "; ".join(n for n in [note, *shape] if n) or None
    source = {
        "format": "swe-bench",
        "path": pred.where,
        "instance_id": pred.instance_id,
        "model": pred.model,
        "trajectory_file": str(msa.path) if msa else None,
        "notes": note,
    }
    run = PredecessorRun(
        id=run_id(
            pred.instance_id,
            f"swe-bench\0{pred.model}\0{pred.instance_id}\0"
            f"{hashlib.sha256(patch or b'').hexdigest() if patch is not None else '-'}",
        ),
        track=ctx.track,
        task=task.id,
        predecessor=Predecessor(agent=pred.model, model_family=ctx.family(pred.model, pred.where)),
        source={k: v for k, v in source.items() if v is not None},
        termination=ending.termination,
        tests=tests or {},
        error=error_text(no_verdict),
        steps=steps,
        final_message=message,
        duration_s=_msa_facts(msa.data)[3] if msa is not None else None,
        **verdict,
    )
    return Imported(run, patch, traj, evidence)


def msa_runs(sources: list[str], ctx: Context) -> Iterator[Imported | Failed]:
    src = collect(sources, want_predictions=False, want_trajectories=True)
    yield from (Failed(p) for p in src.problems)
    if not src.trajectories and not src.problems:
        yield Failed(f"{', '.join(sources)}: no *.traj.json among the SOURCES")
    for traj_file in src.trajectories:
        try:
            yield from_msa(traj_file, src, ctx)
        except (InputError, ValueError) as exc:
            yield Failed(str(exc))


def from_msa(m: MsaTrajectory, src: Sources, ctx: Context) -> Imported:
    data = m.data
    name = m.path.name[: -len(".traj.json")]
    iid = (
        data.get("instance_id")
        if isinstance(data.get("instance_id"), str) and data.get("instance_id")
        else name
    )
    task = ctx.task([iid], f"{m.path}: instance_id")
    model, version, status, duration = _msa_facts(data)
    family = ctx.family(model, f"{m.path}: info.config.model.model_name")
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    submission = info.get("submission") if isinstance(info.get("submission"), str) else None
    patch = submission.encode("utf-8", "surrogateescape") if submission is not None else None
    try:
        traj = import_trajectory(data, "mini-swe-agent")
    except ValueError as exc:  # the trajectory is the run: without it there is nothing to import
        raise InputError(f"{m.path}: {_first_line(str(exc))}") from None
    ending = msa_ending(status)
    outcome, tests, evidence, note = _report_verdict(src, iid, model, task)
    verdict, no_verdict = settle(ending, outcome, None, NO_VERDICT_MSA)
    steps, message = steps_and_message(traj)
    source = {
        "format": "mini-swe-agent",
        "path": str(m.path),
        "instance_id": iid,
        "model": model,
        "agent_version": version,
        "exit_status": status,
        "notes": note,
    }
    run = PredecessorRun(
        id=run_id(iid, f"mini-swe-agent\0{hashlib.sha256(m.raw).hexdigest()}"),
        track=ctx.track,
        task=task.id,
        predecessor=Predecessor(agent="mini-swe-agent", model_family=family),
        source={k: v for k, v in source.items() if v is not None},
        termination=ending.termination,
        tests=tests or {},
        error=error_text(no_verdict),
        steps=steps,
        duration_s=duration,
        final_message=message,
        **verdict,
    )
    return Imported(run, patch, traj, {**evidence, m.path.name: m.raw})


def _json_bytes(obj: object) -> bytes:
    import json

    return (json.dumps(obj, indent=1) + "\n").encode("utf-8", "surrogateescape")


# -- writing and the command ------------------------------------------------------------------------


def store(wd: WorkDir, item: Imported) -> PredecessorRun:
    """Write the run's files into runs/<id>/ (replacing leftovers of an interrupted import), then its
    stage1.jsonl line: the line is the commit point."""
    run = write_files(wd, item)
    wd.append(STAGE1, run)
    return run


def write_files(wd: WorkDir, item: Imported) -> PredecessorRun:
    """store() without the line (an importer that writes its lines in batches appends them itself)."""
    run = item.run
    d, base = wd.run_dir(run.id), f"runs/{run.id}"
    try:
        d.mkdir(parents=True)
    except FileExistsError:
        shutil.rmtree(d)
        d.mkdir(parents=True)
    if item.patch is not None:
        (d / "final.patch").write_bytes(item.patch)
        run.patch = f"{base}/final.patch"
    if item.trajectory is not None:
        item.trajectory.write(d / "trajectory.json")
        run.trajectory = f"{base}/trajectory.json"
    if item.interactions is not None:
        write_interactions(d / INTERACTIONS_FILE, item.interactions)
        run.interactions = f"{base}/{INTERACTIONS_FILE}"
    for rel, data in item.evidence.items():
        target = d / "source" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return run


# -- Terminal-Bench 1 runs: commands.txt is the state's interactions, results.json the verdict
def tb1_runs(sources: list[str], ctx: Context) -> Iterator[Imported | Failed]:
    for src in sources:
        try:
            dirs, meta = tb1_trial_dirs(Path(src))
        except InputError as exc:
            yield Failed(str(exc))
            continue
        for d in dirs:
            try:
                yield from_tb1(read_tb1_trial(d, meta), ctx)
            except InputError as exc:
                yield Failed(str(exc))


def from_tb1(t: TB1Trial, ctx: Context) -> Imported:
    where = t.path / "results.json"
    task = ctx.task([t.task_id], f"{where}: task_id")
    if task.kind != "machine":
        raise InputError(
            f"{where}: task_id: {t.task_id!r} is a task of repository track {ctx.track!r}; "
            "Terminal-Bench 1 runs rebuild machine states (import them into a machine track)"
        )
    family = ctx.family(t.model_name, f"{t.path.parent.parent / 'run_metadata.json'}: model_name")
    ending = tb1_ending(t.failure_mode)
    outcome = None if t.is_resolved is None else int(t.is_resolved)
    verdict, no_verdict = settle(
        ending, outcome, "infra_verifier", "results.json: is_resolved is null (the tests gave no verdict)"
    )
    tests, tests_note = graded_tests(task, t.parser_results)
    interactions = (
        from_tb1_commands(t.commands, str(t.path / "commands.txt")) if t.commands is not None else None
    )
    notes = (
        t.notes
        + ([tests_note] if tests_note else [])
        + (["no commands.txt: the state cannot be rebuilt"] if t.commands is None else [])
    )
    source = {
        "format": "terminal-bench-1",
        "path": str(t.path),
        "trial": t.trial_name,
        "task_name": t.task_id,
        "trial_id": t.trial_id,
        "model": t.model_name,
        "failure_mode": t.failure_mode,
        "notes": "; ".join(notes)[:4000] or None,
    }
    run = PredecessorRun(
        id=run_id(t.trial_name, f"terminal-bench-1\0{t.trial_id or t.result_sha256}"),
        track=ctx.track,
        task=task.id,
        predecessor=Predecessor(agent=t.agent_name or "terminal-bench-1", model_family=family),
        source={k: v for k, v in source.items() if v is not None},
        termination=ending.termination,
        tests=tests,
        error=error_text(no_verdict),
        duration_s=t.agent_duration_s,
        **verdict,
    )
    return Imported(run, None, None, dict(t.evidence), interactions=interactions)


READERS: dict[str, Callable[[list[str], Context], Iterator[Imported | Failed]]] = {
    "harbor": harbor_runs,
    "swe-bench": swebench_runs,
    "mini-swe-agent": msa_runs,
    "terminal-bench-1": tb1_runs,
}


def import_runs(
    wd: WorkDir,
    fmt: str,
    sources: list[str],
    track: str,
    tasks_dir: str | None = None,
    model_family: str | None = None,
    out: Callable[[str], None] = print,
) -> tuple[int, int, int]:
    """Import every run the SOURCES hold; returns (imported, already there, failed)."""
    if tasks_dir is not None and not Path(tasks_dir).is_dir():
        raise InputError(f"--tasks-dir {tasks_dir}: not a directory (the track's Harbor task dirs)")
    tasks = wd.tasks(track, tasks_dir)
    if not tasks:
        raise InputError(f"track {track!r}: no tasks (task.toml) in {wd.tasks_dirs().get(track)}")
    ctx = Context(track, tasks, model_family)
    known = set(wd.runs())
    imported = skipped = failed = 0
    for item in READERS[fmt](sources, ctx):
        if isinstance(item, Failed):
            failed += 1
            out(valid_text(f"  FAILED {item.reason}"))
            continue
        run = item.run
        if run.id in known:
            skipped += 1
            out(valid_text(f"  skip {run.id}: already in {STAGE1} (from {run.source.get('path')})"))
            continue
        try:
            store(wd, item)
        except (ValueError, RecursionError) as exc:  # content that cannot be written: no half-written run dir
            shutil.rmtree(wd.run_dir(run.id), ignore_errors=True)
            failed += 1
            out(
                valid_text(
                    f"  FAILED {run.source.get('path')}: cannot be stored: {type(exc).__name__}: {exc}"[:2000]
                )
            )
            continue
        known.add(run.id)
        imported += 1
        out(valid_text("  " + describe(run)))
    return imported, skipped, failed


def describe(run: PredecessorRun) -> str:
    verdict = run.verdict if run.outcome is not None or run.verdict != "infra_error" else "no verdict"
    failing = sum(1 for s in run.tests.values() if s != "passed")
    tests = f", {failing}/{len(run.tests)} tests failing" if run.tests else ""
    notes = run.source.get("notes")
    return (
        f"{run.id}: task {run.task}, {verdict} ({run.termination}, rule {run.rule or '-'}), "
        f"{'declared complete' if run.declared_complete else 'not declared complete'}{tests}, "
        + (
            "interactions kept"
            if run.interactions is not None
            else f"patch {'none' if run.patch is None else 'kept'}"
        )
        + (f" [note: {notes[:200]}]" if notes else "")
    )


def import_command(wd: WorkDir, args: argparse.Namespace) -> int:
    if not args.sources:
        raise InputError(f"--format {args.format}: give at least one SOURCE before the WORKDIR")
    if getattr(args, "agent", None):
        raise InputError(
            f"--agent: only --format tb-leaderboard selects by agent, not --format {args.format}"
        )
    print(f"importing {args.format} runs of track {args.track} into {wd.path / STAGE1}")
    imported, skipped, failed = import_runs(
        wd, args.format, list(args.sources), args.track, args.tasks_dir, args.model_family
    )
    print(
        f"imported {imported} runs, {skipped} already imported, {failed} sources failed "
        f"({len(wd.runs())} runs in {STAGE1})"
    )
    return 1 if failed else 0
