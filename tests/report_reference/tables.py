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
import os
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

import msgspec

from swe_residual.report.metrics import repeat_row
from swe_residual.report.stats import bootstrap_ci, nested_bootstrap_ci
from swe_residual.results import SUMMARY, Manifest, Record
from tests.report_reference.bias import acceptance_bias
from tests.report_reference.metrics import (
    benchmark_statistics,
    construction_accounting,
    group_records,
    index_outcomes,
    matched_tasks,
    predecessor_groups,
    record_cost,
    success_row,
    total_cost,
)
from tests.report_reference.results import RecordRow, RunRecords, read_rows, record_rows

CONSTRUCTION = "construction.jsonl"
TABLES = "tables.md"
CSV = "results.csv"
REPORT_BOOT = 1000  # bootstrap replicates per track/agent in the report (stats uses 2000 by default)


# -- loading ------------------------------------------------------------------------------------

def _absolute(base: str, rel: str) -> str:
    return rel if not rel or os.path.isabs(rel) else os.path.join(base, rel)


def load_runs(run_dirs: Iterable[Path | str]) -> tuple[RunRecords, Manifest]:
    """Records of every run dir and the union of their manifests (first definition wins). A
    results line that is not a record is left out and named in the records' `bad_lines`."""
    rows: list[RecordRow | Record] = []
    bad: list[str] = []
    merged = Manifest()
    cases: list[str] = []
    for run_dir in run_dirs:
        base = str(Path(run_dir).resolve())
        # the manifest first: its parse peaks at about twice what it keeps, and that transient
        # memory is then reused by the rows instead of adding to them
        m = Manifest.read(Path(base))
        run_rows = read_rows(Path(base), bad)
        for r in run_rows:
            artifacts = r.artifacts
            if artifacts:  # each line's own dict: rewritten in place
                for name, path in artifacts.items():
                    artifacts[name] = _absolute(base, path)
        rows += run_rows
        cases += m.cases
        for key, task in m.tasks.items():
            merged.tasks.setdefault(key, task)
        for sid, st in m.states.items():
            if sid not in merged.states:
                st.patch = _absolute(base, st.patch)  # our own fresh copy: safe to rewrite
                merged.states[sid] = st
    merged.cases = list(dict.fromkeys(cases))  # first occurrence wins, order kept
    return RunRecords(rows, bad), merged


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

def build_report(records: Iterable[Record], manifest: Manifest | None = None, *,
                 construction: list[dict] | None = None, root: Path | str | None = None,
                 n_boot: int = REPORT_BOOT, seed: int = 0, bias: bool = True) -> dict[str, Any]:
    """Every table of the paper plus bootstrap intervals, unrounded.

    root resolves relative artifact/patch paths (load_runs already made them absolute).
    """
    rows = record_rows(records)
    blind = [r for r in rows if r.start in BLIND_STARTS]
    report = _build(blind, manifest or Manifest(), construction, root, n_boot, seed, bias)
    views = sorted({r.start for r in rows} - BLIND_STARTS)
    if views:
        # each handoff view against the same clean runs, as if it were the residual start
        clean = [r for r in blind if r.start == "clean"]
        report["handoff_views"] = {}
        for start in views:
            informed = [_as_residual(r) for r in rows if r.start == start]
            sub = _build(clean + informed, manifest or Manifest(), None, root, n_boot, seed, bias)
            report["handoff_views"][start.split("+", 1)[1]] = {"tracks": sub["tracks"],
                                                               "acceptance_bias": sub["acceptance_bias"]}
        report["meta"]["n_records"] = len(rows)
    costs = [record_cost(r) for r in rows]
    report["cost"] = {"total_usd": total_cost(costs), "records_unknown": costs.count(None)}
    return report


BLIND_STARTS = frozenset({"clean", "residual"})


def _as_residual(r):
    """An informed residual run (residual+summary/trace) read as a residual one, for its view's tables."""
    if isinstance(r, Record):
        return r.model_copy(update={"start": "residual"})
    return msgspec.structs.replace(r, start="residual")


