"""Machine-track states on Docker: replay, snapshot and restore of whole containers.

A snapshot is built once per engine and state (cached like the residual images): the state's
interactions are replayed into two fresh containers of the task's clean image at once; the
first becomes the snapshot, the second only proves the replay deterministic (same content digest
of every changed path outside volatile ones, same live processes). The snapshot is a CRIU
checkpoint where the engine's probe says it works (criu.py), else `commit-restart`: the committed
filesystem plus the processes started during the replay, read from /proc inside the container.

Every continuation restores its own container: from the checkpoint, or by starting the
committed image and starting each recorded process again - same command line, cwd, environment,
user and output files - waiting until it runs and listens where it did, rewriting pid files that
named its old pid. The state's declared live processes are then checked to run and answer on
their ports. Anything missing is a RestoreError with a one-line reason.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swe_residual.backends.docker import criu
from swe_residual.backends.docker.engine import IMG_KEY, IMG_KIND, IMG_RUN, IMG_TASK, Engine
from swe_residual.backends.docker.environment import ChunkReader, DockerEnvironment
from swe_residual.backends.docker.images import ImageInfo, TaskImages, slug
from swe_residual.backends.machine.replay import replay
from swe_residual.backends.machine.snapshot import (
    DEFAULT_VOLATILE,
    PidFile,
    ProcessSpec,
    ReplaySummary,
    Snapshot,
    Stage,
    declared_up,
    differences,
    is_volatile,
    parse_capture,
    parse_digests,
    process_differences,
    started_processes,
    tree_digest,
)
from swe_residual.backends.workspace import script
from swe_residual.errors import HarnessError, RestoreError
from swe_residual.states import LoadedState
from swe_residual.tasks import Task

SNAPSHOT_VERSION = "machine-v3"
RESTORE_TIMEOUT_S = 30.0  # per process: running (and listening) again
LIVE_CHECK_TIMEOUT_S = 10.0
SETTLE_TIMEOUT_S = 30.0  # after a replay: its background processes started and listening
SETTLE_POLL_S = 0.2
MAX_DIGEST_PATHS = 200_000
MAX_DELTA_BYTES = 512 << 20
DIGEST_LIST = "/tmp/.swe-residual-digest-list"


@functools.cache
def _code_version() -> str:
    """What a snapshot depends on besides its inputs: the code that captures and replays (a change
    to it builds snapshots again)."""
    from swe_residual.backends.machine import replay as replay_module
    from swe_residual.backends.machine import snapshot as machine
    from swe_residual.backends.machine import terminal

    h = hashlib.sha256(SNAPSHOT_VERSION.encode())
    for name in ("proc_capture.sh", "fs_digest.sh", "exec_machine.sh"):
        h.update(script(name).encode())
    for mod in (machine, replay_module, terminal):
        h.update(Path(mod.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


class MachineEnvironment(DockerEnvironment):
    """A whole-machine container: processes a command leaves running keep running, commands run
    in the task's working directory, and the request sits in /run/task as a plain file."""

    wrapper = "exec_machine.sh"

    def __init__(self, engine, container_id: str, image: ImageInfo, what: str, workdir: str):
        super().__init__(engine, container_id, image, what, None)
        self.workdir = workdir
        self.start_patch = None
        self.report: dict | None = None

    @property
    def app_dir(self) -> str:
        return self.workdir

    def changes(self) -> list[dict]:
        """Paths changed against the image the container started from (the engine's own list)."""
        return self.engine.diff(self.container_id)

    def root_exec(self, argv: list[str], timeout: float, user: str = "0") -> tuple[int | None, bytes]:
        self.ready()
        rc, out, _ = self.engine.exec(
            self.container_id, argv, timeout=timeout, user=user, workdir="/", stdout_only=True
        )
        return rc, out


