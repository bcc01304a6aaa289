"""Read Harbor / Pier trial directories (one agent run of one task) into a neutral form.

A trial dir is what `harbor run` / Pier leave per trial (Harbor's TrialPaths):

    <job>/<trial>/result.json          TrialResult (task_name, trial_name, agent_info, verifier_result,
                                       exception_info, started_at, agent_execution, config, ...)
                  config.json          TrialConfig (written at the start; result.json embeds it too)
                  exception.txt        traceback of the exception in exception_info
                  agent/trajectory.json              ATIF (Harbor's own agents)
                  agent/mini-swe-agent.trajectory.json  mini-swe-agent's native trajectory
                  artifacts/model.patch                 DeepSWE's graded patch (mounted artifacts dir)
                  artifacts/logs/artifacts/model.patch  the same, collected by newer Harbor
                  verifier/reward.json | reward.txt, ctrf.json, test-stdout.txt, ...

Nothing here decides what a trial means for a benchmark (residualize/importers.py does for
predecessor runs, harbor/import_job.py for results). Everything is read through safe_read: no symlink is
followed and every file is bounded; a trial that cannot be read raises TrialError naming the file.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from swe_residual.errors import InputError, VerifierError
from swe_residual.safe_read import Unsafe, list_dir, parse_json, read_bytes, read_json
from swe_residual.sources.atif import kind_of
from swe_residual.verdicts import ctrf_statuses

MAX_JSON = 16 << 20  # result.json, config.json, ctrf.json, reward.json
MAX_TRAJECTORY = 64 << 20
MAX_PATCH = 64 << 20  # the harness's own final-patch bound (workspace.FINAL_PATCH_LIMIT)
MAX_EVIDENCE_FILE = 16 << 20  # each verifier log kept as evidence
MAX_EVIDENCE = 64 << 20  # all evidence of one trial

PATCH_FILES = ("artifacts/model.patch", "artifacts/logs/artifacts/model.patch")
ATIF_FILE = "agent/trajectory.json"
MSA_FILE = "agent/mini-swe-agent.trajectory.json"
EVIDENCE_FILES = ("result.json", "config.json", "exception.txt")


class TrialError(InputError):
    """A trial dir that cannot be imported; the message is one line naming the file."""


@dataclass
class HarborTrial:
    path: Path
    trial_name: str
    task_name: str | None
    task_refs: list[str]  # every name the trial records for its task, result.json first
    trial_id: str | None  # TrialResult.id (a UUID), stable wherever the dir is copied
    result_sha256: str
    agent_name: str | None = None
    agent_version: str | None = None
    model_name: str | None = None
    model_provider: str | None = None
    rewards: dict[str, float] | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    agent_started_at: datetime | None = None
    agent_finished_at: datetime | None = None
    verifier_disabled: bool = False
    multi_step: bool = False
    patch: bytes | None = None  # None: the trial has no model.patch
    patch_file: str | None = None
    trajectory: dict | None = None  # ATIF, else mini-swe-agent's native trajectory
    trajectory_file: str | None = None
    agent_exit_status: str | None = None  # mini-swe-agent's info.exit_status, when its file is there
    tests: dict[str, str] | None = None  # per-test statuses from verifier/ctrf.json
    evidence: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes, to keep
    notes: list[str] = field(default_factory=list)  # files not read, and why
    # what the verifier wrote itself (verifier/reward.json, else reward.txt, as Harbor reads them);
    # result.json's verifier_result is Harbor's record of the same when verification completed
    file_rewards: dict[str, float] | None = None
    verifier_started_at: datetime | None = None
    verifier_finished_at: datetime | None = None
    environment_type: str | None = None  # TrialConfig.environment.type: docker, modal, daytona, ...
    task_path: str | None = None  # TrialConfig.task.path as recorded (local and git tasks)

    @property
    def reward(self) -> float | None:
        """The trial's reward: `reward` among the rewards, else the only one there is."""
        return _the_reward(self.rewards)

    @property
    def file_reward(self) -> float | None:
        """The reward the verifier's own file holds (same choice as `reward`)."""
        return _the_reward(self.file_rewards)

    @property
    def agent_duration_s(self) -> float | None:
        return _seconds(self.agent_started_at, self.agent_finished_at)

    @property
    def verify_duration_s(self) -> float | None:
        return _seconds(self.verifier_started_at, self.verifier_finished_at)

    @property
    def duration_s(self) -> float | None:
        return _seconds(self.started_at, self.finished_at)


