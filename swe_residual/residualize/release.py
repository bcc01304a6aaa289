"""Stage I from DeepSWE's public leaderboard release: `residualize import --format deepswe-release`
(docs/residualization.md, "DeepSWE's public leaderboard release").

Reads the release's manifest and index (sources/deepswe_release.py), keeps the scored DeepSWE rows
asked for, and turns each trial into one PredecessorRun: its files come from a local mirror, or
are downloaded concurrently into WORKDIR/downloads/<trial>/ first (only the missing ones, so an
interrupted import resumes). Ids depend on the trial name only, so importing again, from the CDN
or a mirror, adds nothing. What each file means:

* the task: the row's `task_name` (never the trial name, which is cut to 32 characters);
* the verdict: verifier/reward.json `reward`, else the row's `reward`, `passed` or `outcome`;
* per-test statuses: verifier/ctrf.json, else pytest's lines in test-stdout.txt;
* how it ended: `error_category` / `errored` -> an infrastructure failure (ERROR_CATEGORIES);
  otherwise the trajectory (mini-swe-agent's submit command in its ATIF export, or its own
  exit_status), else the row (a clean scored run ended normally); `completion_from` says which.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from swe_residual.errors import InputError, VerifierError, did_you_mean, names_list
from swe_residual.progress import Progress, duration
from swe_residual.residualize.importers import (
    UNREPLAYABLE,
    Context,
    Imported,
    describe,
    error_text,
    machine_interactions,
    own_trajectory,
    run_id,
    steps_and_message,
    write_files,
)
from swe_residual.residualize.records import PredecessorRun, TestCounts
from swe_residual.residualize.workdir import STAGE1, WorkDir
from swe_residual.results import append_lines
from swe_residual.safe_read import Unsafe, parse_json, read_yaml, valid_text
from swe_residual.sources.deepswe_release import (
    DEFAULT_RELEASE,
    PATCH,
    STDOUT,
    TRAJECTORY,
    GraderReport,
    Http,
    Release,
    TrialFiles,
    atif_declared_complete,
    download_files,
    download_trial,
    grader_report,
    open_release,
    pytest_statuses,
    read_local,
    reward_of,
    select_rows,
    trial_problem,
)
from swe_residual.sources.endings import (
    SUBMITTED,
    Ending,
    graded_tests,
    model_family,
    msa_ending,
    outcome_of_reward,
    settle,
)
from swe_residual.states import Predecessor
from swe_residual.tasks import Task
from swe_residual.verdicts import ctrf_statuses

DOWNLOADS = "downloads"
FORMAT = "deepswe-release"
LINE_BATCH = 100  # stage1.jsonl lines written at once (at least every second)

#: error_category -> how the trial ended. Every category is an infrastructure failure (the trial
#: is not a fair attempt); the rule says whose: the model provider's, the verifier's, or the harness's.
MODEL_SERVICE_CATEGORIES = {
    "model_routing_404",
    "provider_timeout",
    "upstream_provider_error",
    "rate_limit",
    "provider_error",
    "api_error",
    "model_not_found",
    "quota_exceeded",
}
VERIFIER_CATEGORIES = {"verifier_timeout", "verifier_error", "verifier_crash"}
#: a trajectory that ends without mini-swe-agent's submit command: a step, cost or time limit
#: stopped it (its ATIF export does not say which)
UNSUBMITTED = Ending("budget", "budget")


def category_ending(category: str | None) -> Ending:
    c = (category or "").lower()
    if c in VERIFIER_CATEGORIES or c.startswith("verifier"):
        return Ending("submitted", "infra_verifier")  # the agent finished; its grading failed
    if c in MODEL_SERVICE_CATEGORIES or any(w in c for w in ("provider", "rate_limit", "routing", "api_")):
        return Ending("infra", "infra_model_service")
    return Ending("infra", "infra_harness")  # unclassified_exception, unknown names, none


# -- the model family -----------------------------------------------------------------------------


class FamilyMap:
    """--family-map: model-name prefixes -> family (YAML or JSON, `{prefix: family}` or
    `{"families": {...}}`); case ignored, matched against the name with and without its
    `provider/` part; the longest matching prefix wins."""

    def __init__(self, table: dict[str, str] | None = None):
        self.prefixes = sorted(((k.lower(), v) for k, v in (table or {}).items()), key=lambda kv: -len(kv[0]))

    @classmethod
    def load(cls, path: str | None) -> FamilyMap:
        if not path:
            return cls()
        data = read_yaml(path, "--family-map")  # YAML is a superset of JSON
        if isinstance(data, dict) and isinstance(data.get("families"), dict):
            data = data["families"]
        if not isinstance(data, dict):
            raise InputError(f"{path}: --family-map: a mapping of model-name prefix -> family is expected")
        for k, v in data.items():
            if not isinstance(k, str) or not k.strip() or not isinstance(v, str) or not v.strip():
                raise InputError(
                    f"{path}: --family-map: {str(k)[:60]!r}: prefix and family must be non-empty strings"
                )
        return cls({k.strip(): v.strip() for k, v in data.items()})

    def family(self, model: str | None) -> str | None:
        if not model or not self.prefixes:
            return None
        names = {model.strip().lower(), model.strip().rsplit("/", 1)[-1].lower()}
        for prefix, family in self.prefixes:
            if any(n.startswith(prefix) for n in names):
                return family
        return None


# -- one trial -> one Stage I run ------------------------------------------------------------------


def _s(row: dict, key: str) -> str | None:
    v = row.get(key)
    if isinstance(v, bool) or v is None:
        return None
    text = v.strip() if isinstance(v, str) else str(v)
    return valid_text(text, 300) or None


def _num(row: dict, key: str) -> float | None:
    """A finite number of the row (json.loads takes `Infinity` and `NaN`: they are no number here)."""
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer too large for a float
        return None
    return f if math.isfinite(f) else None


def check_filter_names(rows: Iterable[dict], opts: Options, task_ids: set[str]) -> None:
    """Every --model, --config and --task names something the index (or the track) has: a
    misspelt name would select nothing and look like an empty release. InputError with the close
    match and the names the index uses."""
    used: dict[str, set[str]] = {"model": set(), "config": set(), "task_name": set()}
    for row in rows:
        for key, names in used.items():
            if (value := _s(row, key)) is not None:
                names.add(value)
    wanted = (
        ("--model", "model", opts.models, used["model"]),
        ("--config", "config", opts.configs, used["config"]),
        ("--task", "task", opts.tasks, used["task_name"] | task_ids),
    )
    for option, what, asked, known in wanted:
        lower = {k.lower() for k in known}
        for name in asked:
            if name.lower() not in lower:
                close = did_you_mean(name, known) or did_you_mean(name.lower(), {k.lower() for k in known})
                raise InputError(
                    f"{option} {name}: no trial of the release has this {what} ({close}the index has "
                    f"{len(known)}: {names_list(known, limit=60)})"
                )


def row_reward(row: dict) -> tuple[float | None, str | None]:
    """The row's verdict: `reward`, else `passed`, else `outcome` (pass|fail)."""
    r = reward_of(row)
    if r is not None:
        return r, "row.reward"
    if isinstance(row.get("passed"), bool):
        return float(row["passed"]), "row.passed"
    if row.get("outcome") in ("pass", "fail"):
        return float(row["outcome"] == "pass"), "row.outcome"
    return None, None


