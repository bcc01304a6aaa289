"""Reading a run's provenance (provenance.json, written by run/provenance.py) and saying where two runs
differ: harness version, backend, task dirs, state artifacts, agent configs. `compare` and the
gates print these as warnings: a number that moved may come from a changed task or agent config
rather than from the agent.

provenance.json comes from a run dir or bundle someone else made: it is read with a size cap, and any
field that is not what it should be is left out (a note, never a crash).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROVENANCE = "provenance.json"
SCHEMA = 1
MAX_BYTES = 16 << 20


def read_provenance(run_dir: Path | str) -> tuple[dict[str, Any] | None, str | None]:
    """(provenance.json's content, None), or (None, why there is none that reads)."""
    from swe_residual.safe_read import read_bytes

    try:
        raw = read_bytes(Path(run_dir), PROVENANCE, MAX_BYTES)
    except Exception as exc:  # noqa: BLE001 - hostile input: a link, a dir, a file too large
        return None, f"{Path(run_dir) / PROVENANCE}: not read ({type(exc).__name__}: {exc})"
    if raw is None:
        return None, f"{Path(run_dir) / PROVENANCE}: missing (a run made before run provenance was recorded)"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return None, f"{Path(run_dir) / PROVENANCE}: not JSON ({str(exc)[:200]})"
    if not isinstance(data, dict):
        return None, f"{Path(run_dir) / PROVENANCE}: not a JSON object"
    return data, None


def _strings(value: Any) -> dict[str, str]:
    """A {name: digest} map as written, its other entries left out."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _agents(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, dict)}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:12] if len(text) == 64 else text[:80]


def differences(
    baseline: dict[str, Any] | None,
    run: dict[str, Any] | None,
    why: tuple[str | None, str | None] = (None, None),
) -> list[str]:
    """One line per way the two runs' provenance differs (BASELINE -> RUN), on what both
    runs have (a task, state or agent only one of them used is no difference here: `compare` lists
    those cases as in one run only). A changed agent config under the same agent name is said first."""
    if baseline is None or run is None:
        missing = [w for w in why if w]
        return [f"provenance unknown: {m}" for m in missing] or ["provenance unknown"]
    lines: list[str] = []
    base_agents, run_agents = _agents(baseline.get("agents")), _agents(run.get("agents"))
    for name in sorted(set(base_agents) & set(run_agents)):
        b, r = base_agents[name].get("digest"), run_agents[name].get("digest")
        if b != r:
            lines.append(
                f"agent {name}: its config changed under the same name (digest {_short(b)} -> {_short(r)})"
            )
    bh, rh = baseline.get("harness"), run.get("harness")
    bh, rh = bh if isinstance(bh, dict) else {}, rh if isinstance(rh, dict) else {}
    for key in ("version", "commit"):
        if bh.get(key) != rh.get(key) and (bh.get(key) or rh.get(key)):
            lines.append(f"harness {key}: {_short(bh.get(key))} -> {_short(rh.get(key))}")
    if baseline.get("backend") != run.get("backend"):
        lines.append(f"backend: {_short(baseline.get('backend'))} -> {_short(run.get('backend'))}")
    for field, what in (("tasks", "task dir"), ("states", "state artifact")):
        b, r = _strings(baseline.get(field)), _strings(run.get(field))
        changed = sorted(k for k in set(b) & set(r) if b[k] != r[k])
        for key in changed[:20]:
            lines.append(f"{what} {key}: digest {_short(b[key])} -> {_short(r[key])}")
        if len(changed) > 20:
            lines.append(f"... and {len(changed) - 20} more {what}s whose digests differ")
    return lines


def run_differences(baseline_dir: Path | str, run_dir: Path | str) -> list[str]:
    """differences() of two run dirs' provenance.json."""
    (b, bwhy), (r, rwhy) = read_provenance(baseline_dir), read_provenance(run_dir)
    return differences(b, r, (bwhy, rwhy))
