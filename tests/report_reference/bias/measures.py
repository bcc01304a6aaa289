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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from swe_residual.patches import FileDiff, parse_patch
from swe_residual.results import Manifest, Record
from swe_residual.shell.exposure import scan
from tests.report_reference.bias.kept import changed_paths, kept_fraction, read_regular_file

if TYPE_CHECKING:  # imported where trajectories are read: reports without them never load it
    from swe_residual.trajectory import Trajectory, TrajectoryView


# -- inputs of the measures ----------------------------------------------------------------------


class BiasInputs:
    """Lazy, cached access to what the measures read: state facts, patches, trajectories."""

    def __init__(self, manifest: Manifest, root: Path | str | None = None):
        self.manifest = manifest
        self.root = str(root) if root is not None else None
        self._patches: dict[str, dict[str, FileDiff] | None] = {}
        self._traj_facts: dict[str, tuple[bool, bool] | None] = {}
        self._failing: dict[str | None, frozenset[str] | None] = {}
        self._graded: dict[tuple[str, str], frozenset[str]] = {}
        self._pred_files: dict[str | None, set[str] | None] = {}
        self._state_tests: dict[str | None, tuple | None] = {}
        self._task_failing: dict[tuple[str, str], list[frozenset[str]] | None] = {}
        self._interned: dict = {}   # one object per distinct failing set / state test sets
        #: (id(state sets), id(tests), failed) -> (tests, state sets, facts): rows share equal per-test dicts
        #: (results.read_rows) and states share equal failing sets, so a report computes each
        #: distinct combination once; the tests object is kept, so its id stays its own
        self.facts_cache: dict[tuple, tuple] = {}
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
            self._patches[p] = parse_patch(data) if data is not None else None
        return self._patches[p]

    def state_patch(self, sid: str | None) -> dict[str, FileDiff] | None:
        st = self.manifest.states.get(sid or "")
        return self._patch(st.patch) if st else None

    def left_uncommitted(self, r: Record) -> bool:
        """Graded on its committed work only (a graded_patch) while its final tree changed a file
        otherwise: its failing set is not compared (docs/metrics.md, "What was graded")."""
        graded = self._patch((r.artifacts or {}).get("graded_patch"))
        final = self.run_patch(r) if graded is not None else None
        return final is not None and any(graded.get(path) != diff for path, diff in final.items())

    def run_patch(self, r: Record) -> dict[str, FileDiff] | None:
        return self._patch(r.artifacts.get("patch")) if r.artifacts else None

    def trajectory(self, r: Record) -> Trajectory | TrajectoryView | None:
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

    def trajectory_facts(self, r: Record) -> tuple[bool, bool] | None:
        """(inspected the inherited changes, opened a left-out file) for a continuation, None
        without a trajectory. Each file is read and scanned once, for both questions, and only
        the two answers are kept (a report may read a million trajectories)."""
        rel = r.artifacts.get("trajectory") if r.artifacts else None
        if not rel:
            return None
        p = self.path(rel)
        if p not in self._traj_facts:
            traj = self.trajectory(r)
            if traj is None:
                self._traj_facts[p] = None
            else:
                pred = self.predecessor_files(r.state) or set()
                self._traj_facts[p] = scan(traj, pred, self.solution_files(r.track, r.task) - pred)
        return self._traj_facts[p]

    def failing(self, sid: str | None) -> frozenset[str] | None:
        """F(S_r) from the manifest (None when unknown)."""
        if sid not in self._failing:
            st = self.manifest.states.get(sid or "")
            f_r = frozenset(st.failing_tests) if st and st.failing_tests else None
            self._failing[sid] = self._interned.setdefault(f_r, f_r) if f_r else f_r
        return self._failing[sid]

    def clean_shares(self, failing: list[frozenset[str]], outcomes: list[Mapping[str, str]]) -> list[float]:
        """[passed_share(f_r, tests) for f_r in failing for tests in outcomes], cached for the
        usual single clean run per task (equal failing lists and per-test dicts are shared)."""
        if len(outcomes) != 1:
            return [self.passed_share(f_r, tests) for f_r in failing for tests in outcomes]
        tests = outcomes[0]
        key = (id(failing), id(tests))
        hit = self._shares.get(key)
        if hit is None or hit[0] is not failing or hit[1] is not tests:
            hit = self._shares[key] = (failing, tests, [self.passed_share(f_r, tests) for f_r in failing])
        return list(hit[2])

    def passed_share(self, f_r: frozenset[str], tests: Mapping[str, str]) -> float:
        """Share of F(S_r) whose outcome in `tests` is passed (cached per pair of objects)."""
        key = (id(f_r), id(tests))
        hit = self._shares.get(key)
        if hit is None or hit[0] is not f_r or hit[1] is not tests:
            hit = self._shares[key] = (f_r, tests, len([t for t in f_r if tests.get(t) == "passed"]) / len(f_r))
        return hit[2]

    def state_tests(self, r: Record) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
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
            # one list per distinct content (callers never mutate it): see clean_shares
            self._task_failing[key] = (self._interned.setdefault(("task failing", *failing), failing)
                                       if failing else failing)
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


