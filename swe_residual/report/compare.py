"""A run against a baseline run: per track and agent, the paired task-level differences of
Residual, Clean and Gap with the sign-flip p-value (report/stats.py), and the cases whose verdict
flipped. `swe-residual compare BASELINE RUN` prints it and writes compare.html; `swe-residual
gate --baseline` writes the same page next to its verdicts.

Differences are RUN - BASELINE on the tasks both have (points): a negative Residual difference or
a positive Gap difference is a regression. A case is matched by its case id (agent, task, start,
state; its repeats, `#r<k>`, are one case); it flipped when both runs have a valid verdict for it
and they differ (pass, fail, or mixed over attempts and repeats).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from swe_residual.report.metrics import LOWER_CLEAN, for_agent
from swe_residual.report.stats import DEFAULT_BOOT, DEFAULT_PERM, paired_comparison
from swe_residual.results import Record, case_of, record_rows

METRICS = (("residual", "Residual (%)"), ("clean", "Clean (%)"), ("gap", "Gap (pts)"))
PAGE = "compare.html"
WORD = {"p": "pass", "f": "fail", "m": "mixed", "i": "no valid verdict"}
WARNINGS = "the runs differ in what made them (provenance.json, baseline -> run):"
SHOWN = 200  # flipped cases and changed tasks listed per agent (text and page)


def _outcome(recs: list[Any]) -> str:
    ys = [r.outcome for r in recs if r.valid]
    return "i" if not ys else "p" if all(ys) else "f" if not any(ys) else "m"


def _cases(records: Iterable[Any]) -> dict[str, list[Any]]:
    """Records by case, a case's repeats (--repeat, or merged runs) together: one verdict each."""
    out: dict[str, list[Any]] = {}
    for r in records:
        out.setdefault(case_of(r), []).append(r)
    return out


