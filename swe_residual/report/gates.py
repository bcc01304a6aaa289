"""CI gates on a finished run, with a fixed exit-code contract.

    0  every gate holds
    10 regression: residual or clean success below its floor, gap above the ceiling, more runs
       with integrity flags than allowed, or a drop against the baseline (residual, clean, or a
       gap rise) that the paired test says is beyond noise
    11 invalid run: a results.jsonl line that is not a record (named path:line; always checked),
       cases missing from results.jsonl, or too many infra errors

An invalid run wins over a regression (its numbers cannot be trusted). A baseline drop counts
only when it exceeds max_drop points AND the paired sign-flip test over the shared tasks of
that track/agent gives p < alpha: an unlucky few tasks do not fail CI.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from swe_residual.report.metrics import LOWER_CLEAN, for_agent
from swe_residual.report.stats import DEFAULT_BOOT, DEFAULT_PERM, paired_comparison
from swe_residual.results import Manifest, Record, record_rows

if TYPE_CHECKING:
    from swe_residual.report.aggregates import Success
    from swe_residual.report.columns import LoadedManifest

EXIT_OK = 0
EXIT_REGRESSION = 10
EXIT_INVALID = 11


class GateConfig(BaseModel):
    min_residual: float | None = Field(default=None, description="floor on residual success, in %")
    min_clean: float | None = Field(default=None, description="floor on clean-start success, in %")
    max_gap: float | None = Field(default=None, description="ceiling on the gap, in points")
    max_drop: float | None = Field(
        default=None,
        description="allowed drop vs baseline, in points "
        "(residual or clean down, gap up); 0 when a baseline is given without it",
    )
    max_infra_fraction: float | None = Field(
        default=None, description="max share of cases with no valid verdict"
    )
    max_flagged: int | None = Field(
        default=None, description="max valid runs with integrity flags per track/agent"
    )
    check_missing: bool = True
    alpha: float = 0.05
    seed: int = 0
    n_perm: int = DEFAULT_PERM
    n_boot: int = DEFAULT_BOOT

    @property
    def active(self) -> bool:
        """Any threshold set (a baseline alone also activates the gates)."""
        return any(
            v is not None
            for v in (
                self.min_residual,
                self.min_clean,
                self.max_gap,
                self.max_drop,
                self.max_infra_fraction,
                self.max_flagged,
            )
        )


@dataclass
class GateResult:
    status: int = EXIT_OK
    violations: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    #: where the run and its baseline differ in what made them (report/provenance.py): said, not gated
    warnings: list[str] = field(default_factory=list)

    def fail(self, status: int, line: str, **check: Any) -> None:
        self.status = max(self.status, status)
        self.violations.append(line)
        self.checks.append({"ok": False, "status": status, "message": line, **check})

    def ok(self, **check: Any) -> None:
        self.checks.append({"ok": True, **check})


def missing_cases(records: Iterable[Record], manifest: Manifest | LoadedManifest) -> list[str]:
    """Collected cases (manifest.cases) with no record at all."""
    recorded = {r.case_id for r in records}
    return sorted(set(manifest.cases) - recorded)


def infra_fraction(records: Iterable[Record]) -> tuple[float | None, int, int]:
    """Share of recorded cases whose every attempt ended without a valid verdict."""
    valid: dict[str, bool] = {}
    for r in records:
        valid[r.case_id] = valid.get(r.case_id, False) or r.valid
    bad = sum(1 for v in valid.values() if not v)
    return (bad / len(valid) if valid else None), bad, len(valid)


def unreadable_lines(records: Iterable[Record]) -> list[str]:
    """The results lines load_runs could not read as records ("<path>:<line>: <why>")."""
    return list(getattr(records, "bad_lines", None) or [])


def _first(items: list[str], n: int, sep: str) -> str:
    """The first n items joined, and how many more there are."""
    return sep.join(items[:n]) + (f" (+{len(items) - n} more)" if len(items) > n else "")


def _readable(bad: list[str], res: GateResult, what: str = "") -> None:
    """A line that is not a record makes the run invalid: it is never counted, in any rule."""
    if bad:
        lines = f"line{'s' if len(bad) > 1 else ''}"
        res.fail(
            EXIT_INVALID,
            f"{what}unreadable results {lines}, not counted: {_first(bad, 3, '; ')}",
            gate="unreadable_lines",
            lines=bad,
        )


def _validity(
    records: list[Record], manifest: Manifest | LoadedManifest, cfg: GateConfig, res: GateResult
) -> None:
    if cfg.check_missing and manifest.cases:
        miss = missing_cases(records, manifest)
        if miss:
            res.fail(
                EXIT_INVALID,
                f"missing cases: {len(miss)} of {len(manifest.cases)} have no record: {_first(miss, 5, ', ')}",
                gate="missing_cases",
                missing=miss,
                value=len(miss),
                threshold=0,
            )
        else:
            res.ok(
                gate="missing_cases",
                value=0,
                threshold=0,
                message=f"missing cases: 0 of {len(manifest.cases)} collected cases without a record",
            )
    if cfg.max_infra_fraction is not None:
        frac, bad, total = infra_fraction(records)
        limit = 100 * cfg.max_infra_fraction
        if frac is not None and frac > cfg.max_infra_fraction:
            res.fail(
                EXIT_INVALID,
                f"infra errors: {bad}/{total} cases ({100 * frac:.1f}%) without a valid "
                f"verdict > max {limit:.1f}%",
                gate="max_infra_fraction",
                value=frac,
                threshold=cfg.max_infra_fraction,
            )
        else:
            shown = "no cases" if frac is None else f"{bad}/{total} cases ({100 * frac:.1f}%)"
            res.ok(
                gate="max_infra_fraction",
                value=frac,
                threshold=cfg.max_infra_fraction,
                message=f"infra errors: {shown} without a valid verdict <= max {limit:.1f}%",
            )


#: per threshold gate: the value as shown, the words when it is beyond / within the limit, the
#: limit as shown, and what an undefined value says
_LIMITS = {
    "min_residual": (
        "residual success {v:.1f}%",
        "<",
        ">=",
        "min {t:.1f}%",
        "residual success n/a (no residual run with a verdict)",
    ),
    "min_clean": (
        "clean success {v:.1f}%",
        "<",
        ">=",
        "min {t:.1f}%",
        "clean success n/a (no clean run with a verdict on a task with a residual run)",
    ),
    "max_gap": (
        "gap {v:.1f} pts",
        ">",
        "<=",
        "max {t:.1f} pts",
        "gap n/a (no clean and residual runs on shared tasks)",
    ),
    "max_flagged": ("{v} runs with integrity flags", ">", "<=", "max {t}", ""),
}


def _thresholds(table: dict, cfg: GateConfig, res: GateResult) -> None:
    """The threshold gates on Table 3's rows (residual in %, gap in points, flagged runs)."""
    for track, agents in sorted(table.items()):
        for agent, row in sorted(agents.items()):
            where = f"{track}/{agent}"
            values = {
                "min_residual": None if row["residual"] is None else 100 * row["residual"],
                "min_clean": None if row["clean"] is None else 100 * row["clean"],
                "max_gap": row["gap"],
                "max_flagged": row.get("n_flagged", 0),
            }
            for gate, (shown, beyond, within, limit, undefined) in _LIMITS.items():
                threshold = getattr(cfg, gate)
                if threshold is None:
                    continue
                value = values[gate]
                check = dict(gate=gate, where=where, value=value, threshold=threshold)
                if value is None:
                    res.ok(**check, message=f"{where}: {undefined}: not checked")
                    continue
                bad = value < threshold if gate.startswith("min_") else value > threshold
                words = f"{where}: {shown.format(v=value)} {beyond if bad else within} {limit.format(t=threshold)}"
                if bad:
                    res.fail(EXIT_REGRESSION, words, **check)
                else:
                    res.ok(**check, message=words)


