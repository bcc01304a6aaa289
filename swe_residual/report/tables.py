"""The full report of one or more run dirs: the numbers (JSON) and their views (md, text, csv, HTML).

build_report() returns unrounded values only; every renderer rounds for display (one decimal,
rates in %, gaps in points, step ratios with two decimals) and prints n/a for undefined values.
Run dirs merge: records of several runs (different agents, or repeated runs) and the union of
their manifests. Artifact paths are made absolute on load, so the merged records no longer
depend on which run dir they came from.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from swe_residual.report import aggregates
from swe_residual.report.columns import (
    Columns,
    LoadedManifest,
    case_count,
    columns_for,
    load_columns,
    manifest_facts,
    paused_gc,
)
from swe_residual.report.forked import meanwhile
from swe_residual.report.metrics import benchmark_statistics, construction_accounting
from swe_residual.report.spend import UNKNOWN, cost_text, total_of
from swe_residual.results import STARTS, SUMMARY, Manifest, Record, RunRecords

CONSTRUCTION = "construction.jsonl"
TABLES = "tables.md"
CSV = "results.csv"
REPORT_BOOT = 1000  # bootstrap replicates per track/agent in the report (stats uses 2000 by default)
#: Table 2 of a manifest with this many states is computed by a forked child while the other
#: tables are (report/forked.py): ~8 us a state, most of it reading its patch file
PARALLEL_STATES = 50_000


# -- loading ------------------------------------------------------------------------------------


def load_runs(run_dirs: Iterable[Path | str], rows: bool = False) -> tuple[RunRecords, LoadedManifest]:
    """Records of every run dir and the union of their manifests (first definition wins), with
    artifact and patch paths made absolute. A results line that is not a record is left out and
    named in the records' `bad_lines`. The records are read as columns (report/columns.py), and
    their rows by the same decode where the caller will read them (`rows`: the gates' case checks,
    the pages), else on first access; the manifest as structs (its pydantic Manifest on first
    use)."""
    return load_columns(run_dirs, rows)


def load_construction(run_dirs: Iterable[Path | str]) -> list[dict]:
    """Stage I-IV rows ({track, task, stage_result, state?, steps?, duration_s?}) of the run dirs."""
    rows: list[dict] = []
    for run_dir in run_dirs:
        if (Path(run_dir) / CONSTRUCTION).exists():
            rows.extend(load_construction_file(Path(run_dir) / CONSTRUCTION))
    return rows


def load_construction_file(path: Path) -> list[dict]:
    """The rows of one construction.jsonl (or of the one in a Residualization work dir)."""
    from swe_residual.errors import InputError

    path = path / CONSTRUCTION if path.is_dir() else path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"--construction {path}: {exc.strerror or exc}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{n}: not a JSON object ({exc})") from None
            if not isinstance(row, dict) or not isinstance(row.get("stage_result"), str):
                raise InputError(f"{path}:{n}: stage_result: missing (one JSON object per predecessor run)")
            rows.append(row)
    return rows


# -- the numbers --------------------------------------------------------------------------------


def build_report(
    records: Iterable[Record],
    manifest: Manifest | LoadedManifest | None = None,
    *,
    construction: list[dict] | None = None,
    root: Path | str | None = None,
    n_boot: int = REPORT_BOOT,
    seed: int = 0,
    bias: bool = True,
) -> dict[str, Any]:
    """Every table of the paper plus bootstrap intervals, unrounded.

    root resolves relative artifact/patch paths (load_runs already made them absolute). The
    records are read as columns (load_runs' own while nobody asked for its rows; any others are
    turned into columns first) and every table is computed from them (report/aggregates.py).
    """
    with paused_gc():
        inputs = _Inputs(manifest_facts(manifest), root, n_boot, seed, bias)
        return _report(columns_for(records), inputs, case_count(manifest), construction)


@dataclass(frozen=True)
class _Inputs:
    """What every build of tables reads besides the records: the manifest's facts, where relative
    paths are, the bootstrap's replicates and seed, and whether Table 4 is computed."""

    facts: Any
    root: Path | str | None
    n_boot: int
    seed: int
    bias: bool


