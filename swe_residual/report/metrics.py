"""Success metrics and benchmark statistics (docs/metrics.md; the paper's Appendix A/C/E).

Every number is task-weighted: outcomes are averaged within a task first (over its residual
states, and over repeated attempts of one case), then across tasks, so a task with three states
weighs as much as one with a single state. Only valid verdicts count; infra errors (and runs the
harness ended as infra interruptions) are never outcomes. Values are unrounded fractions in
[0, 1] (gaps in points); rounding is for display only, so Gap is computed before rounding.
Something that cannot be computed is None plus a reason, never a made-up 0.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from pathlib import Path
from statistics import fmean, median
from typing import Any

from swe_residual.report.bias import parse_patch, read_regular_file
from swe_residual.results import Manifest


def _mean(values: list) -> float:
    """Plain mean; statistics.fmean is exact but ~10x slower, and the inputs are 0/1 counts."""
    return sum(values) / len(values)


@dataclass
class Counts:
    """The records behind one agent's row on one track (report/aggregates.py counts them)."""

    n_clean_runs: int = 0  # valid Clean Start runs
    n_residual_runs: int = 0  # valid Residual Start runs
    n_infra_errors: int = 0
    n_flagged: int = 0  # valid runs with integrity flags
    tokens: dict[str, list[int]] = field(
        default_factory=lambda: {"clean": [], "residual": []}
    )  # prompt + completion tokens per valid run that reports any
    cost_usd: float | str = 0.0  # USD of every attempt (report/spend.py), or "unknown"


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


def cond_fail(
    clean_t: Mapping[str, float], res_t: Mapping[str, float], tasks: list[str]
) -> tuple[float | None, int]:
    """CondFail (eq. 5) over C_A, the tasks this agent solved from Clean Start (its own set).

    With repeated clean attempts a task is in C_A only if every valid clean attempt succeeded.
    """
    solved = [t for t in tasks if t in clean_t and t in res_t and clean_t[t] == 1.0]
    if not solved:
        return None, 0
    return fmean([1.0 - res_t[t] for t in solved]), len(solved)  # a list: fmean counts a generator slowly


def success_row(
    counts: Counts, clean_t: Mapping[str, float], res_t: Mapping[str, float], tasks: list[str]
) -> dict[str, Any]:
    """One agent on one track: Res, Clean, Gap, CondFail and the counts behind them, from the
    clean and residual success per task and T (matched_tasks of them)."""
    residual = residual_rate(res_t, tasks)
    clean = clean_rate(clean_t, tasks)
    cf, n_solved = (
        cond_fail(clean_t, res_t, tasks) if residual is not None and clean is not None else (None, 0)
    )
    row: dict[str, Any] = {
        "n_tasks": len(tasks),
        "residual": residual,
        "clean": clean,
        "gap": gap_points(clean, residual),
        "cond_fail": cf,
        "n_clean_solved": n_solved,
        "n_residual_runs": counts.n_residual_runs,
        "n_clean_runs": counts.n_clean_runs,
        "n_infra_errors": counts.n_infra_errors,
        "n_flagged": counts.n_flagged,
        # median model tokens per valid run of each start (None: the harness reports no tokens)
        "tokens_clean": median(counts.tokens["clean"]) if counts.tokens["clean"] else None,
        "tokens_residual": median(counts.tokens["residual"]) if counts.tokens["residual"] else None,
        "cost_usd": counts.cost_usd,  # "unknown" when any attempt's cost is (never 0)
    }
    if res_t and clean_t:
        row["tasks_without_clean"] = sorted(set(res_t) - set(clean_t))
    return row


