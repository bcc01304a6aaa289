"""Read Terminal-Bench 1 run directories (`tb run` output) into a neutral form.

    <run>/run_metadata.json            RunMetadata: run_id, agent_name, model_name, ...
          results.json                 BenchmarkResults: {"results": [TrialResults, ...]}
          <task_id>/<trial_name>/results.json   TrialResults: trial_name, task_id, is_resolved,
                                       failure_mode, parser_results {test: passed|failed},
                                       agent_started_at, agent_ended_at, ...
                                commands.txt    the keys sent to the terminal, one Python repr a line
                                panes/post-agent.txt, sessions/, agent-logs/

A SOURCE is a run dir (its trials are found under <task>/<trial>/) or one trial dir. Everything
is read through safe_read (no symlink followed, every file bounded); a trial that cannot be read
raises InputError naming the file. Deciding what a trial means for a benchmark is left to the
importer (residualize/importers.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from swe_residual.errors import InputError
from swe_residual.safe_read import Unsafe, list_dir, read_bytes, read_json

MAX_JSON = 16 << 20
MAX_COMMANDS = 64 << 20
EVIDENCE = ("results.json", "panes/post-agent.txt", "panes/post-test.txt")
MAX_EVIDENCE_FILE = 4 << 20


@dataclass
class TB1Trial:
    path: Path
    trial_name: str
    task_id: str
    trial_id: str | None
    result_sha256: str
    is_resolved: bool | None
    failure_mode: str
    parser_results: dict[str, str] | None
    commands: str | None  # commands.txt, None when the trial has none
    agent_name: str | None = None
    model_name: str | None = None
    agent_started_at: datetime | None = None
    agent_ended_at: datetime | None = None
    evidence: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def agent_duration_s(self) -> float | None:
        if self.agent_started_at is None or self.agent_ended_at is None:
            return None
        try:
            seconds = (self.agent_ended_at - self.agent_started_at).total_seconds()
        except TypeError:  # one time with a zone, one without
            return None
        return round(seconds, 3) if seconds >= 0 else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _is_trial(d: Path) -> bool:
    try:
        data = read_json(d, "results.json", MAX_JSON)
    except Unsafe:
        return any(n == "results.json" for n, _ in list_dir(d))  # read_tb1_trial says why
    return isinstance(data, dict) and "trial_name" in data  # read_tb1_trial checks the rest


def tb1_trial_dirs(source: Path) -> tuple[list[Path], dict]:
    """The trial dirs a SOURCE names and the run's metadata ({} when there is none)."""
    source = Path(source)
    if not source.is_dir():
        raise InputError(f"{source}: not a directory (a Terminal-Bench 1 run or trial dir)")
    if _is_trial(source):
        meta_root = source.parent.parent
        return [source], _metadata(meta_root) if (meta_root / "run_metadata.json").is_file() else {}
    found = []
    for task, kind in list_dir(source):
        if kind != "dir":
            continue
        for trial, tkind in list_dir(source / task):
            if tkind == "dir" and _is_trial(source / task / trial):
                found.append(source / task / trial)
    if not found:
        raise InputError(
            f"{source}: neither a Terminal-Bench 1 trial dir (results.json with trial_name and task_id) "
            "nor a run dir with <task>/<trial>/ dirs under it"
        )
    return found, _metadata(source)


def _metadata(run: Path) -> dict:
    try:
        meta = read_json(run, "run_metadata.json", MAX_JSON)
    except Unsafe as exc:
        raise InputError(str(exc)) from None
    return meta if isinstance(meta, dict) else {}


def read_tb1_trial(d: Path, meta: dict) -> TB1Trial:
    where = d / "results.json"
    try:
        raw = read_bytes(d, "results.json", MAX_JSON)
        data = read_json(d, "results.json", MAX_JSON)
    except Unsafe as exc:
        raise InputError(str(exc)) from None
    if not isinstance(data, dict) or raw is None:
        raise InputError(f"{where}: not a JSON object (Terminal-Bench 1 TrialResults)")
    for key in ("trial_name", "task_id"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise InputError(f"{where}: {key}: missing")
    resolved = data.get("is_resolved")
    if resolved is not None and not isinstance(resolved, bool):
        raise InputError(f"{where}: is_resolved: {resolved!r} is not true, false or null")
    parsed = data.get("parser_results")
    tests = None
    if isinstance(parsed, dict):
        tests = {str(k): ("passed" if v == "passed" else "failed") for k, v in parsed.items()}
    elif parsed is not None:
        raise InputError(f"{where}: parser_results: not an object of test -> passed|failed")
    notes: list[str] = []
    cmd_bytes = None
    try:
        cmd_bytes = read_bytes(d, "commands.txt", MAX_COMMANDS)
    except Unsafe as exc:
        notes.append(str(exc))
    evidence: dict[str, bytes] = {}
    for rel in EVIDENCE:
        try:
            blob = read_bytes(d, rel, MAX_EVIDENCE_FILE)
        except Unsafe as exc:
            notes.append(str(exc))
            continue
        if blob is not None:
            evidence[rel] = blob
    trial_id = data.get("id") if isinstance(data.get("id"), str) else None
    return TB1Trial(
        path=d,
        trial_name=data["trial_name"],
        task_id=data["task_id"],
        trial_id=trial_id,
        result_sha256=hashlib.sha256(raw).hexdigest(),
        is_resolved=resolved,
        failure_mode=str(data.get("failure_mode") or "unset"),
        parser_results=tests,
        commands=cmd_bytes.decode("utf-8", "replace") if cmd_bytes is not None else None,
        agent_name=meta.get("agent_name") if isinstance(meta.get("agent_name"), str) else None,
        model_name=meta.get("model_name") if isinstance(meta.get("model_name"), str) else None,
        agent_started_at=_time(data.get("agent_started_at")),
        agent_ended_at=_time(data.get("agent_ended_at")),
        evidence=evidence,
        notes=notes,
    )
