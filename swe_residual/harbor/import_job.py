"""`swe-residual import harbor-job`: Harbor / Pier job dirs back into a run dir.

`swe-residual export harbor` turns a track's cases into Harbor task dirs so they can run on Harbor's
cloud sandboxes; this reads the job dirs those runs leave and appends one Record per trial to a run
dir's results.jsonl, with the artifacts and manifest our own runs have, so `swe-residual report` and
`swe-residual gate` work on runs made elsewhere.

* Trials are read with harbor_trials (no symlink followed, every file bounded).
* A trial's case comes from the export: its recorded task names (result.json task_name, the
  config's task name / path) are looked up among export.json's entries, never in its folder name
  (Harbor cuts those to 32 characters); a residual start's `[metadata.swe_residual]` and state patch
  must agree with export.json. The case id is built by runner.Case, exactly as
  `pytest suites/<track> --agent <agent>` builds it, so imported and local runs of one agent name
  compare and merge.
* How a trial ended maps to our taxonomy with the same rules as the predecessor importer
  (sources/endings.py harbor_ending and settle): e.g. AgentTimeoutError is
  `budget` (counted, outcome 0), a model API error `infra_model_service` and VerifierTimeoutError
  `infra_verifier` (no outcome).
* Idempotent: a trial whose id is already in the run dir (its result.json is kept under
  cases/<case>/attempt-N/harbor/) is skipped. New trials of cases the run dir already holds are
  refused unless --append; trials of one case become attempts in order of their start time.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import re
import shutil
import tomllib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from swe_residual import integrity
from swe_residual.errors import RULES, InputError
from swe_residual.harbor.export import EXPORT_FORMAT, METADATA_KEY, PATCH_LIMIT, STATE_DIR
from swe_residual.redact import redact
from swe_residual.results import (
    RESULTS,
    Manifest,
    Record,
    StateFacts,
    TaskFacts,
    append_record,
    iter_records,
)
from swe_residual.run.attempt import Case
from swe_residual.safe_read import Unsafe, list_dir, read_bytes, read_json
from swe_residual.sources.endings import (
    SUBMITTED,
    Ending,
    graded_tests,
    harbor_ending,
    msa_ending,
    outcome_of_reward,
    settle,
)
from swe_residual.sources.harbor_trials import MAX_JSON, HarborTrial, read_trial, trial_dirs
from swe_residual.sources.trajectories import import_trajectory
from swe_residual.states import LoadedState, ResidualState
from swe_residual.tasks import Task, load_task
from swe_residual.trajectory import Trajectory

EXPORT_INDEX = "export.json"
HARBOR_DIR = "harbor"  # the trial's own files, kept in the attempt dir
TRIAL_KEY = "trial-key.txt"  # in HARBOR_DIR: what identifies the trial (re-imports skip it)
MAX_TOML = 1 << 20
LABEL_PART = re.compile(r"[^A-Za-z0-9_.-]+")
NOTE_MAX = 2000


# -- the export: what maps Harbor's task names back to cases ----------------------------------------


@dataclass(frozen=True)
class Exported:
    """One exported task dir, resolved to our task and (residual) state."""

    name: str
    harbor_name: str
    track: str
    start: str
    task: Task  # the exported dir, with our task id
    state: LoadedState | None
    patch: bytes | None  # the state's patch, checked against its sha256


class Export:
    """An export dir: export.json's entries by dir name and Harbor name; task dirs checked on use."""

    def __init__(self, path: Path):
        self.path = Path(path).absolute()
        where = self.path / EXPORT_INDEX
        try:
            index = read_json(self.path, EXPORT_INDEX, MAX_JSON)
        except Unsafe as exc:
            raise InputError(str(exc)) from None
        if index is None:
            raise InputError(
                f"{where}: missing; pass --export with the dir `swe-residual export harbor` wrote"
            )
        if (
            not isinstance(index, dict)
            or index.get("format") != EXPORT_FORMAT
            or not isinstance(index.get("tasks"), list)
        ):
            raise InputError(
                f"{where}: format: not {EXPORT_FORMAT!r} (an index written by swe-residual export harbor)"
            )
        self.entries: dict[str, dict] = {}
        self.by_ref: dict[str, set[str]] = {}
        for i, e in enumerate(index["tasks"]):
            if not isinstance(e, dict) or not all(
                isinstance(e.get(k), str) and e[k] for k in ("name", "harbor_name", "track", "task", "start")
            ):
                raise InputError(f"{where}: tasks[{i}]: needs name, harbor_name, track, task and start")
            if e["start"] not in ("clean", "residual") or "/" in e["name"] or e["name"] in (".", ".."):
                raise InputError(f"{where}: tasks[{i}] ({e['name']!r}): not an exported task dir entry")
            self.entries[e["name"]] = e
            for ref in (e["name"], e["harbor_name"]):
                self.by_ref.setdefault(ref, set()).add(e["name"])
        self._resolved: dict[str, Exported] = {}

    def match(self, refs: list[str]) -> str | None:
        """The entry a trial's recorded task names point to (the first name that names one)."""
        for ref in refs:
            hits = self.by_ref.get(ref, set())
            if len(hits) == 1:
                return next(iter(hits))
        return None

    def resolve(self, name: str) -> Exported:
        if name not in self._resolved:
            self._resolved[name] = self._load(self.entries[name])
        return self._resolved[name]

    def _load(self, e: dict) -> Exported:
        d = self.path / e["name"]
        if dict(list_dir(self.path)).get(e["name"]) != "dir":
            raise InputError(f"{d}: listed in {self.path / EXPORT_INDEX} but not a directory here")
        task = load_task(d, e["track"])
        task = dataclasses.replace(task, id=e["task"])  # a residual dir's own name is not the task id
        meta = self._metadata(d, e)
        if e["start"] == "clean":
            return Exported(e["name"], e["harbor_name"], e["track"], "clean", task, None, None)
        try:
            raw = read_bytes(d, f"environment/{STATE_DIR}/state.patch", PATCH_LIMIT)
        except Unsafe as exc:
            raise InputError(str(exc)) from None
        patch_path = d / "environment" / STATE_DIR / "state.patch"
        if raw is None:
            raise InputError(f"{patch_path}: missing (the residual start's state patch)")
        if hashlib.sha256(raw).hexdigest() != meta["state_patch_sha256"]:
            raise InputError(
                f"{patch_path}: sha256 does not match state_patch_sha256 in {d / 'task.toml'}; "
                "export the track again"
            )
        try:
            entry = ResidualState.model_validate(
                {
                    "id": meta["state_id"],
                    "track": meta["track"],
                    "task": meta["task"],
                    "predecessor": {
                        "agent": meta["predecessor_agent"],
                        "model_family": meta["predecessor_model_family"],
                    },
                    "artifact": {"patch": str(patch_path), "sha256": meta["state_patch_sha256"]},
                    "initial_verdict": {"failing_tests": meta["failing_tests"]},
                }
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(
                f"{d / 'task.toml'}: metadata.{METADATA_KEY}: {'.'.join(map(str, err['loc']))}: {err['msg']}"
            ) from None
        return Exported(
            e["name"], e["harbor_name"], e["track"], "residual", task, LoadedState(entry, patch_path), raw
        )

    def _metadata(self, d: Path, e: dict) -> dict:
        """[metadata.swe_residual] of a residual dir, which must say what export.json says; a clean
        dir (the task's own copy) has none."""
        where = d / "task.toml"
        try:
            raw = read_bytes(d, "task.toml", MAX_TOML)
            meta = tomllib.loads((raw or b"").decode("utf-8")).get("metadata", {}).get(METADATA_KEY)
        except (Unsafe, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError) as exc:
            raise InputError(f"{where}: {exc}") from None
        if e["start"] == "clean":
            if meta is not None:
                raise InputError(
                    f"{where}: metadata.{METADATA_KEY}: set, but {EXPORT_INDEX} lists a clean start"
                )
            return {}
        if not isinstance(meta, dict):
            raise InputError(f"{where}: metadata.{METADATA_KEY}: missing (not an exported residual start)")
        want = {
            "track": e["track"],
            "task": e["task"],
            "start": "residual",
            "state_id": e.get("state_id"),
            "state_patch_sha256": e.get("state_patch_sha256"),
        }
        for key, value in want.items():
            if meta.get(key) != value:
                raise InputError(
                    f"{where}: metadata.{METADATA_KEY}.{key}: {meta.get(key)!r} but {EXPORT_INDEX} "
                    f"says {value!r}"
                )
        return meta


class Exports:
    """The export dirs named with --export, else the one each trial's config records."""

    def __init__(self, given: Iterable[Path]):
        self.given = [Export(p) for p in given]
        self._recorded: dict[Path, Export | None] = {}

    def find(self, t: HarborTrial) -> tuple[Export, str]:
        where = t.path / "result.json"
        named = t.task_refs[0] if t.task_refs else "(none)"
        candidates = self.given or [e for e in [self._from_config(t)] if e is not None]
        if not candidates:
            raise InputError(
                f"{where}: task {named!r}: the task path its config records ({t.task_path or 'none'}) "
                f"is not in an export dir here; pass --export DIR"
            )
        hits = [(x, n) for x in candidates if (n := x.match(t.task_refs)) is not None]
        if len(hits) > 1:
            raise InputError(
                f"{where}: task {named!r} is in several --export dirs ({hits[0][0].path}, "
                f"{hits[1][0].path}); import their jobs separately"
            )
        if not hits:
            dirs = ", ".join(str(x.path) for x in candidates)
            raise InputError(
                f"{where}: task {named!r} (recorded names: {', '.join(t.task_refs) or 'none'}) is not "
                f"in {dirs}; pass the --export DIR these tasks were exported to"
            )
        return hits[0]

    def _from_config(self, t: HarborTrial) -> Export | None:
        if not t.task_path:
            return None
        parent = Path(t.task_path).parent.absolute()
        if parent not in self._recorded:
            self._recorded[parent] = None
            if (parent / EXPORT_INDEX).is_file():
                try:
                    self._recorded[parent] = Export(parent)
                except InputError:
                    pass  # not our index: then the trial names no export and --export is needed
        return self._recorded[parent]


# -- one trial ----------------------------------------------------------------------------------------


def harbor_agent_label(agent: str | None, model: str | None, where: str) -> str:
    """`<agent>` or `<agent>@<model>`: the model without its provider prefix; characters outside
    [A-Za-z0-9_.-] become '-' (e.g. terminus-2 + anthropic/claude-sonnet-4-5 ->
    terminus-2@claude-sonnet-4-5; Harbor's oracle -> oracle)."""

    def part(text: str) -> str:
        return LABEL_PART.sub("-", text).strip("-.")[:64]

    name = part(agent or "")
    if not name:
        raise InputError(f"{where}: agent_info.name: missing; pass --agent NAME")
    short = part((model or "").rstrip("/").rsplit("/", 1)[-1])
    return f"{name}@{short}" if short else name


@dataclass
class Planned:
    """A trial to import: where it is, what it is, and when it started (attempt order)."""

    path: Path
    key: str
    result_sha256: str
    case: Case
    exported: Exported
    started: float
    trial_name: str


def trial_key(t: HarborTrial) -> str:
    """What identifies a trial wherever its dir is copied: TrialResult.id, else its result.json."""
    return t.trial_id or f"sha256:{t.result_sha256}"


def plan_trial(t: HarborTrial, exports: Exports, agent: str | None) -> Planned:
    where = t.path / "result.json"
    if t.multi_step:
        raise InputError(f"{where}: step_results: multi-step trials are not imported")
    if t.verifier_disabled:
        raise InputError(f"{where}: config.verifier.disable: true; a trial without a verifier has no verdict")
    export, name = exports.find(t)
    ex = export.resolve(name)
    label = agent or harbor_agent_label(t.agent_name, t.model_name, str(where))
    case = Case(label, ex.task, ex.start, ex.state)
    started = t.started_at.timestamp() if isinstance(t.started_at, datetime) else float("inf")
    return Planned(t.path, trial_key(t), t.result_sha256, case, ex, started, t.trial_name)


def _ending(t: HarborTrial, notes: list[str]) -> Ending:
    """How the agent's part ended: Harbor's exception (recorded outside the environment), else
    mini-swe-agent's own exit status, as for predecessor runs (residualize/importers.py) - except
    that this file is written inside the environment, so it may make the run a counted failure
    (budget, context, agent error) but never exclude it as infra."""
    ending = harbor_ending(t.exception_type)
    if ending is None or ending.rule == "infra_verifier":
        own = msa_ending(t.agent_exit_status) if t.agent_exit_status is not None else None
        if own is not None and own.rule is not None and not RULES[own.rule].counted:
            notes.append(
                f"agent/mini-swe-agent.trajectory.json says exit_status {t.agent_exit_status[:80]!r} "
                f"({own.rule}); written inside the environment, not trusted to exclude the run"
            )
            own = None
        ending = own if own is not None and own.termination != "submitted" else ending or SUBMITTED
    return ending


def _reward(t: HarborTrial) -> tuple[float | None, list[str]]:
    """Harbor's reward (result.json verifier_result, its parse of verifier/reward.json|txt). The
    files alone count only when the verifier's run finished and result.json has no verifier_result
    (a reward file an agent wrote is removed by Harbor's verifier before it runs)."""
    notes = []
    if t.rewards is not None:
        if t.file_rewards is not None and t.file_rewards != t.rewards:
            notes.append(
                f"verifier/reward file says {t.file_rewards}, result.json {t.rewards}; result.json kept"
            )
        return t.reward, notes
    if t.file_rewards is not None and t.verifier_finished_at is not None:
        notes.append("reward read from the verifier's reward file (result.json has no verifier_result)")
        return t.file_reward, notes
    return None, notes


@dataclass
class Converted:
    key: str
    record: Record
    trajectory: Trajectory | None
    patch: bytes | None
    evidence: dict[str, bytes] = field(default_factory=dict)


def convert(t: HarborTrial, p: Planned, attempt: int) -> Converted:
    """The Record of one trial (artifacts filled in by store)."""
    case, ex = p.case, p.exported
    reward, notes = _reward(t)
    ending = _ending(t, notes)
    outcome, bad_reward = outcome_of_reward(reward)
    if outcome is None and bad_reward is None:
        bad_reward = (
            f"verifier_result.rewards has no `reward` among {sorted(t.rewards)}"
            if t.rewards
            else "result.json has no verifier_result reward"
        )
    verdict, no_verdict = settle(ending, outcome, "infra_verifier", bad_reward)
    tests, tests_note = graded_tests(ex.task, t.tests)
    required = ex.task.grading.required if ex.task.grading is not None else []
    missing = [x for x in required if x not in t.tests] if t.tests is not None and tests_note is None else []
    if verdict["outcome"] is None:  # no valid verdict: no per-test statuses either, as in our runs
        tests, missing, tests_note = {}, [], None
    elif verdict["outcome"] == 1 and any(s != "passed" for s in tests.values()):
        notes.append("reward 1 although the per-test report has graded tests not passing")
    traj = None
    if t.trajectory is not None:
        where = t.path / (t.trajectory_file or "")
        try:
            traj = import_trajectory(t.trajectory, case.agent_label)
            if traj is None:
                notes.append(f"{where}: not an ATIF or mini-swe-agent trajectory; not imported")
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            notes.append(f"{where}: trajectory not imported ({type(exc).__name__}: {str(exc)[:100]})")
    # the same cheat signals and notes as a local run's (run/attempt.py flag), failing closed
    found = (
        integrity.assess_or_flag(t.patch, [], ex.task, ex.patch or b"", name=t.patch_file or "patch")
        if t.patch is not None
        else integrity.Flags()
    )
    exc_line = (
        f"{t.exception_type}: {((t.exception_message or '').strip().splitlines() or [''])[0][:300]}"
        if t.exception_type
        else None
    )
    error = "; ".join(x for x in (exc_line, no_verdict) if x) or None
    all_notes = [*t.notes, *([tests_note] if tests_note else []), *notes]
    record = case.record(
        harness=f"harbor/{t.agent_name}" if t.agent_name else "harbor",
        attempt=attempt,
        backend=f"harbor-{t.environment_type}" if t.environment_type else "harbor",
        termination=ending.termination,
        tests=tests,
        missing_tests=missing,
        steps=len(traj.steps) if traj is not None else None,
        duration_s=t.duration_s,
        agent_duration_s=t.agent_duration_s,
        verify_duration_s=t.verify_duration_s,
        error=redact(error)[:NOTE_MAX] if error else None,
        verdict_note=redact("; ".join(all_notes))[:NOTE_MAX] or None,
        integrity=found.signals,
        integrity_notes=found.notes,
        **verdict,
    )
    if isinstance(t.finished_at, datetime):
        record.finished_at = t.finished_at.timestamp()
    return Converted(p.key, record, traj, t.patch, dict(t.evidence))


def store(run_dir: Path, c: Converted, case: Case) -> Record:
    """Write the attempt's files, then its results.jsonl line (the commit point)."""
    rec = c.record
    art = run_dir / "cases" / case.dir_name / f"attempt-{rec.attempt}"
    shutil.rmtree(art, ignore_errors=True)  # leftovers of an interrupted import
    art.mkdir(parents=True)
    rel = lambda p: str(p.relative_to(run_dir))
    for name, data in c.evidence.items():
        target = art / HARBOR_DIR / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:  # secrets of this machine's environment never reach the run dir (as in our own runs)
            data = redact(data.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            pass
        target.write_bytes(data)
    (art / HARBOR_DIR / TRIAL_KEY).write_text(c.key + "\n", encoding="utf-8")
    rec.artifacts["harbor_result"] = rel(art / HARBOR_DIR / "result.json")
    if c.trajectory is not None:
        c.trajectory.write(art / "trajectory.json")
        rec.artifacts["trajectory"] = rel(art / "trajectory.json")
    if c.patch is not None:
        (art / "final.patch").write_bytes(c.patch)
        rec.artifacts["patch"] = rel(art / "final.patch")
    if "verifier/test-stdout.txt" in c.evidence:
        rec.artifacts["verifier_log"] = rel(art / HARBOR_DIR / "verifier" / "test-stdout.txt")
    append_record(run_dir, rec)
    return rec


# -- the run dir ----------------------------------------------------------------------------------------


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    with open(run_dir / ".import.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def imported_keys(run_dir: Path, records: list[Record]) -> set[str]:
    """Trial keys of the records imported before (each attempt dir keeps its trial's key)."""
    keys: set[str] = set()
    for r in records:
        rel = r.artifacts.get("harbor_result")
        if not rel:
            continue
        try:
            raw = read_bytes(run_dir, str(Path(rel).parent / TRIAL_KEY), 4096)
        except Unsafe:
            continue
        if raw is not None and raw.strip():
            keys.add(raw.decode("utf-8", "replace").strip())
    return keys


def manifest_for(run_dir: Path, planned: list[Planned]) -> Manifest:
    """The run dir's manifest plus the facts of these cases (state patches copied into states/);
    what the run dir already defines stays."""
    new = Manifest(cases=list(dict.fromkeys(p.case.id for p in planned)))
    for p in planned:
        t, s = p.exported.task, p.exported.state
        new.tasks.setdefault(
            f"{t.track}/{t.id}",
            TaskFacts(
                track=t.track, tests=t.grading.required if t.grading else [], solution_files=t.solution_files
            ),
        )
        if s is not None and s.id not in new.states:
            new.states[s.id] = StateFacts(
                track=s.track,
                task=s.task,
                predecessor=s.predecessor.model_dump(),
                failing_tests=s.initial_verdict.failing_tests,
                patch=f"states/{s.id}.patch",
                changed_files=s.changed_files,
            )
    old = Manifest.read(run_dir)
    return Manifest(
        cases=list(dict.fromkeys(old.cases + new.cases)),
        tasks={**new.tasks, **old.tasks},
        states={**new.states, **old.states},
    )


def _check_states(run_dir: Path, planned: list[Planned], manifest: Manifest) -> dict[str, bytes]:
    """State patches to copy; one already in the run dir must be the same bytes."""
    out: dict[str, bytes] = {}
    for p in planned:
        s = p.exported.state
        if s is None or s.id in out:
            continue
        rel = manifest.states[s.id].patch
        there = run_dir / rel
        if there.is_file() and there.read_bytes() != p.exported.patch:
            raise InputError(
                f"{there}: state {s.id} in the run dir is not the exported one "
                f"({p.exported.task.path / 'environment' / STATE_DIR / 'state.patch'}); "
                "choose a new --run-dir"
            )
        out[rel] = p.exported.patch or b""
    return out


@dataclass
class Summary:
    imported: list[Record] = field(default_factory=list)
    skipped: int = 0
    failed: list[str] = field(default_factory=list)


def import_jobs(
    sources: list[str | Path],
    run_dir: Path,
    *,
    exports: Iterable[Path] = (),
    agent: str | None = None,
    append: bool = False,
    out: Callable[[str], None] = print,
) -> Summary:
    """Import every finished trial the SOURCES (job dirs, dirs of jobs, trial dirs) hold into run_dir."""
    run_dir = Path(run_dir)
    found = Exports(exports)
    if agent is not None and not agent.strip():
        raise InputError("--agent: empty")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--run-dir {run_dir}: cannot be created: {exc.strerror or exc}") from None
    summary = Summary()
    with _locked(run_dir):
        existing = list(iter_records(run_dir))
        known = imported_keys(run_dir, existing)
        planned: dict[str, Planned] = {}
        for src in sources:
            try:
                dirs = trial_dirs(Path(src))
            except InputError as exc:
                summary.failed.append(str(exc))
                continue
            for d in dirs:
                try:
                    t = read_trial(d, strict_patch=False)
                    key = trial_key(t)
                    if key in known or key in planned:
                        summary.skipped += 1
                        out(f"  skip {d}: trial {key} already imported")
                        continue
                    planned[key] = plan_trial(t, found, agent)
                except InputError as exc:
                    summary.failed.append(str(exc))
                    out(f"  FAILED {exc}")
        todo = sorted(planned.values(), key=lambda p: (p.case.id, p.started, p.trial_name))
        clash = sorted({p.case.id for p in todo} & {r.case_id for r in existing})
        if clash and not append:
            more = f" (+{len(clash) - 3} more)" if len(clash) > 3 else ""
            raise InputError(
                f"--run-dir {run_dir}: already holds records of {len(clash)} of these cases "
                f"({', '.join(clash[:3])}{more}); pass --append to add the trials as further "
                "attempts, or choose a new --run-dir"
            )
        if not todo:
            return summary
        manifest = manifest_for(run_dir, todo)
        patches = _check_states(run_dir, todo, manifest)
        (run_dir / "states").mkdir(exist_ok=True)
        for rel, data in patches.items():
            (run_dir / rel).write_bytes(data)
        manifest.write(run_dir)
        attempts: dict[str, int] = {}
        for r in existing:
            attempts[r.case_id] = max(r.attempt, attempts.get(r.case_id, 0))
        for p in todo:
            try:
                t = read_trial(p.path, strict_patch=False)
            except InputError as exc:
                summary.failed.append(str(exc))
                out(f"  FAILED {exc}")
                continue
            if t.result_sha256 != p.result_sha256:
                summary.failed.append(f"{p.path / 'result.json'}: changed while importing; import again")
                out(f"  FAILED {summary.failed[-1]}")
                continue
            attempts[p.case.id] = n = attempts.get(p.case.id, 0) + 1
            rec = store(run_dir, convert(t, p, n), p.case)
            summary.imported.append(rec)
            out("  " + describe(rec, p))
    return summary


def describe(r: Record, p: Planned) -> str:
    outcome = "no outcome" if r.outcome is None else f"outcome {r.outcome}"
    return f"{r.case_id} attempt {r.attempt}: {r.verdict}, {outcome} (rule {r.rule}) <- {p.path.name}"


def import_command(args: argparse.Namespace) -> int:
    """`swe-residual import harbor-job`: exit 0 when every trial was imported (or was already), 1
    when some could not be (one line each), 2 for a usage error before anything is written."""
    run_dir = Path(args.run_dir)
    print(f"importing Harbor trials into {run_dir / RESULTS}")
    s = import_jobs(
        list(args.jobs), run_dir, exports=[Path(e) for e in args.export], agent=args.agent, append=args.append
    )
    cases = len({r.case_id for r in s.imported})
    print(
        f"imported {len(s.imported)} trials ({cases} cases), {s.skipped} already imported, {len(s.failed)} failed"
    )
    if s.imported:
        print(f"report: swe-residual report {run_dir}")
    return 1 if s.failed else 0
