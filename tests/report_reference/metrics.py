"""Success metrics and benchmark statistics (docs/metrics.md; the paper's Appendix A/C/E).

Every number is task-weighted: outcomes are averaged within a task first (over its residual
states, and over repeated attempts of one case), then across tasks, so a task with three states
weighs as much as one with a single state. Only valid verdicts count; infra errors (and runs the
harness ended as infra interruptions) are never outcomes. Values are unrounded fractions in
[0, 1] (gaps in points); rounding is for display only, so Gap is computed before rounding.
Something that cannot be computed is None plus a reason, never a made-up 0.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean, median
from typing import Any

from swe_residual.results import Manifest, Record
from tests.report_reference.bias import parse_patch, read_regular_file

TaskOutcomes = tuple[dict[str, float], dict[str, float]]


def _mean(values: list) -> float:
    """Plain mean; statistics.fmean is exact but ~10x slower, and the inputs are 0/1 counts."""
    return sum(values) / len(values)


def record_cost(r: Record) -> float | None:
    """USD a record spent: its cost_usd; nothing for an agent that calls no model or took no step;
    else unknown (None)."""
    if r.cost_usd is not None:
        return float(r.cost_usd)
    if r.harness in ("builtin", "scripted", "replay") or not r.steps:
        return 0.0
    return None


def total_cost(costs: list[float | None]) -> float | str:
    """The exact sum, or "unknown" when one cost is."""
    return "unknown" if any(c is None for c in costs) else math.fsum(costs)


@dataclass
class Outcomes:
    """Valid outcomes of one agent on one track, gathered in a single pass over the records."""

    clean: dict[str, list[int]] = field(default_factory=dict)               # task -> y(S_0) per attempt
    states: dict[str, dict[str, list[int]]] = field(default_factory=dict)   # task -> state -> y(S)
    family: dict[str, str] = field(default_factory=dict)                    # state -> predecessor family
    n_clean_runs: int = 0
    n_residual_runs: int = 0
    n_infra_errors: int = 0
    n_flagged: int = 0                      # valid runs with integrity flags
    tokens: dict[str, list[int]] = field(default_factory=lambda: {"clean": [], "residual": []})  # per valid run
    costs: list[float | None] = field(default_factory=list)  # USD per record, infra errors too (None: unknown)
    _state_means: dict[str, dict[str, float]] | None = field(default=None, repr=False)

    def add(self, r: Record, manifest: Manifest | None = None) -> None:
        self.extend((r,), manifest)

    def extend(self, records: Iterable[Record], manifest: Manifest | None = None) -> None:
        """add() for many records: one tight loop (the report runs it over 100k records)."""
        clean, states, family = self.clean, self.states, self.family
        n_infra = n_flagged = n_clean = n_residual = 0
        for r in records:
            self.costs.append(record_cost(r))
            if r.verdict == "infra_error":
                n_infra += 1
                continue
            y = r.outcome
            if y is None or r.termination == "infra":  # not r.valid (the verdict is checked above)
                continue
            if r.integrity:
                n_flagged += 1
            if r.prompt_tokens is not None or r.completion_tokens is not None:
                self.tokens["clean" if r.start == "clean" else "residual"].append(
                    (r.prompt_tokens or 0) + (r.completion_tokens or 0))
            if r.start == "clean":
                n_clean += 1
                ys = clean.get(r.task)
                if ys is None:
                    clean[r.task] = [y]
                else:
                    ys.append(y)
            else:
                n_residual += 1
                state = r.state or ""
                by_state = states.get(r.task)
                if by_state is None:
                    by_state = states[r.task] = {}
                ys = by_state.get(state)
                if ys is None:
                    by_state[state] = [y]
                else:
                    ys.append(y)
                if state not in family:
                    pred = r.predecessor  # predecessor_family's first case written out
                    family[state] = (pred.get("model_family") if pred else None) or predecessor_family(r, manifest)
        self.n_infra_errors += n_infra
        self.n_flagged += n_flagged
        self.n_clean_runs += n_clean
        self.n_residual_runs += n_residual
        if n_residual:
            self._state_means = None

    def state_means(self) -> dict[str, dict[str, float]]:
        """task -> state -> y(S) averaged over the state's attempts (computed once)."""
        if self._state_means is None:
            self._state_means = {t: {s: sum(v) / len(v) for s, v in sts.items()} for t, sts in self.states.items()}
        return self._state_means

    def task_outcomes(self) -> TaskOutcomes:
        """Per task: clean success y(S_0) and residual success (1/K) sum_S y(S)."""
        clean_t = {t: sum(v) / len(v) for t, v in self.clean.items()}
        res_t = {t: sum(sts.values()) / len(sts) for t, sts in self.state_means().items()}
        return clean_t, res_t