_COUNT_KEYS = ("f2p_total", "f2p_passed", "p2p_total", "p2p_passed")


def reward_counts(reward_json: bytes | None, row: dict) -> TestCounts | None:
    """The graded tests' counts of reward.json (the grader's own), else of the index row."""
    for source, data in (("reward.json", _json_dict(reward_json)), ("row", row)):
        values = [_num(data, k) for k in _COUNT_KEYS]
        if None not in values and all(v >= 0 for v in values):  # type: ignore[operator]
            ft, fp, pt, pp = (int(v) for v in values)  # type: ignore[arg-type]
            if fp <= ft and pp <= pt:
                return TestCounts(f2p_total=ft, f2p_passed=fp, p2p_total=pt, p2p_passed=pp, source=source)
    return None


def _json_dict(raw: bytes | None) -> dict:
    try:
        data = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _grader_counts(report: GraderReport) -> TestCounts:
    return TestCounts(
        f2p_total=report.f2p_total,
        f2p_passed=report.f2p_passed,
        p2p_total=report.p2p_total,
        p2p_passed=report.p2p_passed,
        source="test-stdout.txt",
    )


def _grader_tests(task: Task, report: GraderReport) -> tuple[dict[str, str], str | None]:
    """The grader names only the tests that did not pass: those failed, every other graded test of
    the task (tests/config.json) passed, when the names are all the failures its counts give."""
    required = task.grading.required if task.grading is not None else []
    failing = {t: "failed" for t in sorted(report.failing)}
    if not report.complete:
        return failing, (
            f"test-stdout.txt names {len(report.failing)} failing tests where its counts give "
            f"{report.f2p_total - report.f2p_passed + report.p2p_total - report.p2p_passed}; the "
            "other tests' statuses are unknown"
        )
    if required and set(report.failing) <= set(required):
        return {t: failing.get(t, "passed") for t in required}, None
    return failing, None  # the counts say how many passed (test_counts)


