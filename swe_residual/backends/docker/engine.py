"""The connection to one Docker engine: clients, labels, container bookkeeping, exec, sweeping.

Every container the harness creates carries labels naming the run, host and process that made
it; a backend's start removes containers of this host's runs whose process
is gone, and close() removes its own. Commands run through `exec` with a host-side deadline on
top of the in-container timeout, so a hung engine call cannot hang a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import queue
import re
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from swe_residual.backends.owners import owner_alive, owner_name, pid_start, sweep_dirs
from swe_residual.backends.safecopy import disk_usage, remove_tree
from swe_residual.errors import HarnessError, InputError

LABEL_RUN = "swe-residual.run"
LABEL_PID = "swe-residual.pid"
LABEL_HOST = "swe-residual.host"
LABEL_CASE = "swe-residual.case"
LABEL_PIDSTART = "swe-residual.pidstart"
REAPERS = 4  # threads removing containers in the background
CONTAINER_LABELS = (LABEL_RUN, LABEL_PID, LABEL_HOST, LABEL_CASE, LABEL_PIDSTART)
# Image labels live in their own namespace: containers inherit image labels, and a run's labels
# must only ever name the process that created the container.
IMG_KIND = "swe-residual.image.kind"  # clean | residual | verifier
IMG_KEY = "swe-residual.image.key"  # content hash the tag was derived from
IMG_TASK = "swe-residual.image.task"
IMG_RUN = "swe-residual.image.run"  # run that built it (informational)

# PID 1 of run containers: a shell that makes Harbor's log dirs, idles and reaps orphans.
KEEPALIVE = [
    "bash",
    "-c",
    "mkdir -p /logs/agent /logs/verifier /logs/artifacts 2>/dev/null; "
    "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done",
]
HOST_GRACE_S = 15.0  # host-side deadline beyond the in-container timeout
# What a call to the engine raises when the engine (not our code) fails.
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


def one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def endpoint(base_url: str | None = None) -> str:
    return base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def default_cache_dir() -> Path:
    """Where the harness keeps what it knows of an engine's images (probed facts, build logs,
    snapshots, locks, scratch): $SWE_RESIDUAL_DOCKER_CACHE, else <tmp>/swe-residual-docker."""
    return Path(
        os.environ.get("SWE_RESIDUAL_DOCKER_CACHE") or Path(tempfile.gettempdir()) / "swe-residual-docker"
    )


def client_for(base_url: str | None, timeout: int | None) -> docker.DockerClient:
    """A client of the engine at base_url (DOCKER_HOST and the default socket when None)."""
    if base_url:
        return docker.DockerClient(base_url=base_url, timeout=timeout)
    return docker.from_env(timeout=timeout)


def check_engine(timeout: float = 5.0, base_url: str | None = None) -> None:
    """InputError (a usage error) naming the endpoint when no engine answers; never starts one."""
    client = None
    try:
        client = client_for(base_url, max(1, int(timeout)))
        client.ping()
    except ENGINE_ERRORS as exc:
        raise InputError(
            f"--backend docker: no Docker engine answers at {endpoint(base_url)} ({one_line(exc)}); "
            "start one (as root: `swe-residual images bootstrap` starts dockerd) or point "
            "DOCKER_HOST at a running engine"
        ) from None
    finally:
        if client is not None:
            with contextlib.suppress(*ENGINE_ERRORS):
                client.close()


def tar_path(*items: tuple[Path, str]) -> bytes:
    """A tar of host files or directories (each under its arcname), owned by root and readable by
    every container user."""
    buf = io.BytesIO()

    def owner(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        ti.mode |= 0o444 | (0o111 if ti.isdir() or ti.mode & 0o100 else 0)
        return ti

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, arcname in items:
            tar.add(str(src), arcname=arcname, filter=owner)
    return buf.getvalue()


class FileLock:
    """An exclusive fcntl lock on a file in the cache dir (works across processes and threads)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


