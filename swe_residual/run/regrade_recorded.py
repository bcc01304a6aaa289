"""`swe-residual regrade RUN`: grade every recorded final state of a run again, with the current
(or a new) version of its tasks, into a new run dir; no agent runs and the original run is only read.

A repository final state is its recorded final.patch: applied to a fresh instance of the task's
clean state, then graded by the same Verifier and taxonomy as a run's attempt (RegradeAttempt is an
Attempt whose agent phase is the recorded one), so the re-verify policy, the grading channels, the
hardened re-grade and the integrity flags are those of a run. What the agent did (declared
completion, termination, steps, tokens, cost, trajectory) is copied from the original record: a
budget that ran out is still a 0. A final state that cannot be graded again gets one line saying
why: a machine final state (graded in place in the agent's container, which is removed afterwards:
no snapshot of it is kept), a verifier that collects commits (separate mode), a missing or
unreadable patch, a task the tasks dir lacks, a case without a valid attempt.

The new run dir holds the new records, the original manifest and state patches, and
provenance.json with the tasks' new digests and what was re-graded (`regrade`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from swe_residual.agents import Agent
from swe_residual.backends import backend_class, get_backend
from swe_residual.backends.base import Backend
from swe_residual.backends.workspace import FINAL_PATCH_LIMIT, apply_patch
from swe_residual.errors import InfraError, InputError
from swe_residual.registry import BACKENDS
from swe_residual.report.provenance import PROVENANCE, read_provenance
from swe_residual.results import MANIFEST, RESULTS, Manifest, Record, iter_records
from swe_residual.run.attempt import Attempt, Case, RunSettings, case_dir_name
from swe_residual.run.provenance import harness_facts, tree_digest, write_provenance
from swe_residual.run.reference import ReferenceChecks
from swe_residual.run.verifier import Verifier
from swe_residual.safe_read import read_bytes
from swe_residual.states import LoadedState
from swe_residual.tasks import Task, load_tasks

ARTIFACT_LIMIT = 64 << 20  # bytes of a trajectory or interactions file copied from the original run
#: what the agent did, as the original record says: copied into the re-graded record unchanged
AGENT_FACTS = (
    "case_id",
    "agent",
    "harness",
    "track",
    "task",
    "start",
    "state",
    "predecessor",
    "attempt",
    "repeat",
    "declared_complete",
    "termination",
    "steps",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "agent_duration_s",
)
NO_SNAPSHOT = (
    "a machine final state is graded in place, in the agent's own container, which is removed after "
    "grading: no snapshot of it was kept (its interactions are, but a replay would not reproduce it exactly)"
)
COLLECTS_COMMITS = (
    "its task's verifier collects the agent's commits (separate mode, collect hooks), and the run keeps "
    "the final tree as one patch: the commits cannot be made again from it"
)


@dataclass
class _RecordedState:
    """The Residual State a case started from, as the run dir keeps it: its id and patch (what the
    integrity flags need to tell inherited lines from the agent's)."""

    id: str
    patch: bytes
    recorded_predecessor: dict[str, str] | None = None
    kind: str = "patch"

    @property
    def predecessor(self) -> SimpleNamespace:
        """As Case.record reads it (model_dump), the record's own."""
        return SimpleNamespace(model_dump=lambda: dict(self.recorded_predecessor or {}))


@dataclass
class Outcome:
    """What became of one case: re-graded (with the verdict before and after) or why not."""

    case_id: str
    before: str
    after: str | None = None
    why: str | None = None

    def line(self) -> str:
        if self.why is not None:
            return f"not re-gradable: {self.case_id}: {self.why}"
        return f"re-graded: {self.case_id}: {self.before} -> {self.after}"


@dataclass
class RegradeResult:
    out: Path
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def regraded(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.why is None]

    @property
    def moved(self) -> list[Outcome]:
        return [o for o in self.regraded if o.after != o.before]


class RegradeAttempt(Attempt):
    """An Attempt whose start is the recorded final state and whose agent phase is the recorded one:
    no agent runs; verify, flag and grade are a run's own."""

    def __init__(
        self,
        original: Record,
        case: Case,
        settings: RunSettings,
        backend: Backend,
        final_patch: bytes,
        copied: dict[str, tuple[str, bytes]],
    ):
        agent = cast(Agent, SimpleNamespace(harness=original.harness))  # never run: only named
        super().__init__(case, settings, agent=agent, backend=backend, attempt=original.attempt)
        self.final_patch, self.copied = final_patch, copied
        self.artifacts = settings.run_dir / "cases" / case.dir_name / f"attempt-{original.attempt}"
        self.verifier = Verifier(backend, case.task, self.artifacts, settings.references)
        self.record = Record(
            **{k: getattr(original, k) for k in AGENT_FACTS},
            verdict="infra_error",
            backend=backend.name,
            host=backend.host,
            error=original.error if original.termination == "agent_error" else None,
        )

    def materialize(self) -> None:
        """A fresh clean instance with the recorded final patch applied (its final state); the
        original's trajectory, interactions and ignored paths beside it."""
        t0 = time.monotonic()
        for name, (rel_key, data) in self.copied.items():
            (self.artifacts / name).write_bytes(data)
            if rel_key:
                self.record.artifacts[rel_key] = self._rel(self.artifacts / name)
        self.env = self.backend.materialize(self.case.task, None)
        if self.final_patch:
            path = self.artifacts / "recorded-final.patch"
            path.write_bytes(self.final_patch)
            apply_patch(self.env, path, label=f"the recorded final state of {self.record.case_id}")
            path.unlink()
        self.env.start_patch, self.env.touched = self.final_patch, False  # the state graded: these bytes
        self.verifier.get_ready(self.settings.regrade_mode)
        self._timed("materialize", t0)

    def run_agent(self) -> None:
        """No agent runs: what it did is the original record's (copied in __init__)."""
        self.verifier.agent_stopped(self._environment())


def _verdict(rec: Record | None) -> str:
    if rec is None or not rec.valid:
        return "no valid verdict"
    return "pass" if rec.outcome == 1 else "fail"


def _last_valid(records: list[Record]) -> dict[str, Record | None]:
    """Per case id (in file order): its latest valid record, None when no attempt was valid."""
    out: dict[str, Record | None] = {}
    for r in records:
        if r.valid:
            out[r.case_id] = r
        else:
            out.setdefault(r.case_id, None)
    return out


class _Tasks:
    """The tasks of the tracks the run has: --tasks-dir for every track, else each track's own."""

    def __init__(self, tasks_dir: str | None):
        self.tasks_dir = tasks_dir
        self.tracks: dict[str, dict[str, Task] | str] = {}

    def get(self, track: str, task: str) -> Task | str:
        """The task, or why there is none."""
        if track not in self.tracks:
            from swe_residual.tracks import suite_dir, tasks_dir_for

            try:
                where = (
                    Path(self.tasks_dir).resolve()
                    if self.tasks_dir
                    else tasks_dir_for(suite_dir(track, f"track {track!r} of the run"), None)
                )
                if where is None:
                    raise InputError(f"track {track}: no tasks here (swe-residual tasks fetch {track})")
                self.tracks[track] = load_tasks(where, track)
            except InputError as exc:
                self.tracks[track] = str(exc)
        found = self.tracks[track]
        if isinstance(found, str):
            return found
        return found.get(task) or f"task {task!r} of track {track!r} is not in the tasks dir"


def _artifact(source: Path, rec: Record, key: str, limit: int) -> bytes | None | str:
    """The bytes of a record's artifact in the source run (None: not recorded), or why they cannot be
    read (a link, a path outside the run dir, a file over `limit`)."""
    rel = rec.artifacts.get(key)
    if not rel:
        return None
    try:
        data = read_bytes(source, rel, limit)
    except Exception as exc:  # noqa: BLE001 - hostile run dir: links, dirs, sizes
        return f"artifacts.{key} ({rel[:200]}): {str(exc)[:300]}"
    return data if data is not None else f"artifacts.{key} ({rel[:200]}): missing from the run dir"


def regrade_run(
    source: Path,
    out: Path,
    *,
    tasks_dir: str | None = None,
    backend: str | None = None,
    say: Callable[[str], None] = print,
) -> RegradeResult:
    """Grade every case of the run in `source` again into the new run dir `out` (see the module)."""
    source = Path(source)
    if not (source / RESULTS).is_file():
        raise InputError(f"{source}: no {RESULTS} (not a run dir)")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"--out {out}: not empty; choose a new dir for the re-graded run")
    bad: list[str] = []
    records = list(iter_records(source, bad))
    manifest = _manifest(source)
    before, why_none = read_provenance(source)
    chosen = _last_valid(records)
    name = backend or _recorded_backend(before, records)
    if backend is None and name not in BACKENDS:
        raise InputError(
            f"{source / PROVENANCE}: backend: {name[:80]!r} is no backend ({', '.join(BACKENDS)}); pass --backend"
        )
    backend_class(name).check_available(backend_class(name).hosts(None))
    out.mkdir(parents=True, exist_ok=True)
    result = RegradeResult(out.resolve())
    settings = RunSettings(out.resolve(), ReferenceChecks(out.resolve()))
    tasks = _Tasks(tasks_dir)
    states = _copy_states(source, out, manifest)
    used: dict[str, Task] = {}
    engine = get_backend(name, run_id=f"regrade-{out.name}")
    try:
        for case_id, rec in chosen.items():
            o = _one(source, rec, case_id, tasks, states, settings, engine, used)
            result.outcomes.append(o)
            say(o.line())
    finally:
        engine.close()
    if not (out / RESULTS).exists():
        (out / RESULTS).touch()
    _write_provenance(out, source, before, why_none, name, used, result, bad)
    return result