@dataclass(slots=True)
class RunFacts:
    """Per-test facts of one continuation, computed once and shared by the measures.

    repaired: share of F(S_r) passing at the end; same: F(S') == F(S_r); broke: share of the
    tests passing on S_r that fail at the end (same/broke only for failed continuations).
    """

    repaired: float
    same: float | None = None
    broke: float | None = None


def na(reason: str) -> dict[str, Any]:
    return {"value": None, "n_tasks": 0, "n_runs": 0, "reason": reason}


class StateFirst(dict):
    """task -> [mean of each of its states' runs] (issue 33: a state's repeats weigh as one state),
    with the number of runs behind them."""

    n_runs = 0


def state_first(per_state: Mapping[tuple[str, str | None], list[float]]) -> StateFirst:
    out = StateFirst()
    for (task, _), vs in per_state.items():
        if vs:
            out.setdefault(task, []).append(sum(vs) / len(vs))
            out.n_runs += len(vs)
    return out


def _n_runs(per_task: Mapping[str, list[float]]) -> int:
    if isinstance(per_task, StateFirst):
        return per_task.n_runs
    return sum(len(v) for v in per_task.values())


def task_mean(per_task: Mapping[str, list[float]], reason: str) -> dict[str, Any]:
    """Average within task, then across tasks (every task weighs the same)."""
    means = [sum(v) / len(v) for v in per_task.values() if v]
    if not means:
        return na(reason)
    return {"value": sum(means) / len(means), "n_tasks": len(means),
            "n_runs": _n_runs(per_task), "reason": None}


def by_task(pairs: Iterable[tuple[str, float | None]]) -> dict[str, list[float]]:
    """Per-run values grouped by task, undefined (None) values left out."""
    per_task: dict[str, list[float]] = {}
    for task, v in pairs:
        if v is not None:
            per_task.setdefault(task, []).append(v)
    return per_task