def _build(records: list[Record], manifest: Manifest, construction: list[dict] | None, root: Path | str | None,
           n_boot: int, seed: int, bias: bool) -> dict[str, Any]:
    groups = group_records(records)  # one grouping pass shared by the success metrics and the bias
    index = index_outcomes(records, manifest, groups)
    tracks: dict[str, dict[str, Any]] = {}
    for (track, agent), o in index.items():
        clean_t, res_t = o.task_outcomes()
        row = success_row(o, (clean_t, res_t))
        pairs = {t: (clean_t[t], res_t[t]) for t in matched_tasks(clean_t, res_t) if t in clean_t and t in res_t}
        # repeats (issue 33): pass@k / pass^k and the nested bootstrap from the outcome lists
        cells_c = {t: (sum(v), len(v)) for t, v in o.clean.items()}
        cells_r = {t: [(sum(v), len(v)) for v in sts.values()] for t, sts in o.states.items()}
        repeated = any(n > 1 for _, n in cells_c.values()) or any(n > 1 for c in cells_r.values() for _, n in c)
        pass_k = repeat_row(cells_c, cells_r, matched_tasks(clean_t, res_t)) if repeated else {}
        if pass_k:
            row["pass_k"] = pass_k
        if repeated:
            row["ci"] = nested_bootstrap_ci([(cells_c[t], cells_r[t]) for t in pairs], n_boot=n_boot, seed=seed)
        else:
            row["ci"] = bootstrap_ci(pairs, n_boot=n_boot, seed=seed)
        tracks.setdefault(track, {})[agent] = row
    ab = acceptance_bias(records, manifest, root, groups) if bias else {}
    for track, agents in ab.items():
        for agent, measures in agents.items():
            measures["gap"] = tracks[track][agent]["gap"]
    return {
        "tracks": tracks,
        "predecessors": predecessor_groups(records, manifest, index),
        "statistics": benchmark_statistics(manifest, construction, root),
        "acceptance_bias": ab,
        "construction": construction_accounting(construction),
        "rules": rule_counts(records),
        "meta": {"n_records": len(records), "n_boot": n_boot, "seed": seed,
                 "agents": sorted({agent for _, agent in groups}), "cases_expected": len(manifest.cases)},
    }


def rule_counts(records: Iterable[Record]) -> dict[str, dict[str, int]]:
    """How many records each taxonomy rule produced (docs/errors.md), and whether it is counted."""
    from swe_residual.errors import RULES

    counts: dict[str, int] = {}
    for r in records:
        name = r.rule or ("verdict" if r.valid else "infra_harness")  # records written before rules existed
        counts[name] = counts.get(name, 0) + 1
    return {name: {"records": n, "counted": RULES[name].counted if name in RULES else False}
            for name, n in sorted(counts.items())}


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
    question: str = ""          # the one line saying what the table answers
    names: tuple[int, ...] = (0,)  # columns of names: the terminal shortens these first to fit


def _best(values: list[float | None]) -> set[int]:
    known = [v for v in values if v is not None]
    return {i for i, v in enumerate(values) if known and v == max(known)}