def _report(cols: Columns, inputs: _Inputs, n_cases: int, construction: list[dict] | None) -> dict[str, Any]:
    blind, is_clean = aggregates.blind(cols)
    report = _build(cols, blind, is_clean, inputs, construction, n_cases)
    views = sorted({cols.names[c] for c in np.unique(cols.start).tolist()} - BLIND_STARTS)
    if views:
        # each handoff view against the same clean runs, as if it were the residual start
        clean = blind[is_clean]
        report["handoff_views"] = {}
        for start in views:
            informed = np.flatnonzero(cols.start == cols.code(start))
            pos = np.concatenate((clean, informed))
            sub = _tables(cols, pos, np.arange(len(pos)) < len(clean), inputs)[0]
            report["handoff_views"][start.split("+", 1)[1]] = sub
        report["meta"]["n_records"] = cols.n
    # what the run spent on model calls, every record's attempt: "unknown" when one's cost is
    report["cost"] = {"total_usd": total_of(cols.cost), "records_unknown": int(np.isnan(cols.cost).sum())}
    return report


BLIND_STARTS = frozenset(STARTS)


def _build(
    cols: Columns,
    pos: np.ndarray,
    clean: np.ndarray,
    inputs: _Inputs,
    construction: list[dict] | None,
    n_cases: int,
) -> dict[str, Any]:
    """Every table of the records at `pos` (`clean`: which are Clean Start runs; `n_cases`: the
    manifest's); their Table 3 is kept with the columns (what the gates, compare and the pages
    read)."""
    facts = inputs.facts
    # Table 2 reads only the manifest and its patches: a child computes it meanwhile
    statistics = meanwhile(
        lambda: benchmark_statistics(facts, construction, inputs.root),
        fork=len(facts.states) >= PARALLEL_STATES,
    )
    try:
        out, sel, success = _tables(cols, pos, clean, inputs)
        predecessors = aggregates.predecessor_groups(sel, success)
        cols.success = success  # the numbers printed: what the gates, compare and the pages read
    finally:
        table2 = statistics()
    return {
        "tracks": out["tracks"],
        "predecessors": predecessors,
        "statistics": table2,
        "acceptance_bias": out["acceptance_bias"],
        "construction": construction_accounting(construction),
        "rules": _rule_table(sel.rule_counts()),
        "meta": {
            "n_records": len(pos),
            "n_boot": inputs.n_boot,
            "seed": inputs.seed,
            "agents": sorted({agent for _, agent in sel.groups}),
            "cases_expected": n_cases,
        },
    }


def _tables(
    cols: Columns, pos: np.ndarray, clean: np.ndarray, inputs: _Inputs
) -> tuple[dict[str, Any], aggregates.Selection, aggregates.Success]:
    """Table 3 and 4 of the records at `pos` (a handoff view has only these), and the
    computation behind Table 3 (Table 8 reads it)."""
    sel = aggregates.Selection(cols, pos, clean, inputs.facts)
    success = aggregates.Success(sel)
    tracks = success.with_intervals(inputs.n_boot, inputs.seed)
    ab = aggregates.acceptance_bias(sel, inputs.facts, inputs.root) if inputs.bias else {}
    for track, agents in ab.items():
        for agent, measures in agents.items():
            measures["gap"] = tracks[track][agent]["gap"]
    return {"tracks": tracks, "acceptance_bias": ab}, sel, success


def _rule_table(counts: dict[str, int]) -> dict[str, dict[str, int]]:
    from swe_residual.errors import RULES

    return {
        name: {"records": n, "counted": RULES[name].counted if name in RULES else False}
        for name, n in sorted(counts.items())
    }