@dataclass
class AgentRuns:
    """One agent's normally submitted runs on one track.

    The per-test facts of every continuation are computed once (run_facts) and kept as
    per-task lists: "repaired" (all continuations), and "repaired_failed", "same", "broke"
    (failed continuations); so are the continuation/clean step ratios (steps_ratio).
    """

    clean: dict[str, list[Record]]                     # by task
    continuations: list[Record]
    uncommitted: list[Record] = field(default_factory=list)  # continuations that left work uncommitted
    tests: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    artifacts: frozenset[str] = frozenset()            # artifact names any of these runs carries
    step_ratios: dict[str, list[float]] | None = None  # by task; None: computed on first use

    @classmethod
    def of(cls, records: Iterable[Record], inp: BiasInputs | None = None) -> AgentRuns:
        """The runs and every per-run fact, in one pass over the records: a report runs this over
        100k records, where each extra pass (and each call per run) costs more than the arithmetic.
        The per-test facts are run_facts inlined; without inputs there are none."""
        clean: dict[str, list[Record]] = {}
        conts: list[Record] = []
        failed: list[Record] = []
        uncommitted: list[Record] = []
        names: set[str] = set()
        cont_steps: list[tuple[str, int]] = []
        tests: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in _TEST_FACTS}
        repaired, repaired_failed, same, broke = tests.values()
        state_tests = inp.state_tests if inp is not None else None
        known = inp._state_tests if inp is not None else {}
        facts = inp.facts_cache if inp is not None else {}
        for r in records:
            # not r.normally_submitted, written out (a property call per record costs more)
            if (not r.declared_complete or r.outcome is None or r.verdict == "infra_error"
                    or r.termination == "infra"):
                continue
            if r.start == "clean":
                runs = clean.get(r.task)
                if runs is None:
                    clean[r.task] = [r]
                else:
                    runs.append(r)
                if r.artifacts:
                    names.update(r.artifacts)
                continue
            if not r.state:
                continue
            if r.artifacts:
                names.update(r.artifacts)
            conts.append(r)
            task = r.task
            if r.steps is not None:
                cont_steps.append(((task, r.state), r.steps))
            if inp is not None and r.artifacts and "graded_patch" in r.artifacts and inp.left_uncommitted(r):
                uncommitted.append(r)
                continue
            if r.outcome == 0:
                failed.append(r)
            if state_tests is None:
                continue
            outcomes = r.tests
            if not outcomes and not r.missing_tests:
                continue
            state = known.get(r.state, r)  # state_tests(r), its cache read first
            if state is r:
                state = state_tests(r)
            if state is None:
                continue
            failed_run = r.outcome == 0
            # the facts depend only on the state's test sets, the per-test dict and failed/not
            key = (id(state), id(outcomes), failed_run)
            hit = facts.get(key) if not r.missing_tests else None
            if hit is None or hit[0] is not outcomes or hit[1] is not state:
                hit = (outcomes, state, _test_facts(state, outcomes, r.missing_tests, failed_run))
                if not r.missing_tests:
                    facts[key] = hit
            value, same_v, broke_v = hit[2]
            key = (task, r.state)
            repaired[key].append(value)
            if failed_run:
                repaired_failed[key].append(value)
                same[key].append(same_v)
                if broke_v is not None:
                    broke[key].append(broke_v)
        runs = cls(clean, conts, uncommitted, {k: state_first(v) for k, v in tests.items()}, frozenset(names),
                   _step_ratios(clean, cont_steps))
        runs.failed = failed  # the cached_property's value, collected in the same pass
        return runs

    @cached_property
    def failed(self) -> list[Record]:
        return [r for r in self.continuations if r.outcome == 0 and r not in self.uncommitted]

    def with_artifact(self, name: str) -> bool:
        """Does any run carry this artifact? (cheap precheck before reading files)"""
        return name in self.artifacts


_TEST_FACTS = ("repaired", "repaired_failed", "same", "broke")


def _test_facts(state: tuple[frozenset[str], frozenset[str], frozenset[str]], outcomes: Mapping[str, str],
                missing: list[str], failed: bool) -> tuple[float, float | None, float | None]:
    """(repaired, same, broke) of one continuation (run_facts; same/broke only for failed runs)."""
    f_r, universe, passing = state
    value = len([t for t in f_r if outcomes.get(t) == "passed"]) / len(f_r)
    if not failed:
        return value, None, None
    if not universe:  # no graded list: the tests the record reports
        universe = frozenset(outcomes) | frozenset(missing) | f_r
        passing = universe - f_r
    end = {t for t in universe if outcomes.get(t) != "passed"}
    return value, float(end == f_r), len(passing & end) / len(passing) if passing else None


def tokens_of(r: Record) -> int | None:
    """Prompt + completion tokens of a run, None when its harness reported none."""
    if r.prompt_tokens is None and r.completion_tokens is None:
        return None
    return (r.prompt_tokens or 0) + (r.completion_tokens or 0)