_METRIC_WORDS = {
    "residual": ("residual success", "%", "residual success dropped"),
    "clean": ("clean success", "%", "clean success dropped"),
    "gap": ("gap", " pts", "gap rose"),
}
#: the sign that turns baseline - current (points) into a drop: a lower success, a higher gap
_DROP_SIGN = {"residual": 1.0, "clean": 1.0, "gap": -1.0}


def _change(metric: str, drop: float, clean_drop: float | None) -> str:
    """What a change means for the agent (metrics.for_agent: a smaller Gap is better only when
    Clean did not drop), in words with its size."""
    meaning = for_agent(metric, -drop * _DROP_SIGN[metric], None if clean_drop is None else -clean_drop)
    if meaning == LOWER_CLEAN:
        return f"smaller by {-drop:.1f} pts only because clean success dropped by {clean_drop:.1f} pts (not better)"
    return f"{meaning} by {abs(drop):.1f} pts"


def _baseline(current: Success, baseline: Success, cfg: GateConfig, res: GateResult) -> None:
    """Residual drop, clean drop and gap rise vs the baseline, per track/agent on the shared
    tasks (the same max_drop and paired test for each)."""
    kw = dict(n_boot=cfg.n_boot, n_perm=cfg.n_perm, seed=cfg.seed)
    clean_drops: dict[tuple[str, str], float | None] = {}
    for metric in ("residual", "clean", "gap"):
        cur, base = current.task_values(metric), baseline.task_values(metric)
        for key in sorted(set(base) - set(cur)):
            where = "/".join(key)
            label = _METRIC_WORDS[metric][0]
            res.ok(
                gate="baseline",
                metric=metric,
                where=where,
                note="not in this run",
                message=f"{where}: {label}: in the baseline only (not in this run): not compared",
            )
        for key in sorted(set(cur) & set(base)):
            cmp = paired_comparison(base[key], cur[key], **kw)  # diff = baseline - current, points
            drop = None if cmp["diff"] is None else _DROP_SIGN[metric] * cmp["diff"]
            if metric == "clean":
                clean_drops[key] = drop
            _baseline_check(metric, "/".join(key), cmp, drop, clean_drops.get(key), cfg, res)


