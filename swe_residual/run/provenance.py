"""Run provenance: what a run was made with, written once per run as provenance.json in the run dir.

The digests of the task dirs, state artifacts and agent configs its cases used, the harness's
version and the backend, so `compare` and the gates can say when two runs differ in any of them
(report/provenance.py reads and compares them). Secrets never: an agent config names the variables
that hold its keys (`api_key_env`), and only those names are written; every path is digested by
content, never written as a path of this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swe_residual.agents import AgentRegistry
from swe_residual.report.provenance import PROVENANCE, SCHEMA

__all__ = ["PROVENANCE", "run_provenance", "tree_digest", "agent_facts", "harness_facts", "write_provenance"]
from swe_residual.states import LoadedState
from swe_residual.tasks import Task

ROOT = Path(__file__).resolve().parent.parent.parent


def tree_digest(path: Path) -> str:
    """sha256 over a file or tree: every entry's relative path, kind, executable bit and content (a
    symlink by its target, never followed), in sorted order; the same bytes give the same digest
    wherever the tree lies."""
    h = hashlib.sha256()
    path = Path(path)
    if path.is_file() and not path.is_symlink():
        _file_into(h, "", path)
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(filenames + [d for d in dirnames if (base / d).is_symlink()]):
            p = base / name
            rel = p.relative_to(path).as_posix()
            if p.is_symlink():
                h.update(f"L {rel}\0{os.readlink(p)}\0".encode("utf-8", "surrogateescape"))
            elif p.is_file():
                _file_into(h, rel, p)
    return h.hexdigest()


def _file_into(h: Any, rel: str, p: Path) -> None:
    mode = "x" if os.access(p, os.X_OK) else "f"
    h.update(f"{mode} {rel}\0".encode("utf-8", "surrogateescape"))
    with open(p, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(hashlib.sha256(chunk).digest())
    h.update(b"\0")


def agent_facts(registry: AgentRegistry, name: str) -> dict[str, Any]:
    """An agent's harness, key variable names and config digest: the config as loaded, with every
    file it names (install, scripted_server) digested by content rather than by its path here."""
    spec = registry.spec(name)
    if spec is None:  # a built-in (nop, oracle): its code is the harness's
        return {"harness": name, "builtin": True, "digest": _sha({"builtin": name})}
    config = spec.model_dump(mode="json")
    for key in ("install", "scripted_server"):
        if config.get(key):
            p = Path(config[key])
            config[key] = {"sha256": tree_digest(p)} if p.exists() else {"missing": p.name}
    facts: dict[str, Any] = {"harness": spec.harness, "digest": _sha(config)}
    if spec.model:
        facts["model"] = spec.model
    if spec.api_key_env:
        facts["api_key_env"] = list(spec.api_key_env)  # names only, never the values
    return facts


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def harness_facts() -> dict[str, Any]:
    """The harness's version, and its source commit where it runs from a git checkout."""
    from swe_residual import __version__

    facts: dict[str, Any] = {"name": "swe-residual", "version": __version__}
    if (ROOT / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            if out.returncode == 0 and out.stdout.strip():
                facts["commit"] = out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return facts


def provenance(
    tasks: Iterable[Task], states: Iterable[LoadedState], agents: dict[str, dict], backend: str
) -> dict[str, Any]:
    """provenance.json's content for these tasks, states and agents (agent name -> agent_facts)."""
    return {
        "schema": SCHEMA,
        "harness": harness_facts(),
        "backend": backend,
        "tasks": {f"{t.track}/{t.id}": tree_digest(t.path) for t in tasks},
        "states": {s.id: tree_digest(s.artifact_path) for s in states},
        "agents": agents,
    }


def write_provenance(run_dir: Path, content: dict[str, Any]) -> bool:
    """Write provenance.json once per run: a resumed run keeps the one its start wrote (False then)."""
    path = Path(run_dir) / PROVENANCE
    if path.exists():
        return False
    tmp = path.with_name(PROVENANCE + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return True


def run_provenance(run_dir: Path, plan: Any, cases: Iterable[Any], backend: str) -> bool:
    """provenance.json for the cases a run starts with (a RunSession's plan)."""
    cases = list(cases)
    tasks = {f"{c.task.track}/{c.task.id}": c.task for c in cases}
    states = {c.state.id: c.state for c in cases if c.state is not None}
    agents = {c.agent_label: agent_facts(plan.registry, c.agent) for c in cases}
    return write_provenance(run_dir, provenance(tasks.values(), states.values(), agents, backend))
