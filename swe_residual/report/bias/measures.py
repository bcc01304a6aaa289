"""The acceptance-bias measures (docs/metrics.md; the paper's Table 4 and Appendix D).

They describe *how* continuations fail: whether the same tests still fail, how much of the
predecessor's code survives, whether the files the predecessor left out get changed or even
opened, and how long continuations run. Each measure is computed per normally submitted run
(declared complete, valid verdict), averaged within a task, then across tasks (Steps: median over
tasks). Where the inputs do not exist (no per-test outcomes, no patches, no trajectories) the
value is None with a reason, never a fabricated 0.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any, Protocol

from swe_residual.patches import FileDiff, parse_patch
from swe_residual.report.bias.kept import changed_paths, kept_fraction, read_regular_file
from swe_residual.report.graded import GRADED_PATCH, left_uncommitted
from swe_residual.results import Manifest
from swe_residual.shell.exposure import scan

if TYPE_CHECKING:  # imported where trajectories are read: reports without them never load it
    from swe_residual.trajectory import Trajectory, TrajectoryView


# -- inputs of the measures ----------------------------------------------------------------------


class Placed(Protocol):
    """Where a run ran: what BiasInputs.state_tests reads of it."""

    @property
    def track(self) -> str: ...

    @property
    def task(self) -> str: ...

    @property
    def state(self) -> str | None: ...


class Run(Placed, Protocol):
    """What the measures read of one normally submitted run (report/aggregates.py RunView): its
    outcome (a valid one: 0 or 1, never None) and its artifacts."""

    @property
    def outcome(self) -> int: ...

    @property
    def artifacts(self) -> Mapping[str, str]: ...


#: trajectories scanned by two processes from this many on (~50 us each; at the 3,400 of the
#: 5k demo records the fork and the second process's cold caches cost what they save, measured)
PARALLEL_FILES = 20_000


class BiasInputs:
    """Lazy, cached access to what the measures read: state facts, patches, trajectories."""

    def __init__(self, manifest: Manifest, root: Path | str | None = None):
        self.manifest = manifest
        self.root = str(root) if root is not None else None
        self._patches: dict[str, dict[str, FileDiff] | None] = {}
        #: equal patch files (a nop's empty patch, the oracle's reference change, a continuation that
        #: kept the inherited work) are parsed once; kept and changed paths once per distinct patch
        self._parsed: dict[bytes, dict[str, FileDiff]] = {}
        self._kept: dict[tuple[int, int], tuple] = {}
        self._changed: dict[int, tuple] = {}
        self._traj_facts: dict[str, tuple[bool, bool] | None] = {}
        self._failing: dict[str | None, frozenset[str] | None] = {}
        self._graded: dict[tuple[str, str], frozenset[str]] = {}
        self._pred_files: dict[str | None, set[str] | None] = {}
        self._state_tests: dict[str | None, tuple | None] = {}
        self._task_failing: dict[tuple[str, str], list[frozenset[str]] | None] = {}
        self._interned: dict = {}  # one object per distinct failing set / state test sets
        self._shares: dict[tuple[int, int], tuple] = {}
        self.states_by_task: dict[tuple[str, str], list[str]] = defaultdict(list)
        for sid, st in sorted(manifest.states.items()):
            self.states_by_task[(st.track, st.task)].append(sid)

    def path(self, rel: str) -> str:
        return rel if os.path.isabs(rel) or self.root is None else os.path.join(self.root, rel)

    def _patch(self, rel: str | None) -> dict[str, FileDiff] | None:
        if not rel:
            return None
        p = self.path(rel)
        if p not in self._patches:
            data = read_regular_file(p)
            if data is None:
                self._patches[p] = None
            else:
                parsed = self._parsed.get(data)
                if parsed is None:
                    parsed = self._parsed[data] = parse_patch(data)
                self._patches[p] = parsed
        return self._patches[p]

    def kept(self, pred: dict[str, FileDiff], final: dict[str, FileDiff]) -> float | None:
        """kept_fraction(pred, final), once per distinct pair of parsed patches."""
        key = (id(pred), id(final))
        hit = self._kept.get(key)
        if hit is None or hit[0] is not pred or hit[1] is not final:
            hit = self._kept[key] = (pred, final, kept_fraction(pred, final))
        return hit[2]

    def changed(self, patch: dict[str, FileDiff]) -> set[str]:
        """changed_paths(patch), once per parsed patch (callers only read it)."""
        hit = self._changed.get(id(patch))
        if hit is None or hit[0] is not patch:
            hit = self._changed[id(patch)] = (patch, changed_paths(patch))
        return hit[1]

    def state_patch(self, sid: str | None) -> dict[str, FileDiff] | None:
        st = self.manifest.states.get(sid or "")
        return self._patch(st.patch) if st else None

    def run_patch(self, r: Run) -> dict[str, FileDiff] | None:
        return self._patch(r.artifacts.get("patch")) if r.artifacts else None

    def left_uncommitted(self, artifacts: Mapping[str, str]) -> bool:
        """Was the run graded on its committed work only (report/graded.py) while part of its final
        work was left uncommitted? Its failing set is then not that of the work it was given."""
        final, graded = self._patch(artifacts.get("patch")), self._patch(artifacts.get(GRADED_PATCH))
        return final is not None and graded is not None and bool(left_uncommitted(final, graded))

    def trajectory(self, r: Run) -> Trajectory | TrajectoryView | None:
        """The run's trajectory (None: no artifact, no file, or not a valid trajectory)."""
        rel = r.artifacts.get("trajectory") if r.artifacts else None
        if not rel:
            return None
        p = self.path(rel)
        from swe_residual.trajectory import read_view

        try:
            return read_view(p) if os.path.isfile(p) else None
        except ValueError:
            return None

    def trajectory_facts(self, r: Run) -> tuple[bool, bool] | None:
        """(inspected the inherited changes, opened a left-out file) for a continuation, None
        without a trajectory. Each file is read and scanned once, for both questions, and only
        the two answers are kept (a report may read a million trajectories)."""
        rel = r.artifacts.get("trajectory") if r.artifacts else None
        if not rel:
            return None
        p = self.path(rel)
        if p not in self._traj_facts:
            self._traj_facts[p] = self._scan(r)
        return self._traj_facts[p]

    def _scan(self, r: Run) -> tuple[bool, bool] | None:
        traj = self.trajectory(r)
        if traj is None:
            return None
        pred = self.predecessor_files(r.state) or set()
        return scan(traj, pred, self.solution_files(r.track, r.task) - pred)

    def prefetch_trajectory_facts(self, runs: Iterable[Run]) -> None:
        """trajectory_facts of many continuations at once, half of them read and scanned by a
        forked child meanwhile when there are PARALLEL_FILES or more (report/forked.py). A file
        named by more than one run is left to trajectory_facts (the first run asking decides)."""
        first: dict[str, Run] = {}
        shared: set[str] = set()
        for r in runs:
            rel = r.artifacts.get("trajectory") if r.artifacts else None
            if rel:
                p = self.path(rel)
                if p in first:
                    shared.add(p)
                first.setdefault(p, r)
        todo = [(p, r) for p, r in first.items() if p not in shared and p not in self._traj_facts]
        if len(todo) < PARALLEL_FILES:
            return
        from swe_residual.report.forked import fork_map

        facts = fork_map(lambda batch: [self._scan(r) for _, r in batch], todo, PARALLEL_FILES)
        for (p, _), f in zip(todo, facts):
            self._traj_facts[p] = f

    def failing(self, sid: str | None) -> frozenset[str] | None:
        """F(S_r) from the manifest (None when unknown)."""
        if sid not in self._failing:
            st = self.manifest.states.get(sid or "")
            f_r = frozenset(st.failing_tests) if st and st.failing_tests else None
            self._failing[sid] = self._interned.setdefault(f_r, f_r) if f_r else f_r
        return self._failing[sid]

    def passed_share(self, f_r: frozenset[str], tests: Mapping[str, str]) -> float:
        """Share of F(S_r) whose outcome in `tests` is passed (cached per pair of objects)."""
        key = (id(f_r), id(tests))
        hit = self._shares.get(key)
        if hit is None or hit[0] is not f_r or hit[1] is not tests:
            hit = self._shares[key] = (
                f_r,
                tests,
                len([t for t in f_r if tests.get(t) == "passed"]) / len(f_r),
            )
        return hit[2]

    def state_tests(self, r: Placed) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
        """(F(S_r), test universe, tests passing on S_r) of a continuation's state, cached per
        state; universe and passing are empty when the manifest has no graded test list."""
        key = r.state
        if key not in self._state_tests:
            f_r = self.failing(key)
            graded = self.graded(r.track, r.task)
            universe = graded | f_r if f_r and graded else frozenset()
            sets = None if not f_r else (f_r, universe, universe - f_r)
            self._state_tests[key] = self._interned.setdefault(sets, sets) if sets else None
        return self._state_tests[key]

    def task_failing(self, track: str, task: str) -> list[frozenset[str]] | None:
        """The non-empty F(S_r) of the task's manifest states, in state id order (None: no states)."""
        key = (track, task)
        if key not in self._task_failing:
            sids = self.states_by_task.get(key)
            failing = [f_r for f_r in map(self.failing, sids) if f_r] if sids else None
            # one list per distinct content (callers never mutate it): the columnar report
            # computes the Clean Start shares once per distinct list
            self._task_failing[key] = (
                self._interned.setdefault(("task failing", *failing), failing) if failing else failing
            )
        return self._task_failing[key]

    def graded(self, track: str, task: str) -> frozenset[str]:
        key = (track, task)
        if key not in self._graded:
            t = self.manifest.tasks.get(f"{track}/{task}")
            self._graded[key] = frozenset(t.tests) if t else frozenset()
        return self._graded[key]

    def predecessor_files(self, sid: str | None) -> set[str] | None:
        """Files the state's predecessor changed (manifest changed_files, else its patch)."""
        if sid not in self._pred_files:
            st = self.manifest.states.get(sid or "")
            if st is None:
                files = None
            elif st.changed_files:
                files = set(st.changed_files)
            else:
                patch = self.state_patch(sid)
                files = changed_paths(patch) if patch is not None else None
            self._pred_files[sid] = files
        return self._pred_files[sid]

    def solution_files(self, track: str, task: str) -> set[str]:
        t = self.manifest.tasks.get(f"{track}/{task}")
        return set(t.solution_files) if t else set()


