"""Every table of the report from the columns (report/columns.py), without a loop per record.

The per-record passes of metrics.py (Outcomes) and bias/measures.py (AgentRuns.of) become array
operations: the records of each (track, agent) are sorted by task (and state), stably, so each
(track, agent, task, start, state) is one segment of the arrays, and counts, sums and first
appearances come from numpy. What is left in Python runs once per task or per distinct value (the
per-test facts of a continuation depend only on its state's test sets, its per-test dict and
whether it failed), never per record.

The numbers are bit-identical to the per-record code, which stays the definition: outcomes are
0/1 counts, whose means are exact integer quotients either way; every sum of floats is Python's
own `sum` over the same values in the same order (tasks and states in the order the records
first show them), and the formulas on the aggregates (success_row, task_mean, predecessor_table,
the medians, bootstrap_ci) are the very functions the per-record code calls.
tests/test_report_columns.py compares both on every key of the report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import msgspec
import numpy as np

from swe_residual.report.bias.measures import AgentRuns, BiasInputs, _test_facts, runs_bias
from swe_residual.report.columns import Columns, IntColumn
from swe_residual.report.metrics import Outcomes, group_cell, matched_tasks, success_row
from swe_residual.report.stats import bootstrap_ci


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


def _lists(names: list, keys: np.ndarray, values: np.ndarray) -> dict[Any, list]:
    """{names[key]: [values in order]} with the keys in the order they first appear (what
    appending to a dict of lists record by record gives)."""
    if not len(keys):
        return {}
    order, starts, ends = _segments(keys)
    vals = values[order].tolist()
    firsts = keys[order[starts]].tolist()
    return {names[k]: vals[a:b] for k, a, b in zip(firsts, starts.tolist(), ends.tolist())}


def segment_means(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Per distinct key (in first-appearance order): sum(its values in order) / their number, as
    Python computes it for a list: one or two values directly ((0 + x0) + x1 is also what the
    compensated sum of Python 3.12 gives for two), three or more with Python's own sum."""
    if not len(keys):
        return keys[:0], []
    order, starts, ends = _segments(keys)
    return keys[order[starts]], _contiguous_means(values[order], starts, ends)


class TaskValues(Mapping):
    """Per-task values as arrays (keys[i]: the task code of values[i], in run order): what the
    measures read as {task: [values]}; task_mean reads `task_means` without a list per task."""

    def __init__(self, names: list, keys: np.ndarray, values: np.ndarray):
        self._names, self._keys, self._values = names, keys, values
        self._lists: dict | None = None

    def task_means(self) -> tuple[list[float], int]:
        return segment_means(self._keys, self._values)[1], len(self._keys)

    def _all(self) -> dict:
        if self._lists is None:
            self._lists = _lists(self._names, self._keys, self._values)
        return self._lists

    def __getitem__(self, task):
        return self._all()[task]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(np.unique(self._keys)) if self._lists is None else len(self._lists)


class TaskMeans(Mapping):
    """{task: [values]} whose per-task means and number of values are already computed (what
    task_mean reads); the lists themselves are built by `lists()` on first use."""

    def __init__(self, means: list[float], n_runs: int, lists):
        self._means, self._n_runs, self._make = means, n_runs, lists
        self._lists: dict | None = None

    def task_means(self) -> tuple[list[float], int]:
        return self._means, self._n_runs

    def _all(self) -> dict:
        if self._lists is None:
            self._lists = self._make()
        return self._lists

    def __getitem__(self, task):
        return self._all()[task]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._means)