# -- display helpers ----------------------------------------------------------------------------


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def pts(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _ci(ci: list[float] | None, fmt=pct) -> str:
    return "n/a" if not ci else f"[{fmt(ci[0])}, {fmt(ci[1])}]"


@dataclass
class Table:
    """A renderer-neutral table: cells are display strings, bold marks (row, col)."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    bold: set[tuple[int, int]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    question: str = ""  # the one line saying what the table answers
    names: tuple[int, ...] = (0,)  # columns of names: the terminal shortens these first to fit


def _best(values: list[float | None]) -> set[int]:
    """The rows holding the best success; none when the best is 0 (no success is not a best)."""
    known = [v for v in values if v is not None]
    return {i for i, v in enumerate(values) if known and v == max(known) and v > 0}


def tokens(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


Q3 = (
    "How much success does each agent lose when it starts from a Residual State instead of the clean "
    "repository (the Gap)?"
)
Q3_FIT = Q3 + " Success in %, Gap in points."
Q4 = (
    "How do continuations fail: do they accept the inherited work (same failing tests, code kept) or "
    "repair and inspect it?"
)
Q4_FIT = Q4 + " Shares in %, Steps as a ratio, Gap and Split diff in points."

# Table 3 in the terminal: wide column -> its short head (units in the question line), so a 14-character
# track and a 30-character agent name fit 120 columns; the HTML, tables.md and `--tables wide` show all
_T3_FIT = {
    "Track": "Track",
    "Agent": "Agent",
    "Residual (%)": "Residual",
    "Ref. Clean (%)": "Ref. Clean",
    "Gap (pts)": "Gap",
    "95% CI Gap": "95% CI Gap",
    "CondFail (%)": "CondFail",
    "Tasks": "Tasks",
    "Flagged": "Flagged",
}


def table3(
    report: dict,
    title: str = "Table 3 - success by track (task-weighted; Gap before rounding)",
    wide: bool = True,
) -> Table:
    """Residual / Ref. Clean / Gap per agent and track; bold = best residual and clean per track.
    wide=False keeps the columns a reader needs first (fits 120 columns for agent names up to ~30)."""
    t = Table(
        title,
        [
            "Track",
            "Agent",
            "Residual (%)",
            "Ref. Clean (%)",
            "Gap (pts)",
            "CondFail (%)",
            "Tasks",
            "95% CI Residual",
            "95% CI Clean",
            "95% CI Gap",
            "Flagged",
            "Tokens Residual",
            "Tokens Clean",
            "Cost (USD)",
        ],
        question=Q3,
        names=(0, 1),
    )
    for track, agents in sorted(report["tracks"].items()):
        first = len(t.rows)
        names = sorted(agents)
        for agent in names:
            r = agents[agent]
            ci = r.get("ci") or {}
            t.rows.append(
                [
                    track,
                    agent,
                    pct(r["residual"]),
                    pct(r["clean"]),
                    pts(r["gap"]),
                    pct(r["cond_fail"]),
                    str(r["n_tasks"]),
                    _ci(ci.get("residual")),
                    _ci(ci.get("clean")),
                    _ci(ci.get("gap"), pts),
                    str(r.get("n_flagged", 0)),
                    tokens(r.get("tokens_residual")),
                    tokens(r.get("tokens_clean")),
                    cost_text(r.get("cost_usd")),
                ]
            )
        for col, key in ((2, "residual"), (3, "clean")):
            t.bold.update((first + i, col) for i in _best([agents[a][key] for a in names]))
    t.notes.append(
        "CondFail: residual failure on the tasks each agent solved from Clean Start (its own set)."
    )
    t.notes.append("Flagged: valid runs whose final state has integrity flags (record field `integrity`).")
    fit = {**_T3_FIT, **_add_pass_k(t, report)}
    if wide:
        t.notes.append(
            "Tokens: median prompt + completion tokens per valid run of each start (n/a: not reported)."
        )
        t.notes.append(
            "Cost: what every attempt's model calls cost; unknown when one attempt's cost is (never $0)."
        )
        return t
    return _select(t, fit, Q3_FIT)


#: Table 3's columns of repeated runs: head and key of the row's `pass_k`
_PASS_K = [
    ("pass@k Residual (%)", "pass_at_k_residual"),
    ("pass@k Clean (%)", "pass_at_k_clean"),
    ("pass^k Residual (%)", "pass_hat_k_residual"),
    ("pass^k Clean (%)", "pass_hat_k_clean"),
]


def _add_pass_k(t: Table, report: dict) -> dict[str, str]:
    """Table 3 gains k, pass@k and pass^k where some row has repeats (rows in table3's order; "k"
    in the heads is the number when every row has the same); the fit view's two of them."""
    rows = [
        agents[a].get("pass_k") or {}
        for _, agents in sorted(report["tracks"].items())
        for a in sorted(agents)
    ]
    if not any(rows):
        return {}
    ks = {pk.get("k") for pk in rows}
    k = str(ks.pop()) if len(ks) == 1 else "k"
    heads = [head.replace("@k", f"@{k}").replace("^k", f"^{k}") for head, _ in _PASS_K]
    t.columns += ["k", *heads]
    for cells, pk in zip(t.rows, rows):
        cells += [str(pk["k"]) if pk else "n/a", *(pct(pk.get(key)) for _, key in _PASS_K)]
    t.notes.append(
        "pass@k / pass^k: share of k repeats of a case with at least one / with every one a success "
        "(unbiased over each case's repeats; k = the fewest valid repeats of a case of the row), "
        "task-weighted like Residual and Ref. Clean; the fit view shows Residual's, --tables wide "
        "Clean's too."
    )
    return {heads[0]: f"pass@{k}", heads[2]: f"pass^{k}"}


def _select(t: Table, columns: dict[str, str], question: str) -> Table:
    """The table with only the `columns` (wide name -> shown name, in that order); bold marks and
    name columns follow them."""
    idx = [t.columns.index(c) for c in columns]
    return Table(
        t.title,
        list(columns.values()),
        [[row[i] for i in idx] for row in t.rows],
        {(r, idx.index(c)) for r, c in t.bold if c in idx},
        list(t.notes),
        question,
        tuple(idx.index(c) for c in t.names if c in idx),
    )


#: Table 4's measure columns: head and key; shares in %, the two ratios with two decimals
_T4 = [
    ("Same failing", "same_failing"),
    ("Init. fail Clean", "initially_failing_clean"),
    ("Init. fail Residual", "initially_failing_residual"),
    ("Repair", "repair_rate"),
    ("Break", "break_rate"),
    ("Kept", "kept"),
    ("Left-out Clean", "left_out_changed_clean"),
    ("Left-out Residual", "left_out_changed_residual"),
    ("Left-out opened", "left_out_opened"),
    ("Steps", "steps_ratio"),
    ("Tokens", "tokens_ratio"),
    ("Inspected", "inspection_rate"),
]
_T4_RATIOS = frozenset({"steps_ratio", "tokens_ratio"})


# Table 4 in the terminal: the measures a reader needs first, short heads (`--tables wide`, the HTML
# and tables.md show every column); "Init. fail Clean / Res." puts the two initially-failing shares
# side by side
_T4_FIT = {
    "Agent": "Agent",
    "Gap (pts)": "Gap",
    "Same failing": "Same failing",
    "Init. fail Clean / Res.": "Init. fail Clean / Res.",
    "Repair": "Repair",
    "Break": "Break",
    "Kept": "Kept",
    "Inspected": "Inspected",
    "Steps": "Steps",
    "Split diff (pts)": "Split diff",
}


def table4(report: dict, suffix: str = "", wide: bool = True) -> list[Table]:
    """Acceptance bias per track, agents sorted by Gap (largest first); n/a reasons as one note per
    reason naming its columns. wide=False: the columns of _T4_FIT (fits 120 columns)."""
    tables = []
    for track, agents in sorted(report.get("acceptance_bias", {}).items()):
        columns = [
            "Agent",
            "Gap (pts)",
            *(c for c, _ in _T4),
            "Kept split high/low succ. (%)",
            "Split diff (pts)",
        ]
        if not wide:
            columns = list(_T4_FIT)
        t = Table(
            f"Table 4 - acceptance bias ({track}){suffix}",
            columns if wide else list(_T4_FIT.values()),
            question=Q4 if wide else Q4_FIT,
        )
        reasons: dict[str, set[str]] = {}
        order = sorted(agents, key=lambda a: (agents[a].get("gap") is None, -(agents[a].get("gap") or 0), a))
        for agent in order:
            m = agents[agent]
            cells = {"Agent": agent, "Gap (pts)": pts(m.get("gap"))}
            for col, key in _T4:
                cell = m.get(key) or {"value": None}
                cells[col] = (ratio if key in _T4_RATIOS else pct)(cell["value"])
                if cell["value"] is None and cell.get("reason"):
                    reasons.setdefault(col, set()).add(cell["reason"])
            split = m["kept_split"]
            hi, lo = split.get("high") or {}, split.get("low") or {}
            cells["Kept split high/low succ. (%)"] = f"{pct(hi.get('value'))} / {pct(lo.get('value'))}"
            cells["Split diff (pts)"] = pts(split["value"])
            cells["Init. fail Clean / Res."] = f"{cells['Init. fail Clean']} / {cells['Init. fail Residual']}"
            if split["value"] is None and split.get("reason"):
                reasons.setdefault("Kept split", set()).add(split["reason"])
            t.rows.append([cells[c] for c in columns])
        t.notes.append(
            "Normally submitted runs; per run, averaged within task, then across tasks; "
            "Steps (Tokens) = median over tasks of continuation/clean step (token) ratios."
        )
        t.notes.extend(uncommitted_notes(agents))
        shown = (
            set(columns) | {"Kept split"}
            if wide
            else {
                "Same failing",
                "Init. fail Clean",
                "Init. fail Residual",
                "Repair",
                "Break",
                "Kept",
                "Inspected",
                "Steps",
                "Kept split",
            }
        )
        by_reason: dict[str, list[str]] = {}
        for col, rs in reasons.items():
            if col in shown:
                for r in sorted(rs):
                    by_reason.setdefault(r, []).append(col if wide or col != "Kept split" else "Split diff")
        t.notes.extend(f"{', '.join(cols)} n/a: {r}" for r, cols in by_reason.items())
        tables.append(t)
    return tables


def uncommitted_notes(agents: dict[str, dict]) -> list[str]:
    """Table 4's note on the continuations graded on committed work only that left work
    uncommitted (report/graded.py): what they are, and that no failing set of theirs is compared."""
    left = {a: m for a, m in sorted(agents.items()) if m.get("n_uncommitted")}
    if not left:
        return []
    who = ", ".join(f"{a} {m['n_uncommitted']} of {m['n_continuations']}" for a, m in left.items())
    return [
        f"Left uncommitted: {who} continuations. The verifier graded the committed work only, which "
        "lacks part of their final work: not compared with the state's failing set (left out of Same "
        "failing, Init. fail Residual, Repair, Break and Kept)."
    ]


def table8(report: dict) -> Table:
    """Clean / Residual per predecessor family, tracks pooled."""
    pred = report.get("predecessors") or {"families": [], "agents": {}}
    groups = ["overall", *pred["families"]]
    t = Table(
        "Table 8 - by predecessor family (tracks pooled, tasks weighted equally)",
        [
            "Agent",
            *(
                f"{g.capitalize() if g == 'overall' else g} {s}"
                for g in groups
                for s in ("Clean", "Residual")
            ),
        ],
        question="Does the loss depend on which predecessor (model family) left the state? Success in %.",
    )
    for agent, row in sorted(pred["agents"].items()):
        cells = [agent]
        for g in groups:
            cell = row.get(g) or {}
            cells += [pct(cell.get("clean")), pct(cell.get("residual"))]
        t.rows.append(cells)
    t.notes.append(
        "Each group uses its own matched Clean Start reference on the tasks with a state from that family."
    )
    return t


def _na(cell: dict) -> bool:
    return cell.get("value") is None


def table2(report: dict) -> Table:
    """Benchmark statistics per track."""
    stats = report.get("statistics") or {}
    tracks = sorted(stats)
    t = Table(
        "Table 2 - benchmark statistics",
        ["", *tracks],
        question="What the benchmark holds: tasks, Residual States and how far their predecessors got.",
    )
    fams = sorted({f for s in stats.values() for f in s["states_per_predecessor"]})
    ks = sorted({int(k) for s in stats.values() for k in s["tasks_by_state_count"]}) or [1, 2, 3]

    def row(label: str, fn) -> None:
        t.rows.append([label, *(fn(stats[tr]) for tr in tracks)])

    row("Source benchmark tasks", lambda s: "n/a" if s["source_tasks"] is None else str(s["source_tasks"]))
    row("Source tasks covered", lambda s: str(s["tasks_covered"]))
    row("Residual States", lambda s: str(s["residual_states"]))
    for f in fams:
        row(f"  from {f}", lambda s, f=f: str(s["states_per_predecessor"].get(f, 0)))
    row(
        f"Tasks with {' / '.join(map(str, ks))} states",
        lambda s: " / ".join(str(s["tasks_by_state_count"].get(str(k), 0)) for k in ks),
    )
    row(
        "Prior-attempt length (steps, median)",
        lambda s: "n/a" if _na(s["prior_steps_median"]) else f"{s['prior_steps_median']['value']:g}",
    )
    row(
        "Predecessor execution time (min, median)",
        lambda s: "n/a" if _na(s["prior_minutes_median"]) else f"{s['prior_minutes_median']['value']:.1f}",
    )
    row(
        "Test pass rate (mean / median, %)",
        lambda s: f"{pct(s['pass_rate_mean']['value'])} / {pct(s['pass_rate_median']['value'])}",
    )
    row(
        "States with 1-3 tests still failing",
        lambda s: f"{s['states_1_3_failing']['count']} ({pct(s['states_1_3_failing']['share'])}%)",
    )
    row(
        "Files changed (median)",
        lambda s: "n/a" if _na(s["files_changed_median"]) else f"{s['files_changed_median']['value']:g}",
    )
    row(
        "Lines added / deleted (median)",
        lambda s: " / ".join(
            "n/a" if _na(s[k]) else f"{s[k]['value']:g}"
            for k in ("lines_added_median", "lines_deleted_median")
        ),
    )
    row(
        "Patch size (KiB, median)",
        lambda s: "n/a" if _na(s["patch_kib_median"]) else f"{s['patch_kib_median']['value']:.1f}",
    )
    reasons: set[str] = {
        c["reason"] for s in stats.values() for c in s.values() if isinstance(c, dict) and c.get("reason")
    }
    t.notes.extend(f"n/a: {r}" for r in sorted(reasons))
    return t


_T5 = [
    ("Predecessor runs (Stage I)", "predecessor_runs"),
    ("Did not declare completion", "not_submitted"),
    ("Passed the verifier", "passed"),
    ("Infrastructure failure", "infra_error"),
    ("No substantive change", "no_change"),
    ("Duplicate final state", "duplicate"),
    ("Not selected (per-task cap, families)", "not_selected"),
    ("Rejected in review", "review_rejected"),
    ("Passed human review", "passed_review"),
    ("Patch application or command replay failed", "rebuild_failed"),
    ("Environment unusable for rollouts", "env_unusable"),
    ("No valid verifier result, or no longer failing", "no_valid_verdict_or_not_failing"),
    ("Included", "included"),
]


def table5(report: dict) -> Table | None:
    """Construction accounting; None when no residualization records exist."""
    value = (report.get("construction") or {}).get("value")
    if not value:
        return None
    cols = list(value)
    t = Table("Table 5 - construction accounting", ["", *cols], question=Q5)
    for label, key in _T5:
        t.rows.append([label, *(str(value[c].get(key, 0)) for c in cols)])
    return t


Q5 = "How the states were made: the predecessor runs each stage kept or dropped, and why."


def all_tables(report: dict, wide: bool = True) -> list[Table]:
    """Every table in the order a reader needs them: Table 3 and 4 (and their handoff views), then
    8, 2 and 5. wide=False: Table 3 and 4 with the columns that fit a 120-column terminal."""
    tables = [table3(report, wide=wide), *table4(report, wide=wide)]
    for view, sub in sorted((report.get("handoff_views") or {}).items()):
        tables.append(
            table3(
                sub,
                f"Table 3 - success by track, handoff view '{view}' (residual+{view} "
                "against the same clean runs; never mixed with the blind residual start)",
                wide=wide,
            )
        )
        tables.extend(table4(sub, f", handoff view '{view}'", wide=wide))
    tables += [table8(report), table2(report)]
    t5 = table5(report)
    if t5 is not None:
        tables.append(t5)
    else:
        tables.append(
            Table(
                "Table 5 - construction accounting",
                ["", "value"],
                [["construction", "n/a"]],
                notes=[report.get("construction", {}).get("reason", "")],
                question=Q5,
            )
        )
    return tables


# -- renderers ----------------------------------------------------------------------------------


def render_markdown(report: dict) -> str:
    """tables.md: GitHub tables, best per track in bold."""
    out = ["# SWE-Residual results", ""]
    for t in all_tables(report):
        out += [
            f"## {t.title}",
            "",
            "| " + " | ".join(t.columns) + " |",
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|",
        ]
        for i, row in enumerate(t.rows):
            cells = [f"**{c}**" if (i, j) in t.bold else c for j, c in enumerate(row)]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
        out += [f"- {n}" for n in t.notes if n]
        out.append("")
    out += cost_lines(report)
    return "\n".join(out)


def cost_lines(report: dict) -> list[str]:
    """The run's spend on model calls, where any is recorded or some is unknown ([] otherwise)."""
    cost = report.get("cost") or {}
    total, unknown = cost.get("total_usd", 0.0), cost.get("records_unknown", 0)
    if total == UNKNOWN:
        return [f"cost: unknown ({unknown} attempt(s) without a known cost; never counted as $0)", ""]
    return [f"cost: {cost_text(total)} on model calls", ""] if total else []


TEXT_WIDTH = 120
BEST_NOTE = "* best Residual and Ref. Clean success of its track (bold in the HTML report)."


def shorten(text: str, width: int) -> str:
    """`text` cut in the middle to `width` characters (`mini-sw..sonnet-4`), both ends kept."""
    if len(text) <= width:
        return text
    keep = max(1, width - 2)
    return text[: (keep + 1) // 2] + ".." + text[len(text) - keep // 2 :] if keep > 1 else text[:width]


def _fit(rows: list[list[str]], names: tuple[int, ...], width: int) -> tuple[list[list[str]], list[int]]:
    """Column widths of `rows`; name columns are shortened (longest first, never below 8) until the
    table fits `width`."""
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        candidates = [j for j in names if widths[j] > max(8, len(rows[0][j]))]
        if not candidates:
            break
        j = max(candidates, key=lambda j: widths[j])
        widths[j] -= 1
    if any(widths[j] < max(len(r[j]) for r in rows) for j in names):
        rows = [
            r if k == 0 else [shorten(c, widths[j]) if j in names else c for j, c in enumerate(r)]
            for k, r in enumerate(rows)
        ]
    return rows, widths


def render_text(report: dict, wide: bool = False, width: int = TEXT_WIDTH) -> str:
    """Aligned plain-text tables for the terminal (best marked with *), each under the line saying
    what it answers. By default Table 3 and 4 keep the columns that fit `width` (names shortened in
    the middle if still too wide); wide=True shows every column. A note shared by several tables is
    printed once, where it first applies."""
    out: list[str] = []
    seen: set[str] = set()
    for t in all_tables(report, wide=wide):
        rows = [t.columns] + [
            [c + ("*" if (i, j) in t.bold else "") for j, c in enumerate(r)] for i, r in enumerate(t.rows)
        ]
        rows, widths = (
            (rows, [max(len(r[j]) for r in rows) for j in range(len(t.columns))])
            if wide
            else _fit(rows, t.names, width)
        )
        out += [t.title, "=" * len(t.title)]
        if t.question:
            out += textwrap.wrap(t.question, width)
        for k, r in enumerate(rows):
            out.append(
                "  ".join(
                    c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))
                ).rstrip()
            )
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        notes = [*t.notes, *([BEST_NOTE] if t.bold else [])]
        for n in notes:
            if n and n not in seen:
                seen.add(n)
                out += textwrap.wrap(n, width, initial_indent="  ", subsequent_indent="    ")
        out.append("")
    out += cost_lines(report)
    return "\n".join(out)


