"""Every number of the report from the columns (report/columns.py), without a loop per record.

The records of each (track, agent) are sorted by task (and state), stably, so each (track, agent,
task, start, state) is one segment of the arrays, and counts, sums and first appearances come from
numpy. What is left in Python runs once per task or per distinct value (the per-test facts of a
continuation depend only on its state's test sets, its per-test dict and whether it failed),
never per record.

Table 3 and the per-task values behind it are computed once (`Success`): the tables print it,
and the gates, `compare`, the run page's "states that hurt most" and the end of a run read the
same object (`success_of`), never a second computation.

The numbers are bit-identical to the per-record report this replaced (kept verbatim as the test
oracle in tests/report_reference/): outcomes are 0/1 counts, whose means are exact integer
quotients either way; every sum of floats is Python's own `sum` over the same values in the same
order (tasks and states in the order the records first show them), and the formulas on the
aggregates (success_row, task_mean, group_cell, the medians, bootstrap_ci) are the functions the
per-record code called. tests/test_report_columns.py compares both on every key of the report,
tests/test_gates.py the gates' numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import msgspec
import numpy as np

from swe_residual.report.bias.measures import BiasInputs, PerTask, runs_bias, tests_facts
from swe_residual.report.columns import Columns, IntColumn, ManifestView, columns_for
from swe_residual.report.graded import GRADED_PATCH
from swe_residual.report.metrics import Counts, group_cell, matched_tasks, repeat_row, success_row
from swe_residual.report.spend import total_of
from swe_residual.report.stats import bootstrap_ci, nested_bootstrap_ci
from swe_residual.results import STARTS, Record


def first_seen(values: np.ndarray) -> np.ndarray:
    """The distinct values in the order they first appear (what a loop over the runs meets first)."""
    _, first = np.unique(values, return_index=True)
    return values[np.sort(first)]


def _segments(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of equal keys: (order, starts, ends) where order sorts the keys stably and segment s
    is order[starts[s]:ends[s]] (positions in increasing order); segments come in the order
    their keys first appear."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    brk = np.flatnonzero(k[1:] != k[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [len(k)]))
    seg = np.argsort(order[starts], kind="stable")
    return order, starts[seg], ends[seg]


def segment_means(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Per distinct key (in first-appearance order): sum(its values in order) / their number, as
    Python computes it for a list: one or two values directly ((0 + x0) + x1 is also what the
    compensated sum of Python 3.12 gives for two), three or more with Python's own sum."""
    if not len(keys):
        return keys[:0], []
    order, starts, ends = _segments(keys)
    return keys[order[starts]], _contiguous_means(values[order], starts, ends)