def na(reason: str) -> dict[str, Any]:
    return {"value": None, "n_tasks": 0, "n_runs": 0, "reason": reason}


def task_means(per_task: Mapping[str, list[float]] | PerTask) -> tuple[list[float], int]:
    """[sum(v) / len(v) for each task with values, in order] and how many values there are (the
    columnar report's per-task values, PerTask, have them at hand)."""
    if isinstance(per_task, PerTask):
        return per_task.task_means()
    return [sum(v) / len(v) for v in per_task.values() if v], sum(len(v) for v in per_task.values())


def task_mean(per_task: Mapping[str, list[float]] | PerTask, reason: str) -> dict[str, Any]:
    """Average within task, then across tasks (every task weighs the same)."""
    means, n_runs = task_means(per_task)
    if not means:
        return na(reason)
    return {"value": sum(means) / len(means), "n_tasks": len(means), "n_runs": n_runs, "reason": None}


def by_task(pairs: Iterable[tuple[str, float | None]]) -> dict[str, list[float]]:
    """Per-run values grouped by task, undefined (None) values left out."""
    per_task: dict[str, list[float]] = {}
    for task, v in pairs:
        if v is not None:
            per_task.setdefault(task, []).append(v)
    return per_task


class PerTask:
    """Per-task values as the columnar report holds them (report/aggregates.py computes them from
    the columns): the mean of each task's values, tasks in the order they first appear, and how
    many values there are; len() is the number of tasks."""

    __slots__ = ("_means", "_n_runs")

    def __init__(self, means: list[float], n_runs: int):
        self._means, self._n_runs = means, n_runs

    def task_means(self) -> tuple[list[float], int]:
        return self._means, self._n_runs

    def __len__(self) -> int:
        return len(self._means)