def tokens(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


Q3 = ("How much success does each agent lose when it starts from a Residual State instead of the clean "
      "repository (the Gap)?")
Q3_FIT = Q3 + " Success in %, Gap in points."
Q4 = ("How do continuations fail: do they accept the inherited work (same failing tests, code kept) or "
      "repair and inspect it?")
Q4_FIT = Q4 + " Shares in %, Steps as a ratio, Gap and Split diff in points."

# Table 3 in the terminal: wide column -> its short head (units in the question line), so a 14-character
# track and a 30-character agent name fit 120 columns; the HTML, tables.md and `--tables wide` show all
_T3_FIT = {"Track": "Track", "Agent": "Agent", "Residual (%)": "Residual", "Ref. Clean (%)": "Ref. Clean",
           "Gap (pts)": "Gap", "95% CI Gap": "95% CI Gap", "CondFail (%)": "CondFail", "Tasks": "Tasks",
           "Flagged": "Flagged"}


def table3(report: dict, title: str = "Table 3 - success by track (task-weighted; Gap before rounding)",
           wide: bool = True) -> Table:
    """Residual / Ref. Clean / Gap per agent and track; bold = best residual and clean per track.
    wide=False keeps the columns a reader needs first (fits 120 columns for agent names up to ~30)."""
    t = Table(title,
              ["Track", "Agent", "Residual (%)", "Ref. Clean (%)", "Gap (pts)", "CondFail (%)", "Tasks",
               "95% CI Residual", "95% CI Clean", "95% CI Gap", "Flagged", "Tokens Residual", "Tokens Clean"],
              question=Q3, names=(0, 1))
    for track, agents in sorted(report["tracks"].items()):
        first = len(t.rows)
        names = sorted(agents)
        for agent in names:
            r = agents[agent]
            ci = r.get("ci") or {}
            t.rows.append([track, agent, pct(r["residual"]), pct(r["clean"]), pts(r["gap"]), pct(r["cond_fail"]),
                           str(r["n_tasks"]), _ci(ci.get("residual")), _ci(ci.get("clean")), _ci(ci.get("gap"), pts),
                           str(r.get("n_flagged", 0)), tokens(r.get("tokens_residual")), tokens(r.get("tokens_clean"))])
        for col, key in ((2, "residual"), (3, "clean")):
            t.bold.update((first + i, col) for i in _best([agents[a][key] for a in names]))
    t.notes.append("CondFail: residual failure on the tasks each agent solved from Clean Start (its own set).")
    t.notes.append("Flagged: valid runs whose final state has integrity flags (record field `integrity`).")
    if wide:
        t.notes.append("Tokens: median prompt + completion tokens per valid run of each start (n/a: not reported).")
        return t
    return _select(t, _T3_FIT, Q3_FIT)


def _select(t: Table, columns: dict[str, str], question: str) -> Table:
    """The table with only the `columns` (wide name -> shown name, in that order); bold marks and
    name columns follow them."""
    idx = [t.columns.index(c) for c in columns]
    return Table(t.title, list(columns.values()), [[row[i] for i in idx] for row in t.rows],
                 {(r, idx.index(c)) for r, c in t.bold if c in idx}, list(t.notes), question,
                 tuple(idx.index(c) for c in t.names if c in idx))


_T4 = [("Same failing", "same_failing", pct), ("Init. fail Clean", "initially_failing_clean", pct),
       ("Init. fail Residual", "initially_failing_residual", pct), ("Repair", "repair_rate", pct),
       ("Break", "break_rate", pct), ("Kept", "kept", pct), ("Left-out Clean", "left_out_changed_clean", pct),
       ("Left-out Residual", "left_out_changed_residual", pct), ("Left-out opened", "left_out_opened", pct),
       ("Steps", "steps_ratio", ratio), ("Tokens", "tokens_ratio", ratio), ("Inspected", "inspection_rate", pct)]


# Table 4 in the terminal: the measures a reader needs first, short heads (`--tables wide`, the HTML
# and tables.md show every column); "Init. fail Clean / Res." puts the two initially-failing shares
# side by side
_T4_FIT = {"Agent": "Agent", "Gap (pts)": "Gap", "Same failing": "Same failing",
           "Init. fail Clean / Res.": "Init. fail Clean / Res.", "Repair": "Repair", "Break": "Break", "Kept": "Kept",
           "Inspected": "Inspected", "Steps": "Steps", "Split diff (pts)": "Split diff"}


def table4(report: dict, suffix: str = "", wide: bool = True) -> list[Table]:
    """Acceptance bias per track, agents sorted by Gap (largest first); n/a reasons as one note per
    reason naming its columns. wide=False: the columns of _T4_FIT (fits 120 columns)."""
    tables = []
    for track, agents in sorted(report.get("acceptance_bias", {}).items()):
        columns = ["Agent", "Gap (pts)", *(c for c, _, _ in _T4), "Kept split high/low succ. (%)", "Split diff (pts)"]
        if not wide:
            columns = list(_T4_FIT)
        t = Table(f"Table 4 - acceptance bias ({track}){suffix}",
                  columns if wide else list(_T4_FIT.values()), question=Q4 if wide else Q4_FIT)
        reasons: dict[str, set[str]] = {}
        order = sorted(agents, key=lambda a: (agents[a].get("gap") is None, -(agents[a].get("gap") or 0), a))
        for agent in order:
            m = agents[agent]
            cells = {"Agent": agent, "Gap (pts)": pts(m.get("gap"))}
            for col, key, fmt in _T4:
                cell = m.get(key) or {"value": None}
                cells[col] = fmt(cell["value"])
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
        t.notes.append("Normally submitted runs; per run, averaged within task, then across tasks; "
                       "Steps (Tokens) = median over tasks of continuation/clean step (token) ratios.")
        shown = set(columns) | {"Kept split"} if wide else {"Same failing", "Init. fail Clean", "Init. fail Residual",
                                                             "Repair", "Break", "Kept", "Inspected", "Steps",
                                                             "Kept split"}
        by_reason: dict[str, list[str]] = {}
        for col, rs in reasons.items():
            if col in shown:
                for r in sorted(rs):
                    by_reason.setdefault(r, []).append(col if wide or col != "Kept split" else "Split diff")
        t.notes.extend(f"{', '.join(cols)} n/a: {r}" for r, cols in by_reason.items())
        tables.append(t)
    return tables


def table8(report: dict) -> Table:
    """Clean / Residual per predecessor family, tracks pooled."""
    pred = report.get("predecessors") or {"families": [], "agents": {}}
    groups = ["overall", *pred["families"]]
    t = Table("Table 8 - by predecessor family (tracks pooled, tasks weighted equally)",
              ["Agent", *(f"{g.capitalize() if g == 'overall' else g} {s}" for g in groups for s in ("Clean", "Residual"))],
              question="Does the loss depend on which predecessor (model family) left the state? Success in %.")
    for agent, row in sorted(pred["agents"].items()):
        cells = [agent]
        for g in groups:
            cell = row.get(g) or {}
            cells += [pct(cell.get("clean")), pct(cell.get("residual"))]
        t.rows.append(cells)
    t.notes.append("Each group uses its own matched Clean Start reference on the tasks with a state from that family.")
    return t


def _na(cell: dict) -> bool:
    return cell.get("value") is None


def table2(report: dict) -> Table:
    """Benchmark statistics per track."""
    stats = report.get("statistics") or {}
    tracks = sorted(stats)
    t = Table("Table 2 - benchmark statistics", ["", *tracks],
              question="What the benchmark holds: tasks, Residual States and how far their predecessors got.")
    fams = sorted({f for s in stats.values() for f in s["states_per_predecessor"]})
    ks = sorted({int(k) for s in stats.values() for k in s["tasks_by_state_count"]}) or [1, 2, 3]

    def row(label: str, fn) -> None:
        t.rows.append([label, *(fn(stats[tr]) for tr in tracks)])

    row("Source benchmark tasks", lambda s: "n/a" if s["source_tasks"] is None else str(s["source_tasks"]))
    row("Source tasks covered", lambda s: str(s["tasks_covered"]))
    row("Residual States", lambda s: str(s["residual_states"]))
    for f in fams:
        row(f"  from {f}", lambda s, f=f: str(s["states_per_predecessor"].get(f, 0)))
    row(f"Tasks with {' / '.join(map(str, ks))} states",
        lambda s: " / ".join(str(s["tasks_by_state_count"].get(str(k), 0)) for k in ks))
    row("Prior-attempt length (steps, median)", lambda s: "n/a" if _na(s["prior_steps_median"]) else f"{s['prior_steps_median']['value']:g}")
    row("Predecessor execution time (min, median)", lambda s: "n/a" if _na(s["prior_minutes_median"]) else f"{s['prior_minutes_median']['value']:.1f}")
    row("Test pass rate (mean / median, %)", lambda s: f"{pct(s['pass_rate_mean']['value'])} / {pct(s['pass_rate_median']['value'])}")
    row("States with 1-3 tests still failing",
        lambda s: f"{s['states_1_3_failing']['count']} ({pct(s['states_1_3_failing']['share'])}%)")
    row("Files changed (median)", lambda s: "n/a" if _na(s["files_changed_median"]) else f"{s['files_changed_median']['value']:g}")
    row("Lines added / deleted (median)", lambda s: " / ".join(
        "n/a" if _na(s[k]) else f"{s[k]['value']:g}" for k in ("lines_added_median", "lines_deleted_median")))
    row("Patch size (KiB, median)", lambda s: "n/a" if _na(s["patch_kib_median"]) else f"{s['patch_kib_median']['value']:.1f}")
    reasons = {c.get("reason") for s in stats.values() for c in s.values() if isinstance(c, dict) and c.get("reason")}
    t.notes.extend(f"n/a: {r}" for r in sorted(reasons))
    return t


_T5 = [("Predecessor runs (Stage I)", "predecessor_runs"), ("Did not declare completion", "not_submitted"),
       ("Passed the verifier", "passed"), ("Infrastructure failure", "infra_error"),
       ("No substantive change", "no_change"), ("Duplicate final state", "duplicate"),
       ("Not selected (per-task cap, families)", "not_selected"),
       ("Rejected in review", "review_rejected"), ("Passed human review", "passed_review"),
       ("Patch application or command replay failed", "rebuild_failed"),
       ("Environment unusable for rollouts", "env_unusable"),
       ("No valid verifier result, or no longer failing", "no_valid_verdict_or_not_failing"),
       ("Included", "included")]


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
        tables.append(table3(sub, f"Table 3 - success by track, handoff view '{view}' (residual+{view} "
                                  "against the same clean runs; never mixed with the blind residual start)", wide=wide))
        tables.extend(table4(sub, f", handoff view '{view}'", wide=wide))
    tables += [table8(report), table2(report)]
    t5 = table5(report)
    if t5 is not None:
        tables.append(t5)
    else:
        tables.append(Table("Table 5 - construction accounting", ["", "value"],
                            [["construction", "n/a"]], notes=[report.get("construction", {}).get("reason", "")],
                            question=Q5))
    return tables


# -- renderers ----------------------------------------------------------------------------------

def render_markdown(report: dict) -> str:
    """tables.md: GitHub tables, best per track in bold."""
    out = ["# SWE-Residual results", ""]
    for t in all_tables(report):
        out += [f"## {t.title}", "", "| " + " | ".join(t.columns) + " |",
                "|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|"]
        for i, row in enumerate(t.rows):
            cells = [f"**{c}**" if (i, j) in t.bold else c for j, c in enumerate(row)]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
        out += [f"- {n}" for n in t.notes if n]
        out.append("")
    return "\n".join(out)


TEXT_WIDTH = 120
BEST_NOTE = "* best Residual and Ref. Clean success of its track (bold in the HTML report)."


def shorten(text: str, width: int) -> str:
    """`text` cut in the middle to `width` characters (`mini-sw..sonnet-4`), both ends kept."""
    if len(text) <= width:
        return text
    keep = max(1, width - 2)
    return text[:(keep + 1) // 2] + ".." + text[len(text) - keep // 2:] if keep > 1 else text[:width]


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
        rows = [r if k == 0 else [shorten(c, widths[j]) if j in names else c for j, c in enumerate(r)]
                for k, r in enumerate(rows)]
    return rows, widths


def render_text(report: dict, wide: bool = False, width: int = TEXT_WIDTH) -> str:
    """Aligned plain-text tables for the terminal (best marked with *), each under the line saying
    what it answers. By default Table 3 and 4 keep the columns that fit `width` (names shortened in
    the middle if still too wide); wide=True shows every column. A note shared by several tables is
    printed once, where it first applies."""
    out: list[str] = []
    seen: set[str] = set()
    for t in all_tables(report, wide=wide):
        rows = [t.columns] + [[c + ("*" if (i, j) in t.bold else "") for j, c in enumerate(r)]
                              for i, r in enumerate(t.rows)]
        rows, widths = (rows, [max(len(r[j]) for r in rows) for j in range(len(t.columns))]) if wide else \
            _fit(rows, t.names, width)
        out += [t.title, "=" * len(t.title)]
        if t.question:
            out += textwrap.wrap(t.question, width)
        for k, r in enumerate(rows):
            out.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))).rstrip())
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        notes = [*t.notes, *([BEST_NOTE] if t.bold else [])]
        for n in notes:
            if n and n not in seen:
                seen.add(n)
                out += textwrap.wrap(n, width, initial_indent="  ", subsequent_indent="    ")
        out.append("")
    return "\n".join(out)


