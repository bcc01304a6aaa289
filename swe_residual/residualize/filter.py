"""Stage II: the automatic filter (docs/residualization.md).

A Stage I run becomes a candidate only if it declared completion, got a valid verdict of 0, ended
without an infrastructure failure, changed something beyond incidental artifacts, and is not the
same change as an earlier candidate of its task. Every other run gets exactly one reason.
Incidental artifacts are ignored only for this decision: they stay in the state's patch.
A machine-track run has no patch: it changed something when it typed anything into the machine
(its interactions.jsonl is not empty), and two runs of a task are the same change when they
typed the same inputs in the same order.

Then, when asked (`--per-task N`, `--families`), a selection keeps at most N candidates per task,
preferring distinct model families (the paper built one to three states per task from different
predecessor families); the candidates it leaves out get the reason `not_selected`.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import random

from swe_residual.errors import InputError
from swe_residual.interactions import parse_interactions
from swe_residual.patches import parse_patch
from swe_residual.residualize.importers import UNREPLAYABLE
from swe_residual.residualize.records import FilterDecision, PredecessorRun, tests_caption
from swe_residual.residualize.workdir import STAGE2, WorkDir
from swe_residual.results import append_lines

BATCH = 1000  # Stage II lines written (and fsynced) at once

#: caches, build outputs and logs (matched against every path component and the whole path)
DEFAULT_IGNORES = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".hypothesis",
    ".coverage",
    ".coverage.*",
    "htmlcov",
    "*.egg-info",
    ".eggs",
    "build",
    "dist",
    "node_modules",
    ".next",
    "target",
    ".gradle",
    ".cache",
    "*.log",
    "*.tmp",
    "*.swp",
    ".DS_Store",
    "*.o",
    "*.so",
    "*.class",
    ".venv",
    "venv",
)


def incidental(path: str, globs: tuple[str, ...] | list[str]) -> bool:
    """A path is incidental when it, or one of its directories, matches a glob."""
    return _incidental(path, tuple(globs))


@functools.lru_cache(maxsize=65536)
def _incidental(path: str, globs: tuple[str, ...]) -> bool:  # runs of a task touch the same paths
    parts = path.split("/")
    return any(fnmatch.fnmatchcase(path, g) or any(fnmatch.fnmatchcase(p, g) for p in parts) for g in globs)


def patch_identity(patch: bytes, globs: tuple[str, ...] | list[str]) -> str | None:
    """The normalized identity of a change: its non-incidental file sections, without `index`
    lines (abbreviated blob ids vary), in path order. None when nothing substantive changed."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    text = patch.decode("utf-8", "surrogateescape")
    paths = iter(parse_patch(patch).values())
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            fd = next(paths, None)
            key = fd.path if fd is not None else line
            current = (
                None
                if fd is not None
                and incidental(fd.path, globs)
                and (fd.old_path is None or incidental(fd.old_path, globs))
                else sections.setdefault(key, [])
            )
            if current is not None:
                current.append(line)
        elif current is not None and not line.startswith("index "):
            current.append(line)
    if not sections:
        return None
    h = hashlib.sha256()
    for key in sorted(sections):
        h.update("\n".join(sections[key]).rstrip("\n").encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def interactions_identity(data: bytes, unreplayable: str | None = None) -> str | None:
    """The identity of a machine run's change: its inputs in order, and the call no replay can
    reproduce that follows them (None when it did nothing)."""
    try:
        items = parse_interactions(data, "interactions.jsonl")
    except InputError:
        return None
    if not items and not unreplayable:
        return None
    h = hashlib.sha256()
    for it in items:
        h.update(f"{it.kind}\0{it.input}\0".encode("utf-8", "surrogateescape"))
    if unreplayable:  # a run Stage IV refuses, naming the call: it did something
        h.update(f"unreplayable\0{unreplayable}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def decide(
    run: PredecessorRun, patch: bytes, globs, seen: dict[tuple[str, str], str], *, machine: bool = False
) -> FilterDecision:
    """One run's decision; `seen` maps (track/task, identity) to the first candidate with it.
    `patch` is the run's interactions.jsonl when `machine`."""
    if run.outcome is None or run.verdict == "infra_error" or run.termination == "infra":
        why = run.rule or "no valid verdict"
        return FilterDecision(
            run=run.id,
            result="infra_error",
            detail=f"{why}: {run.error or 'the run has no valid verdict'}"[:500],
        )
    if not run.declared_complete:
        return FilterDecision(
            run=run.id,
            result="not_submitted",
            detail=f"ended by {run.termination or 'unknown'} without declaring completion",
        )
    if run.outcome == 1:
        return FilterDecision(run=run.id, result="passed", detail="the hidden tests pass: nothing residual")
    identity = (
        interactions_identity(patch, run.source.get(UNREPLAYABLE))
        if machine
        else patch_identity(patch, globs)
    )
    if identity is None:
        why = (
            "no terminal interactions recorded"
            if machine
            else "no change beyond incidental artifacts"
            if patch.strip()
            else "empty final patch"
        )
        return FilterDecision(run=run.id, result="no_change", detail=why)
    key = (f"{run.track}/{run.task}", identity)
    if key in seen:
        return FilterDecision(
            run=run.id, result="duplicate", identity=identity, detail=f"same change as candidate {seen[key]}"
        )
    seen[key] = run.id
    return FilterDecision(run=run.id, result="candidate", identity=identity, detail=candidate_detail(run))


def candidate_detail(run: PredecessorRun) -> str:
    caption = tests_caption(run.tests, run.test_counts).replace(" not passing", " hidden tests failing", 1)
    return f"declared complete, {caption}"


def run_filter(wd: WorkDir, globs: tuple[str, ...] | list[str] = DEFAULT_IGNORES) -> list[FilterDecision]:
    """Decide every Stage I run not decided yet (in recording order) and append the decisions."""
    decided, runs = wd.decisions(), wd.runs()
    # a candidate the per-task selection left out still holds its change: a later run with the same
    # change is its duplicate
    seen = {
        (f"{runs[d.run].track}/{runs[d.run].task}", d.identity): d.run
        for d in decided.values()
        if d.result in ("candidate", "not_selected") and d.identity and d.run in runs
    }
    from swe_residual.tracks import track_kind

    kinds: dict[str, str] = {}
    new = []
    for run in runs.values():
        if run.id in decided:
            continue
        if run.track not in kinds:
            kinds[run.track] = track_kind(run.track)
        machine = kinds[run.track] == "machine"
        d = decide(
            run, wd.interactions_bytes(run) if machine else wd.patch_bytes(run), globs, seen, machine=machine
        )
        new.append(d)
        if len(new) % BATCH == 0:  # an interrupted filter keeps what it decided, in whole batches
            append_lines(wd.path / STAGE2, new[-BATCH:])
    append_lines(wd.path / STAGE2, new[len(new) - len(new) % BATCH :])
    return new


# -- selection: at most N candidates per task, from distinct model families -----------------------


def _families(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    out = [f.strip() for v in values for f in v.split(",") if f.strip()]
    if not out:
        raise InputError("--families: no family named")
    return list(dict.fromkeys(out))


def select(
    wd: WorkDir, per_task: int | None, families: list[str] | None = None, seed: int = 0
) -> list[FilterDecision]:
    """Keep at most `per_task` candidates per task (None: no cap), only of `families` when given,
    preferring distinct families: a round-robin over the families (the order given, else shuffled
    from the seed), each family's candidates in an order shuffled from the seed. Candidates already
    reviewed or built are kept first and never dropped. Candidates left out get `not_selected`;
    not_selected ones the selection now picks are candidates again (a new line: the last one counts,
    so each run still has exactly one reason). Reproducible: the same candidates, N, families and
    seed give the same choice, and running it again appends nothing."""
    if per_task is not None and per_task < 0:
        raise InputError("--per-task: must be 0 or more")
    runs, decisions = wd.runs(), wd.decisions()
    pinned = set(wd.reviews()) | set(wd.builds())
    wanted = [f.lower() for f in families] if families else None
    pools: dict[tuple[str, str], list[PredecessorRun]] = {}
    for rid, d in decisions.items():
        if d.result in ("candidate", "not_selected") and rid in runs:
            r = runs[rid]
            pools.setdefault((r.track, r.task), []).append(r)
    out: list[FilterDecision] = []
    for (track, task), pool in sorted(pools.items()):
        keep = [r for r in pool if r.id in pinned and decisions[r.id].result == "candidate"]
        kept = {r.id for r in keep}
        by_family: dict[str, list[PredecessorRun]] = {}
        for r in sorted(pool, key=lambda r: r.id):
            if r.id not in kept:
                by_family.setdefault(r.predecessor.model_family, []).append(r)
        rng = f"{seed}/{track}/{task}"
        if wanted is not None:
            order = [f for w in wanted for f in sorted(by_family) if f.lower() == w]
        else:
            order = sorted(by_family)
            random.Random(rng).shuffle(order)
        for f in order:
            random.Random(f"{rng}/{f}").shuffle(by_family[f])
        covered = {r.predecessor.model_family for r in keep}
        order = [f for f in order if f not in covered] + [f for f in order if f in covered]
        slots = None if per_task is None else max(0, per_task - len(keep))
        picked: list[PredecessorRun] = []
        queues = {f: list(by_family[f]) for f in order}
        while slots is None or len(picked) < slots:
            took = False
            for f in order:
                if queues[f] and (slots is None or len(picked) < slots):
                    picked.append(queues[f].pop(0))
                    took = True
            if not took:
                break
        chosen = {r.id for r in keep} | {r.id for r in picked}
        fams = sorted({r.predecessor.model_family for r in pool if r.id in chosen})
        why = (
            f"task {task}: {len(chosen)} of {len(pool)} candidates selected"
            + (f" (families {', '.join(fams)})" if fams else "")
            + (f"; --per-task {per_task}" if per_task is not None else "")
            + (f"; --families {','.join(families)}" if families else "")
            + f"; seed {seed}"
        )
        for r in pool:
            d = decisions[r.id]
            if r.id in chosen and d.result == "not_selected":
                line = FilterDecision(
                    run=r.id, result="candidate", identity=d.identity, detail=candidate_detail(r)
                )
            elif r.id not in chosen and d.result == "candidate":
                reason = (
                    f"family {r.predecessor.model_family} not among --families"
                    if wanted is not None and r.predecessor.model_family.lower() not in wanted
                    else "not selected"
                )
                line = FilterDecision(
                    run=r.id, result="not_selected", identity=d.identity, detail=f"{reason}: {why}"[:500]
                )
            else:
                continue
            out.append(line)
    append_lines(wd.path / STAGE2, out)
    return out


def candidates(wd: WorkDir) -> list[PredecessorRun]:
    """Stage I runs that passed the filter, in recording order."""
    runs, decisions = wd.runs(), wd.decisions()
    return [
        r for r in runs.values() if decisions.get(r.id) is not None and decisions[r.id].result == "candidate"
    ]


def filter_command(wd: WorkDir, args: argparse.Namespace) -> int:
    globs = ([] if args.no_default_ignores else list(DEFAULT_IGNORES)) + list(args.ignore)
    per_task, families = getattr(args, "per_task", None), _families(getattr(args, "families", None))
    new = run_filter(wd, globs)
    counts: dict[str, int] = {}
    for d in new:
        counts[d.result] = counts.get(d.result, 0) + 1
    total = len(wd.decisions())
    print(
        f"filtered {len(new)} new runs ({total} in all): "
        + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing new")
    )
    for d in new:
        print(f"  {d.run}: {d.result} - {d.detail}")
    if per_task is not None or families is not None:
        changed = select(wd, per_task, families, args.seed)
        decisions = wd.decisions()
        n_cand = sum(1 for d in decisions.values() if d.result == "candidate")
        n_out = sum(1 for d in decisions.values() if d.result == "not_selected")
        print(
            f"selection ({'--per-task ' + str(per_task) if per_task is not None else 'no cap'}"
            f"{', --families ' + ','.join(families) if families else ''}, seed {args.seed}): {n_cand} candidates, "
            f"{n_out} not selected ({len(changed)} changed now)"
        )
        for d in changed:
            print(f"  {d.run}: {d.result} - {d.detail}")
    return 0
