"""Stage III: two reviewers judge every candidate; their decisions, outcomes and agreement.

A candidate is kept only when both of its reviewers find it (a) task-directed and (b) task-verifier
consistent. The first two distinct reviewers of a candidate are its reviewers: a third is refused,
and a reviewer may change their own decision (their last line in reviews.jsonl counts). The
command line and the review page (review_page.py) record decisions through record_review; decisions
made on another machine come in through import_decisions (a JSONL file export_decisions wrote),
under the same lock and the same two-reviewer rule.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shlex
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

from pydantic import ValidationError

from swe_residual.errors import InputError
from swe_residual.progress import Progress
from swe_residual.residualize.filter import candidates
from swe_residual.residualize.packets import make_packets, stale_packets
from swe_residual.residualize.records import PredecessorRun, Review
from swe_residual.residualize.workdir import REVIEWS, WorkDir

REVIEWERS = 2
REVIEWER_NAME = re.compile(r"^\S(.*\S)?$")
MAX_NAME_CHARS = 100
MAX_COMMENT_CHARS = 4000
MAX_DECISIONS_BYTES = 64 * 1024 * 1024
CRITERIA = ("keep", "task_directed", "consistent")


def check_reviewer(name: str) -> str:
    if not name or len(name) > MAX_NAME_CHARS or not REVIEWER_NAME.match(name) or not name.isprintable():
        raise InputError(
            f"reviewer name {name[:MAX_NAME_CHARS]!r}: 1-{MAX_NAME_CHARS} printable characters "
            "without leading or trailing spaces"
        )
    return name


def counted_reviews(wd: WorkDir) -> dict[str, list[Review]]:
    """candidate -> the last reviews of its first two distinct reviewers, in the order they first
    reviewed (wd.reviews() keeps reviewers in first-appearance order)."""
    return {c: list(by.values())[:REVIEWERS] for c, by in wd.reviews().items()}


def _known(cands: list[PredecessorRun]) -> str:
    ids = [c.id for c in cands]
    return ", ".join(ids[:20]) + (f", ... ({len(ids)} in all)" if len(ids) > 20 else "") if ids else "none"


def record_review(
    wd: WorkDir, candidate: str, reviewer: str, task_directed: bool, consistent: bool, comment: str = ""
) -> Review:
    """Append one reviewer's decision on one candidate (the only writer of reviews.jsonl)."""
    cands = candidates(wd)
    if candidate not in {c.id for c in cands}:
        raise InputError(
            f"{wd.path / REVIEWS}: candidate {candidate!r} is not a Stage II candidate; "
            f"known candidates: {_known(cands)}"
        )
    check_reviewer(reviewer)
    if len(comment) > MAX_COMMENT_CHARS:
        raise InputError(f"review of {candidate}: comment: at most {MAX_COMMENT_CHARS} characters")
    review = Review(
        candidate=candidate,
        reviewer=reviewer,
        task_directed=task_directed,
        consistent=consistent,
        comment=comment,
    )
    with reviews_locked(wd):  # check and append under one lock: two third reviewers cannot both get in
        why = third_reviewer(wd.reviews().get(candidate, {}), candidate, reviewer)
        if why:
            raise InputError(why)
        wd.append(REVIEWS, review)
    return review