def trial_dirs(source: Path, _depth: int = 0) -> list[Path]:
    """The trial dirs a SOURCE names: itself when it is one, else its child trial dirs (a job dir),
    or those of its child job dirs (a dir of jobs). Child dirs that are symlinks are never entered."""
    source = Path(source)
    if not source.is_dir():
        raise InputError(f"{source}: not a directory (a Harbor trial or job dir)")
    if _kind(source) == "trial":
        return [source]
    found: list[Path] = []
    for name, kind in list_dir(source):
        child = source / name
        what = _kind(child) if kind == "dir" else None
        if what == "trial":
            found.append(child)
        elif what == "job" and _depth == 0:
            found.extend(trial_dirs(child, 1))
    if not found and _depth == 0:
        raise InputError(
            f"{source}: neither a Harbor trial dir (result.json with trial_name) nor a job dir "
            "whose child dirs are trials"
        )
    return found


def _kind(d: Path) -> str | None:
    """ "trial", "job" or None, from config.json (TrialConfig has `task`, JobConfig `job_name`), else
    from result.json (TrialResult has `trial_name`, JobResult `n_total_trials`)."""
    try:
        config = read_json(d, "config.json", MAX_JSON)
    except Unsafe:
        config = None
    if isinstance(config, dict) and "task" in config:
        return "trial"
    if isinstance(config, dict) and ("job_name" in config or "jobs_dir" in config):
        return "job"
    try:
        result = read_json(d, "result.json", MAX_JSON)
    except Unsafe:
        return "trial" if any(n == "result.json" for n, _ in list_dir(d)) else None  # read_trial says why
    if isinstance(result, dict) and "trial_name" in result:
        return "trial"
    if isinstance(result, dict) and "n_total_trials" in result:
        return "job"
    return None


def _the_reward(rewards: dict[str, float] | None) -> float | None:
    if not rewards:
        return None
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values())) if len(rewards) == 1 else None


def read_trial(path: Path, *, strict_patch: bool = True) -> HarborTrial:
    """Read one trial dir; TrialError (one line, naming the file) when it cannot be imported.

    strict_patch: a model.patch over its bound is a TrialError (a state cannot be rebuilt without
    it); else it is only noted, as every other file written inside the environment is."""
    path = Path(path).absolute()
    try:
        raw = read_bytes(path, "result.json", MAX_JSON)
        config = read_json(path, "config.json", MAX_JSON)
    except Unsafe as exc:
        raise TrialError(str(exc)) from None
    if raw is None:
        raise TrialError(f"{path / 'result.json'}: missing (the trial did not finish)")
    result = _json(raw, path / "result.json")
    if not isinstance(result, dict) or not isinstance(result.get("trial_name"), str):
        raise TrialError(f"{path / 'result.json'}: trial_name: missing; not a Harbor TrialResult")
    cfg = (
        result.get("config")
        if isinstance(result.get("config"), dict)
        else config
        if isinstance(config, dict)
        else {}
    )
    agent_info = _dict(result.get("agent_info"))
    model_info = _dict(agent_info.get("model_info"))
    cfg_agent = _dict(cfg.get("agent"))
    exc_info = _dict(result.get("exception_info"))
    t = HarborTrial(
        path=path,
        trial_name=result["trial_name"],
        task_name=_str(result.get("task_name")),
        task_refs=_task_refs(result, config),
        trial_id=_str(result.get("id")),
        result_sha256=hashlib.sha256(raw).hexdigest(),
        agent_name=_str(agent_info.get("name")) or _str(cfg_agent.get("name")),
        agent_version=_str(agent_info.get("version")),
        model_name=_str(model_info.get("name")) or _str(cfg_agent.get("model_name")),
        model_provider=_str(model_info.get("provider")),
        rewards=_rewards(result.get("verifier_result"), path),
        exception_type=_str(exc_info.get("exception_type")),
        exception_message=(_str(exc_info.get("exception_message")) or "")[:2000] or None,
        started_at=_time(result.get("started_at")),
        finished_at=_time(result.get("finished_at")),
        agent_started_at=_time(_dict(result.get("agent_execution")).get("started_at")),
        agent_finished_at=_time(_dict(result.get("agent_execution")).get("finished_at")),
        verifier_disabled=bool(_dict(cfg.get("verifier")).get("disable")),
        multi_step=bool(result.get("step_results")),
        verifier_started_at=_time(_dict(result.get("verifier")).get("started_at")),
        verifier_finished_at=_time(_dict(result.get("verifier")).get("finished_at")),
        environment_type=_str(_dict(cfg.get("environment")).get("type")),
        task_path=_str(_dict(cfg.get("task")).get("path"))
        or _str(_dict(_dict(config).get("task")).get("path")),
    )
    _read_patch(t, strict_patch)
    _read_trajectory(t)
    _read_verifier(t)
    return t


# -- parts of a trial ------------------------------------------------------------------------------


def _read_patch(t: HarborTrial, strict: bool = True) -> None:
    for rel in PATCH_FILES:
        try:
            data = read_bytes(t.path, rel, MAX_PATCH)
        except Unsafe as exc:
            if strict and "bound" in str(exc):
                raise TrialError(str(exc)) from None  # the state cannot be rebuilt without it
            t.notes.append(str(exc))
            continue
        if data is not None:
            t.patch, t.patch_file = data, rel
            return