def _step_ratios(clean: Mapping[str, list[Record]], cont_steps: Iterable[tuple[tuple[str, str | None], int]],
                 value: Callable[[Record], int | None] = lambda r: r.steps) -> dict[str, list[float]]:
    """Per task, each continuation's steps (or other `value`) / the mean of the agent's Clean Start
    runs there (clean runs without one left out; tasks without one get no ratios)."""
    clean_steps: dict[str, float] = {}
    for task, cleans in clean.items():
        steps = [v for v in map(value, cleans) if v]
        if steps:
            clean_steps[task] = sum(steps) / len(steps)
    ratios: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    for (task, state), steps in cont_steps:
        if task in clean_steps:
            ratios[(task, state)].append(steps / clean_steps[task])
    return state_first(ratios)


def _per_run(runs: Iterable[Record], value: Callable[[Record], float | None]) -> dict[str, list[float]]:
    per_state: dict[tuple[str, str | None], list[float]] = {}
    for r in runs:
        v = value(r)
        if v is not None:
            per_state.setdefault((r.task, r.state), []).append(v)
    return state_first(per_state)


def _why_no_tests(runs: list[Record], inp: BiasInputs, what: str, uncommitted: list[Record] = ()) -> str:
    graded = [r for r in runs if r not in uncommitted]
    if uncommitted and not graded:
        return f"every one of the {what} left work uncommitted (not graded)"
    if not runs:
        return f"no normally submitted {what}"
    if not any(inp.failing(r.state) for r in runs):
        return "no failing-test sets F(S_r) for these states in the manifest"
    return "no per-test outcomes in the records"