class AgentRuns(Protocol):
    """What the measures read of one agent's normally submitted runs on one track (the columnar
    report's ColumnRuns, report/aggregates.py): the per-test facts of the continuations per task
    ("repaired": all continuations; "repaired_failed", "same", "broke": failed ones), the
    continuation/clean step ratios, and the runs themselves for the measures that read files."""

    @property
    def tests(self) -> Mapping[str, PerTask]: ...

    @property
    def artifacts(self) -> frozenset[str]:
        """The artifact names any of these runs carries."""

    @property
    def step_ratios(self) -> PerTask: ...

    @property
    def clean(self) -> Mapping[str, Sequence[Run]]:
        """The Clean Start runs, by task."""

    @property
    def continuations(self) -> Sequence[Run]: ...

    @property
    def failed(self) -> Sequence[Run]:
        """The failed continuations."""

    def with_artifact(self, name: str) -> bool: ...

    def count(self, which: str) -> int:
        """How many runs: "clean", "continuations", "failed" (failed continuations, but those that
        left work uncommitted) or "uncommitted" (continuations graded on committed work only that
        left part of it uncommitted: not compared with the state's failing set)."""

    def states_of(self, which: str) -> Iterable[str | None]:
        """The states of the "continuations" or the "failed" ones."""

    def clean_shares(self, inp: BiasInputs, track: str) -> PerTask:
        """Per task, for each failing set F(S_r) of its states and each Clean Start run with
        per-test outcomes: the share of F(S_r) passing at the end of the run."""

    def token_ratios(self) -> PerTask:
        """Per task, each continuation's tokens / the mean of the agent's Clean Start tokens there."""