def _count_means(keys: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct key (first-appearance order): (key, mean of the 0/1 values, first position).
    sum(ys) / len(ys) of 0/1 ints is an exact integer quotient, correctly rounded: the same
    double whichever way it is computed."""
    if not len(keys):
        return keys[:0], np.zeros(0), keys[:0]
    order, starts, ends = _segments(keys)
    sums = np.add.reduceat(y[order].astype(np.int64), np.sort(starts))
    sums = sums[np.argsort(np.argsort(starts))]
    return keys[order[starts]], sums / (ends - starts), order[starts]


def _means_by(names: list, keys: np.ndarray, y: np.ndarray) -> dict[Any, float]:
    k, m, _ = _count_means(keys, y)
    return dict(zip([names[c] for c in k.tolist()], m.tolist()))


class Selection:
    """The records of one build (positions into the columns, in the order the per-record code
    sees them) with the fields every table reads, and their (track, agent) groups in sorted order."""

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
        for c in codes:
            st = facts.states.get(names[c]) if isinstance(names[c], str) else None
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

    # -- success (Table 3) and what Table 8 reads --------------------------------------------

    def outcomes(self, sl: np.ndarray) -> tuple[Outcomes, dict, dict, GroupStates]:
        """Outcomes.extend of one group's records: the counts and tokens (as an Outcomes), clean
        success per task, residual success per task and the states behind it (GroupStates)."""
        names = self.names
        v, c = self.valid[sl], self.clean[sl]
        o = Outcomes()
        o.n_infra_errors = int(self.infra[sl].sum())
        o.n_flagged = int((v & self.flagged[sl]).sum())
        vc, vr = sl[v & c], sl[v & ~c]
        o.n_clean_runs, o.n_residual_runs = len(vc), len(vr)
        with_tokens = sl[v & self.tokens.present[sl]]
        tc = self.clean[with_tokens]
        tok = self.tokens.values[with_tokens]
        o.tokens = {"clean": tok[tc].tolist(), "residual": tok[~tc].tolist()}
        ctask, cmean, _ = _count_means(self.task[vc], self.outcome[vc])
        clean_t = dict(zip([names[t] for t in ctask.tolist()], cmean.tolist()))
        # per (task, state): y(S); the tasks in the order they first appear, each one's states so
        task, skey = self.task[vr], self.skey[vr]
        width = len(names) + 1
        pk, means, _ = _count_means(task.astype(np.int64) * width + skey, self.outcome[vr])
        ptask = pk // width
        if len(pk):
            _, first_pair, tinv = np.unique(ptask, return_index=True, return_inverse=True)
            task_rank = np.argsort(np.argsort(first_pair))[tinv.reshape(-1)]
            o2 = np.argsort(task_rank, kind="stable")
        else:
            o2 = np.zeros(0, np.int64)
        states = GroupStates(ptask[o2], (pk % width)[o2], means[o2])
        states.clean_task, states.clean_y = ctask, cmean
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
        if getattr(self, "_state_sets", None) is None or self._state_sets[0] is not inp:
            self._state_sets = (inp, np.full(len(self.names), -2, np.int64), [], {})
        return self._state_sets[1:]

    def rule_counts(self) -> dict[str, int]:
        """rule_counts' counts: the record's rule, else "verdict" / "infra_harness" by validity."""
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


def success_tables(sel: Selection, n_boot: int, seed: int) -> tuple[dict, list]:
    """Table 3 ({track: {agent: row}}, as _build makes it) and what Table 8 needs per group."""
    tracks: dict[str, dict[str, Any]] = {}
    per_group = []
    for (track, agent), sl in zip(sel.groups, sel.members):
        o, clean_t, res_t, states = sel.outcomes(sl)
        tasks = matched_tasks(clean_t, res_t)
        row = success_row(o, (clean_t, res_t), tasks)
        # the (clean, residual) pairs of the matched tasks (the bootstrap sorts them by value)
        both = tasks if clean_t and res_t else [t for t in tasks if t in clean_t and t in res_t]
        row["ci"] = bootstrap_ci(
            list(zip([clean_t[t] for t in both], [res_t[t] for t in both])), n_boot=n_boot, seed=seed
        )
        tracks.setdefault(track, {})[agent] = row
        per_group.append((track, agent, clean_t, states))
    return tracks, per_group


class GroupStates:
    """The (task, state) outcomes of one group: task, state (skey code), y(S) and the state's
    family per pair, tasks contiguous in the order they first appear, states within a task in
    the order they first appear."""

    def __init__(self, task: np.ndarray, state: np.ndarray, y: np.ndarray):
        self.task, self.state, self.y = task, state, y
        self.family = np.zeros(0, np.int64)

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


def predecessor_groups(sel: Selection, per_group: list) -> dict[str, Any]:
    """metrics.predecessor_table from the groups' arrays: per task, its states grouped by family
    (families in the order they first appear in the task, states in order), overall = the mean of
    them all in that order, each family's cell the mean of its own; per agent and family, the
    tasks in the order the groups (sorted) and their tasks come, with the agent's Clean Start
    success on the same (track, task)."""
    names = sel.names
    width = len(names) + 1
    # (agent, family code or -1 for overall) -> [(clean values, residual values)] in group order
    cells: dict[tuple[str, int], list[tuple[list, list]]] = defaultdict(list)
    families: set[int] = set()
    for _, agent, _, st in per_group:
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
    for agent in sorted({a for _, a, _, _ in per_group}):
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
    outcome: int | None
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


class ColumnRuns(AgentRuns):
    """AgentRuns of one (track, agent) from the columns: the per-task facts computed as arrays,
    the runs themselves (RunView) only when a measure iterates them."""

    def __init__(self, sel: Selection, sl: np.ndarray, inp: BiasInputs, track: str):
        self.sel, self.inp, self._track = sel, inp, track
        ns, clean = sel.ns[sl], sel.clean[sl]
        self._cn = cn = sl[ns & clean]
        self._rn = rn = sl[ns & ~clean & sel.state_truthy[sl]]
        self._fn = rn[sel.outcome[rn] == 0]
        nested = sel.cols.nested["artifacts"]
        keys: set[str] = set()
        for code in np.unique(np.concatenate((sel.art[cn], sel.art[rn]))).tolist():
            keys.update(nested[code])
        self.artifacts = frozenset(keys)
        self.tests = self._test_lists(inp)
        self.step_ratios = self._ratios(sel.steps)
        self._tokens = self._ratios(sel.tokens)

    def _test_lists(self, inp: BiasInputs) -> dict[str, dict[str, list[float]]]:
        """The per-test facts of every continuation with per-test outcomes (AgentRuns.of's inner
        loop): per distinct (state test sets, per-test dict, missing tests, failed) once."""
        sel, names = self.sel, self.sel.names
        q = self._rn[sel.has_outcomes[self._rn]]
        empty = {"repaired": {}, "repaired_failed": {}, "same": {}, "broke": {}}
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
            _test_facts(sets[sc[i]], tvals[tests[i]], mvals[missing[i]], bool(failed[i]))
            for i in first.tolist()
        ]
        inv = inv.reshape(-1)
        value = np.array([f[0] for f in facts])[inv]
        same = np.array([-1.0 if f[1] is None else f[1] for f in facts])[inv]
        broke = np.array([np.nan if f[2] is None else f[2] for f in facts])[inv]
        task = sel.task[q]
        f_task = task[failed]
        has_broke = ~np.isnan(broke[failed])
        return {
            "repaired": TaskValues(names, task, value),
            "repaired_failed": TaskValues(names, f_task, value[failed]),
            "same": TaskValues(names, f_task, same[failed]),
            "broke": TaskValues(names, f_task[has_broke], broke[failed][has_broke]),
        }

    def _ratios(self, col: IntColumn) -> dict[str, list[float]]:
        """_step_ratios for a count (steps, tokens): per task, each continuation's count / the mean
        of the task's non-zero Clean Start counts."""
        sel, names = self.sel, self.sel.names
        cn = self._cn[col.present[self._cn]]
        cn = cn[col.values[cn] != 0]
        if not len(cn):
            return {}
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
            return {}
        table = np.zeros(len(names))
        table[tasks] = means
        counts = col.values[rn]
        if counts.dtype != object:
            ratios = counts.astype(np.float64) / table[task]
        else:  # Python ints: Python's int / float
            ratios = np.array([c / t for c, t in zip(counts.tolist(), table[task].tolist())], np.float64)
        return TaskValues(names, task, ratios)

    def token_ratios(self) -> dict[str, list[float]]:
        return self._tokens

    def count(self, which: str) -> int:
        return len(self._cn if which == "clean" else self._rn if which == "continuations" else self._fn)

    def states_of(self, which: str) -> Iterator[str]:
        """The distinct states, lazily: the measures stop at the first with a failing set."""
        cache = self.__dict__.setdefault("_states_of", {})
        if which not in cache:
            rows = self._rn if which == "continuations" else self._fn
            cache[which] = first_seen(self.sel.state[rows])
        names = self.sel.names
        return (names[c] for c in cache[which].tolist())

    def clean_outcomes(self) -> dict[str, list[Mapping[str, str]]]:
        names = self.sel.names
        return {names[task]: outcomes for task, _, outcomes in self._clean_outcome_codes()}

    def _clean_outcome_codes(self) -> list[tuple[int, list[int], list[Mapping[str, str]]]]:
        """[(task code, tests codes, per-test dicts)] of clean_outcomes."""
        tasks, starts, ends, codes = self._clean_outcome_arrays()
        tvals = self.sel.cols.nested["tests"]
        codes_l = codes.tolist()
        return [
            (t, codes_l[a:b], [tvals[c] for c in codes_l[a:b]])
            for t, a, b in zip(tasks.tolist(), starts.tolist(), ends.tolist())
        ]

    def _clean_outcome_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """clean_outcomes as arrays: the task codes (in the order of runs.clean) and, per task,
        its slice starts:ends of `codes` (the per-test dict codes of its runs, in order)."""
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

    def clean_shares(self, inp: BiasInputs, track: str) -> Mapping[str, list[float]]:
        """AgentRuns.clean_shares: a task with one Clean Start outcome has the shares (and their
        mean) of its (failing sets, per-test dict), computed once per distinct pair."""
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
        failing_of = None
        for i in np.flatnonzero((ends - starts != 1) & (fidx != -1) | (fidx == -3)).tolist():
            if fidx[i] >= 0:
                failing = lists[fidx[i]]
            else:  # no manifest states for the task: those of the agent's continuations on it
                failing_of = failing_of or self.task_failing(inp, track)
                failing = failing_of(names[tasks[i]])
            if failing:
                outcomes = [tvals[c] for c in codes[starts[i] : ends[i]].tolist()]
                values = [inp.passed_share(f_r, tests) for f_r in failing for tests in outcomes]
                mean[i], count[i] = sum(values) / len(values), len(values)
        kept = ~np.isnan(mean)

        def per_task() -> dict[str, list[float]]:
            return AgentRuns.clean_shares(self, inp, track)

        return TaskMeans(mean[kept].tolist(), int(count[kept].sum()), per_task)

    def continuation_states(self) -> dict[str, set[str]]:
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
                    outcome=int(sel.outcome[r]) if sel.outcome[r] >= 0 else None,
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
    def clean(self) -> dict[str, list[RunView]]:  # type: ignore[override]
        out: dict[str, list[RunView]] = {}
        for v in self._views(self._cn):
            out.setdefault(v.task, []).append(v)
        return out

    @cached_property
    def continuations(self) -> list[RunView]:  # type: ignore[override]
        return self._views(self._rn)

    @cached_property
    def failed(self) -> list[RunView]:
        return [r for r in self.continuations if r.outcome == 0]


def acceptance_bias(sel: Selection, facts: Any, root: Any) -> dict[str, dict[str, Any]]:
    """{track: {agent: measures}} (bias.acceptance_bias from the columns)."""
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