def interrupted_lines(report: dict) -> list[str]:
    """What an interrupted run's summary says (the terminal and the run page's banner): the counts,
    then the command that completes the run; [] for a run that was not interrupted."""
    stopped = report.get("interrupted")
    if not isinstance(stopped, dict):
        return []
    why = [f"stopped: {stopped['reason']}"] if stopped.get("reason") else []
    return [
        *why,
        f"interrupted: {stopped.get('recorded', 0)} of {stopped.get('collected', 0)} cases recorded "
        f"({stopped.get('valid', 0)} with a valid verdict), {stopped.get('not_run', 0)} not run; no gate checked",
        f"continue it with: {stopped.get('resume') or '--resume RUN_DIR'}",
    ]


def figures_absent_reason(report: dict) -> str:
    """Why the run page shows no figure: the true reason, not a guess between two."""
    if report.get("interrupted"):
        return "the run was interrupted before any agent had both a Clean Start and a Residual Start outcome"
    return "no agent has both a Clean Start and a Residual Start outcome"


CSV_COLUMNS = [
    "track",
    "agent",
    "n_tasks",
    "residual_pct",
    "clean_pct",
    "gap_pts",
    "cond_fail_pct",
    "residual_ci_low",
    "residual_ci_high",
    "clean_ci_low",
    "clean_ci_high",
    "gap_ci_low",
    "gap_ci_high",
    "n_clean_solved",
    "n_residual_runs",
    "n_clean_runs",
    "n_infra_errors",
    "n_flagged",
    "cost_usd",
    # repeats (--repeat K, merged runs): empty where no case has two valid repeats
    "k",
    *(f"{key}_pct" for _, key in _PASS_K),
]