def group_records(records: Iterable[Record]) -> dict[tuple[str, str], list[Record]]:
    """{(track, agent): records in their order}, sorted by key: the grouping every table uses."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        key = (r.track, r.agent)
        group = groups.get(key)
        if group is None:
            groups[key] = [r]
        else:
            group.append(r)
    return dict(sorted(groups.items()))


def index_outcomes(records: Iterable[Record], manifest: Manifest | None = None,
                   groups: dict[tuple[str, str], list[Record]] | None = None) -> dict[tuple[str, str], Outcomes]:
    """{(track, agent): Outcomes}, sorted by key: the one pass every success metric starts from.

    `groups` (group_records of the same records) saves the grouping pass when the caller has it.
    """
    index: dict[tuple[str, str], Outcomes] = {}
    for key, recs in (groups if groups is not None else group_records(records)).items():
        index[key] = o = Outcomes()
        o.extend(recs, manifest)
    return index


def task_outcomes(records: Iterable[Record]) -> TaskOutcomes:
    """Per task clean and residual success of one agent on one track (records of one group)."""
    o = Outcomes()
    for r in records:
        o.add(r)
    return o.task_outcomes()


def matched_tasks(clean_t: Mapping[str, float], res_t: Mapping[str, float]) -> list[str]:
    """T: tasks with residual outcomes that also have a clean outcome (the matched reference)."""
    if res_t and clean_t:
        return sorted(set(res_t) & set(clean_t))
    return sorted(res_t or clean_t)


def residual_rate(res_t: Mapping[str, float], tasks: list[str]) -> float | None:
    """Res(A) = (1/N) sum_i (1/K_i) sum_S y(S)  (paper eq. 3)."""
    return fmean([res_t[t] for t in tasks]) if tasks and res_t else None


def clean_rate(clean_t: Mapping[str, float], tasks: list[str]) -> float | None:
    """Clean(A) = (1/N) sum_i y(S_0,i) on the same tasks (eq. 4)."""
    return fmean([clean_t[t] for t in tasks]) if tasks and clean_t else None


def gap_points(clean: float | None, residual: float | None) -> float | None:
    """Gap = 100 (Clean - Res) in points, from unrounded rates."""
    return None if clean is None or residual is None else 100.0 * (clean - residual)


def cond_fail(clean_t: Mapping[str, float], res_t: Mapping[str, float],
              tasks: list[str]) -> tuple[float | None, int]:
    """CondFail (eq. 5) over C_A, the tasks this agent solved from Clean Start (its own set).

    With repeated clean attempts a task is in C_A only if every valid clean attempt succeeded.
    """
    solved = [t for t in tasks if t in clean_t and t in res_t and clean_t[t] == 1.0]
    if not solved:
        return None, 0
    return fmean(1.0 - res_t[t] for t in solved), len(solved)


def success_row(o: Outcomes, outcomes: TaskOutcomes | None = None) -> dict[str, Any]:
    """One agent on one track: Res, Clean, Gap, CondFail and the counts behind them."""
    clean_t, res_t = outcomes or o.task_outcomes()
    tasks = matched_tasks(clean_t, res_t)
    residual = residual_rate(res_t, tasks)
    clean = clean_rate(clean_t, tasks)
    cf, n_solved = cond_fail(clean_t, res_t, tasks) if residual is not None and clean is not None else (None, 0)
    row: dict[str, Any] = {
        "n_tasks": len(tasks), "residual": residual, "clean": clean, "gap": gap_points(clean, residual),
        "cond_fail": cf, "n_clean_solved": n_solved, "n_residual_runs": o.n_residual_runs,
        "n_clean_runs": o.n_clean_runs, "n_infra_errors": o.n_infra_errors, "n_flagged": o.n_flagged,
        # median model tokens per valid run of each start (None: the harness reports no tokens)
        "tokens_clean": median(o.tokens["clean"]) if o.tokens["clean"] else None,
        "tokens_residual": median(o.tokens["residual"]) if o.tokens["residual"] else None,
        "cost_usd": total_cost(o.costs),
    }
    if res_t and clean_t:
        row["tasks_without_clean"] = sorted(set(res_t) - set(clean_t))
    return row


def success_table(records: Iterable[Record], index: dict[tuple[str, str], Outcomes] | None = None) -> dict[str, dict[str, dict]]:
    """{track: {agent: {residual, clean, gap, cond_fail, n_tasks, ...}}} (paper Table 3).

    The task set T of an agent on a track is the tasks with residual outcomes; Clean is computed
    on the same tasks (tasks without a clean outcome are left out of both, and listed).
    """
    table: dict[str, dict[str, dict]] = defaultdict(dict)
    for (track, agent), o in (index if index is not None else index_outcomes(records)).items():
        table[track][agent] = success_row(o)
    return dict(table)


# -- predecessor groups (Table 8) ---------------------------------------------------------------

def predecessor_family(r: Record, manifest: Manifest | None = None) -> str:
    """The model family that produced the record's starting state ("unknown" if unrecorded)."""
    if r.predecessor and r.predecessor.get("model_family"):
        return r.predecessor["model_family"]
    if manifest is not None and r.state in manifest.states:
        return manifest.states[r.state].predecessor.get("model_family") or "unknown"
    return "unknown"