# -- repeats: pass@k and pass^k (Table 3 with --repeat K > 1) -------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n repeats with c successes (Chen et al. 2021, the
    Codex paper): 1 - C(n-c, k) / C(n, k), the chance that k of the n repeats drawn without
    replacement hold at least one success. n >= k."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k from n repeats with c successes: C(c, k) / C(n, k), the chance that k of them drawn
    without replacement all succeed (every one of k tries solves it). n >= k."""
    return comb(c, k) / comb(n, k)


def repeat_row(
    clean: Mapping[str, tuple[int, int]],
    residual: Mapping[str, Sequence[tuple[int, int]]],
    tasks: list[str],
) -> dict[str, Any]:
    """pass@k and pass^k of one Table 3 row, from the (successes, valid repeats) of every case of
    its tasks T (a task's clean start; each of its states), weighted like Res and Clean: per case,
    then over a task's states, then over tasks. k is the fewest valid repeats of any of those
    cases, so the estimate is defined for all of them; {} when no case has two (no repeats)."""
    cells = [clean[t] for t in tasks if t in clean] + [c for t in tasks for c in residual.get(t, ())]
    if not cells or max(n for _, n in cells) < 2:
        return {}
    k = min(n for _, n in cells)
    out: dict[str, Any] = {"k": k}
    names = ("pass_at_k", "pass_hat_k")
    if k < 2:
        for name in names:
            out[f"{name}_residual"] = out[f"{name}_clean"] = None
        out["reason"] = "a case has one valid attempt only: pass@k needs k >= 2 of every case (--resume)"
        return out
    # both estimators of each distinct (successes, repeats), once
    of = {c: (pass_at_k(c[1], c[0], k), pass_hat_k(c[1], c[0], k)) for c in set(cells)}
    res: tuple[list[float], list[float]] = ([], [])
    for t in tasks:
        own = residual.get(t)
        if own:
            values = [of[c] for c in own]
            res[0].append(sum([v[0] for v in values]) / len(values))
            res[1].append(sum([v[1] for v in values]) / len(values))
    cl = [of[clean[t]] for t in tasks if t in clean]
    for i, name in enumerate(names):
        out[f"{name}_residual"] = _mean(res[i]) if res[i] else None
        out[f"{name}_clean"] = _mean([v[i] for v in cl]) if cl else None
    return out


# -- predecessor groups (Table 8; report/aggregates.py groups the tasks) ---------------------------


def group_cell(clean: list[float], residual: list[float]) -> dict[str, Any]:
    """One Table 8 cell from the clean and residual success of its tasks (in the same order)."""
    if not residual:
        return {"clean": None, "residual": None, "gap": None, "n_tasks": 0}
    res = _mean(residual)
    cl = _mean(clean)
    return {"clean": cl, "residual": res, "gap": gap_points(cl, res), "n_tasks": len(residual)}


# -- benchmark statistics (Table 2, Appendix A) -------------------------------------------------


def _resolve(path: str, root: Path | str | None) -> str:
    return path if os.path.isabs(path) or root is None else os.path.join(str(root), path)


def _median_or_na(values: Sequence[float], reason: str) -> dict[str, Any]:
    return (
        {"value": median(values), "n": len(values)} if values else {"value": None, "n": 0, "reason": reason}
    )


def patch_stats(patch: bytes) -> dict[str, int]:
    """Files changed and text lines added/deleted by one state patch."""
    files = parse_patch(patch)
    return {
        "files": len(files),
        "added": sum(len(f.added) for f in files.values()),
        "deleted": sum(f.deleted for f in files.values()),
        "bytes": len(patch),
    }


def benchmark_statistics(
    manifest: Manifest, construction: list[dict] | None = None, root: Path | str | None = None
) -> dict[str, dict[str, Any]]:
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
                files.append(ps["files"])
                added.append(ps["added"])
                deleted.append(ps["deleted"])
                kib.append(ps["bytes"] / 1024)
        few = sum(1 for n in n_fail if 1 <= n <= 3)
        steps = [prior[s]["steps"] for s in sids if s in prior and prior[s].get("steps") is not None]
        minutes = [
            prior[s]["duration_s"] / 60 for s in sids if s in prior and prior[s].get("duration_s") is not None
        ]
        no_prior = "no Stage I record with steps/duration for these states"
        from swe_residual.tracks import track_kind

        no_patch = (
            "machine track: states are replayed interactions, not patches"
            if track_kind(track) == "machine"
            else "no state patch files"
        )
        out[track] = {
            "source_tasks": len(source) if source else None,
            "tasks_covered": len(per_task),
            "residual_states": len(sids),
            "states_per_predecessor": dict(
                sorted(
                    Counter(
                        manifest.states[s].predecessor.get("model_family", "unknown") for s in sids
                    ).items()
                )
            ),
            "tasks_by_state_count": {str(k): v for k, v in sorted(Counter(per_task.values()).items())},
            "prior_steps_median": _median_or_na(steps, no_prior),
            "prior_minutes_median": _median_or_na(minutes, no_prior),
            "pass_rate_mean": (
                {"value": fmean(rates), "n": len(rates)}
                if rates
                else {"value": None, "n": 0, "reason": "no graded test lists in manifest"}
            ),
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
    "not_submitted",  # II(a): did not declare completion
    "passed",  # II(a): valid verdict 1 - not a residual state
    "infra_error",  # II(c): ended in an infrastructure failure / no valid verdict
    "no_change",  # II(b): no substantive change after ignoring incidental artifacts
    "duplicate",  # II: identical final state of the same task already kept
    "not_selected",  # II: over `residualize filter --per-task` (one to N per task, families spread)
    "review_rejected",  # III: not task-directed or task/verifier inconsistent
    "rebuild_failed",  # IV: patch application or command replay failed
    "env_unusable",  # IV: harness/agent/verifier cannot use the rebuilt state
    "no_valid_verdict",  # IV: verifier gave no valid result on the rebuilt state
    "no_longer_failing",  # IV: verifier passes on the rebuilt state
    "included",
)
_BEFORE_REVIEW = STAGE_RESULTS[: STAGE_RESULTS.index("rebuild_failed")]
_AFTER_REVIEW = STAGE_RESULTS[len(_BEFORE_REVIEW) :]


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


#: a smaller Gap that comes from a lower Clean success (for_agent)
LOWER_CLEAN = "not better: Clean dropped"


def for_agent(metric: str, diff: float | None, clean_diff: float | None) -> str:
    """What a change RUN - BASELINE (points) means for the agent: higher Residual or Clean success
    is better; a smaller Gap is better only when Clean did not drop (a Gap that shrank because
    the agent lost clean-start successes is LOWER_CLEAN, never "better")."""
    if not diff:
        return "unchanged"
    if metric != "gap":
        return "better" if diff > 0 else "worse"
    if diff > 0:
        return "worse"
    return LOWER_CLEAN if clean_diff is not None and clean_diff < 0 else "better"