def render_csv(report: dict) -> str:
    """results.csv: one row per track/agent, unrounded (rates in %, gaps in points)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    scale = lambda v, k=100.0: "" if v is None else repr(k * v)
    for track, agents in sorted(report["tracks"].items()):
        for agent, r in sorted(agents.items()):
            ci = r.get("ci") or {}
            pass_k = r.get("pass_k") or {}
            bounds = []
            for key, k in (("residual", 100.0), ("clean", 100.0), ("gap", 1.0)):
                b = ci.get(key) or [None, None]
                bounds += [scale(b[0], k), scale(b[1], k)]
            w.writerow(
                [
                    track,
                    agent,
                    r["n_tasks"],
                    scale(r["residual"]),
                    scale(r["clean"]),
                    scale(r["gap"], 1.0),
                    scale(r["cond_fail"]),
                    *bounds,
                    r.get("n_clean_solved", ""),
                    r.get("n_residual_runs", ""),
                    r.get("n_clean_runs", ""),
                    r.get("n_infra_errors", ""),
                    r.get("n_flagged", ""),
                    r.get("cost_usd", ""),
                    pass_k.get("k", ""),
                    *(scale(pass_k.get(key)) for _, key in _PASS_K),
                ]
            )
    return buf.getvalue()


# -- figures ------------------------------------------------------------------------------------

from swe_residual.report.figures import figure_conditional, figure_success  # noqa: E402  (re-exported)

# -- files --------------------------------------------------------------------------------------


def write_outputs(run_dir: Path | str, report: dict) -> dict[str, Path]:
    """summary.json (the full report), tables.md and results.csv in the run dir."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {"summary": run_dir / SUMMARY, "tables": run_dir / TABLES, "csv": run_dir / CSV}
    paths["summary"].write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    paths["tables"].write_text(render_markdown(report), encoding="utf-8")
    paths["csv"].write_text(render_csv(report), encoding="utf-8")
    return paths


__all__ = [
    "build_report",
    "figure_conditional",
    "figures_absent_reason",
    "figure_success",
    "load_construction",
    "load_construction_file",
    "interrupted_lines",
    "load_runs",
    "render_csv",
    "render_markdown",
    "render_text",
    "write_outputs",
]