def same_failing(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Failed continuations whose final failing set equals F(S_r) exactly."""
    return task_mean(runs.tests["same"], _why_no_tests(runs.failed, inp, "failed continuations", runs.uncommitted))


def initially_failing_residual(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Share of F(S_r) passing at the end of continuations from S_r (all normally submitted)."""
    return task_mean(runs.tests["repaired"], _why_no_tests(runs.continuations, inp, "continuations", runs.uncommitted))


def repair_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Initially failing (Residual) restricted to failed continuations."""
    return task_mean(runs.tests["repaired_failed"], _why_no_tests(runs.failed, inp, "failed continuations", runs.uncommitted))


def break_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Share of tests passing on S_r that fail at the end, over failed continuations (paper 5.4)."""
    return task_mean(runs.tests["broke"], _why_no_tests(runs.failed, inp, "failed continuations", runs.uncommitted))


def initially_failing_clean(runs: AgentRuns, inp: BiasInputs, track: str) -> dict[str, Any]:
    """For each residual state of a task, share of F(S_r) passing at the end of the agent's
    Clean Start run(s) on that task."""
    if not runs.clean:
        return na("no normally submitted Clean Start runs")
    states_seen: dict[str, set[str]] | None = None  # only for tasks the manifest has no states of
    per_task: dict[str, list[float]] = {}
    for task, cleans in runs.clean.items():
        outcomes = [r.tests for r in cleans if r.tests or r.missing_tests]
        if not outcomes:
            continue
        failing = inp.task_failing(track, task)
        if failing is None:
            if states_seen is None:
                states_seen = defaultdict(set)
                for r in runs.continuations:
                    states_seen[r.task].add(r.state)
            failing = [f_r for f_r in map(inp.failing, sorted(states_seen.get(task, ()))) if f_r]
        if failing:
            per_task[task] = inp.clean_shares(failing, outcomes)
    return task_mean(per_task, "no per-test outcomes or failing sets for these tasks")


def _kept_of(inp: BiasInputs, r: Record) -> float | None:
    final = inp.run_patch(r)
    pred = inp.state_patch(r.state) if final is not None else None
    return None if pred is None else kept_fraction(pred, final)


def _why_no_patch(runs: list[Record], inp: BiasInputs, what: str, any_patch: bool = True,
                  uncommitted: list[Record] = ()) -> str:
    """any_patch=False (no run of the agent carries a patch artifact) skips the scan of `runs`."""
    if uncommitted and not runs:
        return f"every one of the {what} left work uncommitted (not graded)"
    if not runs:
        return f"no normally submitted {what}"
    if not any_patch or not any(r.artifacts and inp.run_patch(r) is not None for r in runs):
        return "no final patch artifacts in the records"
    return "no state patches (P) for these states"


def kept(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Kept over failed continuations (see kept_fraction)."""
    failed = runs.failed
    per_task = _per_run(failed, lambda r: _kept_of(inp, r)) if runs.with_artifact("patch") else {}
    return task_mean(per_task, _why_no_patch(failed, inp, "failed continuations", runs.with_artifact("patch"),
                                             runs.uncommitted))


_LEFT_OUT = ("left_out_changed_clean", "left_out_changed_residual", "left_out_opened")


def left_out_files(runs: AgentRuns, inp: BiasInputs, track: str) -> dict[str, dict[str, Any]]:
    """Left-out files L = solution files - predecessor files, on states with non-empty L where
    both a Clean Start run and a continuation were normally submitted: share of Clean runs and
    of continuations that change a file in L, and of continuations that open one."""
    has_patch, has_traj = runs.with_artifact("patch"), runs.with_artifact("trajectory")
    if not has_patch and not has_traj:  # nothing to look at: skip the per-state work
        return {"left_out_changed_clean": na("no final patch artifacts in the records"),
                "left_out_changed_residual": na("no final patch artifacts in the records"),
                "left_out_opened": na("no trajectories for continuations")}
    conts: dict[str, list[Record]] = defaultdict(list)
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
            state_c = [float(bool(changed_paths(p) & left)) for p in map(inp.run_patch, runs.clean[task]) if p is not None]
            state_r = [float(bool(changed_paths(p) & left)) for p in map(inp.run_patch, rs) if p is not None]
            if state_c:
                changed_c[task].append(sum(state_c) / len(state_c))
            if state_r:
                changed_r[task].append(sum(state_r) / len(state_r))
        if has_traj:
            state_o = [float(f[1]) for f in map(inp.trajectory_facts, rs) if f is not None]
            if state_o:
                opened[task].append(sum(state_o) / len(state_o))
    if not n_states:
        reason = ("no solution files in the manifest"
                  if not any(inp.solution_files(track, r.task) for r in runs.continuations)
                  else "no state with a non-empty left-out set and both runs normally submitted")
        return {k: na(reason) for k in _LEFT_OUT}
    return {"left_out_changed_clean": task_mean(changed_c, "no final patch artifacts for Clean Start runs"),
            "left_out_changed_residual": task_mean(changed_r, "no final patch artifacts for continuations"),
            "left_out_opened": task_mean(opened, "no trajectories for continuations")}


def steps_ratio(runs: AgentRuns) -> dict[str, Any]:
    """Continuation steps / the agent's Clean Start steps on the task; mean over a task's states,
    median over tasks."""
    per_task = runs.step_ratios
    if per_task is None:
        per_task = _step_ratios(runs.clean, [((r.task, r.state), r.steps) for r in runs.continuations
                                             if r.steps is not None])
    if not per_task:
        return na("no continuation with a step count and a Clean Start run with steps on its task")
    return {"value": median(sum(v) / len(v) for v in per_task.values()), "n_tasks": len(per_task),
            "n_runs": _n_runs(per_task), "reason": None, "aggregate": "median over tasks"}


def tokens_ratio(runs: AgentRuns) -> dict[str, Any]:
    """Steps' twin in model tokens: continuation tokens / the agent's Clean Start tokens on the task;
    mean over a task's states, median over tasks."""
    per_task = _step_ratios(runs.clean, [((r.task, r.state), t) for r in runs.continuations
                                         if (t := tokens_of(r)) is not None], tokens_of)
    if not per_task:
        return na("no token counts (the harness reports none, or no Clean Start run with tokens on the task)")
    return {"value": median(sum(v) / len(v) for v in per_task.values()), "n_tasks": len(per_task),
            "n_runs": _n_runs(per_task), "reason": None, "aggregate": "median over tasks"}


def inspection_rate(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Continuations that ran git status / git diff or read a file the predecessor modified."""
    def value(r: Record) -> float | None:
        facts = inp.trajectory_facts(r)
        return None if facts is None else float(facts[0])
    reason = "no normally submitted continuations" if not runs.continuations else "no trajectories for continuations"
    per_task = _per_run(runs.continuations, value) if runs.with_artifact("trajectory") else {}
    return task_mean(per_task, reason)


def kept_split(runs: AgentRuns, inp: BiasInputs) -> dict[str, Any]:
    """Success of continuations keeping more than the agent's median Kept vs the rest.

    Kept is computed for every normally submitted continuation (successes too); runs at the
    median go to the lower half. value = 100 (high - low) in points.
    """
    scored = ([(r, k) for r in runs.continuations if (k := _kept_of(inp, r)) is not None]
              if runs.with_artifact("patch") else [])
    if not scored:
        return {**na(_why_no_patch(runs.continuations, inp, "continuations", runs.with_artifact("patch"))),
                "median_kept": None}
    mid = median(k for _, k in scored)
    high = task_mean(_per_run([r for r, k in scored if k > mid], lambda r: float(r.outcome)), "no run above the median")
    low = task_mean(_per_run([r for r, k in scored if k <= mid], lambda r: float(r.outcome)), "no run at or below the median")
    value = None if high["value"] is None or low["value"] is None else 100.0 * (high["value"] - low["value"])
    reason = None if value is not None else (high["reason"] or low["reason"])
    return {"value": value, "median_kept": mid, "high": high, "low": low, "n_runs": len(scored),
            "n_tasks": len({r.task for r, _ in scored}), "reason": reason}


MACHINE_NA = ("machine track: a state is a whole machine rebuilt from replayed interactions, not a patch "
              "(no predecessor lines to keep, no files left out)")


def agent_bias(records: Iterable[Record], inp: BiasInputs, track: str) -> dict[str, Any]:
    """Every Table 4 measure for one agent on one track (on a machine track, those that need a
    repository - Kept, its split, left-out files, inspection of the changed files - are n/a)."""
    from swe_residual.tracks import track_kind

    runs = AgentRuns.of(records, inp)
    machine = track_kind(track) == "machine"
    return {
        "n_continuations": len(runs.continuations), "n_failed_continuations": len(runs.failed),
        "n_uncommitted": len(runs.uncommitted),
        "n_clean_runs": sum(map(len, runs.clean.values())),
        "same_failing": same_failing(runs, inp),
        "initially_failing_clean": initially_failing_clean(runs, inp, track),
        "initially_failing_residual": initially_failing_residual(runs, inp),
        "repair_rate": repair_rate(runs, inp),
        "break_rate": break_rate(runs, inp),
        "kept": na(MACHINE_NA) if machine else kept(runs, inp),
        **({k: na(MACHINE_NA) for k in _LEFT_OUT} if machine else left_out_files(runs, inp, track)),
        "steps_ratio": steps_ratio(runs),
        "tokens_ratio": tokens_ratio(runs),
        "inspection_rate": na("machine track: no list of the files a state's predecessor changed") if machine
        else inspection_rate(runs, inp),
        "kept_split": {**na(MACHINE_NA), "median_kept": None} if machine else kept_split(runs, inp),
    }


def acceptance_bias(records: Iterable[Record], manifest: Manifest, root: Path | str | None = None,
                    groups: Mapping[tuple[str, str], list[Record]] | None = None) -> dict[str, dict[str, Any]]:
    """{track: {agent: measures}} for every track/agent with records (n/a where undefined).

    `groups` ({(track, agent): records}, as metrics.group_records returns) saves the grouping
    pass when the caller has it.
    """
    if groups is None:
        groups = defaultdict(list)
        for r in records:
            groups[(r.track, r.agent)].append(r)
    inp = BiasInputs(manifest, root)
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (track, agent), recs in sorted(groups.items()):
        out[track][agent] = agent_bias(recs, inp, track)
    return dict(out)