def tests_facts(
    state: tuple[frozenset[str], frozenset[str], frozenset[str]],
    outcomes: Mapping[str, str],
    missing: list[str],
    failed: bool,
) -> tuple[float, float | None, float | None]:
    """(repaired, same, broke) of one continuation (same/broke only for failed runs): the share of
    F(S_r) passing at the end; whether the tests failing at the end are F(S_r) exactly; the share
    of the tests passing on S_r that fail at the end."""
    f_r, universe, passing = state
    value = len([t for t in f_r if outcomes.get(t) == "passed"]) / len(f_r)
    if not failed:
        return value, None, None
    if not universe:  # no graded list: the tests the record reports
        universe = frozenset(outcomes) | frozenset(missing) | f_r
        passing = universe - f_r
    end = {t for t in universe if outcomes.get(t) != "passed"}
    return value, float(end == f_r), len(passing & end) / len(passing) if passing else None


def _per_run(runs: Iterable[Run], value: Callable[[Run], float | None]) -> PerTask:
    """Per task, the mean over its states of each state's runs' mean (a state's repeats weigh as
    one state); undefined (None) values left out."""
    per_state: dict[tuple[str, str | None], list[float]] = {}
    n = 0
    for r in runs:
        v = value(r)
        if v is not None:
            per_state.setdefault((r.task, r.state), []).append(v)
            n += 1
    per_task: dict[str, list[float]] = {}
    for (task, _), vs in per_state.items():
        per_task.setdefault(task, []).append(sum(vs) / len(vs))
    return PerTask([sum(v) / len(v) for v in per_task.values()], n)


def _left_uncommitted(runs: AgentRuns, which: str, what: str) -> str | None:
    """The reason when every run of `which` left work uncommitted (report/graded.py)."""
    left = runs.count("uncommitted")
    graded = runs.count(which) - (left if which == "continuations" else 0)
    return f"every one of the {what} left work uncommitted (not graded)" if left and not graded else None


def _why_no_tests(runs: AgentRuns, which: str, inp: BiasInputs, what: str) -> str:
    if reason := _left_uncommitted(runs, which, what):
        return reason
    if not runs.count(which):
        return f"no normally submitted {what}"
    if not any(inp.failing(state) for state in runs.states_of(which)):
        return "no failing-test sets F(S_r) for these states in the manifest"
    return "no per-test outcomes in the records"