def interrupted_lines(report: dict) -> list[str]:
    """What an interrupted run's summary says (the terminal and the run page's banner): the counts,
    then the command that completes the run; [] for a run that was not interrupted."""
    stopped = report.get("interrupted")
    if not isinstance(stopped, dict):
        return []
    return [f"interrupted: {stopped.get('recorded', 0)} of {stopped.get('collected', 0)} cases recorded "
            f"({stopped.get('valid', 0)} with a valid verdict), {stopped.get('not_run', 0)} not run; no gate checked",
            f"continue it with: {stopped.get('resume') or '--resume RUN_DIR'}"]


def figures_absent_reason(report: dict) -> str:
    """Why the run page shows no figure: the true reason, not a guess between two."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:     # without importing it
        return "matplotlib is not installed (pip install matplotlib)"
    if report.get("interrupted"):
        return "the run was interrupted before any agent had both a Clean Start and a Residual Start outcome"
    return "no agent has both a Clean Start and a Residual Start outcome"


CSV_COLUMNS = ["track", "agent", "n_tasks", "residual_pct", "clean_pct", "gap_pts", "cond_fail_pct",
               "residual_ci_low", "residual_ci_high", "clean_ci_low", "clean_ci_high", "gap_ci_low",
               "gap_ci_high", "n_clean_solved", "n_residual_runs", "n_clean_runs", "n_infra_errors", "n_flagged"]


def render_csv(report: dict) -> str:
    """results.csv: one row per track/agent, unrounded (rates in %, gaps in points)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    scale = lambda v, k=100.0: "" if v is None else repr(k * v)
    for track, agents in sorted(report["tracks"].items()):
        for agent, r in sorted(agents.items()):
            ci = r.get("ci") or {}
            bounds = []
            for key, k in (("residual", 100.0), ("clean", 100.0), ("gap", 1.0)):
                b = ci.get(key) or [None, None]
                bounds += [scale(b[0], k), scale(b[1], k)]
            w.writerow([track, agent, r["n_tasks"], scale(r["residual"]), scale(r["clean"]), scale(r["gap"], 1.0),
                        scale(r["cond_fail"]), *bounds, r.get("n_clean_solved", ""), r.get("n_residual_runs", ""),
                        r.get("n_clean_runs", ""), r.get("n_infra_errors", ""), r.get("n_flagged", "")])
    return buf.getvalue()