def _one(
    source: Path,
    rec: Record | None,
    case_id: str,
    tasks: _Tasks,
    states: dict[str, bytes],
    settings: RunSettings,
    engine: Backend,
    used: dict[str, Task],
) -> Outcome:
    if rec is None:
        return Outcome(
            case_id, "no valid verdict", why="no valid attempt was recorded: no graded final state"
        )
    o = Outcome(case_id, _verdict(rec))
    task = tasks.get(rec.track, rec.task)
    if isinstance(task, str):
        o.why = task
        return o
    if task.kind == "machine":
        o.why = NO_SNAPSHOT
        return o
    if task.verify_mode == "separate":
        o.why = COLLECTS_COMMITS
        return o
    if engine.name == "local" and task.repository_dir is None:
        o.why = (
            f"task {task.id} ships no repository: the local backend cannot grade it (use --backend docker)"
        )
        return o
    patch = _artifact(source, rec, "patch", FINAL_PATCH_LIMIT)
    if patch is None or isinstance(patch, str):
        o.why = patch or "no final patch was recorded (artifacts.patch)"
        return o
    state = None
    if rec.state is not None and not rec.start.startswith("clean"):
        if rec.state not in states:
            o.why = f"its state {rec.state!r} has no patch in the run dir ({MANIFEST}: states)"
            return o
        state = cast(LoadedState, _RecordedState(rec.state, states[rec.state], rec.predecessor))
    copied: dict[str, tuple[str, bytes]] = {}
    for key, file in (
        ("trajectory", "trajectory.json"),
        ("interactions", "interactions.jsonl"),
        ("ignored", "final.ignored"),
    ):
        data = _artifact(source, rec, key, ARTIFACT_LIMIT)
        if isinstance(data, bytes):
            copied[file] = ("" if key == "ignored" else key, data)
    start = rec.start.split("+", 1)
    case = Case(rec.agent, task, start[0], state, start[1] if len(start) > 1 else None, rec.repeat)
    used[f"{task.track}/{task.id}"] = task
    try:
        engine.prepare(task, [])
        new = RegradeAttempt(rec, case, settings, engine, patch, copied).run()
    except InfraError as exc:
        o.why = f"the re-grade ended in an infrastructure error ({exc.rule}): {str(exc)[:300]}"
        return o
    except (OSError, ValueError) as exc:  # a record's values no dir or record can take (hostile input)
        o.why = f"the re-grade could not be recorded ({type(exc).__name__}: {str(exc)[:300]})"
        return o
    o.after = _verdict(new)
    return o


