"""Stage I from Terminal-Bench 2's published trials: `residualize import --format tb-leaderboard
SOURCE` (docs/residualization.md, "Terminal-Bench 2's leaderboard trials").

The index (sources/tb_leaderboard.py) reads each submission's metadata.yaml and each trial's
config.json and result.json; the trials the options select (`--agent`, `--model`, `--task`,
`--limit`) that are not imported yet then have their other files fetched (remote sources only,
into WORKDIR/downloads/tb-leaderboard/, -j at once) and are converted exactly as a Harbor trial
(importers.from_trial: verdict, ending, per-test statuses, and the interactions that rebuild the
machine). A name given to `--agent`/`--model`/`--task` that no trial has is a usage error naming
the close match, so a typo never selects nothing. Ids are those of `--format harbor` (the trial's
own id), so a trial is imported once whatever the source; lines are written in index order.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from swe_residual.errors import InputError, did_you_mean, names_list
from swe_residual.progress import Progress, duration
from swe_residual.residualize.importers import Context, describe, from_trial, run_id, write_files
from swe_residual.residualize.records import PredecessorRun
from swe_residual.residualize.workdir import STAGE1, WorkDir
from swe_residual.results import append_lines
from swe_residual.safe_read import valid_text
from swe_residual.sources.deepswe_release import Http
from swe_residual.sources.harbor_trials import read_trial
from swe_residual.sources.tb_leaderboard import (
    FetchFailed,
    Index,
    Tree,
    TrialRef,
    build_index,
    episodes_atif,
    fetch_trial,
    open_tree,
)
from swe_residual.tasks import Task

FORMAT = "tb-leaderboard"
DOWNLOADS = Path("downloads") / FORMAT
LINE_BATCH = 100


@dataclass
class Options:
    source: str
    agents: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    limit: int | None = None
    jobs: int = 8
    model_family: str | None = None
    tasks_dir: str | None = None
    verbose: bool = False


@dataclass
class Result:
    trials: int = 0
    selected: int = 0
    imported: int = 0
    already: int = 0
    refused: int = 0
    incomplete: int = 0
    unknown_tasks: Counter = field(default_factory=Counter)
    fetched: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return 1 if self.refused or self.incomplete else 0


def _matches_model(ref: TrialRef, wanted: set[str]) -> bool:
    m = (ref.model or "").lower()
    return m in wanted or m.rsplit("/", 1)[-1] in wanted


def check_names(idx: Index, opts: Options, task_ids: set[str]) -> None:
    """Every --agent, --model and --task names something the trials (or the track) have; else a
    usage error with the close match and the names there are."""
    models = idx.models() | {
        m["model_name"]
        for s in idx.submissions
        for m in (s.metadata.get("models") if isinstance(s.metadata.get("models"), list) else [])
        if isinstance(m, dict) and isinstance(m.get("model_name"), str)
    }
    tasks = task_ids | {r for t in idx.trials for r in t.task_refs}
    for option, asked, known in (
        ("--agent", opts.agents, idx.agents()),
        ("--model", opts.models, models),
        ("--task", opts.tasks, tasks),
    ):
        lower = {k.lower() for k in known}
        for name in asked:
            if name.lower() not in lower:
                close = did_you_mean(name, known) or did_you_mean(name.lower(), lower)
                what = option.lstrip("-")
                raise InputError(
                    f"{option} {name}: no trial of {opts.source} has this {what} ({close}the trials have "
                    f"{len(known)}: {names_list(known, limit=40)})"
                )


def select(idx: Index, opts: Options, ctx: Context) -> tuple[list[tuple[TrialRef, Task]], Counter]:
    """The trials asked for, in index order, with their task; trials of tasks the track lacks are
    counted per task name, never imported."""
    agents = {a.lower() for a in opts.agents}
    models = {m.lower() for m in opts.models}
    tasks = {t.lower() for t in opts.tasks}
    out, unknown = [], Counter()
    by_refs: dict[tuple[str, ...], Task | None] = {}
    for ref in idx.trials:
        if agents and (ref.agent or "").lower() not in agents:
            continue
        if models and not _matches_model(ref, models):
            continue
        key = tuple(ref.task_refs)
        if key not in by_refs:
            try:
                by_refs[key] = ctx.task(list(key), "task_name")
            except InputError:
                by_refs[key] = None
        task = by_refs[key]
        if task is None:
            unknown[ref.task_refs[0] if ref.task_refs else "(no task named)"] += 1
            continue
        if tasks and task.id.lower() not in tasks and not tasks & {r.lower() for r in ref.task_refs}:
            continue
        out.append((ref, task))
    return out, unknown


@dataclass
class _Outcome:
    ref: TrialRef
    run: PredecessorRun | None = None
    notes: list[str] = field(default_factory=list)
    failed: str | None = None
    incomplete: str | None = None
    fetched: int = 0


def convert(tree: Tree, ref: TrialRef, wd: WorkDir, ctx: Context) -> _Outcome:
    """One selected trial: its files (fetched for a remote tree), read as a Harbor trial dir,
    converted, and its run's files written (its stage1.jsonl line comes later, in index order)."""
    o = _Outcome(ref)
    try:
        if tree.local is not None:
            trial_dir = tree.local / ref.rel
        else:
            trial_dir = wd.path / DOWNLOADS / ref.rel
            try:
                got = fetch_trial(tree, ref, trial_dir)
            except (FetchFailed, InputError) as exc:
                o.incomplete = f"{ref.rel}: {exc}"
                return o
            o.fetched, o.notes = got.fetched, list(got.notes)
        t = read_trial(trial_dir)
        o.notes += t.notes
        t.notes = []
        if t.trajectory is None:
            atif, notes = episodes_atif(trial_dir)
            o.notes += notes
            if atif is not None:
                t.trajectory, t.trajectory_file = atif, "agent/episode-*/response.txt"
        item = from_trial(t, ctx)
        meta = ref.submission.metadata
        item.run.source.update(
            {
                k: v
                for k, v in {
                    "format": FORMAT,
                    "source": tree.where,
                    "version": ref.submission.version,
                    "submission": ref.submission.name,
                    "job": ref.job,
                    "agent": ref.agent,
                    "model": ref.model,
                    "agent_display_name": valid_text(str(meta.get("agent_display_name") or ""), 200),
                }.items()
                if v
            }
        )
        o.run = write_files(wd, item)
    except InputError as exc:
        o.failed = str(exc)
    except Exception as exc:  # whatever a hostile trial makes of the code: that trial fails, the rest goes on
        shutil.rmtree(wd.run_dir(run_id(ref.trial_name or ref.trial, ref.key)), ignore_errors=True)
        o.failed = f"{ref.rel}: {type(exc).__name__}: {exc}"[:2000]
    return o