def _stdout_tests(
    task: Task, statuses: dict[str, str], counts: TestCounts | None
) -> tuple[dict[str, str], str | None]:
    """Statuses from pytest's console output, which names some tests (failures, maybe some passes)
    and not others: the unnamed graded tests passed when the failures are exactly as many as the
    verifier counted, else they are unknown (never failed for want of a name)."""
    required = task.grading.required if task.grading is not None else []
    failing = {t for t, s in statuses.items() if s != "passed"}
    if required and counts is not None and len(failing) == counts.failing and failing <= set(required):
        return {t: "failed" if t in failing else "passed" for t in required}, None
    if any(s == "passed" for s in statuses.values()) and counts is None:
        return graded_tests(task, statuses)
    return {t: "failed" for t in sorted(failing)}, (
        "test-stdout.txt lists failures only; the other tests' statuses are unknown"
    )


def from_release_trial(
    files: TrialFiles, ctx: Context, task: Task, release_id: str, fmap: FamilyMap, *, evidence: bool = True
) -> Imported:
    """One trial of the release as a Stage I run (InputError when it names no model and no
    family is given). `evidence`: copy the row and the verdict's files into runs/<id>/source/ (a
    mirror may go away; a download dir in the work dir is the evidence itself)."""
    row, trial = files.row, files.trial
    where = Path(files.where)
    model, config, harness = _s(row, "model"), _s(row, "config"), _s(row, "harness") or "mini-swe-agent"
    agent = "/".join(p for p in (harness, model) if p) + (f"@{config}" if config else "")
    family = ctx.default_family or fmap.family(model) or (model_family(model) if model else None)
    if not family:
        raise InputError(f"trial {trial}: the row names no model; pass --model-family FAMILY")
    notes = list(files.notes)

    traj, raw_traj, declared, exit_status = None, None, None, None
    raw = files.files.get(TRAJECTORY)
    if raw is not None:
        try:
            data = parse_json(raw, where / TRAJECTORY)
        except Unsafe as exc:
            notes.append(f"trial {trial}: {TRAJECTORY}: {exc}; not read")
            data = None
        if data is not None and not isinstance(data, dict):
            notes.append(f"trial {trial}: {TRAJECTORY}: not a JSON object; not read")
        elif isinstance(data, dict):
            traj, raw_traj = own_trajectory(data, agent, where / TRAJECTORY, notes)
            if str(data.get("schema_version", "")).startswith("ATIF"):
                declared = atif_declared_complete(data)
            elif str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
                info = data.get("info") if isinstance(data.get("info"), dict) else {}
                exit_status = info.get("exit_status") if isinstance(info.get("exit_status"), str) else None

    category, errored = _s(row, "error_category"), row.get("errored") is True
    if category or errored:
        ending = category_ending(category)
        failure = f"error_category {category}" if category else "errored: true (no error_category)"
    elif exit_status is not None:
        ending, failure = msa_ending(exit_status), None
    elif declared is not None:
        ending, failure = (SUBMITTED if declared else UNSUBMITTED), None
    else:
        ending, failure = SUBMITTED, None  # a clean scored run of the row ended normally
    completion_from = "trajectory" if exit_status is not None or declared is not None else "row"

    reward, verdict_from = None, None
    rj = files.files.get("verifier/reward.json")
    if rj is not None:
        try:
            reward = reward_of(parse_json(rj, where / "verifier/reward.json"))
            verdict_from = "reward.json" if reward is not None else None
            if reward is None:
                notes.append(
                    f"trial {trial}: verifier/reward.json: no numeric reward; the row's verdict used"
                )
        except Unsafe as exc:
            notes.append(f"trial {trial}: verifier/reward.json: {exc}; the row's verdict used")
    if reward is None:
        reward, verdict_from = row_reward(row)
    elif isinstance(row.get("passed"), bool) and (reward >= 1) != row["passed"]:
        notes.append(
            f"trial {trial}: verifier/reward.json reward {reward:g} and the row's passed "
            f"{str(row['passed']).lower()} disagree; reward.json used"
        )
    outcome, bad = outcome_of_reward(reward)
    if outcome is None and bad is None:
        bad = "no verdict: no reward.json and the row has no reward, passed or outcome"
    verdict, no_verdict = settle(ending, outcome, "infra_verifier", bad)
    if failure and (exit_status is not None or declared is not None):
        verdict["declared_complete"] = (
            declared if declared is not None else msa_ending(exit_status) == SUBMITTED
        )

    statuses, tests_from = None, None
    ctrf = files.files.get("verifier/ctrf.json")
    if ctrf is not None:
        try:
            statuses = ctrf_statuses(parse_json(ctrf, where / "verifier/ctrf.json"), "verifier/ctrf.json")
            tests_from = "ctrf.json"
        except (Unsafe, VerifierError) as exc:
            notes.append(f"trial {trial}: verifier/ctrf.json: {exc}; not used")
    counts = reward_counts(rj, row)
    if statuses is None and files.files.get(STDOUT):
        text = files.files[STDOUT].decode("utf-8", "replace")
        report = grader_report(text)
        if report is not None:
            tests, tests_note = _grader_tests(task, report)
            counts, tests_from = _grader_counts(report), "test-stdout.txt"
        elif found := pytest_statuses(text):
            tests, tests_note = _stdout_tests(task, found, counts)
            tests_from = "test-stdout.txt"
    if tests_from != "test-stdout.txt":
        tests, tests_note = graded_tests(task, statuses)
        if statuses is None:
            tests_note = "no per-test report (verifier/ctrf.json, test-stdout.txt): per-test statuses unknown"

    steps, message = steps_and_message(traj)
    if steps is None and _num(row, "n_agent_steps") is not None:
        steps = int(_num(row, "n_agent_steps"))
    absent = "; ".join(f"{rel} ({why})" for rel, why in sorted(files.absent.items()))
    notes_text = "; ".join(notes + ([tests_note] if tests_note else []))
    source = {
        "format": FORMAT,
        "path": str(where),
        "release": release_id,
        "trial": trial,
        "task_name": _s(row, "task_name"),
        "model": model,
        "provider": _s(row, "provider"),
        "config": config,
        "reasoning_effort": _s(row, "reasoning_effort"),
        "harness": harness,
        "error_category": category,
        "layout": files.layout,
        "verdict_from": verdict_from,
        "completion_from": completion_from,
        "tests_from": tests_from,
        "exit_status": exit_status,
        "absent": absent[:4000] or None,
        "notes": notes_text[:4000] or None,
    }
    run = PredecessorRun(
        id=run_id(trial, f"{FORMAT}\0{trial}"),
        track=ctx.track,
        task=task.id,
        predecessor=Predecessor(agent=agent, model_family=family),
        source={k: v for k, v in source.items() if v is not None},
        termination=ending.termination,
        tests=tests,
        test_counts=counts,
        error=error_text(failure, no_verdict),
        steps=steps,
        duration_s=_num(row, "agent_duration_seconds"),
        final_message=message,
        **verdict,
    )
    kept = {}
    if evidence:
        kept["meta.json"] = (json.dumps(row, sort_keys=True, ensure_ascii=True, indent=1) + "\n").encode()
        kept.update(
            (rel, files.files[rel])
            for rel in ("verifier/reward.json", "verifier/ctrf.json", STDOUT)
            if rel in files.files
        )
    interactions, unreplayable = machine_interactions(task, raw_traj, traj)
    if unreplayable:
        run.source[UNREPLAYABLE] = unreplayable
    return Imported(run, files.files.get(PATCH), traj, kept, interactions=interactions)