def _group_cell(clean_t: dict, res_t: dict) -> dict[str, Any]:
    tasks = [t for t in res_t if t in clean_t]
    if not tasks:
        return {"clean": None, "residual": None, "gap": None, "n_tasks": 0}
    res = _mean([res_t[t] for t in tasks])
    clean = _mean([clean_t[t] for t in tasks])
    return {"clean": clean, "residual": res, "gap": gap_points(clean, res), "n_tasks": len(tasks)}


def predecessor_groups(records: Iterable[Record], manifest: Manifest | None = None,
                       index: dict[tuple[str, str], Outcomes] | None = None) -> dict[str, Any]:
    """Table 8: tracks pooled, every (track, task) weighted equally, per predecessor family g.

    The g group holds the tasks with >= 1 state from g; within a task only g's states are
    averaged; Clean is the same agent's clean success on exactly that task set. "overall" uses
    all states. Returns {"families": [...], "agents": {agent: {"overall": cell, g: cell}}}.
    """
    index = index if index is not None else index_outcomes(records, manifest)
    clean: dict[str, dict] = defaultdict(dict)          # agent -> (track, task) -> y(S_0)
    res: dict[tuple, dict] = defaultdict(dict)          # (agent, g | None) -> (track, task) -> residual
    for (track, agent), o in index.items():
        agent_clean = clean[agent]
        for task, ys in o.clean.items():
            agent_clean[(track, task)] = sum(ys) / len(ys)
        family = o.family
        overall = res[(agent, None)]
        for task, sts in o.state_means().items():
            key = (track, task)
            fams = [family[state] for state in sts]
            if len(set(fams)) == len(fams):
                # each state from its own family (the usual case): every group list holds one value
                # y, whose mean is y, and the overall list is the states in order
                overall[key] = sum(sts.values()) / len(sts)
                for g, y in zip(fams, sts.values()):
                    res[(agent, g)][key] = y
                continue
            by_g: dict[str, list[float]] = {}
            for g, y in zip(fams, sts.values()):
                by_g.setdefault(g, []).append(y)
            overall[key] = _mean([y for ys in by_g.values() for y in ys])
            for g, ys in by_g.items():
                res[(agent, g)][key] = _mean(ys)
    families = sorted({g for (_, g) in res if g is not None})
    out: dict[str, Any] = {"families": families, "agents": {}}
    for agent in sorted({a for (_, a) in index}):
        clean_t = clean.get(agent, {})
        row = {"overall": _group_cell(clean_t, res.get((agent, None), {}))}
        for g in families:
            row[g] = _group_cell(clean_t, res.get((agent, g), {}))
        out["agents"][agent] = row
    return out


