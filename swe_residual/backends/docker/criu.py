"""CRIU checkpoints through Docker (`docker checkpoint`), and the probe that decides whether an
engine can take them.

Checkpointing needs a daemon started with --experimental, criu on the engine's host and a kernel
CRIU accepts; none of that can be assumed (on this project's own machines CRIU fails its vDSO
check). So each engine is asked once, with a probe container: checkpoint it, start a second
container of the same image from that checkpoint, run a command in it. The answer (and why) is
cached per engine - its id, version and kernel - on disk, and machine states fall back to a
portable snapshot (commit-restart) when it is negative. `SWE_RESIDUAL_SNAPSHOT=commit-restart`
skips CRIU on purpose; `=criu` insists on it (an engine without it is then an error).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from swe_residual.backends.docker.engine import ENGINE_ERRORS, Engine, one_line
from swe_residual.errors import HarnessError, InputError

METHOD_ENV = "SWE_RESIDUAL_SNAPSHOT"
_memo: dict[str, CriuProbe] = {}
_lock = threading.Lock()


@dataclass
class CriuProbe:
    available: bool
    reason: str  # one line: why not, or what worked
    engine: str  # the engine key the answer belongs to
    checked_at: float
    cached: bool = False  # answered from an earlier probe


def engine_key(engine: Engine) -> str:
    try:
        info = engine.api.info()
    except ENGINE_ERRORS as exc:
        raise HarnessError(f"Docker: cannot read the engine's info: {one_line(exc)}") from None
    text = "\0".join(
        str(info.get(k, "")) for k in ("ID", "ServerVersion", "KernelVersion", "ExperimentalBuild")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def checkpoint(engine: Engine, cid: str, directory: Path, name: str, *, exit: bool = True) -> None:
    """`docker checkpoint create --checkpoint-dir directory cid name` (the container stops when exit)."""
    api = engine.api
    try:
        res = api._post_json(
            api._url("/containers/{0}/checkpoints", cid),
            data={"CheckpointID": name, "CheckpointDir": str(directory), "Exit": exit},
        )
        api._raise_for_status(res)
    except ENGINE_ERRORS as exc:
        raise HarnessError(f"Docker: checkpoint of container {cid[:12]} failed: {_reason(exc)}") from None


def start_from_checkpoint(engine: Engine, cid: str, directory: Path, name: str) -> None:
    api = engine.api
    try:
        res = api._post(
            api._url("/containers/{0}/start", cid),
            params={"checkpoint": name, "checkpoint-dir": str(directory)},
        )
        api._raise_for_status(res)
    except ENGINE_ERRORS as exc:
        raise HarnessError(
            f"Docker: restoring container {cid[:12]} from checkpoint {name} failed: {_reason(exc)}"
        ) from None


def _reason(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return one_line(explanation or exc)


def _cache_file(engine: Engine, key: str) -> Path:
    return engine.cache_dir / "criu" / f"{key}.json"


def probe(engine: Engine, image: str) -> CriuProbe:
    """Can this engine checkpoint and restore a container of `image`? Asked once per engine."""
    key = engine_key(engine)
    with _lock:
        if key in _memo:
            return CriuProbe(**{**asdict(_memo[key]), "cached": True})
        path = _cache_file(engine, key)
        if path.is_file():
            with contextlib.suppress(ValueError, TypeError, OSError):
                found = CriuProbe(**{**json.loads(path.read_text(encoding="utf-8")), "cached": True})
                _memo[key] = found
                return found
        with engine.file_lock(f"criu-probe-{key}"):
            result = _probe(engine, image, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(result)), encoding="utf-8")
        tmp.replace(path)
        _memo[key] = result
        return result


def _probe(engine: Engine, image: str, key: str) -> CriuProbe:
    now = time.time()
    workdir = Path(tempfile.mkdtemp(prefix="criu-probe-", dir=engine.cache_dir))
    made: list[str] = []
    try:
        first = engine.create(
            image, case="criu-probe", what="the CRIU probe", working_dir="/", network_mode="none"
        )
        made.append(first)
        engine.start(first, "the CRIU probe")
        rc, _, _ = engine.exec(
            first, ["/bin/sh", "-c", "echo probe > /tmp/.swe-residual-criu-probe"], timeout=30, workdir="/"
        )
        if rc != 0:
            return CriuProbe(False, f"the probe container does not run commands (exit {rc})", key, now)
        try:
            checkpoint(engine, first, workdir, "probe")
        except HarnessError as exc:
            return CriuProbe(
                False, f"docker checkpoint is unavailable: {str(exc).split(': ', 2)[-1]}", key, now
            )
        second = engine.create(
            image, case="criu-probe", what="the CRIU probe", working_dir="/", network_mode="none"
        )
        made.append(second)
        try:
            start_from_checkpoint(engine, second, workdir, "probe")
        except HarnessError as exc:
            return CriuProbe(False, f"restoring a checkpoint failed: {str(exc).split(': ', 2)[-1]}", key, now)
        rc, out, _ = engine.exec(
            second, ["/bin/sh", "-c", "cat /tmp/.swe-residual-criu-probe"], timeout=30, workdir="/"
        )
        if rc != 0 or b"probe" not in out:
            return CriuProbe(
                False, f"a container restored from a checkpoint does not run commands (exit {rc})", key, now
            )
        return CriuProbe(True, "checkpoint and restore of a probe container worked", key, now)
    except HarnessError as exc:
        return CriuProbe(False, f"the probe itself failed: {exc}", key, now)
    finally:
        for cid in made:
            with contextlib.suppress(HarnessError):
                engine.remove(cid)
        shutil.rmtree(workdir, ignore_errors=True)


def choose_method(engine: Engine, image: str) -> tuple[str, CriuProbe | None]:
    """criu or commit-restart for snapshots on this engine (and the probe's answer when asked)."""
    wanted = os.environ.get(METHOD_ENV, "auto").strip() or "auto"
    if wanted not in ("auto", "criu", "commit-restart"):
        raise InputError(f"${METHOD_ENV}: {wanted!r} (choose auto, criu or commit-restart)")
    if wanted == "commit-restart":
        return "commit-restart", None
    found = probe(engine, image)
    if found.available:
        return "criu", found
    if wanted == "criu":
        raise HarnessError(f"${METHOD_ENV}=criu but this engine cannot checkpoint: {found.reason}")
    return "commit-restart", found