@contextmanager
def reviews_locked(wd: WorkDir):
    fd = os.open(wd.path / "reviews.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def third_reviewer(by: dict[str, Review], candidate: str, reviewer: str) -> str | None:
    """Why `reviewer` may not decide on the candidate (None: they may)."""
    first = list(by)[:REVIEWERS]
    if reviewer not in first and len(first) >= REVIEWERS:
        return (
            f"candidate {candidate} already has its {REVIEWERS} reviewers ({', '.join(first)}); "
            f"the decision of {reviewer} is not recorded"
        )
    return None


# -- decisions between machines: export and import as JSONL ----------------------------------------


def export_decisions(wd: WorkDir, path: Path, reviewer: str | None = None) -> int:
    """Write every counted decision (each reviewer's last, on each current candidate; only
    `reviewer`'s when given) as Review lines, the format of reviews.jsonl. Returns how many."""
    counted = counted_reviews(wd)
    lines = [
        r.model_dump_json() + "\n"
        for c in candidates(wd)
        for r in counted.get(c.id, [])
        if reviewer is None or r.reviewer == reviewer
    ]
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text("".join(lines), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"--export-decisions {path}: cannot be written: {exc.strerror or exc}") from None
    return len(lines)


def read_decisions(path: Path) -> list[tuple[int, Review]]:
    """(line number, Review) of a decisions file; InputError naming the file, line and field of the
    first line that is not a decision (nothing is imported then)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_DECISIONS_BYTES + 1)
    except OSError as exc:
        raise InputError(f"--import-decisions {path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_DECISIONS_BYTES:
        raise InputError(f"--import-decisions {path}: larger than {MAX_DECISIONS_BYTES >> 20} MiB")
    out = []
    for n, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            r = Review.model_validate_json(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(map(str, err["loc"])) or "(line)"
            raise InputError(
                f"{path}:{n}: {where}: {err['msg']} (a line of a decisions file is one "
                "review, as `review --export-decisions` writes)"
            ) from None
        try:
            check_reviewer(r.reviewer)
        except InputError as exc:
            raise InputError(f"{path}:{n}: {exc}") from None
        if len(r.comment) > MAX_COMMENT_CHARS:
            raise InputError(f"{path}:{n}: comment: at most {MAX_COMMENT_CHARS} characters")
        out.append((n, r))
    return out


def judgements(r: Review) -> str:
    return f"task-directed {yes_no(r.task_directed)}, consistent {yes_no(r.consistent)}" + (
        f", comment {r.comment!r}" if r.comment else ""
    )


def import_decisions(wd: WorkDir, path: Path) -> tuple[dict[str, int], list[str]]:
    """Add the decisions of a file another machine exported: each reviewer's last line per
    candidate. One already here is skipped; one that differs from this work dir's decision of the
    same reviewer, one on a candidate unknown here, and a third reviewer are refused, each with one
    line. Returns the counts (imported, already, refused) and the refusal lines."""
    decisions = read_decisions(path)
    last: dict[tuple[str, str], tuple[int, Review]] = {}
    for n, r in decisions:
        last[(r.candidate, r.reviewer)] = (n, r)
    known = {c.id for c in candidates(wd)}
    counts = {"imported": 0, "already": 0, "refused": 0}
    refused: list[str] = []

    def refuse(n: int, why: str) -> None:
        counts["refused"] += 1
        refused.append(f"refused {path}:{n}: {why}")

    with reviews_locked(wd):
        here = wd.reviews()
        for (cid, who), (n, r) in sorted(last.items(), key=lambda kv: kv[1][0]):
            if cid not in known:
                refuse(n, f"{who} on {cid}: {cid!r} is not a Stage II candidate of {wd.path}")
                continue
            by = here.setdefault(cid, {})
            mine = by.get(who)
            if mine is not None:
                if (mine.task_directed, mine.consistent, mine.comment) == (
                    r.task_directed,
                    r.consistent,
                    r.comment,
                ):
                    counts["already"] += 1
                else:
                    cmd = [
                        "swe-residual",
                        "residualize",
                        "review",
                        "--reviewer",
                        who,
                        "--candidate",
                        cid,
                        "--task-directed",
                        yes_no(r.task_directed),
                        "--consistent",
                        yes_no(r.consistent),
                        *(["--comment", r.comment] if r.comment else []),
                        str(wd.path),
                    ]
                    refuse(
                        n,
                        f"{who} on {cid}: {judgements(r)} in the file, but {judgements(mine)} here; this "
                        f"work dir's stands - to take the file's, record it here: {shlex.join(cmd)}",
                    )
                continue
            why = third_reviewer(by, cid, who)
            if why:
                refuse(n, why)
                continue
            wd.append(REVIEWS, r)
            by[who] = r
            counts["imported"] += 1
    return counts, refused


def outcome(reviews: list[Review]) -> str:
    if len(reviews) < REVIEWERS:
        return "pending"
    return "kept" if all(r.keep for r in reviews) else "rejected"


def review_outcomes(wd: WorkDir) -> dict[str, str]:
    """Every candidate id -> "pending" (fewer than two reviews), "kept" (both reviewers keep it:
    task-directed and consistent) or "rejected" (two reviews, at least one rejects)."""
    counted = counted_reviews(wd)
    return {c.id: outcome(counted.get(c.id, [])) for c in candidates(wd)}


def judgement(r: Review, criterion: str) -> bool:
    return r.keep if criterion == "keep" else getattr(r, criterion)


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> dict:
    """Cohen's kappa for two raters' yes/no judgements of the same items.

    With a = both yes, b = rater 1 yes and rater 2 no, c = rater 1 no and rater 2 yes, d = both no,
    n = a+b+c+d: p_o = (a+d)/n, p_e = ((a+b)/n)((a+c)/n) + ((c+d)/n)((b+d)/n),
    kappa = (p_o - p_e) / (1 - p_e). Undefined (None, with a reason) when n = 0 or p_e = 1.
    """
    a = sum(1 for x, y in pairs if x and y)
    b = sum(1 for x, y in pairs if x and not y)
    c = sum(1 for x, y in pairs if not x and y)
    d = sum(1 for x, y in pairs if not x and not y)
    n = a + b + c + d
    out = {
        "n": n,
        "table": {"yes_yes": a, "yes_no": b, "no_yes": c, "no_no": d},
        "observed": None,
        "expected": None,
        "kappa": None,
        "reason": None,
    }
    if n == 0:
        out["reason"] = "no candidate has two reviews"
        return out
    p_o = Fraction(a + d, n)
    p_e = Fraction(a + b, n) * Fraction(a + c, n) + Fraction(c + d, n) * Fraction(b + d, n)
    out["observed"], out["expected"] = float(p_o), float(p_e)
    if p_e == 1:
        out["reason"] = "both reviewers gave the same judgement to every candidate (chance agreement is 1)"
        return out
    out["kappa"] = float((p_o - p_e) / (1 - p_e))
    return out


def agreement(wd: WorkDir) -> dict:
    """Cohen's kappa between the two reviewers over the candidates with two reviews, for the keep
    decision and for each criterion, plus every disagreement with both judgements and comments.

    When the same two people reviewed every such candidate they are rater 1 and 2 (by name);
    otherwise each candidate's first and second reviewer are (`note` says so)."""
    counted = counted_reviews(wd)
    pairs = [(c.id, counted[c.id]) for c in candidates(wd) if len(counted.get(c.id, [])) >= REVIEWERS]
    names = sorted({r.reviewer for _, rs in pairs for r in rs})
    if len(names) == REVIEWERS:
        raters, note = names, None
        pairs = [(cid, sorted(rs, key=lambda r: names.index(r.reviewer))) for cid, rs in pairs]
    else:
        raters = ["first reviewer", "second reviewer"]
        note = (
            f"{len(names)} reviewers in all: rater 1 and 2 are each candidate's first and second reviewer"
            if names
            else None
        )
    out: dict = {"candidates": len(pairs), "raters": raters, "note": note}
    for criterion in CRITERIA:
        out[criterion] = cohen_kappa(
            [(judgement(r1, criterion), judgement(r2, criterion)) for _, (r1, r2) in pairs]
        )
    out["disagreements"] = [
        {
            "candidate": cid,
            "on": [k for k in CRITERIA if judgement(r1, k) != judgement(r2, k)],
            "reviews": [
                {
                    "reviewer": r.reviewer,
                    "task_directed": r.task_directed,
                    "consistent": r.consistent,
                    "keep": r.keep,
                    "comment": r.comment,
                }
                for r in (r1, r2)
            ],
        }
        for cid, (r1, r2) in pairs
        if any(judgement(r1, k) != judgement(r2, k) for k in CRITERIA)
    ]
    return out


def yes_no(v: bool) -> str:
    return "yes" if v else "no"


def format_agreement(ag: dict) -> list[str]:
    labels = {"keep": "keep", "task_directed": "task-directed", "consistent": "task-verifier consistent"}
    lines = [
        f"agreement over {ag['candidates']} candidates with two reviews "
        f"(raters: {ag['raters'][0]}, {ag['raters'][1]})" + (f"; {ag['note']}" if ag["note"] else "") + ":"
    ]
    for k in CRITERIA:
        s = ag[k]
        if s["kappa"] is None:
            lines.append(f"  {labels[k]}: kappa undefined - {s['reason']}")
        else:
            lines.append(
                f"  {labels[k]}: kappa {s['kappa']:.3f} (observed {s['observed']:.3f}, "
                f"chance {s['expected']:.3f}, n {s['n']})"
            )
    if ag["disagreements"]:
        lines.append(f"disagreements ({len(ag['disagreements'])}):")
        for d in ag["disagreements"]:
            lines.append(f"  {d['candidate']} (on {', '.join(labels[k] for k in d['on'])}):")
            for r in d["reviews"]:
                lines.append(
                    f"    {r['reviewer']}: task-directed {yes_no(r['task_directed'])}, consistent "
                    f"{yes_no(r['consistent'])}" + (f" - {r['comment']!r}" if r["comment"] else "")
                )
    return lines


def write_packets(wd: WorkDir, args: argparse.Namespace) -> tuple[list[PredecessorRun], int]:
    """Write missing or stale packets of the candidates of --track (default every track),
    --jobs at a time."""
    cands = [c for c in candidates(wd) if args.track is None or c.track == args.track]
    tracks = sorted({c.track for c in cands})
    if args.tasks_dir and args.track is None and len(tracks) > 1:
        raise InputError(
            f"--tasks-dir {args.tasks_dir}: the candidates span tracks {', '.join(tracks)}; "
            "pass --track with it"
        )
    loaded: dict[str, dict] = {}

    def tasks_of(track: str) -> dict:
        if track not in loaded:
            loaded[track] = wd.tasks(track, args.tasks_dir)
        return loaded[track]

    todo = stale_packets(wd, cands, tasks_of, args.summary_model)
    written, failed = [], {}
    if todo:
        with Progress(len(todo), "packets", label="review packets") as progress:
            written, failed = make_packets(
                wd,
                todo,
                args.summary_model,
                jobs=getattr(args, "jobs", 1),
                done=lambda cid, err: progress.advance(**({"failed": 1} if err else {})),
            )
    print(
        f"packets: {len(written)} written, {len(cands) - len(written) - len(failed)} up to date"
        + (f", {len(failed)} failed" if failed else "")
        + f" ({wd.path / 'packets'})"
    )
    for cid, err in failed.items():
        print(f"error: packet {cid}: {err}; run `review` again to retry")
    return cands, 1 if failed else 0