# -- benchmark statistics (Table 2, Appendix A) -------------------------------------------------

def _resolve(path: str, root: Path | str | None) -> str:
    return path if os.path.isabs(path) or root is None else os.path.join(str(root), path)


def _median_or_na(values: list[float], reason: str) -> dict[str, Any]:
    return {"value": median(values), "n": len(values)} if values else {"value": None, "n": 0, "reason": reason}


def patch_stats(patch: bytes) -> dict[str, int]:
    """Files changed and text lines added/deleted by one state patch."""
    files = parse_patch(patch)
    return {"files": len(files), "added": sum(len(f.added) for f in files.values()),
            "deleted": sum(f.deleted for f in files.values()), "bytes": len(patch)}


def benchmark_statistics(manifest: Manifest, construction: list[dict] | None = None,
                         root: Path | str | None = None) -> dict[str, dict[str, Any]]:
    """Table 2 per track, from the manifest (and Stage I records for prior-attempt effort).

    Pass rates weight every state equally. Prior-attempt steps/minutes come from construction
    rows with stage_result "included" that carry `state` plus `steps` / `duration_s`; without
    them they are n/a.
    """
    prior = {row.get("state"): row for row in construction or [] if row.get("stage_result") == "included"}
    by_track: dict[str, list[str]] = defaultdict(list)
    for sid, st in sorted(manifest.states.items()):
        by_track[st.track].append(sid)
    tracks = sorted(set(by_track) | {t.track for t in manifest.tasks.values()})
    out: dict[str, dict[str, Any]] = {}
    graded: dict[str, frozenset[str]] = {}  # per task, shared by its states
    seen: dict[bytes, dict[str, int]] = {}
    for track in tracks:
        sids = by_track.get(track, [])
        source = [k for k, t in manifest.tasks.items() if t.track == track]
        per_task = Counter(manifest.states[s].task for s in sids)
        rates, n_fail, files, added, deleted, kib = [], [], [], [], [], []
        for sid in sids:
            st = manifest.states[sid]
            key = f"{track}/{st.task}"
            tests = graded.get(key)
            if tests is None:
                task = manifest.tasks.get(key)
                tests = graded[key] = frozenset(task.tests if task else ())
            failing = set(st.failing_tests)
            if tests:
                rates.append(len(tests - failing) / len(tests))  # state_pass_rate
            n_fail.append(len(failing))
            data = read_regular_file(_resolve(st.patch, root)) if st.patch else None
            if data is not None:
                ps = seen.get(data)  # equal patches (a state rebuilt for several tasks) parsed once
                if ps is None:
                    ps = seen[data] = patch_stats(data)
                files.append(ps["files"]); added.append(ps["added"]); deleted.append(ps["deleted"])
                kib.append(ps["bytes"] / 1024)
        few = sum(1 for n in n_fail if 1 <= n <= 3)
        steps = [prior[s]["steps"] for s in sids if s in prior and prior[s].get("steps") is not None]
        minutes = [prior[s]["duration_s"] / 60 for s in sids
                   if s in prior and prior[s].get("duration_s") is not None]
        no_prior = "no Stage I record with steps/duration for these states"
        from swe_residual.tracks import track_kind
        no_patch = ("machine track: states are replayed interactions, not patches" if track_kind(track) == "machine"
                    else "no state patch files")
        out[track] = {
            "source_tasks": len(source) if source else None,
            "tasks_covered": len(per_task),
            "residual_states": len(sids),
            "states_per_predecessor": dict(sorted(Counter(
                manifest.states[s].predecessor.get("model_family", "unknown") for s in sids).items())),
            "tasks_by_state_count": {str(k): v for k, v in sorted(Counter(per_task.values()).items())},
            "prior_steps_median": _median_or_na(steps, no_prior),
            "prior_minutes_median": _median_or_na(minutes, no_prior),
            "pass_rate_mean": ({"value": fmean(rates), "n": len(rates)} if rates
                               else {"value": None, "n": 0, "reason": "no graded test lists in manifest"}),
            "pass_rate_median": _median_or_na(rates, "no graded test lists in manifest"),
            "states_1_3_failing": {"count": few, "share": few / len(sids) if sids else None},
            "files_changed_median": _median_or_na(files, no_patch),
            "lines_added_median": _median_or_na(added, no_patch),
            "lines_deleted_median": _median_or_na(deleted, no_patch),
            "patch_kib_median": _median_or_na(kib, no_patch),
        }
    return out