def _read_trajectory(t: HarborTrial) -> None:
    for rel in (ATIF_FILE, MSA_FILE):
        try:
            raw = read_bytes(t.path, rel, MAX_TRAJECTORY)
            data = None if raw is None else _json(raw, t.path / rel)
        except (Unsafe, TrialError) as exc:
            t.notes.append(str(exc))
            continue
        if data is None:
            continue
        if not isinstance(data, dict):
            t.notes.append(f"{t.path / rel}: {kind_of(data)} where the trajectory object belongs; not read")
            continue
        t.evidence[rel] = raw
        if rel == MSA_FILE:
            status = _dict(data.get("info")).get("exit_status")
            t.agent_exit_status = status if isinstance(status, str) else None
        if t.trajectory is None:
            t.trajectory, t.trajectory_file = data, rel


def _read_verifier(t: HarborTrial) -> None:
    """The trial's own files and the verifier's top-level files, kept as evidence (bounded)."""
    total = 0
    listing = list_dir(t.path, "verifier")
    for name, kind in listing:
        if kind == "symlink":
            t.notes.append(f"{t.path / 'verifier' / name}: a symlink; not followed")
        elif kind == "other":
            t.notes.append(f"{t.path / 'verifier' / name}: not a regular file; not read")
    for rel in list(EVIDENCE_FILES) + [f"verifier/{n}" for n, kind in listing if kind == "file"]:
        try:
            data = read_bytes(t.path, rel, MAX_EVIDENCE_FILE)
        except Unsafe as exc:
            t.notes.append(str(exc))
            continue
        if data is None:
            continue
        if total + len(data) > MAX_EVIDENCE:
            t.notes.append(f"{t.path / rel}: evidence over {MAX_EVIDENCE >> 20} MiB in all; not kept")
            continue
        total += len(data)
        t.evidence[rel] = data
    ctrf = t.evidence.get("verifier/ctrf.json")
    if ctrf is not None:
        try:
            t.tests = ctrf_statuses(_json(ctrf, t.path / "verifier/ctrf.json"), "verifier/ctrf.json")
        except (TrialError, VerifierError) as exc:
            t.notes.append(f"{t.path / 'verifier/ctrf.json'}: no per-test statuses: {exc}")
    t.file_rewards = _file_rewards(t)


def _file_rewards(t: HarborTrial) -> dict[str, float] | None:
    """Rewards from verifier/reward.json (a flat object of numbers), else verifier/reward.txt (one
    number), the order Harbor's verifier reads them in; what does not parse is noted."""
    for rel in ("verifier/reward.json", "verifier/reward.txt"):
        raw = t.evidence.get(rel)
        if raw is None:
            continue
        try:
            text = raw.decode("utf-8").strip()
            data = _json(raw, t.path / rel) if rel.endswith(".json") else float(text)
            if not isinstance(data, dict):
                data = {"reward": data}
            out = {}
            for k, v in data.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"{k}: {str(v)[:50]!r} is not a finite number")
                out[str(k)] = float(v)
            return out or None
        except (UnicodeDecodeError, ValueError, TrialError) as exc:
            t.notes.append(f"{t.path / rel}: no reward read: {str(exc)[:200]}")
            return None
    return None


def _task_refs(result: dict, config: Any) -> list[str]:
    refs: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, str) and value and value not in refs:
            refs.append(value)

    def from_task(task: Any) -> None:
        task = _dict(task)
        if task.get("org") and task.get("name"):
            add(f"{task['org']}/{task['name']}")
        add(task.get("name"))
        if isinstance(task.get("path"), str):
            add(PurePosixPath(task["path"].rstrip("/")).name)

    add(result.get("task_name"))
    from_task(result.get("task_id"))
    from_task(_dict(result.get("config")).get("task"))
    from_task(_dict(config).get("task"))
    return refs


def _rewards(verifier_result: Any, path: Path) -> dict[str, float] | None:
    rewards = _dict(verifier_result).get("rewards")
    if not isinstance(rewards, dict) or not rewards:
        return None
    out: dict[str, float] = {}
    for k, v in rewards.items():
        try:
            value = float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise TrialError(
                f"{path / 'result.json'}: verifier_result.rewards.{k}: {str(v)[:50]!r} is not a finite number"
            )
        out[str(k)] = value
    return out


def _json(raw: bytes, where: Path) -> Any:
    """parse_json (depth-limited, strings made valid); TrialError naming the file."""
    try:
        return parse_json(raw, where)
    except Unsafe as exc:
        raise TrialError(str(exc)) from None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    try:
        return round((end - start).total_seconds(), 3)
    except TypeError:  # one naive, one aware
        return None