def compare_runs(
    baseline: Iterable[Record],
    run: Iterable[Record],
    *,
    n_boot: int = DEFAULT_BOOT,
    n_perm: int = DEFAULT_PERM,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One entry per (track, agent) in either run, sorted: its metrics (paired comparison of
    RUN vs BASELINE per metric, with every task's values: Table 3's, report/aggregates.py
    success_of) and its flipped cases."""
    from swe_residual.report.aggregates import success_of

    numbers = success_of(baseline), success_of(run)  # first: load_runs' columns, rows untouched
    values = {m: (numbers[0].task_values(m), numbers[1].task_values(m)) for m, _ in METRICS}
    base_rows, run_rows = record_rows(baseline), record_rows(run)
    base_cases, run_cases = _cases(base_rows), _cases(run_rows)
    keys = {(r.track, r.agent) for r in base_rows} | {(r.track, r.agent) for r in run_rows}
    out = []
    for track, agent in sorted(keys):
        entry: dict[str, Any] = {"track": track, "agent": agent, "metrics": {}}
        for metric, _ in METRICS:
            b = values[metric][0].get((track, agent))
            c = values[metric][1].get((track, agent))
            cmp = paired_comparison(c, b, n_boot=n_boot, n_perm=n_perm, seed=seed) if b and c else None
            tasks = sorted(set(b or {}) | set(c or {}))
            entry["metrics"][metric] = {
                "comparison": cmp,  # diff = RUN - BASELINE (points), mean_a = RUN, mean_b = BASELINE
                "tasks": [
                    {
                        "task": t,
                        "baseline": None if b is None or t not in b else 100 * b[t],
                        "run": None if c is None or t not in c else 100 * c[t],
                        "diff": None if not (b and c and t in b and t in c) else 100 * (c[t] - b[t]),
                    }
                    for t in tasks
                ],
            }
        flipped, invalid, only = [], [], {"baseline": 0, "run": 0}
        ids = {cid for cid, recs in base_cases.items() if (recs[0].track, recs[0].agent) == (track, agent)}
        run_ids = {cid for cid, recs in run_cases.items() if (recs[0].track, recs[0].agent) == (track, agent)}
        only["baseline"], only["run"] = len(ids - run_ids), len(run_ids - ids)
        for cid in sorted(ids & run_ids):
            was, now = _outcome(base_cases[cid]), _outcome(run_cases[cid])
            r = run_cases[cid][-1]
            item = {
                "case_id": cid,
                "task": r.task,
                "start": r.start,
                "state": r.state,
                "baseline": WORD[was],
                "run": WORD[now],
            }
            if "i" in (was, now):
                if was != now:
                    invalid.append(item)
            elif was != now:
                flipped.append(item)
        entry.update(flipped=flipped, invalid=invalid, only_cases=only)
        out.append(entry)
    return out


#: the page's class for what a change means for the agent (metrics.for_agent)
MEANING_CLASS = {"better": " exit0", "worse": " exitn", LOWER_CLEAN: " lowclean", "unchanged": ""}


def meanings(entry: dict[str, Any]) -> dict[str, str]:
    """for_agent of each metric of one compare entry."""
    diffs = {m: (entry["metrics"][m]["comparison"] or {}).get("diff") for m, _ in METRICS}
    return {m: for_agent(m, diffs[m], diffs["clean"]) for m, _ in METRICS}


def _num(v: float | None, signed: bool = False) -> str:
    return "n/a" if v is None else (f"{v:+.1f}" if signed else f"{v:.1f}")


def _p(cmp: dict | None) -> str:
    if not cmp or cmp.get("p_value") is None:
        return "n/a"
    return f"{cmp['p_value']:.3g}" + ("" if cmp.get("exact") else " (MC)")


def summary_rows(entry: dict[str, Any]) -> list[list[str]]:
    """[metric, baseline, run, diff, 95% CI, p, shared tasks, for the agent] per metric of one agent."""
    rows = []
    meaning = meanings(entry)
    for metric, label in METRICS:
        cmp = entry["metrics"][metric]["comparison"]
        if cmp is None or cmp.get("diff") is None:
            rows.append([label, "n/a", "n/a", "n/a", "n/a", "n/a", "0", "n/a"])
            continue
        ci = cmp.get("ci")
        rows.append(
            [
                label,
                _num(cmp["mean_b"]),
                _num(cmp["mean_a"]),
                _num(cmp["diff"], True),
                f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "n/a",
                _p(cmp),
                str(cmp["n_shared"]),
                meaning[metric],
            ]
        )
    return rows


SUMMARY_COLUMNS = [
    "metric",
    "baseline",
    "run",
    "diff (pts)",
    "95% CI",
    "p (sign-flip)",
    "shared tasks",
    "for the agent",
]


def _aligned(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append(
            indent
            + "  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths)))
        )
        if k == 0:
            out.append(indent + "  ".join("-" * w for w in widths))
    return out


#: the terminal's colour for what a change means for the agent (`compare` on a terminal)
ANSI = {"better": "\033[32m", "worse": "\033[31m", LOWER_CLEAN: "\033[33m"}


def _coloured(line: str, meaning: str) -> str:
    """An aligned summary line with its last cell (the meaning) in the meaning's colour."""
    code = ANSI.get(meaning)
    if not code or not line.endswith(meaning):
        return line
    return line[: -len(meaning)] + code + meaning + "\033[0m"


def render_text(
    result: list[dict[str, Any]], baseline: str = "BASELINE", run: str = "RUN", color: bool = False
) -> str:
    """What `swe-residual compare` prints: per agent its summary, changed tasks and flipped cases;
    `color`: the meaning of each change for the agent in green, red or amber (a terminal)."""
    out = [
        "compare: differences RUN - BASELINE on the tasks both have, in points; p: paired sign-flip test "
        "over tasks",
        f"  run:      {run}",
        f"  baseline: {baseline}",
        "",
    ]
    for e in result:
        out.append(f"{e['track']}/{e['agent']}")
        rows = summary_rows(e)
        lines = _aligned([SUMMARY_COLUMNS, *rows])
        out += lines[:2] + [_coloured(ln, r[-1]) if color else ln for ln, r in zip(lines[2:], rows)]
        changed = [t for t in e["metrics"]["residual"]["tasks"] if t["diff"]] + [
            t for t in e["metrics"]["clean"]["tasks"] if t["diff"]
        ]
        if changed:
            rows = [["task", "start", "baseline", "run", "diff"]]
            for metric, label in (("clean", "clean"), ("residual", "residual")):
                for t in e["metrics"][metric]["tasks"]:
                    if t["diff"]:
                        rows.append(
                            [t["task"], label, _num(t["baseline"]), _num(t["run"]), _num(t["diff"], True)]
                        )
            out.append(f"  tasks whose success changed ({len(rows) - 1}):")
            out += _aligned(rows[: SHOWN + 1], "    ")
        flips = e["flipped"]
        out.append(f"  flipped cases ({len(flips)}):" if flips else "  flipped cases: none")
        for f in flips[:SHOWN]:
            out.append(f"    {f['baseline']} -> {f['run']}  {f['case_id']}")
        if len(flips) > SHOWN:
            out.append(f"    ... and {len(flips) - SHOWN} more")
        for f in e["invalid"][:SHOWN]:
            out.append(
                f"    {f['baseline']} -> {f['run']}  {f['case_id']} (not a flip: no valid verdict on one side)"
            )
        only = e["only_cases"]
        if only["baseline"] or only["run"]:
            out.append(
                f"  cases in one run only: {only['baseline']} in the baseline, {only['run']} in this run"
            )
        out.append("")
    if not result:
        out.append("no records in either run")
    return "\n".join(out).rstrip() + "\n"


# -- the page ----------------------------------------------------------------------------------------


def _case_link(cid: str, run_dirs: Sequence[str], out_dir: str, label: str) -> str:
    """A link to the case's page in the run dir that has it (pages/), else plain text."""
    from swe_residual.report.html.kit import esc
    from swe_residual.report.html.run_page import PAGES, page_name

    for d in run_dirs:
        path = os.path.join(d, PAGES, page_name(cid))
        if os.path.isfile(path):
            return f'<a href="{esc(os.path.relpath(path, out_dir).replace(os.sep, "/"))}">{esc(label)}</a>'
    return f'<span class="mute">{esc(label)}</span>'


def _worse(diff: float | None, bad_sign: int) -> str:
    """The cell class of a difference: red when it goes the bad way (Residual down, Gap up), green the other."""
    if not diff:
        return ""
    return " exitn" if diff * bad_sign > 0 else " exit0"


def _overview_cell(cmp: dict | None, meaning: str) -> str:
    """One metric of the overview: baseline -> run (diff, p), coloured by what it means for the agent."""
    from swe_residual.report.html.kit import esc

    if not cmp or cmp.get("diff") is None:
        return '<td class="num mute">n/a</td>'
    text = f"{_num(cmp['mean_b'])} \u2192 {_num(cmp['mean_a'])} ({_num(cmp['diff'], True)}, p {_p(cmp)})"
    return f'<td class="num{MEANING_CLASS[meaning]}" title="{esc(meaning)}">{esc(text)}</td>'


def _overview_row(i: int, e: dict[str, Any]) -> str:
    """One agent of the overview: Residual, Clean and Gap side by side."""
    from swe_residual.report.html.kit import esc

    meaning = meanings(e)
    cells = "".join(_overview_cell(e["metrics"][m]["comparison"], meaning[m]) for m, _ in METRICS)
    return (
        f'<tr><td><a href="#g{i}">{esc(e["track"])}/{esc(e["agent"])}</a></td>{cells}'
        f'<td class="num">{len(e["flipped"])}</td></tr>'
    )


def render_page(
    result: list[dict[str, Any]],
    baseline_dirs: Sequence[Path | str],
    run_dirs: Sequence[Path | str],
    out_dir: Path | str,
) -> str:
    """compare.html: per agent the summary with p-values, the tasks that changed and the flipped
    cases, each linked to its case page in the baseline and in the run (where pages exist)."""
    from swe_residual.report.html.kit import esc, page, table

    out = os.path.realpath(out_dir)
    base = [os.path.realpath(d) for d in baseline_dirs]
    cur = [os.path.realpath(d) for d in run_dirs]
    names = lambda ds: ", ".join(os.path.basename(d) for d in ds)
    body = [
        f"<h1>SWE-Residual: run <code>{esc(names(cur))}</code> vs baseline <code>{esc(names(base))}</code></h1>",
        '<p class="mute small">Differences are RUN \u2212 BASELINE on the tasks both runs have, in points '
        "(task-weighted as in Table 3); p is the paired sign-flip test over those tasks (exact where the "
        "flip combinations are few, else Monte Carlo, MC). A flipped case has a valid verdict in both runs and "
        "they differ.</p>",
    ]
    nav = "".join(f'<a href="#g{i}">{esc(e["track"])}/{esc(e["agent"])}</a>' for i, e in enumerate(result))
    body.insert(0, f'<nav class="top">{nav}</nav>')
    body.append(
        '<h2 id="overview">Overview</h2><p class="mute small">Baseline \u2192 run, the difference and its '
        "p per metric; green: better for the agent, red: worse; a smaller Gap that comes from a lower Clean "
        "success is marked amber (not better).</p>"
        + table(
            ["agent", "Residual (%)", "Clean (%)", "Gap (pts)", "flipped cases"],
            [_overview_row(i, e) for i, e in enumerate(result)],
            ' id="overview-table"',
        )
    )
    for i, e in enumerate(result):
        body.append(f'<section class="agent" id="g{i}"><h2>{esc(e["track"])}/{esc(e["agent"])}</h2>')
        rows = [
            f"<tr>{''.join(f'<td>{esc(c)}</td>' if j == 0 else f'<td class=num>{esc(c)}</td>' for j, c in enumerate(r))}"
            "</tr>"
            for r in summary_rows(e)
        ]
        body.append(table(SUMMARY_COLUMNS, rows, ' class="summary"'))
        flips = e["flipped"]
        if flips:
            frows = []
            for f in flips[:SHOWN]:
                cls = "f" if f["run"] == "fail" else "p" if f["run"] == "pass" else "m"
                frows.append(
                    f"<tr><td><code>{esc(f['case_id'])}</code></td><td>{esc(f['task'])}</td>"
                    f"<td>{esc(f['start'])}</td><td>{esc(f['state'] or '')}</td>"
                    f"<td>{_case_link(f['case_id'], base, out, f['baseline'])}</td>"
                    f'<td><span class="v {cls}">{_case_link(f["case_id"], cur, out, f["run"])}</span></td></tr>'
                )
            more = (
                f'<p class="mute small">... and {len(flips) - SHOWN} more.</p>' if len(flips) > SHOWN else ""
            )
            body.append(
                f"<h3>Flipped cases ({len(flips)})</h3>"
                + table(["case", "task", "start", "state", "baseline", "run"], frows, ' class="flipped"')
                + more
            )
        else:
            body.append('<p class="mute">No case flipped.</p>')
        trows = []
        for metric, label in (("clean", "clean"), ("residual", "residual")):
            for t in e["metrics"][metric]["tasks"]:
                if t["diff"]:
                    trows.append(
                        f"<tr><td>{esc(t['task'])}</td><td>{label}</td><td class=num>{esc(_num(t['baseline']))}"
                        f'</td><td class=num>{esc(_num(t["run"]))}</td><td class="num{_worse(t["diff"], -1)}">'
                        f"{esc(_num(t['diff'], True))}</td></tr>"
                    )
        if trows:
            body.append(
                f"<h3>Tasks whose success changed ({len(trows)})</h3>"
                + table(
                    ["task", "start", "baseline (%)", "run (%)", "diff (pts)"],
                    trows[:SHOWN],
                    ' class="tasks"',
                )
            )
        only = e["only_cases"]
        if only["baseline"] or only["run"]:
            body.append(
                f'<p class="mute small">Cases in one run only: {only["baseline"]} in the baseline, '
                f"{only['run']} in this run (not compared).</p>"
            )
        body.append("</section>")
    if not result:
        body.append('<p class="mute">No records in either run.</p>')
    return page(f"SWE-Residual compare {names(cur)} vs {names(base)}", "".join(body))


def compare_dirs(
    baseline_dirs: Sequence[Path | str], run_dirs: Sequence[Path | str], **kw: Any
) -> list[dict[str, Any]]:
    """compare_runs on run dirs as stored."""
    from swe_residual.report.tables import load_runs

    return compare_runs(load_runs(baseline_dirs, rows=True)[0], load_runs(run_dirs, rows=True)[0], **kw)


# -- `swe-residual compare` -----------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """The `compare` subcommand (hooked into swe_residual/cli.py)."""
    about = (
        "compare a run with a baseline run: per agent and task the paired differences of Residual, Clean and "
        "Gap with the sign-flip p-value, and the cases whose verdict flipped; writes compare.html"
    )
    c = sub.add_parser(
        "compare",
        help=about,
        description=about + ". Differences are RUN - BASELINE on the tasks "
        "both runs have, in points; `gate --baseline` writes the same page.",
        epilog="exit status: 0 compared (output and page written); 2 usage error (one line "
        "`error: ...`: a dir without results.jsonl, a page that cannot be written); 11 a "
        "results.jsonl line that is not a record (left out; the output is still written)",
    )
    c.add_argument("baseline", metavar="BASELINE", help="the baseline run dir (or run bundle, .tar.gz)")
    c.add_argument("run", metavar="RUN", help="the run dir (or run bundle) to compare with it")
    c.add_argument("--html-dir", default=None, metavar="D", help="write compare.html here (default: RUN)")
    c.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="stdout: aligned text, or the whole comparison as JSON",
    )
    c.add_argument(
        "--n-perm",
        type=int,
        default=DEFAULT_PERM,
        help="sign-flip resamples when the exact test has too many combinations (default %(default)s)",
    )
    c.add_argument(
        "--n-boot",
        type=int,
        default=1000,
        help="bootstrap resamples for the 95%% intervals (default %(default)s)",
    )
    c.add_argument("--seed", type=int, default=0, help="seed of the resampling (default %(default)s)")
    c.set_defaults(func=cmd_compare)