def same_failing(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Failed continuations whose final failing set equals F(S_r) exactly."""
    return task_mean(runs.tests["same"], _why_no_tests(runs, "failed", inp, "failed continuations"))


def initially_failing_residual(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Share of F(S_r) passing at the end of continuations from S_r (all normally submitted)."""
    return task_mean(runs.tests["repaired"], _why_no_tests(runs, "continuations", inp, "continuations"))


def repair_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Initially failing (Residual) restricted to failed continuations."""
    return task_mean(
        runs.tests["repaired_failed"], _why_no_tests(runs, "failed", inp, "failed continuations")
    )


def break_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Share of tests passing on S_r that fail at the end, over failed continuations (paper 5.4)."""
    return task_mean(runs.tests["broke"], _why_no_tests(runs, "failed", inp, "failed continuations"))


def initially_failing_clean(runs: AgentRuns, inp: BiasInputs, track: str) -> dict[str, Any]:
    """For each residual state of a task, share of F(S_r) passing at the end of the agent's
    Clean Start run(s) on that task."""
    if not runs.count("clean"):
        return na("no normally submitted Clean Start runs")
    return task_mean(runs.clean_shares(inp, track), "no per-test outcomes or failing sets for these tasks")


def _kept_of(inp: BiasInputs, r: Run) -> float | None:
    final = inp.run_patch(r)
    if final is None:
        return None
    pred = inp.state_patch(r.state)
    return None if pred is None else inp.kept(pred, final)


def _why_no_patch(runs: AgentRuns, which: str, inp: BiasInputs, what: str) -> str:
    """Without a patch artifact on any run of the agent, `which` runs are only counted."""
    if reason := _left_uncommitted(runs, which, what):
        return reason
    if not runs.count(which):
        return f"no normally submitted {what}"
    if not runs.with_artifact("patch") or not any(
        r.artifacts and inp.run_patch(r) is not None
        for r in (runs.continuations if which == "continuations" else runs.failed)
    ):
        return "no final patch artifacts in the records"
    return "no state patches (P) for these states"


def kept(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Kept over failed continuations (see kept_fraction)."""
    per_task = (
        _per_run(runs.failed, lambda r: _kept_of(inp, r)) if runs.with_artifact("patch") else PerTask([], 0)
    )
    return task_mean(per_task, _why_no_patch(runs, "failed", inp, "failed continuations"))


_LEFT_OUT = ("left_out_changed_clean", "left_out_changed_residual", "left_out_opened")


def left_out_files(runs: AgentRuns, inp: BiasInputs, track: str) -> dict[str, dict[str, Any]]:
    """Left-out files L = solution files - predecessor files, on states with non-empty L where
    both a Clean Start run and a continuation were normally submitted: share of Clean runs and
    of continuations that change a file in L, and of continuations that open one."""
    has_patch, has_traj = runs.with_artifact("patch"), runs.with_artifact("trajectory")
    if not has_patch and not has_traj:  # nothing to look at: skip the per-state work
        return {
            "left_out_changed_clean": na("no final patch artifacts in the records"),
            "left_out_changed_residual": na("no final patch artifacts in the records"),
            "left_out_opened": na("no trajectories for continuations"),
        }
    conts: dict[str | None, list[Run]] = defaultdict(list)
    for r in runs.continuations:
        conts[r.state].append(r)
    changed_c: dict[str, list[float]] = defaultdict(list)
    changed_r: dict[str, list[float]] = defaultdict(list)
    opened: dict[str, list[float]] = defaultdict(list)
    n_states = 0
    for sid, rs in sorted(conts.items()):
        task = rs[0].task
        pred = inp.predecessor_files(sid)
        left = inp.solution_files(track, task) - (pred or set())
        if not left or pred is None or not runs.clean.get(task):
            continue
        n_states += 1
        # average within the state first, so a state's repeated attempts weigh as one state
        if has_patch:
            state_c = [
                float(bool(inp.changed(p) & left))
                for p in map(inp.run_patch, runs.clean[task])
                if p is not None
            ]
            state_r = [float(bool(inp.changed(p) & left)) for p in map(inp.run_patch, rs) if p is not None]
            if state_c:
                changed_c[task].append(sum(state_c) / len(state_c))
            if state_r:
                changed_r[task].append(sum(state_r) / len(state_r))
        if has_traj:
            state_o = [float(f[1]) for f in map(inp.trajectory_facts, rs) if f is not None]
            if state_o:
                opened[task].append(sum(state_o) / len(state_o))
    if not n_states:
        reason = (
            "no solution files in the manifest"
            if not any(inp.solution_files(track, r.task) for r in runs.continuations)
            else "no state with a non-empty left-out set and both runs normally submitted"
        )
        return {k: na(reason) for k in _LEFT_OUT}
    return {
        "left_out_changed_clean": task_mean(changed_c, "no final patch artifacts for Clean Start runs"),
        "left_out_changed_residual": task_mean(changed_r, "no final patch artifacts for continuations"),
        "left_out_opened": task_mean(opened, "no trajectories for continuations"),
    }


def steps_ratio(runs: AgentRuns) -> dict[str, Any]:
    """Continuation steps / the agent's Clean Start steps on the task; mean over a task's states,
    median over tasks."""
    return _median_ratio(
        runs.step_ratios, "no continuation with a step count and a Clean Start run with steps on its task"
    )


def tokens_ratio(runs: AgentRuns) -> dict[str, Any]:
    """Steps' twin in model tokens: continuation tokens / the agent's Clean Start tokens on the task;
    mean over a task's states, median over tasks."""
    return _median_ratio(
        runs.token_ratios(),
        "no token counts (the harness reports none, or no Clean Start run with tokens on the task)",
    )


def _median_ratio(per_task: PerTask, reason: str) -> dict[str, Any]:
    """The median over tasks of the per-task mean ratios."""
    if not per_task:
        return na(reason)
    means, n_runs = task_means(per_task)
    return {
        "value": median(means),
        "n_tasks": len(per_task),
        "n_runs": n_runs,
        "reason": None,
        "aggregate": "median over tasks",
    }


def inspection_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Continuations that ran git status / git diff or read a file the predecessor modified."""

    def value(r: Run) -> float | None:
        facts = inp.trajectory_facts(r)
        return None if facts is None else float(facts[0])

    reason = (
        "no normally submitted continuations"
        if not runs.count("continuations")
        else "no trajectories for continuations"
    )
    per_task = _per_run(runs.continuations, value) if runs.with_artifact("trajectory") else PerTask([], 0)
    return task_mean(per_task, reason)


def kept_split(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Success of continuations keeping more than the agent's median Kept vs the rest.

    Kept is computed for every normally submitted continuation (successes too); runs at the
    median go to the lower half. value = 100 (high - low) in points.
    """
    scored = (
        [(r, k) for r in runs.continuations if (k := _kept_of(inp, r)) is not None]
        if runs.with_artifact("patch")
        else []
    )
    if not scored:
        return {**na(_why_no_patch(runs, "continuations", inp, "continuations")), "median_kept": None}
    mid = median(k for _, k in scored)
    high = task_mean(
        _per_run([r for r, k in scored if k > mid], lambda r: float(r.outcome)), "no run above the median"
    )
    low = task_mean(
        _per_run([r for r, k in scored if k <= mid], lambda r: float(r.outcome)),
        "no run at or below the median",
    )
    value = None if high["value"] is None or low["value"] is None else 100.0 * (high["value"] - low["value"])
    reason = None if value is not None else (high["reason"] or low["reason"])
    return {
        "value": value,
        "median_kept": mid,
        "high": high,
        "low": low,
        "n_runs": len(scored),
        "n_tasks": len({r.task for r, _ in scored}),
        "reason": reason,
    }


MACHINE_NA = (
    "machine track: a state is a whole machine rebuilt from replayed interactions, not a patch "
    "(no predecessor lines to keep, no files left out)"
)


def runs_bias(runs: AgentRuns, inp: BiasInputs, track: str) -> dict[str, Any]:
    """Every Table 4 measure for one agent on one track (on a machine track, those that need a
    repository - Kept, its split, left-out files, inspection of the changed files - are n/a)."""
    from swe_residual.tracks import track_kind

    machine = track_kind(track) == "machine"
    return {
        "n_continuations": runs.count("continuations"),
        "n_failed_continuations": runs.count("failed"),
        "n_uncommitted": runs.count("uncommitted"),
        "n_clean_runs": runs.count("clean"),
        "same_failing": same_failing(runs, inp),
        "initially_failing_clean": initially_failing_clean(runs, inp, track),
        "initially_failing_residual": initially_failing_residual(runs, inp),
        "repair_rate": repair_rate(runs, inp),
        "break_rate": break_rate(runs, inp),
        "kept": na(MACHINE_NA) if machine else kept(runs, inp),
        **({k: na(MACHINE_NA) for k in _LEFT_OUT} if machine else left_out_files(runs, inp, track)),
        "steps_ratio": steps_ratio(runs),
        "tokens_ratio": tokens_ratio(runs),
        "inspection_rate": na("machine track: no list of the files a state's predecessor changed")
        if machine
        else inspection_rate(runs, inp),
        "kept_split": {**na(MACHINE_NA), "median_kept": None} if machine else kept_split(runs, inp),
    }