class Archive:
    """The chunks of a tar stream the engine sends. close() closes its connection even when the
    reader stopped early (a copy over its limit): an unread stream left open keeps the engine's
    lock on the container, and removing that container waits for it - forever, if a thread keeps
    the reader's exception (and so the stream) alive."""

    def __init__(self, chunks):
        self._chunks = chunks

    def __iter__(self):
        return self._chunks

    def close(self) -> None:
        frame = getattr(self._chunks, "gi_frame", None)  # the SDK's generator over its HTTP response
        response = frame.f_locals.get("response") if frame is not None else None
        self._chunks.close()
        if response is not None:
            response.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Engine:
    """One process's connection to one Docker engine on this host (DOCKER_HOST by default)."""

    def __init__(
        self,
        run_id: str | None = None,
        cache_dir: Path | None = None,
        work_root: Path | None = None,
        sweep: bool = True,
        base_url: str | None = None,
    ):
        check_engine(base_url=base_url)
        self.base_url = endpoint(base_url)
        self.client = client_for(base_url, 600)
        self.api = self.client.api
        api_url = str(self.api.base_url)
        if not (
            api_url.startswith("http+docker://")
            or re.match(r"^https?://(localhost|127\.0\.0\.1)(:|/|$)", api_url)
        ):
            raise InputError(
                f"--backend docker needs an engine on this host (it bind-mounts host directories); "
                f"{self.base_url} is {api_url}"
            )
        # exec_start and waits block for as long as a command runs: no socket timeout there; the
        # deadline is enforced by a watchdog thread instead.
        self._long_client = client_for(base_url, None)
        self.long_api = self._long_client.api
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.run_id = run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{self.pid}"
        self.pid_start = pid_start(self.pid) or ""
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._own_work = work_root is None
        # host-side scratch (inboxes); a dead process's one is swept like its containers
        self.work_root = Path(work_root or self.cache_dir / "work" / owner_name())
        self.work_root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._containers: set[str] = set()
        self._doomed: queue.Queue[str | None] = queue.Queue()
        self._reapers: list[threading.Thread] = []
        self._creating = 0  # create() calls under way (close() waits for them)
        self._created = threading.Condition(self._lock)
        self.closed = False
        self.storage_quota: bool | None = (
            None  # does the storage driver take --storage-opt size? (first use tells)
        )
        self._upper: dict[str, str | None] = {}  # container id -> its writable layer's dir on this host
        try:
            self.ncpu = float(self.api.info().get("NCPU") or os.cpu_count() or 1)
        except ENGINE_ERRORS:
            self.ncpu = float(os.cpu_count() or 1)
        self.swept: list[str] = self.sweep() if sweep else []

    # -- labels and sweeping --------------------------------------------------------------------
    def labels(self, case: str = "") -> dict[str, str]:
        return {
            LABEL_RUN: self.run_id,
            LABEL_PID: str(self.pid),
            LABEL_HOST: self.host,
            LABEL_CASE: case,
            LABEL_PIDSTART: self.pid_start,
        }

    def sweep(self) -> list[str]:
        """Remove containers of this host's runs whose process is gone (and their host scratch)."""
        removed: list[str] = []
        try:
            found = self.api.containers(all=True, filters={"label": [f"{LABEL_HOST}={self.host}"]})
        except ENGINE_ERRORS as exc:
            raise HarnessError(f"Docker: cannot list containers: {one_line(exc)}") from None
        for c in found:
            labels = c.get("Labels") or {}
            if not labels.get(LABEL_RUN) or owner_alive(labels.get(LABEL_PID), labels.get(LABEL_PIDSTART)):
                continue
            with contextlib.suppress(*ENGINE_ERRORS):
                self.api.remove_container(c["Id"], force=True, v=True)
                removed.append(c["Id"])
        sweep_dirs(self.cache_dir / "work")
        return removed

    # -- containers -----------------------------------------------------------------------------
    def create(
        self, image: str, *, case: str, what: str, working_dir: str = "/app", **host_config: Any
    ) -> str:
        """A stopped container of image with KEEPALIVE as PID 1, tracked for removal. A storage_opt
        quota is passed where the storage driver takes it (overlay2 only on xfs with pquota): the
        first refusal tells, and it is left out from then on (the backend measures instead). Once
        close() began, nothing is created: a thread still making an instance nobody will use (a
        standby) must not leave one behind it."""
        with self._lock:
            if self.closed:
                raise HarnessError(f"Docker: the run is ending: no container of {what} is made")
            self._creating += 1
        try:
            return self._create(image, case=case, what=what, working_dir=working_dir, **host_config)
        finally:
            with self._lock:
                self._creating -= 1
                self._created.notify_all()

    def _create(self, image: str, *, case: str, what: str, working_dir: str, **host_config: Any) -> str:
        if self.storage_quota is False:
            host_config.pop("storage_opt", None)
        try:
            try:
                cid = self.api.create_container(
                    image,
                    entrypoint=KEEPALIVE,
                    working_dir=working_dir,
                    labels=self.labels(case),
                    host_config=self.api.create_host_config(**host_config),
                )["Id"]
            except docker.errors.APIError:
                if "storage_opt" not in host_config:
                    raise
                # the driver takes no quota (overlay2 says "--storage-opt is supported only for overlay
                # over xfs with 'pquota'", others in their words): the same container without one
                host_config.pop("storage_opt")
                cid = self.api.create_container(
                    image,
                    entrypoint=KEEPALIVE,
                    working_dir=working_dir,
                    labels=self.labels(case),
                    host_config=self.api.create_host_config(**host_config),
                )["Id"]
                self.storage_quota = False
            else:
                if "storage_opt" in host_config:
                    self.storage_quota = True
        except ENGINE_ERRORS as exc:
            raise HarnessError(f"Docker: cannot create the container of {what}: {one_line(exc)}") from None
        with self._lock:
            self._containers.add(cid)
        return cid

    def start(self, cid: str, what: str) -> None:
        try:
            self.api.start(cid)
        except ENGINE_ERRORS as exc:
            raise HarnessError(f"Docker: cannot start the container of {what}: {one_line(exc)}") from None

    def remove(self, cid: str, background: bool = False) -> None:
        """Remove a container now, or (background) from a reaper thread; close() waits for them.
        REAPERS threads: one container slow to remove (a huge or deep writable layer) does not
        hold back the removal of every container after it. Once close() began, a background
        removal is close()'s own (it removes every container still tracked, then returns): none is
        left half-removed by a thread the interpreter's exit cuts off."""
        if background:
            with self._lock:
                if self.closed:
                    return
                self._reapers = [t for t in self._reapers if t.is_alive()]
                if len(self._reapers) < REAPERS and self._doomed.unfinished_tasks >= len(self._reapers):
                    reaper = threading.Thread(target=self._reap, daemon=True, name="swe-residual-reaper")
                    reaper.start()
                    self._reapers.append(reaper)
            self._doomed.put(cid)
            return
        for attempt in (1, 2):  # one retry: removal can race with a container that is still stopping
            try:
                self.api.remove_container(cid, force=True, v=True)
                break
            except docker.errors.NotFound:
                break
            except ENGINE_ERRORS as exc:
                if attempt == 2:
                    raise HarnessError(
                        f"Docker: cannot remove container {cid[:12]}: {one_line(exc)}"
                    ) from None
                time.sleep(0.5)
        with self._lock:
            self._containers.discard(cid)
            self._upper.pop(cid, None)

    def _reap(self) -> None:
        while True:
            cid = self._doomed.get()
            try:
                if cid is None:
                    return
                with contextlib.suppress(*ENGINE_ERRORS):
                    self.remove(cid)
            finally:
                self._doomed.task_done()

    def exec(
        self,
        cid: str,
        argv: list[str],
        *,
        timeout: float,
        environment: dict[str, str] | None = None,
        user: str = "",
        workdir: str | None = "/app",
        stdout_only: bool = False,
    ) -> tuple[int | None, bytes, bool]:
        """Run argv in the container; (exit code, output, host-side deadline hit)."""
        try:
            exec_id = self.api.exec_create(
                cid,
                argv,
                stdout=True,
                stderr=not stdout_only,
                environment=environment,
                user=user,
                workdir=workdir,
            )["Id"]
        except docker.errors.APIError as exc:
            raise HarnessError(
                f"Docker: cannot run a command in container {cid[:12]}: {one_line(exc.explanation or exc)}"
            ) from None
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["out"] = self.long_api.exec_start(exec_id)
            except BaseException as exc:  # any failure in this thread is surfaced below
                result["err"] = exc

        th = threading.Thread(target=run, daemon=True, name="swe-residual-exec")
        th.start()
        th.join(timeout)
        host_timeout = th.is_alive()
        if host_timeout:
            # the in-container timeout did not end it: kill everything but PID 1, then the container
            with contextlib.suppress(*ENGINE_ERRORS):
                kid = self.api.exec_create(cid, ["/bin/sh", "-c", "kill -9 -1"], user="0")["Id"]
                self.api.exec_start(kid)
            th.join(5)
            if th.is_alive():
                with contextlib.suppress(*ENGINE_ERRORS):
                    self.api.kill(cid)
                th.join(10)
                with contextlib.suppress(*ENGINE_ERRORS):
                    self.api.start(cid)
        if "err" in result:
            raise HarnessError(f"Docker: command in container {cid[:12]} failed: {one_line(result['err'])}")
        try:
            rc = self.api.exec_inspect(exec_id).get("ExitCode")
        except ENGINE_ERRORS:
            rc = None
        return rc, result.get("out") or b"", host_timeout

    def layer_size(self, cid: str) -> int | None:
        """Bytes of disk a container's writable layer holds: du of its upper dir where this host
        can read it (overlay2, as root), else the engine's own count (SizeRw); None when neither
        answers."""
        if cid not in self._upper:
            try:
                data = (self.api.inspect_container(cid).get("GraphDriver") or {}).get("Data") or {}
            except ENGINE_ERRORS:
                data = {}
            upper = data.get("UpperDir")
            self._upper[cid] = upper if upper and os.access(upper, os.R_OK | os.X_OK) else None
        upper = self._upper[cid]
        if upper is not None:
            return disk_usage(upper)
        try:
            res = self.api._result(
                self.api._get(self.api._url("/containers/{0}/json", cid), params={"size": 1}), True
            )
            return int(res.get("SizeRw") or 0)
        except (*ENGINE_ERRORS, ValueError, TypeError):
            return None

    def put(self, cid: str, path: str, data: bytes) -> None:
        try:
            ok = self.api.put_archive(cid, path, data)
        except ENGINE_ERRORS as exc:
            raise HarnessError(
                f"Docker: cannot copy into container {cid[:12]}:{path}: {one_line(exc)}"
            ) from None
        if not ok:
            raise HarnessError(f"Docker: cannot copy into container {cid[:12]}:{path}")

    def archive(self, cid: str, path: str) -> Archive | None:
        """A tar stream of path in the container (an Archive: close it, or use it in a with
        block), or None when it does not exist."""
        try:
            bits, _ = self.api.get_archive(cid, path)
            return Archive(bits)
        except docker.errors.NotFound:
            return None
        except ENGINE_ERRORS as exc:
            raise HarnessError(
                f"Docker: cannot copy {path} out of container {cid[:12]}: {one_line(exc)}"
            ) from None

    def diff(self, cid: str) -> list[dict]:
        """The container's changes against its image: [{"Path", "Kind": 0 changed, 1 added, 2 deleted}]."""
        try:
            return self.api.diff(cid) or []
        except ENGINE_ERRORS as exc:
            raise HarnessError(
                f"Docker: cannot list the changes of container {cid[:12]}: {one_line(exc)}"
            ) from None

    def commit(self, cid: str, *, repository: str, tag: str, conf: dict, message: str = "") -> str:
        try:
            return self.api.commit(cid, repository=repository, tag=tag, conf=conf, message=message)["Id"]
        except ENGINE_ERRORS as exc:
            raise HarnessError(f"Docker: cannot commit container {cid[:12]}: {one_line(exc)}") from None

    # -- images ---------------------------------------------------------------------------------
    def remove_image(self, ref: str | None) -> None:
        """Remove an image this harness made (quietly: it may be in use or gone already)."""
        if ref:
            with contextlib.suppress(*ENGINE_ERRORS):
                self.api.remove_image(ref)

    def image_attrs(self, ref: str) -> dict | None:
        try:
            return self.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            if getattr(exc, "status_code", None) == 404:
                return None
            raise HarnessError(f"Docker: cannot inspect image {ref}: {one_line(exc)}") from None

    def file_lock(self, tag: str) -> FileLock:
        """Serializes building one image on this engine across processes (other engines build theirs)."""
        key = f"{self.base_url}\0{tag}".encode()
        return FileLock(self.cache_dir / "locks" / (hashlib.sha256(key).hexdigest()[:24] + ".lock"))

    # -- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            # a create() under way finishes first: its container is then ours to remove below
            self._created.wait_for(lambda: self._creating == 0, timeout=60)
            reapers = [t for t in self._reapers if t.is_alive()]
        for _ in reapers:
            self._doomed.put(None)
        deadline = time.monotonic() + 120
        for reaper in reapers:
            reaper.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            leftover = list(self._containers)
        for cid in leftover:
            with contextlib.suppress(*ENGINE_ERRORS):
                self.remove(cid)
        # anything else this process labelled (e.g. an environment nobody closed)
        with contextlib.suppress(*ENGINE_ERRORS):
            for c in self.api.containers(
                all=True, filters={"label": [f"{LABEL_PID}={self.pid}", f"{LABEL_HOST}={self.host}"]}
            ):
                with contextlib.suppress(*ENGINE_ERRORS):
                    self.api.remove_container(c["Id"], force=True, v=True)
        if self._own_work:
            remove_tree(self.work_root)
        for client in (self._long_client, self.client):
            with contextlib.suppress(*ENGINE_ERRORS):
                client.close()