class MachineStates:
    """Snapshots (built once per engine) and restored instances of one Docker backend's machine states."""

    def __init__(self, engine: Engine, images: TaskImages, limits: Callable[[Task, str], dict[str, Any]]):
        """limits: the backend's container limits for (task, role), shared with its other containers."""
        self.engine = engine
        self.images = images
        self.limits = limits
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self._key_locks: dict[str, threading.Lock] = {}

    # -- environments ---------------------------------------------------------------------------------
    def workdir(self, task: Task, image: ImageInfo) -> str:
        if task.config.environment.workdir:
            return task.config.environment.workdir
        attrs = self.engine.image_attrs(image.id) or {}
        return ((attrs.get("Config") or {}).get("WorkingDir")) or "/"

    def new_environment(
        self, task: Task, image: ImageInfo, what: str, *, role: str = "agent"
    ) -> MachineEnvironment:
        limits = self.limits(task, role)
        workdir = self.workdir(task, image)
        cid = self.engine.create(
            image.id, case=what, what=f"task {task.id} ({what})", working_dir=workdir, **limits
        )
        return MachineEnvironment(self.engine, cid, image, f"task {task.id} ({what})", workdir)

    def _give_request(self, env: MachineEnvironment, task: Task) -> None:
        """The request as /run/task/instruction.md (read-only file, outside the workdir)."""
        data = task.instruction.encode("utf-8")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, payload, mode in (("run/task", None, 0o755), ("run/task/instruction.md", data, 0o444)):
                ti = tarfile.TarInfo(name)
                ti.mode, ti.uid, ti.gid, ti.mtime = mode, 0, 0, int(time.time())
                if payload is None:
                    ti.type = tarfile.DIRTYPE
                    tar.addfile(ti)
                else:
                    ti.size = len(payload)
                    tar.addfile(ti, io.BytesIO(payload))
        self.engine.put(env.container_id, "/", buf.getvalue())

    def fresh(self, task: Task) -> MachineEnvironment:
        """The clean machine: a running container of the task's image."""
        env = self.new_environment(task, self.images.clean(task), f"{task.id}/clean")
        try:
            env.ready()
            self._give_request(env, task)
            return env
        except BaseException:
            env.close()
            raise

    # -- snapshots ------------------------------------------------------------------------------------
    def snapshot(self, task: Task, state: LoadedState) -> Snapshot:
        clean = self.images.clean(task)
        method, found = criu.choose_method(self.engine, clean.id)
        volatile = sorted(set(DEFAULT_VOLATILE) | set(state.artifact.volatile_paths))
        scripts = _code_version()
        key = hashlib.sha256(
            "\0".join(
                [SNAPSHOT_VERSION, clean.id, state.artifact.sha256, method, scripts, *volatile]
            ).encode()
        ).hexdigest()
        with self._lock:
            if key in self._snapshots:
                return self._snapshots[key]
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._snapshots:
                return self._snapshots[key]
            tag = f"swe-residual/machine-{slug(task.id)}:{key[:16]}"
            with self.engine.file_lock(tag):
                snap = self._cached(tag, key)
                if snap is None:
                    snap = self._build(task, state, clean, tag, key, method, volatile)
                    snap.criu_probe = found.reason if found is not None else f"skipped (${criu.METHOD_ENV})"
                    self._store(snap)
            with self._lock:
                self._snapshots[key] = snap
            return snap

    def _meta_path(self, image_id: str) -> Path:
        return self.engine.cache_dir / "snapshots" / (image_id.split(":")[-1] + ".json")

    def _cached(self, tag: str, key: str) -> Snapshot | None:
        attrs = self.engine.image_attrs(tag)
        if attrs is None:
            return None
        path = self._meta_path(attrs["Id"])
        try:
            snap = Snapshot.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if snap.key != key or snap.image != attrs["Id"]:
            return None
        if snap.base_image and (
            self.engine.image_attrs(snap.base_image) is None
            or not all(Path(d).is_file() for d in [*(st.delta for st in snap.stages), snap.final_delta] if d)
        ):
            return None  # a staged snapshot whose pieces are gone: built again
        return snap

    def _store(self, snap: Snapshot) -> None:
        path = self._meta_path(snap.image)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(snap.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(path)

    def _replay_into(
        self, task: Task, clean: ImageInfo, state: LoadedState, what: str, *, stages: _Stages | None = None
    ) -> tuple[MachineEnvironment, ReplaySummary, set[int]]:
        """A fresh container with the state's interactions replayed: (env, replay summary, pids
        before). With `stages`, the points where processes started are recorded on the way."""
        env = self.new_environment(task, clean, what)
        try:
            env.ready()
            procs, _ = parse_capture(self._capture_text(env))
            baseline = set(procs)
            after = (lambda n: stages.after(n, env, baseline)) if stages is not None else None
            summary = replay(env, state.interactions, label=f"state {state.id}", after=after)
            return env, summary, baseline
        except BaseException:
            env.close()
            raise

    def _capture_text(self, env: MachineEnvironment) -> str:
        rc, out = env.root_exec(["bash", "-c", script("proc_capture.sh")], timeout=120)
        if rc != 0:
            raise HarnessError(f"{env.what}: reading its processes failed (exit {rc})")
        return out.decode("utf-8", "replace")

    def settle(
        self, state: LoadedState, replays: list[tuple[MachineEnvironment, set[int]]]
    ) -> list[list[ProcessSpec]]:
        """The processes each replay started, once they have settled: every live process the state
        declares runs and listens on its ports, and the replays agree on what runs. A process
        started in the background takes a moment to start, fork or bind its port; a look taken
        before would see it in one replay only. Asked again until both hold, for at most
        SETTLE_TIMEOUT_S (then what differs is reported as it is)."""
        wants = [(w.match, w.ports) for w in state.artifact.live_processes]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            got, up = [], True
            for env, baseline in replays:
                procs, listen = parse_capture(self._capture_text(env))
                got.append(started_processes(procs, listen, baseline))
                up = up and declared_up(procs, listen, wants)
            if (up and not process_differences(got[0], got[-1])) or time.monotonic() >= deadline:
                return got
            time.sleep(SETTLE_POLL_S)

    def digest(self, env: MachineEnvironment, volatile: list[str]) -> dict[str, str]:
        """{path: "type mode uid gid content-digest"} of every path the container changed."""
        entries: dict[str, str] = {}
        listed: list[str] = []
        for change in env.changes()[:MAX_DIGEST_PATHS]:
            path = str(change.get("Path") or "")
            if not path.startswith("/") or is_volatile(path, volatile):
                continue
            if change.get("Kind") == 2:
                entries[path] = "deleted - - - -"
            else:
                listed.append(path)
        if listed:
            data = b"\0".join(p.encode("utf-8", "surrogateescape") for p in listed) + b"\0"
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                ti = tarfile.TarInfo(DIGEST_LIST.lstrip("/"))
                ti.size, ti.mode = len(data), 0o600
                tar.addfile(ti, io.BytesIO(data))
            self.engine.put(env.container_id, "/", buf.getvalue())
            try:
                rc, out = env.root_exec(
                    ["bash", "-c", script("fs_digest.sh"), "fs_digest", DIGEST_LIST], timeout=600
                )
            finally:
                env.root_exec(["rm", "-f", DIGEST_LIST], timeout=30)
            if rc != 0:
                raise HarnessError(f"{env.what}: digesting its changed files failed (exit {rc})")
            entries.update(parse_digests(out))
        return entries

    def _pid_files(self, env: MachineEnvironment, specs: list[ProcessSpec]) -> list[PidFile]:
        """Changed *.pid files holding a recorded process's pid (rewritten on restore)."""
        by_pid = {str(s.pid): i for i, s in enumerate(specs)}
        found: list[PidFile] = []
        for path in sorted(str(c.get("Path") or "") for c in env.changes() if c.get("Kind") != 2):
            if not path.endswith(".pid") or len(found) >= 64:
                continue
            data = env.read_file(path, limit=64)
            text = data.decode("ascii", "replace").strip() if data else ""
            if text in by_pid:
                found.append(PidFile(path=path, process=by_pid[text]))
        return found

    def _build(
        self,
        task: Task,
        state: LoadedState,
        clean: ImageInfo,
        tag: str,
        key: str,
        method: str,
        volatile: list[str],
    ) -> Snapshot:
        started = time.monotonic()
        repo, tg = tag.rsplit(":", 1)
        labels = {
            IMG_KIND: "machine",
            IMG_KEY: key,
            IMG_TASK: task.id,
            IMG_RUN: self.engine.run_id,
            "swe-residual.image.state": state.id,
        }
        conf = self.images.commit_conf(clean, labels)
        stages = (
            _Stages(self, volatile, self.engine.cache_dir / "snapshots" / key[:24], repo, f"{tg}-base", conf)
            if method == "commit-restart"
            else None
        )
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="swe-residual-replay") as pool:
            futures = [
                pool.submit(self._replay_into, task, clean, state, f"snapshot:{state.id}", stages=stages),
                pool.submit(self._replay_into, task, clean, state, f"replay-check:{state.id}"),
            ]
            results = []
            for f in futures:
                try:
                    results.append(f.result())
                except BaseException as exc:  # noqa: BLE001 - decided below, after both finished
                    results.append(exc)
        replay_s = time.monotonic() - started
        envs = [r[0] for r in results if isinstance(r, tuple)]
        try:
            if not isinstance(results[0], tuple):
                raise results[0]
            env, summary, baseline = results[0]
            other = results[1] if isinstance(results[1], tuple) else None
            settled = self.settle(state, [(env, baseline)] + ([(other[0], other[2])] if other else []))
            specs = settled[0]
            entries = self.digest(env, volatile)
            pid_files = self._pid_files(env, specs)
            staged = stages.finish(env, entries, specs) if stages is not None else {}
            checkpoint_info = None
            if method == "criu":
                directory = self.engine.cache_dir / "checkpoints" / key[:24]
                directory.mkdir(parents=True, exist_ok=True)
                criu.checkpoint(self.engine, env.container_id, directory, "state")
                checkpoint_info = {"dir": str(directory), "name": "state"}
            image_id = self.engine.commit(
                env.container_id,
                repository=repo,
                tag=tg,
                conf=conf,
                message=f"swe-residual: machine state {state.id} ({method})",
            )
            snapshot_s = time.monotonic() - started
            if other is not None:
                diffs = differences(entries, self.digest(other[0], volatile)) + process_differences(
                    specs, settled[1]
                )
            else:
                diffs = [f"the second replay failed: {results[1]}"]
        finally:
            for e in envs:
                e.close()
        self.images.built.append(tag)
        return Snapshot(
            key=key,
            state=state.id,
            task=task.id,
            method=method,
            image=image_id,
            tag=tag,
            processes=specs,
            pid_files=pid_files,
            digest=tree_digest(entries),
            changed_paths=len(entries),
            deterministic=not diffs,
            differences=diffs,
            replay=summary,
            criu=checkpoint_info,
            snapshot_s=round(snapshot_s, 3),
            replay_s=round(replay_s, 3),
            **staged,
        )

    # -- restore --------------------------------------------------------------------------------------
    def restore(self, task: Task, state: LoadedState) -> MachineEnvironment:
        """An independent running instance of the state, its processes checked (RestoreError if not)."""
        snap = self.snapshot(task, state)
        started = time.monotonic()
        base = snap.base_image if snap.stages and snap.base_image else None
        image = ImageInfo(ref=base, id=base) if base else ImageInfo(ref=snap.tag, id=snap.image)
        env = self.new_environment(task, image, f"{task.id}/{state.id}")
        try:
            if snap.method == "criu" and snap.criu is not None:
                criu.start_from_checkpoint(
                    self.engine, env.container_id, Path(snap.criu["dir"]), snap.criu["name"]
                )
                env.started_elsewhere()
                pids = [s.pid for s in snap.processes]
                for spec in snap.processes:
                    self._check_up(env, state, spec, spec.pid)
            elif base:
                env.ready()
                pids = [0] * len(snap.processes)
                for j, stage in enumerate(snap.stages):
                    if j:
                        self._apply(env, stage.delta, stage.deletions)
                    for i in stage.processes:
                        pids[i] = self._start(env, state, snap.processes[i])
                self._apply(env, snap.final_delta, snap.final_deletions)
            else:
                env.ready()
                pids = [self._start(env, state, spec) for spec in snap.processes]
            self._rewrite_pid_files(env, snap, pids)
            self.check_live(env, state)
            self._give_request(env, task)
            env.report = {
                "state": state.id,
                "method": snap.method,
                "image": snap.tag,
                "snapshot_s": snap.snapshot_s,
                "restore_s": round(time.monotonic() - started, 3),
                "deterministic": snap.deterministic,
                "stages": len(snap.stages) if base else 0,
                "processes": [
                    {"argv": s.argv[:8], "pid": p, "ports": [x.port for x in s.ports]}
                    for s, p in zip(snap.processes, pids)
                ],
            }
            return env
        except BaseException:
            env.close()
            raise

    def _apply(self, env: MachineEnvironment, delta: str | None, deletions: list[str]) -> None:
        """What changed on the filesystem after a stage: deletions, then the changed files."""
        for i in range(0, len(deletions), 256):
            env.root_exec(["rm", "-rf", "--", *deletions[i : i + 256]], timeout=120)
        if delta:
            try:
                data = Path(delta).read_bytes()
            except OSError as exc:
                raise HarnessError(
                    f"{env.what}: the snapshot's file changes {delta} are gone ({exc.strerror}); "
                    "remove its image to rebuild it"
                ) from None
            self.engine.put(env.container_id, "/", data)

    def _start(self, env: MachineEnvironment, state: LoadedState, spec: ProcessSpec) -> int:
        envs = [f"{k}={v}" for k, v in spec.env.items()]
        argv = [
            "bash",
            "-c",
            script("proc_launch.sh"),
            "proc_launch",
            spec.cwd,
            spec.stdout or "",
            spec.stderr or "",
            str(len(envs)),
            *envs,
            *spec.argv,
        ]
        rc, out = env.root_exec(argv, timeout=60, user=f"{spec.uid}:{spec.gid}")
        text = out.decode("utf-8", "replace").strip()
        if rc != 0 or not text.splitlines() or not text.splitlines()[-1].isdigit():
            raise RestoreError(
                f"state {state.id}: after restore, process `{spec.label}` could not be started again "
                f"(exit {rc}: {text[-160:] or 'no output'})"
            )
        pid = int(text.splitlines()[-1])
        self._check_up(env, state, spec, pid)
        return pid

    def _check_up(
        self,
        env: MachineEnvironment,
        state: LoadedState,
        spec: ProcessSpec,
        pid: int,
        timeout: float = RESTORE_TIMEOUT_S,
    ) -> None:
        line = self._wait(env, pid, [f"{p.address}:{p.port}" for p in spec.ports], timeout)
        if line != "ok":
            raise RestoreError(f"state {state.id}: after restore, process `{spec.label}` {line}")

    def _wait(self, env: MachineEnvironment, pid: int, ports: list[str], timeout: float) -> str:
        rc, out = env.root_exec(
            ["bash", "-c", script("proc_wait.sh"), "proc_wait", str(int(timeout)), str(pid), *ports],
            timeout=timeout + 30,
        )
        lines = out.decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:200] if lines else f"could not be checked (exit {rc})"

    def _rewrite_pid_files(self, env: MachineEnvironment, snap: Snapshot, pids: list[int]) -> None:
        for pf in snap.pid_files:
            if pf.process < len(pids):
                env.root_exec(
                    ["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "pidfile", str(pids[pf.process]), pf.path],
                    timeout=30,
                )

    def check_live(self, env: MachineEnvironment, state: LoadedState) -> None:
        """Every live process the state declares runs and answers on its ports (RestoreError if not)."""
        if not state.artifact.live_processes:
            return
        procs, _ = parse_capture(self._capture_text(env))
        for want in state.artifact.live_processes:
            hits = [
                p
                for p in procs.values()
                if p.state not in ("Z", "X") and p.pid != 1 and want.match in " ".join(p.argv)
            ]
            ports = ", ".join(map(str, want.ports)) or "none"
            if not hits:
                raise RestoreError(
                    f"state {state.id}: after restore, the expected live process {want.match!r} "
                    f"(ports {ports}) is not running"
                )
            root = min(hits, key=lambda p: (p.start, p.pid))
            line = self._wait(env, root.pid, [f"127.0.0.1:{p}" for p in want.ports], LIVE_CHECK_TIMEOUT_S)
            if line != "ok":
                raise RestoreError(
                    f"state {state.id}: after restore, the expected live process {want.match!r} {line}"
                )


class _Stages:
    """Stage points of a commit-restart snapshot's replay (see machine.Stage): after every
    interaction, the processes started so far; where new ones appear, the filesystem then - the
    first one as an image, later ones as the files changed since the previous stage."""

    def __init__(
        self,
        states: MachineStates,
        volatile: list[str],
        directory: Path,
        repo: str,
        base_tag: str,
        conf: dict,
    ):
        self.states, self.volatile, self.dir = states, volatile, directory
        self.repo, self.base_tag, self.conf = repo, base_tag, conf
        self.points: list[tuple[int, set[int], dict[str, str], str | None, list[str]]] = []
        self.known: set[int] = set()
        self.base_image: str | None = None

    def after(self, n: int, env: MachineEnvironment, baseline: set[int]) -> None:
        procs, listen = parse_capture(self.states._capture_text(env))
        roots = {s.pid for s in started_processes(procs, listen, baseline)}
        new = roots - self.known
        self.known |= roots
        if not new:
            return
        entries = self.states.digest(env, self.volatile)
        if not self.points:
            self.base_image = self.states.engine.commit(
                env.container_id,
                repository=self.repo,
                tag=self.base_tag,
                conf=self.conf,
                message="swe-residual: first stage",
            )
            self.points.append((n, new, entries, None, []))
        else:
            delta, dels = self.delta(env, self.points[-1][2], entries, f"stage-{n}")
            self.points.append((n, new, entries, delta, dels))

    def delta(
        self, env: MachineEnvironment, before: dict[str, str], after: dict[str, str], name: str
    ) -> tuple[str | None, list[str]]:
        """A tar of the paths whose state differs between two digests (read from the live
        container), and the paths deleted in between."""
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        deletions = [p for p in changed if (after.get(p) or "deleted").split()[0] in ("deleted", "x")]
        copies = [p for p in changed if p not in set(deletions)]
        if not copies:
            return None, deletions
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{name}.tar"
        size = 0
        with tarfile.open(path, "w") as out:
            for p in copies:
                kind, mode, uid, gid = (after[p].split() + ["-"] * 4)[:4]
                if kind == "d":
                    ti = tarfile.TarInfo(p.lstrip("/"))
                    ti.type = tarfile.DIRTYPE
                    ti.mode = int(mode, 8) if mode.isdigit() else 0o755
                    ti.uid, ti.gid = (int(uid) if uid.isdigit() else 0), (int(gid) if gid.isdigit() else 0)
                    out.addfile(ti)
                    continue
                stream = self.states.engine.archive(env.container_id, p)
                if stream is None:
                    continue
                with stream, tarfile.open(fileobj=ChunkReader(stream), mode="r|") as tar:
                    member = tar.next()
                    if member is None:
                        continue
                    size += member.size
                    if size > MAX_DELTA_BYTES:
                        raise HarnessError(
                            f"{env.what}: more than {MAX_DELTA_BYTES >> 20} MiB changed after a "
                            "process started; too much for a staged restore"
                        )
                    data = tar.extractfile(member) if member.isreg() else None
                    member.name = p.lstrip("/")
                    out.addfile(member, data)
        return str(path), deletions

    def finish(self, env: MachineEnvironment, entries: dict[str, str], specs: list[ProcessSpec]) -> dict:
        """Snapshot fields for a staged restore; {} when every process could start on the final
        filesystem (nothing changed after any of them started)."""
        if not self.points:
            return {}
        final_delta, final_dels = self.delta(env, self.points[-1][2], entries, "final")
        needed = final_delta or final_dels or any(d or dl for _, _, _, d, dl in self.points[1:])
        if not needed:
            self.states.engine.remove_image(self.base_image)
            return {}
        index = {s.pid: i for i, s in enumerate(specs)}
        stages = [
            Stage(
                interaction=n,
                processes=sorted(index[p] for p in pids if p in index),
                delta=delta,
                deletions=dels,
            )
            for n, pids, _, delta, dels in self.points
        ]
        return {
            "base_image": self.base_image,
            "stages": stages,
            "final_delta": final_delta,
            "final_deletions": final_dels,
        }


__all__ = ["MachineEnvironment", "MachineStates"]