def import_leaderboard(
    wd: WorkDir,
    track: str,
    opts: Options,
    *,
    out: Callable[[str], None] = print,
    stream: TextIO | None = None,
    http: Http | None = None,
) -> Result:
    t_start = time.perf_counter()
    if opts.jobs < 1:
        raise InputError("-j: must be at least 1")
    if opts.limit is not None and opts.limit < 0:
        raise InputError("--limit: must be 0 or more")
    if opts.tasks_dir is not None and not Path(opts.tasks_dir).is_dir():
        raise InputError(f"--tasks-dir {opts.tasks_dir}: not a directory (the track's Harbor task dirs)")
    tasks = wd.tasks(track, opts.tasks_dir)
    if not tasks:
        raise InputError(f"track {track!r}: no tasks (task.toml) in {wd.tasks_dirs().get(track)}")
    ctx = Context(track, tasks, opts.model_family)
    res = Result()
    tree = open_tree(opts.source, http or Http(), wd.path / DOWNLOADS)
    idx = build_index(tree, opts.jobs)
    res.trials, res.seconds["index"] = len(idx.trials), idx.seconds
    out(
        valid_text(
            f"index of {tree.where}: {len(idx.submissions)} submissions, {len(idx.trials)} trials "
            f"(metadata.yaml, config.json and result.json read in {idx.seconds:.2f} s)"
            + (f", {len(idx.unfinished)} not finished (no result.json)" if idx.unfinished else "")
        )
    )
    for problem in idx.problems:
        out(valid_text(f"  refused: {problem}"[:2000]))
    for rel in idx.unfinished[:5]:
        out(valid_text(f"  not finished: {tree.where}/{rel}: config.json without result.json; not imported"))
    res.refused += len(idx.problems)
    check_names(idx, opts, set(tasks))
    t_sel = time.perf_counter()
    todo, res.unknown_tasks = select(idx, opts, ctx)
    if opts.limit is not None:
        todo = todo[: opts.limit]
    res.selected = len(todo)
    res.seconds["selection"] = time.perf_counter() - t_sel
    for name, n in sorted(res.unknown_tasks.items()):
        out(valid_text(f"  task {name!r} is not a task of track {track!r}: {n} trials not imported"))
    known = set(wd.runs())
    work = []
    queued: set[str] = set()
    for ref, _task in todo:
        rid = run_id(ref.trial_name or ref.trial, ref.key)
        if rid in known or rid in queued:  # imported, or the same trial twice in the source
            res.already += 1
        else:
            queued.add(rid)
            work.append(ref)
    asked = ", ".join(
        f"{o} {' '.join(v)}"
        for o, v in (("--agent", opts.agents), ("--model", opts.models), ("--task", opts.tasks))
        if v
    )
    out(
        f"selected {res.selected} trials"
        + (f" ({asked})" if asked else "")
        + (f", first {opts.limit}" if opts.limit is not None else "")
        + f"; importing {len(work)} into {wd.path / STAGE1}"
        + (f" ({res.already} already imported)" if res.already else "")
    )

    progress = Progress(len(work), "trials", label="import", stream=stream)
    pending: list[PredecessorRun] = []
    flushed = [time.monotonic()]

    def flush() -> None:
        append_lines(wd.path / STAGE1, pending)
        pending.clear()
        flushed[0] = time.monotonic()

    def record(o: _Outcome) -> None:
        res.fetched += o.fetched
        for n in o.notes:
            progress.note(valid_text(f"  refused: {n}"[:2000]))
        if o.incomplete:
            res.incomplete += 1
            progress.note(valid_text(f"  not finished: {o.incomplete}"[:2000]))
            return progress.advance(incomplete=1)
        if o.failed or o.run is None:
            res.refused += 1
            progress.note(valid_text(f"  FAILED {o.failed}"[:2000]))
            return progress.advance(refused=1)
        if o.run.id in known:  # the same trial twice in the source (a copied trial dir): once
            res.already += 1
            return progress.advance()
        known.add(o.run.id)
        pending.append(o.run)
        if len(pending) >= LINE_BATCH or time.monotonic() - flushed[0] > 1.0:
            flush()
        res.imported += 1
        if opts.verbose:
            progress.note(valid_text("  " + describe(o.run)))
        progress.advance()

    t_work = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=opts.jobs)
    with progress:
        try:
            futures = {pool.submit(convert, tree, ref, wd, ctx): i for i, ref in enumerate(work)}
            done: dict[int, _Outcome] = {}
            following = 0
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                while following in done:
                    record(done.pop(following))
                    following += 1
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            flush()
    res.seconds["trials"] = time.perf_counter() - t_work
    res.seconds["total"] = time.perf_counter() - t_start
    if res.incomplete:
        out(f"  {res.incomplete} trials not finished (fetches failed): run the same command again")
    out(
        f"imported {res.imported} runs, {res.already} already imported, {res.refused} refused, "
        f"{res.incomplete} not finished; {res.fetched} files fetched in {duration(res.seconds['trials'])}; "
        f"{len(wd.runs())} runs in {STAGE1}"
    )
    return res


def import_leaderboard_command(wd: WorkDir, args) -> int:
    if len(args.sources) != 1:
        raise InputError(
            f"--format {FORMAT}: give exactly one SOURCE (a dir, an http(s) dataset URL or a git URL), "
            f"got {len(args.sources)}"
        )
    opts = Options(
        source=args.sources[0],
        agents=list(args.agent),
        models=list(args.model),
        tasks=list(args.task),
        limit=args.limit,
        jobs=args.jobs,
        model_family=args.model_family,
        tasks_dir=args.tasks_dir,
        verbose=args.verbose,
    )
    return import_leaderboard(wd, args.track, opts, stream=sys.stderr).status
