"""One container per environment: created by materialize, started on first use.

An agent that never runs a command (nop) never needs its container running: its final state is
the starting image itself. The request sits in a read-only
bind mount at /run/task. Each command runs under `timeout -s KILL` inside the container with its
output in a file; afterwards every process but PID 1 is killed. The host enforces the deadline too.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from swe_residual.backends.base import APP_DIR, COPY_LIMIT, TASK_INBOX, Environment, ExecResult
from swe_residual.backends.docker.engine import HOST_GRACE_S, tar_path
from swe_residual.backends.safecopy import extract_tar
from swe_residual.backends.workspace import AGENT_GIT_IDENTITY, script
from swe_residual.errors import HarnessError

if TYPE_CHECKING:
    from swe_residual.backends.docker.images import ImageInfo

# Environment of commands (the image keeps PATH/HOME).
EXEC_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb",
            "APP_DIR": APP_DIR, "TASK_DIR": TASK_INBOX}


class DockerEnvironment(Environment):
    backend = "docker"
    wrapper = "exec_wrapper.sh"     # how one command runs (scripts/); machine environments keep processes

    def __init__(self, engine, container_id: str, image: "ImageInfo", what: str, inbox: Path | None):
        self.engine = engine
        self.container_id = container_id
        self.image = image
        self.what = what
        self.inbox = inbox          # host side of the read-only /run/task
        self.base_commit = image.base_commit
        self.baseline = image.baseline_env
        self.touched = False        # something ran or was copied in: the filesystem may differ from the image
        self._needs_kill = False    # a command may have left processes (stop() kills them)
        self._closed = False
        self._started = False
        self._start_lock = threading.Lock()
        self.workdir = APP_DIR      # where commands run

    def ready(self) -> None:
        """Start the container on first use."""
        if self._closed:
            raise HarnessError("environment already closed")
        with self._start_lock:
            if not self._started:
                self.engine.start(self.container_id, self.what)
                self._started = True

    def execute(self, command: str, *, timeout: float, env: dict[str, str] | None = None) -> ExecResult:
        self.ready()
        timeout = max(float(timeout), 0.01)
        self.touched = True
        self._needs_kill = True
        started = time.monotonic()
        argv = ["bash", "-c", script(self.wrapper), "swe-residual-exec", f"{timeout:.3f}", command]
        environment = {**EXEC_ENV, **AGENT_GIT_IDENTITY, **(env or {})}
        try:
            rc, out, host_timeout = self.engine.exec(self.container_id, argv, environment=environment,
                                                     timeout=timeout + HOST_GRACE_S, workdir=self.workdir)
        except HarnessError:
            if not self._started_again():
                raise
            rc, out, host_timeout = self.engine.exec(self.container_id, argv, environment=environment,
                                                     timeout=timeout + HOST_GRACE_S, workdir=self.workdir)
        duration = time.monotonic() - started
        timed_out = host_timeout or (rc == 137 and duration >= timeout - 0.05)
        if not host_timeout:
            self._needs_kill = False
        return ExecResult(command=command, output=out.decode("utf-8", errors="replace"),
                          exit_code=None if timed_out else rc, duration_s=duration, timed_out=timed_out)

    def _exited(self) -> bool:
        """The container has exited (the agent ended its PID 1), its filesystem intact."""
        try:
            state = self.engine.api.inspect_container(self.container_id).get("State") or {}
        except Exception:  # noqa: BLE001 - the engine itself is failing: the caller's error stands
            return False
        return not state.get("Running") and state.get("Status") == "exited"

    def _started_again(self) -> bool:
        """Start an exited container again (what ran in it is gone, as after stop()), so the agent
        ending PID 1 never becomes an engine failure; False when it is not merely exited."""
        if not self._exited():
            return False
        self.engine.start(self.container_id, self.what)
        return True

    def copy_in(self, src: Path, dest: str) -> None:
        self.copy_in_many([(src, dest)])

    def copy_in_many(self, items: list[tuple[Path, str]]) -> None:
        # one put_archive at "/": the engine creates missing parent directories itself
        self.touched = True
        self.engine.put(self.container_id, "/",
                        tar_path(*[(Path(src), str(PurePosixPath(dest).relative_to("/"))) for src, dest in items]))

    def copy_out(self, src: str, dest: Path, *, limit: int = COPY_LIMIT) -> None:
        self.ready()
        stream = self.engine.archive(self.container_id, src.rstrip("/"))
        if stream is None:
            dest.mkdir(parents=True, exist_ok=True)
            return
        extract_tar(_Reader(stream), dest, strip=1, limit=limit, what=f"copying {src} out of {self.what}")

    def read_file(self, path: str, *, limit: int = COPY_LIMIT) -> bytes | None:
        self.ready()
        stream = self.engine.archive(self.container_id, path)
        if stream is None:
            return None
        with tarfile.open(fileobj=_Reader(stream), mode="r|") as tar:
            member = tar.next()
            if member is None or not member.isreg() or member.size > limit:
                return None
            fh = tar.extractfile(member)
            return fh.read() if fh is not None else None

    def stop(self) -> None:
        """Kill every process except PID 1 (as root, so nothing the agent started survives)."""
        if self._closed or not self._needs_kill or not self._started:
            return
        try:
            self.engine.exec(self.container_id, ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"], user="0",
                             timeout=30, workdir="/")
        except HarnessError:
            if not self._exited():
                raise
            # the agent ended PID 1: every process is gone already
        self._needs_kill = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self._start_lock:
                pass  # a start in progress finishes first
            self.engine.remove(self.container_id, background=True)
            if self.inbox is not None:
                shutil.rmtree(self.inbox, ignore_errors=True)


class _Reader(io.RawIOBase):
    """A file object over the docker SDK's chunk iterator (tar streams are read without buffering them all)."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