# -- construction accounting (Table 5) ----------------------------------------------------------

#: stage_result vocabulary of one Stage I predecessor run, in pipeline order.
STAGE_RESULTS = (
    "not_submitted",      # II(a): did not declare completion
    "passed",             # II(a): valid verdict 1 - not a residual state
    "infra_error",        # II(c): ended in an infrastructure failure / no valid verdict
    "no_change",          # II(b): no substantive change after ignoring incidental artifacts
    "duplicate",          # II: identical final state of the same task already kept
    "not_selected",       # II: over `residualize filter --per-task` (one to N per task, families spread)
    "review_rejected",    # III: not task-directed or task/verifier inconsistent
    "rebuild_failed",     # IV: patch application or command replay failed
    "env_unusable",       # IV: harness/agent/verifier cannot use the rebuilt state
    "no_valid_verdict",   # IV: verifier gave no valid result on the rebuilt state
    "no_longer_failing",  # IV: verifier passes on the rebuilt state
    "included",
)
_BEFORE_REVIEW = STAGE_RESULTS[:STAGE_RESULTS.index("rebuild_failed")]
_AFTER_REVIEW = STAGE_RESULTS[len(_BEFORE_REVIEW):]


def construction_accounting(rows: list[dict] | None) -> dict[str, Any]:
    """Table 5 per track and in total from Stage I-IV rows ({track, task, stage_result, ...}).

    Rows: passed review -> rebuild (patch/replay) failed -> env unusable -> no valid verdict or
    no longer failing -> included; plus the earlier Stage II/III exclusions per reason.
    """
    if not rows:
        return {"value": None, "reason": "no residualization records (construction.jsonl)"}
    counts: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        result = row.get("stage_result")
        result = result if result in STAGE_RESULTS else "other"
        for col in (row.get("track", "unknown"), "total"):
            counts[col][result] += 1
    table: dict[str, dict[str, int]] = {}
    for col, c in counts.items():
        table[col] = {
            "predecessor_runs": sum(c.values()),
            **{k: c[k] for k in _BEFORE_REVIEW},
            "passed_review": sum(c[k] for k in _AFTER_REVIEW),
            "rebuild_failed": c["rebuild_failed"],
            "env_unusable": c["env_unusable"],
            "no_valid_verdict_or_not_failing": c["no_valid_verdict"] + c["no_longer_failing"],
            "included": c["included"],
            "other": c["other"],
        }
    return {"value": dict(sorted(table.items(), key=lambda kv: (kv[0] == "total", kv[0])))}