# -- figures ------------------------------------------------------------------------------------

def _pyplot():
    """matplotlib on the Agg backend (no display); None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def figure_success(report: dict) -> bytes | None:
    """Figure 1 (right): Clean vs Residual success per agent, averaged over tracks."""
    per_agent: dict[str, tuple[list[float], list[float]]] = {}
    for agents in report["tracks"].values():
        for agent, r in agents.items():
            if r["clean"] is not None and r["residual"] is not None:
                c, s = per_agent.setdefault(agent, ([], []))
                c.append(r["clean"])
                s.append(r["residual"])
    plt = _pyplot() if per_agent else None     # matplotlib (~0.6 s to import) only for a figure to draw
    if plt is None:
        return None
    names = sorted(per_agent)
    clean = [100 * fmean(per_agent[a][0]) for a in names]
    res = [100 * fmean(per_agent[a][1]) for a in names]
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(names) + 2), 3.2))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], clean, 0.4, label="Clean Start", color="#9aa5b1")
    ax.bar([x + 0.2 for x in xs], res, 0.4, label="Residual Start", color="#d1495b")
    for x, c, s in zip(xs, clean, res):
        ax.text(x - 0.2, c + 1, f"{c:.1f}", ha="center", fontsize=7)
        ax.text(x + 0.2, s + 1, f"{s:.1f}", ha="center", fontsize=7)
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Success (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Success, averaged over tracks", fontsize=9)
    ax.legend(fontsize=7)
    return _png(fig, plt)


def figure_conditional(report: dict) -> bytes | None:
    """Figure 2: on each agent's Clean Start successes, Residual failure (red) / success (green)."""
    bars = [(f"{agent} ({track})", r["cond_fail"]) for track, agents in sorted(report["tracks"].items())
            for agent, r in sorted(agents.items()) if r.get("cond_fail") is not None]
    plt = _pyplot() if bars else None
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(bars) + 1))
    labels = [b[0] for b in bars]
    fail = [100 * b[1] for b in bars]
    ys = range(len(bars))
    ax.barh(list(ys), fail, color="#d1495b", label="fail")
    ax.barh(list(ys), [100 - f for f in fail], left=fail, color="#2e933c", label="success")
    for y, f in zip(ys, fail):
        ax.text(f / 2, y, f"{f:.1f}", va="center", ha="center", color="white", fontsize=7)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("Residual Start outcome on Clean Start successes (%)")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    return _png(fig, plt)


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
