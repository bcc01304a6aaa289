"""Where every Stage I run stands, and the Table 5 rows (construction.jsonl) that say so.

Each run is in exactly one place: waiting for a stage, or dropped at a stage with one reason, or
included. Counts therefore add up to the number of Stage I runs at every step.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter

import msgspec

from swe_residual.residualize.workdir import CONSTRUCTION, STAGE1, STAGE2, WorkDir

#: where a run waits (not a Table 5 exclusion): counted as `other` in Table 5 until decided
PENDING = ("pending_filter", "pending_review", "pending_build")
#: a candidate the per-task selection left out (`filter --per-task N`): a Stage II reason
NOT_SELECTED = "not_selected"


def stages(wd: WorkDir) -> list[dict]:
    """One row per Stage I run: its identity and the stage_result it has reached so far."""
    from swe_residual.residualize.review import counted_reviews, outcome

    decisions = _fast_lines(wd, STAGE2, _DecisionView, lambda v: v.run, wd.decisions)
    builds, counted = wd.builds(), counted_reviews(wd)
    # review_outcomes(wd) without reading the stage files a second time (20,000 runs: ~1 s)
    reviewed = {rid: outcome(counted.get(rid, [])) for rid, d in decisions.items() if d.result == "candidate"}
    rows = []
    for run in _fast_lines(wd, STAGE1, _RunView, lambda v: v.id, wd.runs).values():
        pred = run.predecessor
        row = {
            "run": run.id,
            "track": run.track,
            "task": run.task,
            "predecessor": {"agent": pred.agent, "model_family": pred.model_family},
            "source_format": run.source.get("format"),
            "steps": run.steps,
            "duration_s": run.duration_s,
        }
        d = decisions.get(run.id)
        if d is None:
            row["stage_result"], row["detail"] = "pending_filter", ""
        elif d.result != "candidate":
            row["stage_result"], row["detail"] = d.result, d.detail
        else:
            review = reviewed.get(run.id, "pending")
            b = builds.get(run.id)
            if review == "pending":
                row["stage_result"], row["detail"] = "pending_review", ""
            elif review == "rejected":
                row["stage_result"], row["detail"] = "review_rejected", _rejection(wd, run.id)
            elif b is None:
                row["stage_result"], row["detail"] = "pending_build", ""
            else:
                row["stage_result"], row["detail"] = b.result, b.detail
                if b.state:
                    row["state"] = b.state
        rows.append(row)
    return rows


class _PredecessorView(msgspec.Struct):
    agent: str
    model_family: str


class _RunView(msgspec.Struct, kw_only=True):
    """The fields of a PredecessorRun that status shows."""

    id: str
    track: str
    task: str
    predecessor: _PredecessorView
    source: dict[str, str] = {}
    steps: int | None = None
    duration_s: float | None = None


class _DecisionView(msgspec.Struct, kw_only=True):
    run: str
    result: str
    detail: str = ""


def _fast_lines(wd: WorkDir, name: str, view: type, key, slow) -> dict:
    """A stage file's lines decoded by msgspec into the fields status shows (a later line with
    the same key wins, a torn last line is skipped, as WorkDir reads them): 20,000 lines in a
    tenth of the time. At the first line msgspec does not take, the full reader (`slow`) reads
    the file, with its validation and its error naming the line."""
    path = wd.path / name
    if not path.is_file():
        return {}
    decoder = msgspec.json.Decoder(view)
    out = {}
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                v = decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return slow()
            out[key(v)] = v
    return out


def _rejection(wd: WorkDir, candidate: str) -> str:
    parts = []
    for r in wd.reviews().get(candidate, {}).values():
        if not r.keep:
            what = [
                w
                for w, ok in (
                    ("not task-directed", r.task_directed),
                    ("task/verifier inconsistent", r.consistent),
                )
                if not ok
            ]
            parts.append(f"{r.reviewer}: {', '.join(what)}" + (f" ({r.comment})" if r.comment else ""))
    return "; ".join(parts)


def write_construction(wd: WorkDir) -> list[dict]:
    """Rewrite construction.jsonl from the stage files (it is derived: safe to regenerate)."""
    rows = stages(wd)
    try:
        data = msgspec.json.Encoder(order="sorted").encode_lines(rows)
    except UnicodeEncodeError:  # a lone surrogate in a hand-edited stage file: escaped as JSON does
        data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("ascii")
    tmp = wd.path / f".{CONSTRUCTION}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, wd.path / CONSTRUCTION)
    return rows


def summary(rows: list[dict]) -> dict:
    by_stage = Counter(r["stage_result"] for r in rows)
    return {
        "runs": len(rows),
        "by_stage_result": dict(sorted(by_stage.items())),
        "not_selected": [
            {
                "id": r["run"],
                "track": r["track"],
                "task": r["task"],
                "model_family": r["predecessor"]["model_family"],
                "detail": r["detail"],
            }
            for r in rows
            if r["stage_result"] == NOT_SELECTED
        ],
        "candidates": [
            {"id": r["run"], "track": r["track"], "task": r["task"], "stage": r["stage_result"]}
            for r in rows
            if r["stage_result"]
            in (
                "pending_review",
                "pending_build",
                "review_rejected",
                "rebuild_failed",
                "env_unusable",
                "no_valid_verdict",
                "no_longer_failing",
                "included",
            )
        ],
    }


def status_command(wd: WorkDir, args: argparse.Namespace) -> int:
    rows = write_construction(wd)
    out = summary(rows)
    if args.format == "json":
        out["rows"] = rows
        print(json.dumps(out, indent=1, sort_keys=True))
        return 0
    from swe_residual.report.metrics import STAGE_RESULTS

    print(f"{out['runs']} predecessor runs in {wd.path}")
    stage2 = [s for s in STAGE_RESULTS[:5] if s != NOT_SELECTED]
    rest = [s for s in STAGE_RESULTS[5:] if s != NOT_SELECTED]
    order = [*PENDING[:1], *stage2, NOT_SELECTED, PENDING[1], rest[0], PENDING[2], *rest[1:]]
    by_stage: dict[str, list[dict]] = {}
    for r in rows:
        by_stage.setdefault(r["stage_result"], []).append(r)
    lines = []
    for stage in order:
        n = out["by_stage_result"].get(stage, 0)
        if n:
            lines.append(f"  {stage:<18} {n}")
            if stage != "pending_filter":
                lines.extend(
                    f"      {r['run']}" + (f": {r['detail']}" if r.get("detail") else "")
                    for r in by_stage[stage]
                )
    print("\n".join(lines))
    return 0