# -- the command ----------------------------------------------------------------------------------


@dataclass
class Options:
    release: str = DEFAULT_RELEASE
    models: list[str] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    limit: int | None = None
    jobs: int = 8
    family_map: str | None = None
    model_family: str | None = None
    tasks_dir: str | None = None
    verbose: bool = False


@dataclass
class Result:
    selected: int = 0
    imported: int = 0
    already: int = 0
    refused: int = 0
    incomplete: int = 0
    unknown_tasks: Counter = field(default_factory=Counter)
    absent: int = 0
    fetched: int = 0
    requests: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return 1 if self.refused or self.incomplete else 0


@dataclass
class _Outcome:
    trial: str
    run: PredecessorRun | None = None  # its files written, its line not yet
    notes: list[str] = field(default_factory=list)
    failed: str | None = None
    incomplete: str | None = None
    fetched: int = 0
    requests: int = 0


def import_release(
    wd: WorkDir,
    track: str,
    opts: Options,
    *,
    out=print,
    stream: TextIO | None = None,
    http: Http | None = None,
) -> Result:
    """Import the trials of a release the options select; see the module docstring."""
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
    ctx, fmap = Context(track, tasks, opts.model_family), FamilyMap.load(opts.family_map)
    http = http or Http()
    res = Result()

    release = open_release(opts.release, http)
    m = release.manifest
    res.seconds.update(release.seconds)
    t_sel = time.perf_counter()
    sel = select_rows(release.rows, models=opts.models, configs=opts.configs)
    check_filter_names(release.rows, opts, set(tasks))
    todo, by_name = [], {}
    for row in sel.rows:
        name = _s(row, "task_name")
        if name not in by_name:
            try:
                by_name[name] = ctx.task([name] if name else [], "task_name")
            except InputError:
                by_name[name] = None
        task = by_name[name]
        if task is None:
            res.unknown_tasks[name or "(no task_name)"] += 1
        elif not opts.tasks or task.id in opts.tasks or name in opts.tasks:
            todo.append((row, task))
    if opts.limit is not None:
        todo = todo[: opts.limit]
    res.selected = len(todo)
    res.seconds["selection"] = time.perf_counter() - t_sel

    out(
        valid_text(
            f"release {m.release_id}: {release.where}; index {release.index_where}: {len(release.rows)} rows "
            f"({release.index_bytes / 1e6:.1f} MB) read in {release.seconds['index_fetch']:.2f} s, parsed in "
            f"{release.seconds['index_parse']:.2f} s"
            + (f", {release.not_rows} entries not rows" if release.not_rows else "")
        )
    )
    out(f"selected {len(sel.rows)} scored DeepSWE trials (left out: {sel.describe()})")
    for name, n in sorted(res.unknown_tasks.items()):
        out(
            valid_text(
                f"  task {name!r} is not a task of track {track!r}: {n} trial{'s' if n != 1 else ''} not imported"
            )
        )

    known = set(wd.runs())
    work = []
    for row, task in todo:
        problem = trial_problem(row)
        if problem:
            res.refused += 1
            out(valid_text(f"  FAILED row of task {row.get('task_name')!r}: {problem}"))
            continue
        if run_id(row["trial_name"], f"{FORMAT}\0{row['trial_name']}") in known:
            res.already += 1
            continue
        work.append((row, task))
    downloads = wd.path / DOWNLOADS
    source = (
        f"the mirror {release.mirror}"
        if release.mirror
        else f"{m.artifact_base_url} ({opts.jobs} connections)"
    )
    out(
        f"importing {len(work)} trials from {source} into {wd.path / STAGE1}"
        + (f" ({res.already} already imported)" if res.already else "")
    )

    def one(row: dict, task: Task) -> _Outcome:
        trial = row["trial_name"]
        o = _Outcome(trial)
        try:
            if release.mirror is not None:
                files = read_local(release.mirror, m, row)
            else:
                dl = download_trial(http, m, row, downloads / trial)
                o.fetched, o.requests, o.notes = dl.fetched, dl.requests, list(dl.notes)
                if dl.incomplete:
                    o.incomplete = dl.incomplete
                    return o
                files = download_files(downloads / trial, row, dl)
            files.notes[:0] = o.notes
            o.notes = []
            if files.refused:
                o.failed = files.refused
            elif str(files.absent.get(PATCH, "")).startswith("over its bound"):
                o.failed = f"trial {trial}: {PATCH}: {files.absent[PATCH]}; the state cannot be rebuilt"
            else:
                item = from_release_trial(
                    files, ctx, task, m.release_id, fmap, evidence=release.mirror is not None
                )
                o.notes = list(files.notes)
                try:
                    o.run = write_files(wd, item)  # runs/<id>/: its line comes later, in index order
                except (ValueError, RecursionError, OSError) as exc:
                    shutil.rmtree(wd.run_dir(item.run.id), ignore_errors=True)
                    o.failed = f"trial {trial}: cannot be stored: {type(exc).__name__}: {exc}"[:2000]
        except (
            Exception
        ) as exc:  # whatever a hostile trial makes of the code: that trial fails, the rest goes on
            o.failed = f"trial {trial}: {type(exc).__name__}: {exc}"[:2000]
        return o

    t_work = time.perf_counter()
    progress = Progress(len(work), "trials", label="import", stream=stream)
    pending: list[PredecessorRun] = []  # runs whose files are written; their lines (the commit point) follow
    flushed = [time.monotonic()]

    def flush() -> None:
        append_lines(wd.path / STAGE1, pending)
        pending.clear()
        flushed[0] = time.monotonic()

    def record(o: _Outcome) -> None:
        res.fetched += o.fetched
        res.requests += o.requests
        for n in o.notes:
            progress.note(valid_text(f"  {n}"[:2000]))
        if o.incomplete:
            res.incomplete += 1
            if res.incomplete <= 5:
                progress.note(valid_text(f"  not finished: {o.incomplete}"[:2000]))
            return progress.advance(incomplete=1)
        if o.failed:
            res.refused += 1
            progress.note(valid_text(f"  FAILED {o.failed}"[:2000]))
            return progress.advance(refused=1)
        run = o.run
        pending.append(run)
        if len(pending) >= LINE_BATCH or time.monotonic() - flushed[0] > 1.0:
            flush()
        known.add(run.id)
        res.imported += 1
        n_absent = len([a for a in run.source.get("absent", "").split("; ") if a])
        res.absent += n_absent
        if opts.verbose:
            progress.note(valid_text("  " + describe(run)))
        progress.advance(absent=n_absent)

    # runs are recorded in index order whatever finishes first, so Stage II's "first of its kind"
    # (duplicates) does not depend on -j
    pool = ThreadPoolExecutor(max_workers=opts.jobs)
    with progress:
        try:
            futures = {pool.submit(one, row, task): i for i, (row, task) in enumerate(work)}
            done: dict[int, _Outcome] = {}
            following = 0
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                while following in done:
                    record(done.pop(following))
                    following += 1
        except BaseException:  # Ctrl-C: no new fetches; what is written is kept
            http.aborted = "interrupted"
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            flush()
    res.seconds["trials"] = time.perf_counter() - t_work
    res.seconds["total"] = time.perf_counter() - t_start
    if res.incomplete:
        why = http.aborted or "fetches failed after their retries"
        out(
            valid_text(
                f"  {res.incomplete} trials not finished ({why}): run the same command again to fetch "
                "what is missing"
            )
        )
    rate = res.imported / res.seconds["trials"] if res.seconds["trials"] > 0 and res.imported else 0.0
    out(
        f"imported {res.imported} runs, {res.already} already imported, {res.refused} refused, {res.incomplete} "
        f"not finished; {res.absent} files absent (not published or empty); {res.fetched} files downloaded "
        f"({res.requests} requests) in {duration(res.seconds['trials'])} ({rate:.1f} trials/s); "
        f"{len(wd.runs()) if res.imported or res.already else len(known)} runs in {STAGE1}"
    )
    return res


def import_release_command(wd: WorkDir, args) -> int:
    if args.sources:
        raise InputError(
            f"--format {FORMAT} takes no SOURCE (use --release URL|DIR): got {' '.join(args.sources)}"
        )
    if getattr(args, "agent", None):
        raise InputError(
            f"--agent: only --format tb-leaderboard selects by agent; {FORMAT} has --model, --config"
        )
    opts = Options(
        release=args.release or DEFAULT_RELEASE,
        models=list(args.model),
        configs=list(args.config),
        tasks=list(args.task),
        limit=args.limit,
        jobs=args.jobs,
        family_map=args.family_map,
        model_family=args.model_family,
        tasks_dir=args.tasks_dir,
        verbose=args.verbose,
    )
    return import_release(wd, args.track, opts, stream=sys.stderr).status


__all__ = [
    "FamilyMap",
    "Options",
    "Release",
    "Result",
    "category_ending",
    "from_release_trial",
    "import_release",
    "import_release_command",
]
