"""Read SWE-bench predictions and reports and mini-swe-agent trajectories, without trusting them.

    predictions   a JSON list, JSON lines, or mini-swe-agent's preds.json ({instance_id: prediction})
                  of {instance_id, model_name_or_path, model_patch}
    report.json   {instance_id: {resolved, patch_successfully_applied, tests_status: {FAIL_TO_PASS:
                  {success: [...], failure: [...]}, PASS_TO_PASS: {...}, ...}}}, one per instance
                  under logs/run_evaluation/<run_id>/<model_name_or_path with / as __>/<instance_id>/
    *.traj.json   mini-swe-agent trajectory (trajectory_format mini-swe-agent-1.x): info.exit_status,
                  info.submission (the patch of SWE-bench style runs), messages[], instance_id

Sources are files or directories; directories are walked (no symlinks, bounded) for report.json
and *.traj.json files. Problems are collected as one-line reasons, never raised past a source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_residual.safe_read import Unsafe, parse_json, read_bytes, walk_files

MAX_PREDICTIONS = 256 << 20
MAX_REPORT = 16 << 20
MAX_TRAJECTORY = 64 << 20
MAX_LOG = 16 << 20
REPORT_LOGS = ("test_output.txt", "run_instance.log")


@dataclass
class Prediction:
    instance_id: str
    model: str
    patch: str | None
    where: str  # file:line (or file[index]) for messages
    path: Path  # the predictions file


@dataclass
class Report:
    instance_id: str
    entry: dict
    path: Path
    evidence: dict[str, bytes]  # report.json and its test log, to keep


@dataclass
class MsaTrajectory:
    path: Path
    raw: bytes
    data: dict


@dataclass
class Sources:
    predictions: list[Prediction] = field(default_factory=list)
    reports: dict[str, list[Report]] = field(default_factory=dict)
    trajectories: list[MsaTrajectory] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def report_for(self, instance_id: str, model: str | None) -> Report | None:
        """The report of an instance; with several, the one under the model's dir. ValueError when
        that does not single one out."""
        found = self.reports.get(instance_id, [])
        if len(found) > 1 and model:
            mine = [r for r in found if model.replace("/", "__") in r.path.parts]
            found = mine or found
        if len(found) > 1:
            raise ValueError(
                f"{len(found)} report.json files for {instance_id} ({found[0].path}, "
                f"{found[1].path}, ...); pass only the run's logs dir"
            )
        return found[0] if found else None


def collect(paths: list[str], *, want_predictions: bool, want_trajectories: bool) -> Sources:
    """Every prediction, report and trajectory the SOURCES name; unreadable ones become problems."""
    out = Sources()
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            n = len(out.problems)
            found = 0
            for rel in walk_files(p):
                name = rel.rsplit("/", 1)[-1]
                if name == "report.json":
                    found += _add_report(out, p, rel)
                elif want_trajectories and name.endswith(".traj.json"):
                    found += _add_trajectory(out, p, rel)
            if not found and len(out.problems) == n:
                what = "report.json or *.traj.json" if want_trajectories else "report.json"
                out.problems.append(f"{p}: no {what} below it")
        elif p.is_file():
            p = p.resolve()  # the user named this file: a symlink here is theirs to follow
            root, name = p.parent, p.name
            if want_trajectories and name.endswith(".traj.json"):
                _add_trajectory(out, root, name)
            elif name == "report.json":
                _add_report(out, root, name)
            elif want_predictions:
                _add_predictions(out, root, name)
            else:
                out.problems.append(f"{p}: neither a *.traj.json trajectory nor a report.json")
        else:
            out.problems.append(f"{p}: does not exist")
    return out


def _read(out: Sources, root: Path, rel: str, limit: int) -> bytes | None:
    try:
        data = read_bytes(root, rel, limit)
    except Unsafe as exc:
        out.problems.append(str(exc))
        return None
    if data is None:
        out.problems.append(f"{root / rel}: does not exist")
    return data


def _parse(out: Sources, raw: bytes, where: Path) -> Any:
    try:
        return parse_json(raw, where)  # depth-limited, strings made valid
    except Unsafe as exc:
        out.problems.append(str(exc))
        return None


def _add_report(out: Sources, root: Path, rel: str) -> int:
    raw = _read(out, root, rel, MAX_REPORT)
    data = None if raw is None else _parse(out, raw, root / rel)
    if raw is None or data is None:
        return 0
    path = root / rel
    if not isinstance(data, dict) or not data or not all(isinstance(v, dict) for v in data.values()):
        out.problems.append(f"{path}: not a SWE-bench report ({{instance_id: {{resolved, tests_status}}}})")
        return 0
    evidence = {"report.json": raw}
    parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
    for log in REPORT_LOGS:
        try:
            data_log = read_bytes(root, f"{parent}/{log}" if parent else log, MAX_LOG)
        except Unsafe:
            data_log = None  # evidence only: a hostile or huge log is left behind
        if data_log is not None:
            evidence[log] = data_log
    for iid, entry in data.items():
        out.reports.setdefault(str(iid), []).append(Report(str(iid), entry, path, evidence))
    return 1


def _add_trajectory(out: Sources, root: Path, rel: str) -> int:
    raw = _read(out, root, rel, MAX_TRAJECTORY)
    data = None if raw is None else _parse(out, raw, root / rel)
    if raw is None or data is None:
        return 0
    fmt = data.get("trajectory_format") if isinstance(data, dict) else None
    if not isinstance(fmt, str) or not fmt.startswith("mini-swe-agent"):
        out.problems.append(f"{root / rel}: trajectory_format: {fmt!r} is not a mini-swe-agent trajectory")
        return 0
    out.trajectories.append(MsaTrajectory(root / rel, raw, data))
    return 1


def _add_predictions(out: Sources, root: Path, name: str) -> None:
    path = root / name
    raw = _read(out, root, name, MAX_PREDICTIONS)
    if raw is None:
        return
    try:
        data: Any = parse_json(raw, path)
    except Unsafe as exc:
        lines = [(n, line) for n, line in enumerate(raw.split(b"\n"), 1) if line.strip()]
        if len(lines) < 2:  # not JSON lines either: one reason for the file
            out.problems.append(str(exc))
            return
        items = []
        for n, line in lines:
            try:
                items.append((f"{path}:{n}", parse_json(line, f"{path}:{n}", position=False)))
            except Unsafe as e:
                out.problems.append(str(e))
    else:
        try:
            items = _prediction_items(data, path)
        except ValueError as exc:
            out.problems.append(str(exc))
            return
    for where, item in items:
        if not isinstance(item, dict):
            out.problems.append(f"{where}: not a prediction object")
            continue
        iid, model, patch = item.get("instance_id"), item.get("model_name_or_path"), item.get("model_patch")
        if not isinstance(iid, str) or not iid:
            out.problems.append(f"{where}: instance_id: missing")
        elif not isinstance(model, str) or not model:
            out.problems.append(f"{where}: model_name_or_path: missing (instance {iid})")
        elif patch is not None and not isinstance(patch, str):
            out.problems.append(f"{where}: model_patch: not a string (instance {iid})")
        else:
            out.predictions.append(Prediction(iid, model, patch, where, path))


def _prediction_items(data: Any, path: Path) -> list[tuple[str, Any]]:
    if isinstance(data, list):
        return [(f"{path}[{i}]", item) for i, item in enumerate(data)]
    if isinstance(data, dict) and "instance_id" in data:
        return [(str(path), data)]
    if isinstance(data, dict):  # mini-swe-agent's preds.json
        return [(f"{path}[{k!r}]", v) for k, v in data.items()]
    raise ValueError(
        f"{path}: not SWE-bench predictions (a JSON list, JSON lines or {{instance_id: prediction}})"
    )


def sibling_trajectory(pred: Prediction) -> MsaTrajectory | None:
    """mini-swe-agent's <output>/<instance_id>/<instance_id>.traj.json beside its preds.json."""
    iid = pred.instance_id
    if "/" in iid or iid in (".", "..") or "\0" in iid:
        return None
    rel = f"{iid}/{iid}.traj.json"
    try:
        raw = read_bytes(pred.path.parent, rel, MAX_TRAJECTORY)
        data = parse_json(raw, pred.path.parent / rel) if raw is not None else None
    except Unsafe:
        return None
    if not isinstance(data, dict) or not str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return None
    return MsaTrajectory(pred.path.parent / rel, raw, data)