def cmd_compare(args: Any) -> int:
    """`swe-residual compare`: a bundle (.tar.gz) is read where a run dir is accepted."""
    import sys

    from swe_residual.report.bundle import is_bundle, opened

    page_dir = args.html_dir or (None if is_bundle(args.run) else args.run)
    if page_dir is None:
        print(
            "note: no compare.html: RUN is a bundle (read, not written); pass --html-dir D", file=sys.stderr
        )
    with opened([args.baseline, args.run]) as (baseline, run):
        return _compare(args, baseline, run, page_dir)


def _compare(args: Any, baseline_dir: str, run_dir: str, page_dir: str | None) -> int:
    import json
    import sys
    import textwrap

    from swe_residual.errors import InputError
    from swe_residual.report.gates import EXIT_INVALID
    from swe_residual.report.provenance import run_differences
    from swe_residual.report.tables import load_runs

    for d, given in ((baseline_dir, args.baseline), (run_dir, args.run)):
        if not (Path(d) / "results.jsonl").is_file():
            raise InputError(f"{given}: no results.jsonl (not a run dir)")
    base, _ = load_runs([baseline_dir], rows=True)
    cur, _ = load_runs([run_dir], rows=True)
    result = compare_runs(base, cur, n_boot=args.n_boot, n_perm=args.n_perm, seed=args.seed)
    warnings = run_differences(baseline_dir, run_dir)
    print(
        json.dumps(result, indent=1, sort_keys=True)
        if args.format == "json"
        else render_text(
            result, args.baseline, args.run, color=sys.stdout.isatty() and "NO_COLOR" not in os.environ
        )
        + (WARNINGS + "\n" if warnings else "")
        + "".join(textwrap.fill(f"warning: {w}", 120, subsequent_indent="  ") + "\n" for w in warnings),
        end="" if args.format == "text" else "\n",
    )
    for w in [WARNINGS, *warnings] if args.format == "json" and warnings else []:  # stdout: the JSON alone
        print(w if w == WARNINGS else f"warning: {w}", file=sys.stderr)
    if page_dir is not None:
        page_for(result, [baseline_dir], [run_dir], page_dir, "--html-dir")
    bad = [*base.bad_lines, *cur.bad_lines]
    if bad:
        print(
            f"INVALID RUN (exit {EXIT_INVALID}): unreadable results line, not counted: {bad[0]}"
            + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""),
            file=sys.stderr,
        )
        return EXIT_INVALID
    return 0


def page_for(
    result: list[dict[str, Any]] | None,
    baseline_dirs: Sequence[Path | str],
    run_dirs: Sequence[Path | str],
    out_dir: Path | str,
    option: str = "--html-dir",
) -> Path:
    """Write <out_dir>/compare.html in place (never through a symlink; credential values redacted;
    the comparison computed when `result` is None) and say where on stderr; a dir that cannot take
    it is a usage error naming `option`."""
    import sys

    from swe_residual.errors import InputError
    from swe_residual.report.html.run_page import write_page as write_html

    if result is None:
        result = compare_dirs(baseline_dirs, run_dirs)
    out = Path(out_dir)
    path = out / PAGE
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_html(path, render_page(result, baseline_dirs, run_dirs, out))
    except OSError as exc:
        raise InputError(f"{option} {out_dir}: cannot write {PAGE} there ({exc.strerror or exc})") from None
    print(f"compare: {path.resolve()}", file=sys.stderr)
    return path