def per_state_task(tasks: np.ndarray, states: np.ndarray, values: np.ndarray) -> PerTask:
    """The per-task values the measures read (bias/measures.py PerTask) of values in run order
    (tasks[i], states[i]: the codes of values[i]): a state's runs (its repeats) averaged first,
    then the task's states, so each state weighs the same within its task however many repeats
    it has. One run per state gives the mean of a task's runs bit for bit ((0 + x) / 1 is x)."""
    if not len(tasks):
        return PerTask([], 0)
    width = int(states.max()) + 1
    pairs, means = segment_means(tasks.astype(np.int64) * width + states, values)
    return PerTask(segment_means(pairs // width, np.array(means, dtype=np.float64))[1], len(tasks))


def _count_means(keys: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, Cells]:
    """Per distinct key (first-appearance order): (key, mean of the 0/1 values, their successes
    and number). sum(ys) / len(ys) of 0/1 ints is an exact integer quotient, correctly rounded:
    the same double whichever way it is computed."""
    if not len(keys):
        return keys[:0], np.zeros(0), Cells(keys[:0], keys[:0])
    order, starts, ends = _segments(keys)
    sums = np.add.reduceat(y[order].astype(np.int64), np.sort(starts))
    sums = sums[np.argsort(np.argsort(starts))]
    counts = ends - starts
    return keys[order[starts]], sums / counts, Cells(sums, counts)


class Cells:
    """Per case (a task's clean start, or one state): its successes `s` and valid repeats `n`:
    what pass@k, pass^k and the nested bootstrap read of the repeats."""

    __slots__ = ("s", "n")

    def __init__(self, s: np.ndarray, n: np.ndarray):
        self.s, self.n = s, n

    def take(self, idx: np.ndarray) -> Cells:
        return Cells(self.s[idx], self.n[idx])


class Selection:
    """The records of one build (positions into the columns, in file order) with the fields every
    table reads, and their (track, agent) groups in sorted order."""

    def __init__(self, cols: Columns, pos: np.ndarray, clean: np.ndarray, facts: Any):
        self.cols = cols
        names = cols.names
        self.pos = pos
        self.clean = clean
        self.task = cols.task[pos]
        self.state = cols.state[pos]
        self.outcome = cols.outcome[pos]
        self.infra = cols.verdict[pos] == cols.code("infra_error")
        self.valid = ~self.infra & (self.outcome >= 0) & (cols.termination[pos] != cols.code("infra"))
        self.ns = self.valid & (cols.declared[pos] == 1)  # normally submitted
        self.flagged = cols.truthy("integrity")[pos]
        self.tests = cols.tests[pos]
        self.missing = cols.missing_tests[pos]
        self.has_outcomes = cols.truthy("tests")[pos] | cols.truthy("missing_tests")[pos]
        self.art = cols.artifacts[pos]
        self.cost = cols.cost[pos]
        self.steps = cols.steps.take(pos)
        p, c = cols.prompt_tokens.take(pos), cols.completion_tokens.take(pos)
        self.tokens = IntColumn(p.values * p.present + c.values * c.present, p.present | c.present)
        none = cols.code(None)
        empty = cols.code("", add=True)
        self.skey = np.where(self.state == none, empty, self.state)  # r.state or ""
        self.state_truthy = (self.state != none) & (self.state != empty)
        # the family of each record's state: its predecessor's, else the manifest's, else "unknown"
        unknown = cols.code("unknown", add=True)
        codes = np.flatnonzero(np.bincount(self.state, minlength=len(names))).tolist()  # the distinct states
        fams = []
        for code in codes:
            st = facts.states.get(names[code]) if isinstance(names[code], str) else None
            fams.append(
                cols.code(st.predecessor.get("model_family") or "unknown", add=True)
                if st is not None
                else unknown
            )
        table = np.full(len(names), unknown, np.int64)
        table[codes] = fams
        own = cols.family()[pos]
        self.family = np.where(own >= 0, own, table[self.state])
        self.names = names
        # (track, agent) groups, sorted by their names, each one's records in order
        width = len(names) + 1
        pair = cols.track[pos].astype(np.int64) * width + cols.agent[pos]
        upair, inv = np.unique(pair, return_inverse=True)
        keys = [(names[p // width], names[p % width]) for p in upair.tolist()]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        rank = np.empty(len(keys), np.int64)
        rank[order] = np.arange(len(keys))
        g = rank[inv.reshape(-1)] if len(keys) else inv
        self.groups = [keys[i] for i in order]
        # stable: each group's records in order (as 16-bit ints numpy sorts them by radix)
        perm = np.argsort(g.astype(np.int16) if len(keys) < (1 << 15) else g, kind="stable")
        bounds = np.searchsorted(g[perm], np.arange(len(keys) + 1))
        self.members = [perm[bounds[j] : bounds[j + 1]] for j in range(len(keys))]
        #: state_sets' table, list and index, kept for the BiasInputs they were made with
        self._state_sets: tuple[BiasInputs, np.ndarray, list, dict] | None = None

    # -- success (Table 3) and what Table 8 reads --------------------------------------------

    def outcomes(self, sl: np.ndarray) -> tuple[Counts, dict, dict, GroupStates]:
        """One group's records: their counts and tokens, clean success per task, residual success
        per task and the states behind it (GroupStates)."""
        names = self.names
        v, c = self.valid[sl], self.clean[sl]
        o = Counts()
        o.n_infra_errors = int(self.infra[sl].sum())
        o.n_flagged = int((v & self.flagged[sl]).sum())
        vc, vr = sl[v & c], sl[v & ~c]
        o.n_clean_runs, o.n_residual_runs = len(vc), len(vr)
        with_tokens = sl[v & self.tokens.present[sl]]
        tc = self.clean[with_tokens]
        tok = self.tokens.values[with_tokens]
        o.tokens = {"clean": tok[tc].tolist(), "residual": tok[~tc].tolist()}
        o.cost_usd = total_of(self.cost[sl])  # every attempt's spend, infra errors too
        ctask, cmean, ccells = _count_means(self.task[vc], self.outcome[vc])
        clean_t = dict(zip([names[t] for t in ctask.tolist()], cmean.tolist()))
        # per (task, state): y(S); the tasks in the order they first appear, each one's states so
        task, skey = self.task[vr], self.skey[vr]
        width = len(names) + 1
        pk, means, cells = _count_means(task.astype(np.int64) * width + skey, self.outcome[vr])
        ptask = pk // width
        if len(pk):
            _, first_pair, tinv = np.unique(ptask, return_index=True, return_inverse=True)
            task_rank = np.argsort(np.argsort(first_pair))[tinv.reshape(-1)]
            o2 = np.argsort(task_rank, kind="stable")
        else:
            o2 = np.zeros(0, np.int64)
        states = GroupStates(ptask[o2], (pk % width)[o2], means[o2], ctask, cmean)
        states.cells, states.clean_cells = cells.take(o2), ccells
        # each state's family: that of the first of its records
        fam_of_state = np.full(width, -1, np.int64)
        if len(vr):
            _, fi = np.unique(skey, return_index=True)
            fam_of_state[skey[fi]] = self.family[vr][fi]
        states.family = fam_of_state[states.state]
        tstarts, tends = states.task_bounds()
        res = _contiguous_means(states.y, tstarts, tends)
        res_t = dict(zip([names[t] for t in states.task[tstarts].tolist()], res))
        return o, clean_t, res_t, states

    def failing_index(self, inp: BiasInputs, track: str, tasks: np.ndarray) -> tuple[np.ndarray, list]:
        """Per task code of `tasks`, the index of BiasInputs.task_failing(track, task) in a list
        shared by the track's groups (-1: no failing set, -3: the manifest has no states of the
        task), and the list."""
        cache = self.__dict__.setdefault("_failing", {})
        if cache.get(track, (None,))[0] is not inp:
            cache[track] = (inp, np.full(len(self.names), -2, np.int64), [], {})
        _, table, lists, ids = cache[track]
        for t in np.unique(tasks[table[tasks] == -2]).tolist():
            found = inp.task_failing(track, self.names[t])
            if found is None:
                table[t] = -3
            elif not found:
                table[t] = -1
            else:
                table[t] = ids.setdefault(id(found), len(lists))
                if table[t] == len(lists):
                    lists.append(found)
        return table[tasks], lists

    def state_sets(self, inp: BiasInputs) -> tuple[np.ndarray, list, dict]:
        """Per state code, the index of its test sets (BiasInputs.state_tests) in a shared list
        (-1: none, -2: not asked yet), the list, and its index by object identity."""
        if self._state_sets is None or self._state_sets[0] is not inp:
            self._state_sets = (inp, np.full(len(self.names), -2, np.int64), [], {})
        _, table, sets, ids = self._state_sets
        return table, sets, ids

    def rule_counts(self) -> dict[str, int]:
        """How many records each taxonomy rule produced (docs/errors.md): the record's rule, else
        (records written before rules existed) "verdict" / "infra_harness" by validity."""
        rules = self.cols.rule[self.pos]
        names = self.names
        counts: dict[str, int] = {}
        for code, n in zip(*np.unique(rules, return_counts=True)):
            if names[code]:
                counts[names[code]] = counts.get(names[code], 0) + int(n)
        unnamed = np.isin(rules, [i for i, v in enumerate(names) if not v])
        for name, n in (
            ("verdict", int((unnamed & self.valid).sum())),
            ("infra_harness", int((unnamed & ~self.valid).sum())),
        ):
            if n:
                counts[name] = counts.get(name, 0) + n
        return counts


def blind(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the Clean and Residual Start records (a handoff view's runs have tables
    of their own) and which of them are Clean Start runs."""
    pos = np.flatnonzero(np.isin(cols.start, [cols.code(s) for s in STARTS]))
    return pos, cols.start[pos] == cols.code("clean")


class GroupSuccess:
    """One (track, agent) of Table 3: the per-task success behind its row, and the row."""

    __slots__ = ("track", "agent", "clean_t", "res_t", "tasks", "states", "row", "_cells")

    def __init__(
        self, track: str, agent: str, counts: Counts, clean_t: dict, res_t: dict, states, names: list
    ):
        self.track, self.agent = track, agent
        self.clean_t = clean_t  # task -> y(S_0) (its valid attempts averaged)
        self.res_t = res_t  # task -> residual success (1/K) sum_S y(S)
        self.tasks = matched_tasks(clean_t, res_t)  # T
        self.states: GroupStates = states
        self.row = success_row(counts, clean_t, res_t, self.tasks)
        self._cells = None
        if states.repeated():  # pass@k, pass^k: only where some case has repeats
            self._cells = states.cells_by_task(names)
            pass_k = repeat_row(self._cells[0], self._cells[1], self.tasks)
            if pass_k:
                self.row["pass_k"] = pass_k

    def task_cells(self, tasks: list[str]) -> list[tuple[tuple[int, int], list[tuple[int, int]]]] | None:
        """Per task: (successes, repeats) of its clean start and of each of its states, for the
        nested bootstrap; None when no case has more than one valid attempt."""
        if self._cells is None:
            return None
        clean, res = self._cells
        return [(clean[t], res[t]) for t in tasks]

    def both(self) -> list[str]:
        """The tasks of T with a clean and a residual value (the pairs the bootstrap resamples)."""
        if self.clean_t and self.res_t:
            return self.tasks
        return [t for t in self.tasks if t in self.clean_t and t in self.res_t]

    def task_values(self, metric: str) -> dict[str, float]:
        """{task: value} on T: residual = (1/K_i) sum_S y(S); clean = y(S_0); gap = clean - residual
        (a fraction)."""
        clean_t, res_t = self.clean_t, self.res_t
        if metric == "residual":
            return {t: res_t[t] for t in self.tasks if t in res_t}
        if metric == "clean":
            return {t: clean_t[t] for t in self.tasks if t in clean_t}
        return {t: clean_t[t] - res_t[t] for t in self.both()}


@dataclass
class StateHarm:
    """One state across agents: its task's clean success and the residual success from it."""

    track: str
    task: str
    state: str
    agents: list[str]
    clean: float  # mean over agents of y(S_0) of the task (each agent's attempts averaged)
    residual: float  # mean over agents of y(S) from this state

    @property
    def gap(self) -> float:
        return 100.0 * (self.clean - self.residual)


class Success:
    """Table 3 of a selection of records and the per-task values behind it, computed once: the
    tables print it; the gates, `compare`, the run page and the end of a run read this object."""

    METRICS = ("residual", "clean", "gap")

    def __init__(self, sel: Selection):
        self.names = sel.names
        self.groups: list[GroupSuccess] = []
        for (track, agent), sl in zip(sel.groups, sel.members):
            counts, clean_t, res_t, states = sel.outcomes(sl)
            self.groups.append(GroupSuccess(track, agent, counts, clean_t, res_t, states, sel.names))

    def table(self) -> dict[str, dict[str, dict]]:
        """{track: {agent: row}} (Table 3 without its bootstrap intervals)."""
        out: dict[str, dict[str, dict]] = {}
        for g in self.groups:
            out.setdefault(g.track, {})[g.agent] = g.row
        return out

    def with_intervals(self, n_boot: int, seed: int) -> dict[str, dict[str, dict]]:
        """Table 3: each row with its bootstrap intervals (`ci`) over the (clean, residual) pairs of
        its tasks (the bootstrap sorts them by value)."""
        out: dict[str, dict[str, dict]] = {}
        for g in self.groups:
            both = g.both()
            cells = g.task_cells(both)
            if cells is None:
                pairs = list(zip([g.clean_t[t] for t in both], [g.res_t[t] for t in both]))
                ci = bootstrap_ci(pairs, n_boot=n_boot, seed=seed)
            else:  # the repeats resampled within each drawn task too
                ci = nested_bootstrap_ci(cells, n_boot=n_boot, seed=seed)
            out.setdefault(g.track, {})[g.agent] = {**g.row, "ci": ci}
        return out

    def task_values(self, metric: str = "residual") -> dict[tuple[str, str], dict[str, float]]:
        """{(track, agent): {task: value}} on each agent's matched task set T (docs/metrics.md)."""
        if metric not in self.METRICS:
            raise ValueError(f"metric must be one of {self.METRICS}, not {metric!r}")
        return {(g.track, g.agent): g.task_values(metric) for g in self.groups}

    def state_harm(self, exclude: frozenset[str] = frozenset()) -> list[StateHarm]:
        """Per Residual State, over the agents that ran both its task's Clean Start and the state
        (but those in `exclude`): mean clean success, mean residual success and their difference
        (points), largest first."""
        names = self.names
        per: dict[tuple[str, str, str], list[tuple[str, float, float]]] = {}
        for g in self.groups:
            if g.agent in exclude:
                continue
            st = g.states
            for t, s, y in zip(st.task.tolist(), st.state.tolist(), st.y.tolist()):
                clean = g.clean_t.get(names[t])
                if clean is not None:
                    per.setdefault((g.track, names[t], names[s]), []).append((g.agent, clean, y))
        out = [
            StateHarm(
                track,
                task,
                state,
                [a for a, _, _ in v],
                sum(c for _, c, _ in v) / len(v),
                sum(r for _, _, r in v) / len(v),
            )
            for (track, task, state), v in per.items()
        ]
        return sorted(out, key=lambda h: (-h.gap, h.track, h.task, h.state))


def success_of(records: Iterable[Record]) -> Success:
    """Table 3 of records (their Clean and Residual Start runs) and its per-task values: for
    load_runs' records the Success their report computed (the numbers it printed), else computed
    from their columns now (and kept with them)."""
    cols = getattr(records, "columns", None)
    if cols is None or cols.success is None:
        cols = columns_for(records)
    if cols.success is None:
        pos, clean = blind(cols)
        cols.success = Success(Selection(cols, pos, clean, ManifestView()))
    return cols.success


class GroupStates:
    """The (task, state) outcomes of one group: task, state (skey code), y(S) and the state's
    family per pair, tasks contiguous in the order they first appear, states within a task in
    the order they first appear; and the group's clean success per task (clean_task: the task
    codes, clean_y: y(S_0))."""

    def __init__(
        self, task: np.ndarray, state: np.ndarray, y: np.ndarray, clean_task: np.ndarray, clean_y: np.ndarray
    ):
        self.task, self.state, self.y = task, state, y
        self.clean_task, self.clean_y = clean_task, clean_y
        self.family = np.zeros(0, np.int64)
        empty = np.zeros(0, np.int64)
        self.cells = Cells(empty, empty)  # per pair: successes and valid repeats
        self.clean_cells = Cells(empty, empty)  # per clean_task

    def repeated(self) -> bool:
        """Has some case (clean start or state) more than one valid attempt?"""
        return bool(len(self.cells.n) and self.cells.n.max() > 1) or bool(
            len(self.clean_cells.n) and self.clean_cells.n.max() > 1
        )

    def cells_by_task(
        self, names: list
    ) -> tuple[dict[str, tuple[int, int]], dict[str, list[tuple[int, int]]]]:
        """{task: (successes, repeats)} of the clean starts and {task: [(successes, repeats) per
        state]} in the order of the states."""
        clean = dict(
            zip(
                [names[t] for t in self.clean_task.tolist()],
                zip(self.clean_cells.s.tolist(), self.clean_cells.n.tolist()),
            )
        )
        res: dict[str, list[tuple[int, int]]] = {}
        for t, s, n in zip(self.task.tolist(), self.cells.s.tolist(), self.cells.n.tolist()):
            res.setdefault(names[t], []).append((s, n))
        return clean, res

    def task_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.task
        if not len(t):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        brk = np.flatnonzero(t[1:] != t[:-1]) + 1
        return np.concatenate(([0], brk)).astype(np.int64), np.concatenate((brk, [len(t)])).astype(np.int64)


def _contiguous_means(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[float]:
    """sum(values[a:b]) / (b - a) per segment, as Python computes it for a list (see segment_means)."""
    v = values.astype(np.float64)
    lens = ends - starts
    out = np.empty(len(starts))
    one, two = lens == 1, lens == 2
    out[one] = (0.0 + v[starts[one]]) / 1.0
    s2 = starts[two]
    out[two] = ((0.0 + v[s2]) + v[s2 + 1]) / 2.0
    more = np.flatnonzero(lens > 2)
    if len(more):
        vl = v.tolist()
        for i, a, b in zip(more.tolist(), starts[more].tolist(), ends[more].tolist()):
            out[i] = sum(vl[a:b]) / (b - a)
    return out.tolist()


def predecessor_groups(sel: Selection, success: Success) -> dict[str, Any]:
    """Table 8 (docs/metrics.md) from the groups' arrays: per task, its states grouped by family
    (families in the order they first appear in the task, states in order), overall = the mean of
    them all in that order, each family's cell the mean of its own; per agent and family, the
    tasks in the order the groups (sorted) and their tasks come, with the agent's Clean Start
    success on the same (track, task)."""
    names = sel.names
    width = len(names) + 1
    # (agent, family code or -1 for overall) -> [(clean values, residual values)] in group order
    cells: dict[tuple[str, int], list[tuple[list, list]]] = defaultdict(list)
    families: set[int] = set()
    for agent, st in ((g.agent, g.states) for g in success.groups):
        if not len(st.task):
            continue
        has_clean = np.zeros(width, bool)
        has_clean[st.clean_task] = True
        clean = np.zeros(width)
        clean[st.clean_task] = st.clean_y
        tstarts, tends = st.task_bounds()
        seg = np.repeat(np.arange(len(tstarts)), tends - tstarts)
        order, gstarts, gends = _segments(seg * width + st.family)  # (task, family) runs
        # the pairs in (task, family in the order it first appears in the task, state) order
        rank = np.repeat(np.argsort(gstarts, kind="stable"), np.sort(gends) - np.sort(gstarts))
        flat = order[np.argsort(rank, kind="stable")]
        lens = gends - gstarts
        fstarts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
        y = st.y[flat]
        overall = np.array(_contiguous_means(y, tstarts, tends))
        by_family = np.array(_contiguous_means(y, fstarts, fstarts + lens))
        ttask = st.task[tstarts]
        keep = has_clean[ttask]
        cells[(agent, -1)].append((clean[ttask][keep].tolist(), overall[keep].tolist()))
        gfam, gtask = st.family[flat][fstarts], st.task[flat][fstarts]
        gkeep = has_clean[gtask]
        for g in np.unique(gfam).tolist():
            families.add(g)
            m = (gfam == g) & gkeep
            cells[(agent, g)].append((clean[gtask][m].tolist(), by_family[m].tolist()))
    fam_names = sorted(names[g] for g in families)
    codes = {names[g]: g for g in families}
    out: dict[str, Any] = {"families": fam_names, "agents": {}}
    for agent in sorted({g.agent for g in success.groups}):
        row = {}
        for key, g in (("overall", -1), *((f, codes[f]) for f in fam_names)):
            parts = cells.get((agent, g), [])
            row[key] = group_cell([v for cl, _ in parts for v in cl], [v for _, rs in parts for v in rs])
        out["agents"][agent] = row
    return out


# -- acceptance bias (Table 4) ----------------------------------------------------------------


READ = ("patch", "trajectory")  # the artifacts the measures read


class RunView(msgspec.Struct, kw_only=True, gc=False):
    """One normally submitted run as the file-reading measures (Kept, left-out files, inspection)
    see it: built only for agents whose runs carry patch or trajectory artifacts (and with only
    those artifacts, their paths absolute)."""

    task: str
    state: str | None
    track: str
    start: str
    outcome: int  # valid: 0 or 1
    steps: int | None
    tests: dict
    missing_tests: list
    artifacts: dict
    prompt_tokens: int | None
    completion_tokens: int | None


class _Probe(msgspec.Struct, gc=False):
    """What BiasInputs.state_tests reads of a record."""

    state: str
    track: str
    task: str


class ColumnRuns:
    """One agent's normally submitted runs on one track, as the measures read them
    (bias/measures.py AgentRuns): the per-task facts computed as arrays from the columns, the runs
    themselves (RunView) only when a measure iterates them."""

    def __init__(self, sel: Selection, sl: np.ndarray, inp: BiasInputs, track: str):
        self.sel, self.inp, self._track = sel, inp, track
        ns, clean = sel.ns[sl], sel.clean[sl]
        self._cn = cn = sl[ns & clean]
        self._rn = rn = sl[ns & ~clean & sel.state_truthy[sl]]
        uncommitted = self._uncommitted(rn)
        self._un, self._gn = rn[uncommitted], rn[~uncommitted]  # _gn: graded with the work given
        self._fn = self._gn[sel.outcome[self._gn] == 0]
        nested = sel.cols.nested["artifacts"]
        keys: set[str] = set()
        for code in np.unique(np.concatenate((sel.art[cn], sel.art[rn]))).tolist():
            keys.update(nested[code])
        self.artifacts = frozenset(keys)
        self.tests = self._test_lists(inp)
        self.step_ratios = self._ratios(sel.steps)
        self._tokens = self._ratios(sel.tokens)

    def with_artifact(self, name: str) -> bool:
        """Does any run carry this artifact? (cheap precheck before reading files)"""
        return name in self.artifacts

    def _uncommitted(self, rows: np.ndarray) -> np.ndarray:
        """Which of these continuations were graded on committed work only (a graded_patch,
        report/graded.py) and left part of their work uncommitted."""
        sel = self.sel
        out = np.zeros(len(rows), bool)
        nested = sel.cols.nested["artifacts"]
        codes = sel.art[rows]
        graded = [c for c in np.unique(codes).tolist() if GRADED_PATCH in nested[c]]
        for i in np.flatnonzero(np.isin(codes, graded)).tolist():
            art = sel.cols.artifact_dict(int(sel.pos[rows[i]]), ("patch", GRADED_PATCH))
            out[i] = self.inp.left_uncommitted(art)
        return out

    def _test_lists(self, inp: BiasInputs) -> dict[str, PerTask]:
        """The per-test facts of every continuation with per-test outcomes, per task: per distinct
        (state test sets, per-test dict, missing tests, failed) computed once."""
        sel, names = self.sel, self.sel.names
        q = self._gn[sel.has_outcomes[self._gn]]
        empty = {k: PerTask([], 0) for k in ("repaired", "repaired_failed", "same", "broke")}
        if not len(q):
            return empty
        # each state's test sets: state_tests(r) of the first record of the state decides (across
        # the groups, in order), kept per state code for the groups after this one
        table, sets, ids = sel.state_sets(inp)
        states, first = np.unique(sel.state[q], return_index=True)
        new = table[states] == -2
        for code, i in zip(states[new].tolist(), first[new].tolist()):
            sid = names[code]
            if sid not in inp._state_tests:
                r = q[i]
                inp.state_tests(_Probe(sid, names[sel.cols.track[sel.pos[r]]], names[sel.task[r]]))
            st = inp._state_tests[sid]
            if st is None:
                table[code] = -1
            else:
                table[code] = ids.setdefault(id(st), len(sets))
                if table[code] == len(sets):
                    sets.append(st)
        sc = table[sel.state[q]]
        q, sc = q[sc >= 0], sc[sc >= 0]
        if not len(q):
            return empty
        failed = sel.outcome[q] == 0
        tests, missing = sel.tests[q].astype(np.int64), sel.missing[q].astype(np.int64)
        combo = ((sc * (tests.max() + 1) + tests) * (missing.max() + 1) + missing) * 2 + failed
        uniq, first, inv = np.unique(combo, return_index=True, return_inverse=True)
        tvals, mvals = sel.cols.nested["tests"], sel.cols.nested["missing_tests"]
        facts = [
            tests_facts(sets[sc[i]], tvals[tests[i]], mvals[missing[i]], bool(failed[i]))
            for i in first.tolist()
        ]
        inv = inv.reshape(-1)
        value = np.array([f[0] for f in facts])[inv]
        same = np.array([-1.0 if f[1] is None else f[1] for f in facts])[inv]
        broke = np.array([np.nan if f[2] is None else f[2] for f in facts])[inv]
        task, state = sel.task[q], sel.state[q]
        f_task, f_state = task[failed], state[failed]
        has_broke = ~np.isnan(broke[failed])
        return {
            "repaired": per_state_task(task, state, value),
            "repaired_failed": per_state_task(f_task, f_state, value[failed]),
            "same": per_state_task(f_task, f_state, same[failed]),
            "broke": per_state_task(f_task[has_broke], f_state[has_broke], broke[failed][has_broke]),
        }

    def _ratios(self, col: IntColumn) -> PerTask:
        """_step_ratios for a count (steps, tokens): per task, each continuation's count / the mean
        of the task's non-zero Clean Start counts."""
        sel, names = self.sel, self.sel.names
        cn = self._cn[col.present[self._cn]]
        cn = cn[col.values[cn] != 0]
        if not len(cn):
            return PerTask([], 0)
        keys = sel.task[cn]
        order, starts, ends = _segments(keys)
        vals = col.values[cn][order]
        tasks = keys[order[starts]]
        sums = None
        if vals.dtype != object and len(vals) < (1 << 23):  # counts below 2**40: int64 sums are exact
            sums = np.add.reduceat(vals, np.sort(starts))[np.argsort(np.argsort(starts))]
        if sums is not None and np.abs(sums).max() < (1 << 53):  # exact as floats too
            means = sums.astype(np.float64) / (ends - starts)  # int / int, correctly rounded
        else:  # Python's int sum and int / int
            vl = vals.tolist()
            means = np.array([sum(vl[a:b]) / (b - a) for a, b in zip(starts.tolist(), ends.tolist())])
        rn = self._rn[col.present[self._rn]]
        task = sel.task[rn]
        has_clean = np.zeros(len(names), bool)
        has_clean[tasks] = True
        known = has_clean[task]
        rn, task = rn[known], task[known]
        if not len(rn):
            return PerTask([], 0)
        table = np.zeros(len(names))
        table[tasks] = means
        counts = col.values[rn]
        if counts.dtype != object:
            ratios = counts.astype(np.float64) / table[task]
        else:  # Python ints: Python's int / float
            ratios = np.array([c / t for c, t in zip(counts.tolist(), table[task].tolist())], np.float64)
        return per_state_task(task, sel.state[rn], ratios)

    def token_ratios(self) -> PerTask:
        return self._tokens

    def count(self, which: str) -> int:
        rows = {"clean": self._cn, "continuations": self._rn, "uncommitted": self._un}
        return len(rows.get(which, self._fn))

    def states_of(self, which: str) -> Iterator[str]:
        """The distinct states, lazily: the measures stop at the first with a failing set."""
        cache = self.__dict__.setdefault("_states_of", {})
        if which not in cache:
            rows = self._rn if which == "continuations" else self._fn
            cache[which] = first_seen(self.sel.state[rows])
        names = self.sel.names
        return (names[c] for c in cache[which].tolist())

    def _clean_outcome_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The per-test outcomes of the Clean Start runs that report any (tests or missing tests):
        the task codes (in the order of runs.clean) and, per task, its slice starts:ends of
        `codes` (the per-test dict codes of its runs, in order)."""
        sel = self.sel
        cn = self._cn
        empty = np.zeros(0, np.int64)
        if not len(cn):
            return empty, empty, empty, empty
        task = sel.task[cn]
        _, first, inv = np.unique(task, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first))[inv.reshape(-1)]  # tasks in the order of runs.clean
        q = sel.has_outcomes[cn]
        rank, task, tests = rank[q], task[q], sel.tests[cn][q]
        if not len(rank):
            return empty, empty, empty, empty
        order = np.argsort(rank, kind="stable")
        r = rank[order]
        brk = np.flatnonzero(r[1:] != r[:-1]) + 1
        starts, ends = np.concatenate(([0], brk)), np.concatenate((brk, [len(r)]))
        return task[order][starts], starts, ends, tests[order].astype(np.int64)

    def clean_shares(self, inp: BiasInputs, track: str) -> PerTask:
        """Per task, for each failing set F(S_r) of its states (the manifest's, else those of the
        agent's continuations on it) and each Clean Start run with per-test outcomes: the share of
        F(S_r) passing at the end of the run. A task with one Clean Start outcome has the shares
        (and their mean) of its (failing sets, per-test dict), computed once per distinct pair."""
        sel, names = self.sel, self.sel.names
        tasks, starts, ends, codes = self._clean_outcome_arrays()
        tvals = sel.cols.nested["tests"]
        fidx, lists = sel.failing_index(inp, track, tasks)
        width = int(codes.max()) + 1 if len(codes) else 1
        mean = np.full(len(tasks), np.nan)
        count = np.zeros(len(tasks), np.int64)
        single = np.flatnonzero((ends - starts == 1) & (fidx >= 0))
        combos, inv = np.unique(fidx[single] * width + codes[starts[single]], return_inverse=True)
        cmean, ccount = np.empty(len(combos)), np.empty(len(combos), np.int64)
        for k, combo in enumerate(combos.tolist()):
            tests = tvals[combo % width]
            values = [inp.passed_share(f_r, tests) for f_r in lists[combo // width]]
            cmean[k], ccount[k] = sum(values) / len(values), len(values)
        mean[single], count[single] = cmean[inv.reshape(-1)], ccount[inv.reshape(-1)]
        seen = None
        # a task's repeated clean runs: the shares of each (failing sets, per-test dict) once
        shares: dict[tuple[int, int], list[float]] = {}
        for i in np.flatnonzero((ends - starts != 1) & (fidx != -1) | (fidx == -3)).tolist():
            known = int(fidx[i]) >= 0
            if known:
                failing = lists[fidx[i]]
            else:  # no manifest states for the task: those of the agent's continuations on it
                seen = self.continuation_states() if seen is None else seen
                failing = [f_r for f_r in map(inp.failing, sorted(seen.get(names[tasks[i]], ()))) if f_r]
            if failing:
                run_codes = codes[starts[i] : ends[i]].tolist()
                by_code = []
                for c in run_codes:
                    got = shares.get((int(fidx[i]), c)) if known else None
                    if got is None:
                        got = [inp.passed_share(f_r, tvals[c]) for f_r in failing]
                        if known:
                            shares[(int(fidx[i]), c)] = got
                    by_code.append(got)
                # in the order f_r, then the runs (the sum's order)
                values = [row[j] for j in range(len(failing)) for row in by_code]
                mean[i], count[i] = sum(values) / len(values), len(values)
        kept = ~np.isnan(mean)
        return PerTask(mean[kept].tolist(), int(count[kept].sum()))

    def continuation_states(self) -> dict[str, set[str]]:
        """Per task, the states of its continuations."""
        seen: dict[str, set[str]] = defaultdict(set)
        names = self.sel.names
        for t, s in zip(self.sel.task[self._rn].tolist(), self.sel.state[self._rn].tolist()):
            seen[names[t]].add(names[s])
        return seen

    # the runs themselves, for the measures that read their files

    def _views(self, rows: np.ndarray) -> list[RunView]:
        sel, names, cols = self.sel, self.sel.names, self.sel.cols
        tvals, mvals = cols.nested["tests"], cols.nested["missing_tests"]
        ptok, ctok = cols.prompt_tokens, cols.completion_tokens

        def num(col: IntColumn, i: int) -> int | None:
            return int(col.values[i]) if col.present[i] else None

        out = []
        for r in rows.tolist():
            p = int(sel.pos[r])
            out.append(
                RunView(
                    task=names[sel.task[r]],
                    state=names[sel.state[r]],
                    track=self._track,
                    start="clean" if sel.clean[r] else "residual",
                    outcome=int(sel.outcome[r]),
                    steps=num(sel.steps, r),
                    tests=tvals[sel.tests[r]],
                    missing_tests=mvals[sel.missing[r]],
                    artifacts=cols.artifact_dict(p, READ),
                    prompt_tokens=num(ptok, p),
                    completion_tokens=num(ctok, p),
                )
            )
        return out

    @cached_property
    def clean(self) -> dict[str, list[RunView]]:
        out: dict[str, list[RunView]] = {}
        for v in self._views(self._cn):
            out.setdefault(v.task, []).append(v)
        return out

    @cached_property
    def continuations(self) -> list[RunView]:
        return self._views(self._rn)

    @cached_property
    def failed(self) -> list[RunView]:
        """The failed continuations graded with the work they were given (not _un)."""
        return self._views(self._fn)


def acceptance_bias(sel: Selection, facts: Any, root: Any) -> dict[str, dict[str, Any]]:
    """Table 4: {track: {agent: measures}} for every track/agent with records (n/a where
    undefined)."""
    from swe_residual.tracks import track_kind

    inp = BiasInputs(facts, root)
    runs = [
        (track, agent, ColumnRuns(sel, sl, inp, track)) for (track, agent), sl in zip(sel.groups, sel.members)
    ]
    # the trajectories the inspection and left-out measures read, all at once (two processes)
    inp.prefetch_trajectory_facts(
        r
        for track, _, ru in runs
        if ru.with_artifact("trajectory") and track_kind(track) != "machine"
        for r in ru.continuations
    )
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for track, agent, ru in runs:
        out[track][agent] = runs_bias(ru, inp, track)
    return dict(out)
