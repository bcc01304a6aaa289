"""Stage IV: rebuild every kept candidate from the clean state and validate it.

A candidate becomes a state only if its patch applies at the task's base commit (else
rebuild_failed), the rebuilt environment is usable - it starts and runs a command, and the
verifier runs (else env_unusable) - and the original verifier gives it a valid 0 with failing
tests (else no_valid_verdict, or no_longer_failing when it passes). Included states are added to
the states file with their patch beside it and the failing tests just measured.

At scale: candidates are grouped by task and each task's images are prepared once for all of its
candidates, then its candidates are validated, -j at a time, with a progress line and per-stage
timings kept in each outcome. Every outcome is recorded as soon as it is decided (an included
state is added to the states file first, then its stage4.jsonl line), so a build that dies loses
nothing already decided and a rerun skips what has an outcome.

The states file is only ever added to, as text: its comments and formatting stay byte for byte
(StatesTarget). A candidate whose patch is byte-identical to a state of its task already there is
skipped with one line and counted (it gets no outcome: it was not built into this file).

A machine-track candidate is rebuilt from its interactions: replayed twice into fresh task
containers and snapshotted (docs/machine-track.md). A replay that does not reproduce the
recording, or two replays that differ, is rebuild_failed; a restore whose processes do not come
back is env_unusable. The snapshot method used is kept in the state's provenance.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import hashlib
import os
import re
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import yaml

from swe_residual.agents import AgentRegistry
from swe_residual.backends.base import Backend
from swe_residual.errors import InfraError, InputError, PatchApplyError, ReplayError
from swe_residual.patches import parse_patch
from swe_residual.progress import Progress, duration
from swe_residual.residualize.filter import candidates
from swe_residual.residualize.importers import UNREPLAYABLE
from swe_residual.residualize.records import BuildOutcome, PredecessorRun
from swe_residual.residualize.status import write_construction
from swe_residual.residualize.workdir import STAGE4, WorkDir
from swe_residual.results import RESULTS
from swe_residual.run.attempt import Case
from swe_residual.run.patchcheck import state_patch_problems
from swe_residual.run.plan import Plan, Track
from swe_residual.run.session import RunSession, SessionOptions
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
HEADER = (
    "# Residual States (swe-residual states schema prints the schema); paths are relative to this file.\n"
)
DEFAULT_STATES = Path("states") / "states.yaml"  # in the work dir, unless --states says otherwise
# per candidate, after its task's images: a machine state's "state" splits into the two replays and
# the snapshot (settle, digest, commit, compare); probe + verify validate the rebuilt state
STAGES = ("state", "replay", "snapshot", "probe", "verify")
SLOWEST = 5


def state_id(run: PredecessorRun) -> str:
    """The run's id, prefixed with its task's name unless the id already names the task (Harbor's
    trial names start with the task name cut short: `<task, cut>__<random>`)."""
    head = run.id.split("__", 1)[0]
    names_task = run.task in run.id or (len(head) >= 8 and run.task.startswith(head))
    name = run.id if names_task else f"{run.task}--{run.id}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:120]


def states_path_of(wd: WorkDir, args: argparse.Namespace) -> Path:
    return Path(args.states).resolve() if getattr(args, "states", None) else wd.path / DEFAULT_STATES


# -- the states file: read once, added to as text ---------------------------------------------------


class StatesTarget:
    """The states file a build adds to. Its entries are read once; new ones are added as text
    after the last entry (or in place of an empty `states: []`), never by dumping the YAML again,
    so comments, order, quoting and layout stay as they were. Every addition is checked by loading
    the result back: the old entries unchanged plus the new one, else nothing is written."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[dict] = []
        if path.is_file():
            raw = read_yaml(path, "states file")
            if not isinstance(raw, dict) or not isinstance(raw.get("states") or [], list):
                raise InputError(
                    f"{path}: not a states file (a mapping with a `states:` list); pass another --states"
                )
            self.entries = [e for e in raw.get("states") or [] if isinstance(e, dict)]

    def by_id(self, sid: str) -> dict | None:
        return next((e for e in self.entries if e.get("id") == sid), None)

    def same_patch(self, track: str, task: str, sha: str) -> str | None:
        """The id of a state of this task whose artifact is byte-identical (same sha256)."""
        for e in self.entries:
            art = e.get("artifact") if isinstance(e.get("artifact"), dict) else {}
            if e.get("track") == track and e.get("task") == task and art.get("sha256") == sha:
                return str(e.get("id"))
        return None

    def add(self, entry: dict) -> None:
        lock = self.path.with_name(f".{self.path.name}.lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            old = self.path.read_text(encoding="utf-8") if self.path.is_file() else ""
            new = appended(old, [entry], self.path)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(new, encoding="utf-8")
            if self.path.is_file():
                shutil.copymode(self.path, tmp)
            os.replace(tmp, self.path)
        finally:
            os.close(fd)
        self.entries.append(entry)


def _dump_items(entries: list[dict], indent: int) -> str:
    text = yaml.safe_dump(entries, sort_keys=False, width=120, allow_unicode=True)
    return "".join(" " * indent + line if line.strip() else line for line in text.splitlines(keepends=True))


def _line_after(text: str, index: int) -> int:
    """The index of the start of the line after the one holding text[index - 1]."""
    if index > 0 and text[index - 1] == "\n":
        return index
    nl = text.find("\n", index)
    return len(text) if nl < 0 else nl + 1


def _last_leaf_end(node: yaml.Node) -> int:
    if isinstance(node, yaml.ScalarNode):
        return node.end_mark.index
    children = [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else node.value
    return max((_last_leaf_end(c) for c in children), default=node.end_mark.index)


def appended(old: str, entries: list[dict], path: Path) -> str:
    """`old` (a states file's text) with `entries` added to its states list, as text."""
    body = old if not old or old.endswith("\n") else old + "\n"
    try:
        root = yaml.compose(old, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if root is None:  # empty, or comments only
        new = (body or HEADER) + "states:\n" + _dump_items(entries, 0)
    elif not isinstance(root, yaml.MappingNode):
        raise InputError(f"{path}: not a states file (a mapping with a `states:` list)")
    else:
        pair = next(
            ((k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "states"), None
        )
        if pair is None:
            new = body + "states:\n" + _dump_items(entries, 0)
        else:
            key, value = pair
            flow = old[value.start_mark.index : value.start_mark.index + 1] == "["
            if isinstance(value, yaml.SequenceNode) and value.value and not flow:
                at = _line_after(old, _last_leaf_end(value.value[-1]))
                indent = (
                    value.value[0].start_mark.column - 2
                    if isinstance(value.value[0], yaml.MappingNode)
                    else value.start_mark.column
                )
                indent = max(indent, 0)
                head = old[:at] if old[:at].endswith("\n") or not old[:at] else old[:at] + "\n"
                new = head + _dump_items(entries, indent) + old[at:]
            elif (isinstance(value, yaml.SequenceNode) and not value.value and flow) or (
                isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null")
            ):
                # `states: []` or an empty `states:`: the value goes, the entries follow its line
                start, end = value.start_mark.index, value.end_mark.index
                rest = _line_after(old, end)
                line = old[:start] + old[end:rest]
                line = line if line.endswith("\n") else line + "\n"
                new = line + _dump_items(entries, key.start_mark.column) + old[rest:]
            else:
                raise InputError(
                    f"{path}: states: entries can be added only to a block list (`states:` then "
                    "`- id: ...` lines) or an empty one; pass another --states"
                )
    check_appended(old, new, entries, path)
    return new


def check_appended(old: str, new: str, entries: list[dict], path: Path) -> None:
    """The new text loads as the old one plus the entries, nothing else changed."""
    before = yaml.safe_load(old) or {} if old.strip() else {}
    after = yaml.safe_load(new) or {}
    want = {**before, "states": list(before.get("states") or []) + entries}
    if after != want:
        raise InputError(
            f"{path}: the new states could not be added as text without changing what the file "
            "holds (an unusual layout); nothing written - pass another --states"
        )


# -- one candidate ------------------------------------------------------------------------------------


def _loaded(
    run: PredecessorRun, wd: WorkDir, states_path: Path, machine: bool = False, volatile: tuple[str, ...] = ()
) -> LoadedState:
    """The candidate as a state entry, its patch (or interactions) copied beside the states file;
    `volatile`: a machine state's paths that change by themselves (left out of its digest)."""
    sid = state_id(run)
    rel = Path("states") / run.track / run.task / (f"{sid}.interactions.jsonl" if machine else f"{sid}.patch")
    dest = states_path.parent / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(wd.interactions_bytes(run) if machine else wd.patch_bytes(run))
    traj_rel, traj_dest = None, None
    source = wd.file(run.trajectory)
    if source is not None and source.is_file():  # what --handoff-view shows the continuation
        traj_rel = rel.with_name(f"{sid}.trajectory.json")
        traj_dest = states_path.parent / traj_rel
        shutil.copyfile(source, traj_dest)
    traj = str(traj_rel) if traj_rel else None
    artifact = (
        Artifact(
            interactions=str(rel), sha256=sha256_file(dest), trajectory=traj, volatile_paths=list(volatile)
        )
        if machine
        else Artifact(patch=str(rel), sha256=sha256_file(dest), trajectory=traj)
    )
    entry = ResidualState(
        id=sid,
        track=run.track,
        task=run.task,
        predecessor=Predecessor(**run.predecessor.model_dump()),
        artifact=artifact,
        provenance={
            "source_run": run.id,
            **{f"source_{k}": v for k, v in run.source.items()},
            "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        },
        initial_verdict=InitialVerdict(failing_tests=PENDING_TESTS),
    )
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


class Clock:
    """Seconds per stage of one candidate."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self._stage, self._t = None, 0.0

    def stage(self, name: str) -> None:
        self.stop()
        self._stage, self._t = name, time.monotonic()

    def stop(self) -> dict[str, float]:
        if self._stage is not None:
            self.timings[self._stage] = round(time.monotonic() - self._t, 3)
            self._stage = None
        return self.timings

    def split(self, stage: str, **parts: float) -> None:
        """Count `parts` (seconds measured inside the running `stage`) apart from it."""
        for name, seconds in parts.items():
            self.timings[name] = round(self.timings.get(name, 0.0) + seconds, 3)
        self._t += sum(parts.values())  # what is left of the stage, when it stops


def validate_candidate(
    session: RunSession, case: Case, run: PredecessorRun, clock: Clock | None = None
) -> BuildOutcome | None:
    """The Stage IV outcome of one candidate; None when the harness itself failed (try again later)."""
    state = case.state
    clock = clock or Clock()

    def out(result: str, detail: str = "", **kw) -> BuildOutcome:
        return BuildOutcome(
            candidate=run.id, result=result, detail=detail[:1000], timings=dict(clock.stop()), **kw
        )

    try:
        clock.stage("state")
        asked = time.time()
        session.backend.prepare(case.task, [state])  # a machine state: its snapshot built here
        if state.kind == "machine":
            snap = session.backend.snapshot(case.task, state)
            state.entry.provenance = {**(state.entry.provenance or {}), "snapshot": snap.method}
            if snap.built_at >= asked:  # built now, not found in the engine's cache
                clock.split("state", replay=snap.replay_s, snapshot=snap.snapshot_s - snap.replay_s)
            if not snap.deterministic:
                return out(
                    "rebuild_failed", "two replays of its interactions differ: " + "; ".join(snap.differences)
                )
        clock.stage("probe")
        problem = _usable(session.backend, case.task, state)
    except (PatchApplyError, ReplayError) as exc:
        return out("rebuild_failed", str(exc))
    except InfraError as exc:
        return out("env_unusable", f"the rebuilt state does not start: {exc}")
    if problem:
        return out("env_unusable", problem)
    try:
        clock.stage("verify")
        record = session.run(case, grade_uncommitted=True)
    except InfraError as exc:
        rec = getattr(exc, "record", None)
        if rec is not None and rec.rule == "infra_verifier":
            return out("no_valid_verdict", f"the verifier gave no valid verdict: {exc}")
        clock.stop()
        print(f"  {run.id}: harness failure, not decided (run build again): {exc}", flush=True)
        return None
    failing = sorted(t for t, s in record.tests.items() if s != "passed")
    if record.outcome == 1:
        return out("no_longer_failing", "every hidden test passes on the rebuilt state")
    if record.rule != "verdict" or not failing:
        return out(
            "no_valid_verdict",
            f"outcome 0 without failing hidden tests (rule {record.rule}"
            + (f"; {record.verdict_note}" if record.verdict_note else "")
            + ")",
        )
    if set(record.missing_tests) >= set(record.tests):
        return out(
            "no_valid_verdict",
            "the verifier wrote no per-test report on the rebuilt state (only a reward "
            "of 0): no failing tests to record",
        )
    return out(
        "included",
        f"{len(failing)} of {len(record.tests)} hidden tests fail",
        state=state.id,
        failing_tests=failing,
        # without a graded test list (Terminal-Bench), the passing ones make the pass rate countable
        passing_tests=sorted(t for t, s in record.tests.items() if s == "passed")
        if case.task.grading is None
        else [],
    )


def state_entry(state: LoadedState, outcome: BuildOutcome) -> dict:
    """The states-file entry of an included state, with the failing tests just measured."""
    entry = state.entry.model_copy(
        update={
            "initial_verdict": InitialVerdict(
                failing_tests=outcome.failing_tests, passing_tests=outcome.passing_tests
            )
        }
    )
    dumped = entry.model_dump(mode="json", exclude_none=True)
    if not dumped["initial_verdict"].get("passing_tests"):
        dumped["initial_verdict"].pop("passing_tests", None)  # repository states: as before
    return dumped


# -- a track's candidates -------------------------------------------------------------------------------


class Build:
    """One `build` of one track: what it decided, skipped and how long each stage took."""

    def __init__(self, wd: WorkDir, track: str, target: StatesTarget, progress: Progress | None = None):
        self.wd, self.track, self.target, self.progress = wd, track, target, progress
        self.counts: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.outcomes: list[BuildOutcome] = []
        self.task_images: dict[str, float] = {}

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.note(text)
        else:
            print(text, flush=True)

    def record(self, outcome: BuildOutcome, state: LoadedState | None = None) -> None:
        """Decided: an included state goes into the states file first, then its stage4.jsonl line."""
        if outcome.result == "included" and state is not None:
            self.target.add(state_entry(state, outcome))
        self.wd.append(STAGE4, outcome)
        self.outcomes.append(outcome)
        self.counts[outcome.result] = self.counts.get(outcome.result, 0) + 1
        took = sum(v for k, v in outcome.timings.items() if k in STAGES)
        self.say(
            f"  {outcome.candidate}: {outcome.result}"
            + (f" - {outcome.detail}" if outcome.detail else "")
            + (f" ({took:.1f} s)" if outcome.timings else "")
        )
        if self.progress is not None:
            self.progress.advance(**{outcome.result: 1})

    def skip(self, run: PredecessorRun, why: str, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1
        self.say(f"  skip {run.id}: {why}")
        if self.progress is not None:
            self.progress.advance(skipped=1)


def build_track(
    wd: WorkDir,
    track: str,
    runs: list[PredecessorRun],
    args: argparse.Namespace,
    target: StatesTarget | None = None,
    progress: Progress | None = None,
) -> Build:
    from swe_residual.run.plan import default_backend

    tasks = wd.tasks(track, args.tasks_dir)
    states_path = states_path_of(wd, args)
    target = target or StatesTarget(states_path)
    build = Build(wd, track, target, progress)

    loaded: dict[str, tuple[PredecessorRun, LoadedState]] = {}
    batch: dict[tuple[str, str], str] = {}  # (task, artifact sha) -> candidate, this build
    for run in runs:
        if run.task not in tasks:
            raise InputError(
                f"candidate {run.id}: task {run.task!r} is not in the tasks dir of track {track!r}"
            )
        machine = tasks[run.task].kind == "machine"
        data = wd.interactions_bytes(run) if machine else wd.patch_bytes(run)
        if machine and not data.strip():
            build.record(
                BuildOutcome(
                    candidate=run.id,
                    result="rebuild_failed",
                    detail="no interactions to rebuild the state from",
                )
            )
            continue
        if machine and run.source.get(UNREPLAYABLE):
            # never a state rebuilt from part of a run: Table 5's "command replay failed"
            build.record(
                BuildOutcome(
                    candidate=run.id,
                    result="rebuild_failed",
                    detail=f"command replay failed: {run.source[UNREPLAYABLE]}",
                )
            )
            continue
        if not machine and not parse_patch(data):
            build.record(
                BuildOutcome(
                    candidate=run.id, result="rebuild_failed", detail="no patch to rebuild the state from"
                )
            )
            continue
        sha, sid = hashlib.sha256(data).hexdigest(), state_id(run)
        there = target.by_id(sid)
        if there is not None:
            art = there.get("artifact") if isinstance(there.get("artifact"), dict) else {}
            prov = there.get("provenance") if isinstance(there.get("provenance"), dict) else {}
            verdict = there.get("initial_verdict") if isinstance(there.get("initial_verdict"), dict) else {}
            if art.get("sha256") == sha and prov.get("source_run") == run.id and verdict.get("failing_tests"):
                # written by a build that stopped before its stage4.jsonl line: decided already
                build.record(
                    BuildOutcome(
                        candidate=run.id,
                        result="included",
                        state=sid,
                        detail=f"already in {states_path} (added by a build that stopped before "
                        "recording it)",
                        failing_tests=list(verdict["failing_tests"]),
                        passing_tests=list(verdict.get("passing_tests") or []),
                    )
                )
            else:
                build.skip(
                    run,
                    f"state id {sid} is already in {states_path} with another patch or source; "
                    "not added (pass another --states, or remove that entry)",
                    "id_taken",
                )
            continue
        same = target.same_patch(track, run.task, sha) or batch.get((run.task, sha))
        if same is not None:
            build.skip(
                run,
                f"its patch is byte-identical to state {same} of task {run.task} already in "
                f"{states_path}; not added again",
                "identical_patch",
            )
            continue
        batch[(run.task, sha)] = sid
        loaded[run.id] = (
            run,
            _loaded(run, wd, states_path, machine, tuple(getattr(args, "volatile", ()) or ())),
        )
    problems = state_patch_problems([s for _, s in loaded.values()], lambda s: tasks[s.task])
    for run_id, (_run, s) in list(loaded.items()):
        if s.id in problems:
            s.artifact_path.unlink(missing_ok=True)
            build.record(BuildOutcome(candidate=run_id, result="rebuild_failed", detail=problems[s.id]))
            del loaded[run_id]
    if not loaded:
        return build
    cases = {run_id: Case("nop", tasks[run.task], "residual", s) for run_id, (run, s) in loaded.items()}
    plan = Plan(
        tracks={track: Track(track, None, tasks)},
        states=[s for _, s in loaded.values()],
        cases=list(cases.values()),
        registry=AgentRegistry(),
    )
    n = len(list((wd.path / "stage4-runs").glob("build-*"))) + 1
    run_dir = wd.path / "stage4-runs" / f"build-{n}"
    backend = args.backend or default_backend(track)
    session = RunSession.open(
        plan,
        run_dir,
        SessionOptions(backend=backend, infra_retries=1, run_id=f"residualize-{run_dir.name}"),
        resume=(run_dir / RESULTS).is_file(),
    )
    by_task: dict[str, list[str]] = {}
    for run_id, (run, _) in loaded.items():
        by_task.setdefault(run.task, []).append(run_id)
    build.say(
        f"stage IV: rebuilding {len(cases)} candidates of {len(by_task)} tasks of track {track} on the "
        f"{backend} backend, {max(1, args.jobs)} at a time (runs: {run_dir})"
    )
    try:
        _schedule(session, build, tasks, by_task, cases, loaded, max(1, args.jobs))
    finally:
        session.close()
    if build.counts.get("included"):
        load_states(states_path, {track: tasks}, tracks={track})  # what we wrote loads back
    return build


def _schedule(
    session: RunSession,
    build: Build,
    tasks: dict[str, Task],
    by_task: dict[str, list[str]],
    cases: dict[str, Case],
    loaded: dict[str, tuple[PredecessorRun, LoadedState]],
    jobs: int,
) -> None:
    """At most `jobs` at once: a task's images first (once for all its candidates), then its
    candidates; a free worker takes a ready candidate before the next task's images. Outcomes are
    recorded here, in this thread, as each one is decided."""
    todo_tasks = list(by_task)
    ready: list[str] = []
    running: dict[Future, tuple[str, str]] = {}
    task_failed: dict[str, str] = {}
    task_images_s: dict[str, float] = {}

    def prepare_task(task_id: str) -> float:
        t = time.monotonic()
        session.backend.prepare(tasks[task_id], [])
        return time.monotonic() - t

    def one(run_id: str) -> BuildOutcome | None:
        return validate_candidate(session, cases[run_id], loaded[run_id][0])

    def drop(run_id: str) -> None:
        s = loaded[run_id][1]
        s.artifact_path.unlink(missing_ok=True)
        if s.trajectory_path is not None:
            s.trajectory_path.unlink(missing_ok=True)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while todo_tasks or ready or running:
                while len(running) < jobs and (ready or todo_tasks):
                    if ready:
                        run_id = ready.pop(0)
                        running[pool.submit(one, run_id)] = ("candidate", run_id)
                    else:
                        task_id = todo_tasks.pop(0)
                        running[pool.submit(prepare_task, task_id)] = ("task", task_id)
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    kind, key = running.pop(fut)
                    if kind == "task":
                        try:
                            task_images_s[key] = round(fut.result(), 3)
                            build.task_images[key] = task_images_s[key]
                            build.say(
                                f"  task {key}: images ready in {duration(task_images_s[key])} "
                                f"for {len(by_task[key])} candidates"
                            )
                            ready.extend(by_task[key])
                        except InfraError as exc:
                            task_failed[key] = str(exc)
                            for run_id in by_task[key]:
                                drop(run_id)
                                build.record(
                                    BuildOutcome(
                                        candidate=run_id,
                                        result="env_unusable",
                                        detail=f"the task's environment could not be prepared: {exc}"[:1000],
                                    )
                                )
                        continue
                    outcome = fut.result()
                    if outcome is None:
                        drop(key)
                        if build.progress is not None:
                            build.progress.advance(undecided=1)
                        continue
                    task_id = loaded[key][0].task
                    outcome.timings = {"task_images": task_images_s.get(task_id, 0.0), **outcome.timings}
                    if outcome.result != "included":
                        drop(key)
                    build.record(outcome, loaded[key][1])
        except BaseException:
            for fut in running:
                fut.cancel()
            raise


def timing_lines(outcomes: list[BuildOutcome], task_images: dict[str, float], wall: float) -> list[str]:
    """Total per stage (task images counted once per task), and the slowest candidates."""
    timed = [o for o in outcomes if o.timings]
    if not timed and not task_images:
        return []
    # stages no candidate went through (a repository track has no replay) are left out
    totals = {
        s: sum(o.timings.get(s, 0.0) for o in timed) for s in STAGES if any(s in o.timings for o in timed)
    }
    lines = [
        f"stage IV timings ({len(timed)} candidates, {len(task_images)} tasks, {duration(wall)} wall): "
        f"task images {sum(task_images.values()):.1f} s, "
        + ", ".join(f"{s} {total:.1f} s" for s, total in totals.items())
    ]
    own = lambda o: sum(o.timings.get(s, 0.0) for s in STAGES)
    slow = sorted(timed, key=own, reverse=True)[:SLOWEST]
    if slow:
        lines.append(
            "slowest: "
            + "; ".join(
                f"{o.candidate} {own(o):.1f} s ("
                + ", ".join(f"{s} {o.timings[s]:.1f}" for s in STAGES if s in o.timings)
                + ")"
                for o in slow
            )
        )
    return lines


def build_command(wd: WorkDir, args: argparse.Namespace) -> int:
    from swe_residual.residualize.review import review_outcomes

    outcomes, built = review_outcomes(wd), wd.builds()
    kept = [
        r
        for r in candidates(wd)
        if outcomes.get(r.id) == "kept"
        and r.id not in built
        and (args.track is None or r.track == args.track)
    ]
    states_path = states_path_of(wd, args)
    done = sum(1 for r in candidates(wd) if outcomes.get(r.id) == "kept" and r.id in built)
    if not kept:
        pending = sum(1 for v in outcomes.values() if v == "pending")
        print(
            "stage IV: nothing to build"
            + (f" ({done} built already)" if done else "")
            + (f" ({pending} candidates still wait for two reviews)" if pending else "")
        )
        write_construction(wd)
        return 0
    target = StatesTarget(states_path)  # a states file that cannot be added to fails before any build
    if done:
        print(f"stage IV: {done} kept candidates have an outcome already (skipped); {len(kept)} to build")
    by_track: dict[str, list[PredecessorRun]] = {}
    for r in kept:
        by_track.setdefault(r.track, []).append(r)
    started = time.monotonic()
    builds = []
    with Progress(len(kept), "candidates", label="stage IV") as progress:
        for track, runs in by_track.items():
            b = build_track(wd, track, runs, args, target, progress)
            builds.append(b)
            progress.note(
                f"track {track}: "
                + (", ".join(f"{k} {v}" for k, v in sorted(b.counts.items())) or "nothing decided")
                + "".join(f", skipped {v} ({k.replace('_', ' ')})" for k, v in sorted(b.skipped.items()))
            )
    write_construction(wd)
    for line in timing_lines(
        [o for b in builds for o in b.outcomes],
        {f"{b.track}/{k}": v for b in builds for k, v in b.task_images.items()},
        time.monotonic() - started,
    ):
        print(line)
    added = sum(b.counts.get("included", 0) for b in builds)
    skipped = sum(sum(b.skipped.values()) for b in builds)
    print(f"states file: {states_path} ({added} added" + (f", {skipped} skipped" if skipped else "") + ")")
    return 0
