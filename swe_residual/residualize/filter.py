"""Stage II: the automatic filter (docs/residualization.md).

A Stage I run becomes a candidate only if it declared completion, got a valid verdict of 0, ended
without an infrastructure failure, changed something beyond incidental artifacts, and is not the
same change as an earlier candidate of its task. Every other run gets exactly one reason.
Incidental artifacts are ignored only for this decision: they stay in the state's patch.
A machine-track run has no patch: it changed something when it typed anything into the machine
(its interactions.jsonl is not empty), and two runs of a task are the same change when they
typed the same inputs in the same order.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib

from swe_residual.errors import InputError
from swe_residual.interactions import parse_interactions
from swe_residual.patches import parse_patch
from swe_residual.residualize.records import FilterDecision, PredecessorRun
from swe_residual.residualize.workdir import STAGE2, WorkDir

#: caches, build outputs and logs (matched against every path component and the whole path)
DEFAULT_IGNORES = (
    "__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox",
    ".hypothesis", ".coverage", ".coverage.*", "htmlcov", "*.egg-info", ".eggs", "build", "dist",
    "node_modules", ".next", "target", ".gradle", ".cache", "*.log", "*.tmp", "*.swp", ".DS_Store",
    "*.o", "*.so", "*.class", ".venv", "venv",
)


def incidental(path: str, globs: tuple[str, ...] | list[str]) -> bool:
    """A path is incidental when it, or one of its directories, matches a glob."""
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
            current = None if fd is not None and incidental(fd.path, globs) and \
                (fd.old_path is None or incidental(fd.old_path, globs)) else sections.setdefault(key, [])
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


def interactions_identity(data: bytes) -> str | None:
    """The identity of a machine run's change: its inputs in order (None when it typed nothing)."""
    try:
        items = parse_interactions(data, "interactions.jsonl")
    except InputError:
        return None
    if not items:
        return None
    h = hashlib.sha256()
    for it in items:
        h.update(f"{it.kind}\0{it.input}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def decide(run: PredecessorRun, patch: bytes, globs, seen: dict[tuple[str, str], str], *,
           machine: bool = False) -> FilterDecision:
    """One run's decision; `seen` maps (track/task, identity) to the first candidate with it.
    `patch` is the run's interactions.jsonl when `machine`."""
    if run.outcome is None or run.verdict == "infra_error" or run.termination == "infra":
        why = run.rule or "no valid verdict"
        return FilterDecision(run=run.id, result="infra_error",
                              detail=f"{why}: {run.error or 'the run has no valid verdict'}"[:500])
    if not run.declared_complete:
        return FilterDecision(run=run.id, result="not_submitted",
                              detail=f"ended by {run.termination or 'unknown'} without declaring completion")
    if run.outcome == 1:
        return FilterDecision(run=run.id, result="passed", detail="the hidden tests pass: nothing residual")
    identity = interactions_identity(patch) if machine else patch_identity(patch, globs)
    if identity is None:
        why = ("no terminal interactions recorded" if machine else
               "no change beyond incidental artifacts" if patch.strip() else "empty final patch")
        return FilterDecision(run=run.id, result="no_change", detail=why)
    key = (f"{run.track}/{run.task}", identity)
    if key in seen:
        return FilterDecision(run=run.id, result="duplicate", identity=identity,
                              detail=f"same change as candidate {seen[key]}")
    seen[key] = run.id
    failing = sum(1 for s in run.tests.values() if s != "passed")
    return FilterDecision(run=run.id, result="candidate", identity=identity,
                          detail=f"declared complete, {failing} of {len(run.tests)} hidden tests failing")


def run_filter(wd: WorkDir, globs: tuple[str, ...] | list[str] = DEFAULT_IGNORES) -> list[FilterDecision]:
    """Decide every Stage I run not decided yet (in recording order) and append the decisions."""
    decided, runs = wd.decisions(), wd.runs()
    seen = {(f"{runs[d.run].track}/{runs[d.run].task}", d.identity): d.run for d in decided.values()
            if d.result == "candidate" and d.identity and d.run in runs}
    from swe_residual.tracks import track_kind

    new = []
    for run in runs.values():
        if run.id in decided:
            continue
        machine = track_kind(run.track) == "machine"
        d = decide(run, wd.interactions_bytes(run) if machine else wd.patch_bytes(run), globs, seen, machine=machine)
        wd.append(STAGE2, d)
        new.append(d)
    return new


def candidates(wd: WorkDir) -> list[PredecessorRun]:
    """Stage I runs that passed the filter, in recording order."""
    runs, decisions = wd.runs(), wd.decisions()
    return [r for r in runs.values() if decisions.get(r.id) is not None and decisions[r.id].result == "candidate"]


def filter_command(wd: WorkDir, args: argparse.Namespace) -> int:
    globs = ([] if args.no_default_ignores else list(DEFAULT_IGNORES)) + list(args.ignore)
    new = run_filter(wd, globs)
    counts: dict[str, int] = {}
    for d in new:
        counts[d.result] = counts.get(d.result, 0) + 1
    total = len(wd.decisions())
    print(f"filtered {len(new)} new runs ({total} in all): "
          + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing new"))
    for d in new:
        print(f"  {d.run}: {d.result} - {d.detail}")
    return 0