def _baseline_check(
    metric: str,
    where: str,
    cmp: dict[str, Any],
    drop: float | None,
    clean_drop: float | None,
    cfg: GateConfig,
    res: GateResult,
) -> None:
    """One metric of one track/agent against the baseline: a violation when the drop exceeds
    max_drop and the paired test puts it beyond noise."""
    label, unit, what = _METRIC_WORDS[metric]
    max_drop = cfg.max_drop or 0.0
    if drop is None:
        res.ok(
            gate="baseline",
            metric=metric,
            where=where,
            n_shared=0,
            message=f"{where}: {label}: no task shared with the baseline: not compared",
        )
        return
    numbers = (
        f"{label} {cmp['mean_b']:.1f}{unit} vs baseline {cmp['mean_a']:.1f}{unit} on "
        f"{cmp['n_shared']} shared tasks"
    )
    detail = dict(
        gate="baseline",
        metric=metric,
        where=where,
        drop=drop,
        p_value=cmp["p_value"],
        ci=cmp["ci"],
        n_shared=cmp["n_shared"],
        value=cmp["mean_b"],
        baseline=cmp["mean_a"],
        threshold=max_drop,
        alpha=cfg.alpha,
    )
    if drop > max_drop and cmp["p_value"] < cfg.alpha:
        res.fail(
            EXIT_REGRESSION,
            f"{where}: {what} by {drop:.1f} pts vs baseline on {cmp['n_shared']} "
            f"shared tasks (> {max_drop:.1f}, p={cmp['p_value']:.3g} < {cfg.alpha}): {numbers}",
            **detail,
        )
        return
    p = f"p={cmp['p_value']:.3g}"
    why = (
        f"within the allowed {max_drop:.1f} pts ({p})"
        if drop <= max_drop
        else f"beyond the allowed {max_drop:.1f} pts but within noise ({p} >= {cfg.alpha})"
    )
    res.ok(message=f"{where}: {numbers}: {_change(metric, drop, clean_drop)}, {why}", **detail)


def check_gates(
    records: Iterable[Record],
    manifest: Manifest | LoadedManifest | None,
    cfg: GateConfig,
    baseline: Iterable[Record] | None = None,
) -> GateResult:
    """Evaluate every configured gate; one violation line per failed gate. Unreadable results
    lines (load_runs' bad_lines, of the run or the baseline) always make the run invalid.

    The thresholds and the baseline comparison judge Table 3's numbers: for load_runs' records
    the very ones their report computed (report/aggregates.py success_of), else computed once
    here from the records' columns."""
    from swe_residual.report.aggregates import success_of

    bad = unreadable_lines(records)
    current = success_of(records)  # first: load_runs' columns, while its rows are untouched
    base = success_of(baseline) if baseline is not None else None
    res = GateResult()
    _readable(bad, res)
    if baseline is not None:
        _readable(unreadable_lines(baseline), res, "baseline: ")
    # the cases: load_runs' rows (made by the same decode as its columns)
    _validity(record_rows(records), manifest or Manifest(), cfg, res)
    _thresholds(current.table(), cfg, res)
    if base is not None:
        _baseline(current, base, cfg, res)
    return res


def check_lines(result: GateResult | dict[str, Any]) -> list[str]:
    """One line per check, the numbers behind its verdict (value, threshold, baseline value):
    `GATE: ...` for a violated gate, `ok:   ...` for one that holds; then the verdict. `result`
    is a GateResult or its form in summary.json (`gates`: status, checks)."""
    checks = result.checks if isinstance(result, GateResult) else list(result.get("checks") or [])
    status = result.status if isinstance(result, GateResult) else result.get("status", 0)
    lines = [f"{'ok:  ' if c.get('ok') else 'GATE:'} {c['message']}" for c in checks if c.get("message")]
    warnings = result.warnings if isinstance(result, GateResult) else list(result.get("warnings") or [])
    lines += [f"warning: baseline -> run: {w}" for w in warnings]
    n_bad = sum(1 for c in checks if not c.get("ok"))
    n = len(checks)
    lines.append(
        f"gates: passed ({n} check{'s' if n != 1 else ''})"
        if status == 0
        else f"gates: failed, exit status {status} ({n_bad} of {n} check{'s' if n != 1 else ''} failed)"
    )
    return lines