def _manifest(source: Path) -> Manifest:
    raw = read_bytes(source, MANIFEST, 256 << 20)
    if raw is None:
        return Manifest()
    try:
        return Manifest.model_validate_json(raw)
    except ValueError as exc:
        raise InputError(
            f"{source / MANIFEST}: not a run manifest ({str(exc).splitlines()[0][:200]})"
        ) from None


def _copy_states(source: Path, out: Path, manifest: Manifest) -> dict[str, bytes]:
    """The manifest, and the state patches it names, into the new run dir; {state id: patch}."""
    patches: dict[str, bytes] = {}
    for sid, facts in manifest.states.items():
        if not facts.patch:
            continue
        try:
            data = read_bytes(source, facts.patch, FINAL_PATCH_LIMIT)
        except Exception:  # noqa: BLE001 - a link or a path outside the run: left out
            data = None
        if data is None:
            continue
        rel = Path("states") / f"{case_dir_name(sid)}.patch"
        (out / "states").mkdir(exist_ok=True)
        (out / rel).write_bytes(data)
        facts.patch = rel.as_posix()
        patches[sid] = data
    manifest.write(out)
    return patches


def _recorded_backend(before: dict[str, Any] | None, records: list[Record]) -> str:
    """The backend the run was made on: its provenance's, else its records', else local."""
    if before and isinstance(before.get("backend"), str):
        return before["backend"]
    named = [r.backend for r in records if r.backend]
    return named[-1] if named else "local"


def _sha256(path: Path) -> str | None:
    try:
        return (
            hashlib.sha256(path.read_bytes()).hexdigest()
            if path.is_file() and not path.is_symlink()
            else None
        )
    except OSError:
        return None


def _write_provenance(
    out: Path,
    source: Path,
    before: dict[str, Any] | None,
    why_none: str | None,
    backend: str,
    used: dict[str, Task],
    result: RegradeResult,
    bad: list[str],
) -> None:
    """The new run's provenance.json: the tasks' digests now, the original's states and agents (no
    agent ran), this harness and backend, and what was re-graded from which run."""
    before = before or {}
    content = {
        "schema": before.get("schema", 1),
        "harness": harness_facts(),
        "backend": backend,
        "tasks": {key: tree_digest(t.path) for key, t in sorted(used.items())},
        "states": before.get("states", {}),
        "agents": before.get("agents", {}),
        "regrade": {
            "source": {
                "name": source.resolve().name,
                "results_sha256": _sha256(source / RESULTS),
                "provenance_sha256": _sha256(source / PROVENANCE),
                "provenance_note": why_none,
            },
            "tasks_before": before.get("tasks", {}),
            "unreadable_lines": len(bad),
            "cases": {
                o.case_id: ("re-graded" if o.why is None else f"not re-gradable: {o.why}")
                for o in result.outcomes
            },
        },
    }
    write_provenance(out, json.loads(json.dumps(content, default=str)))
