"""One container per environment: created by materialize, started on first use.

An agent that never runs a command (nop) never needs its container running: its final state is
the starting image itself. The request sits in a read-only
bind mount at /run/task. Each command runs under `timeout -s KILL` inside the container with its
output in a file; afterwards every process but PID 1 is killed. The host enforces the deadline too.
While the agent works (agent_limits) a thread measures the container's writable layer against the
task's storage_mb and kills the command's processes when it goes over.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from swe_residual.backends.base import (
    APP_DIR,
    CHANNEL_LIMIT,
    COPY_LIMIT,
    TASK_INBOX,
    Environment,
    ExecResult,
    StorageMeter,
)
from swe_residual.backends.docker.engine import HOST_GRACE_S, tar_path
from swe_residual.backends.safecopy import extract_tar
from swe_residual.backends.workspace import AGENT_GIT_IDENTITY, script
from swe_residual.errors import HarnessError

if TYPE_CHECKING:
    from swe_residual.backends.docker.images import ImageInfo

# Environment of commands (the image keeps PATH/HOME).
EXEC_ENV = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "TERM": "dumb",
    "APP_DIR": APP_DIR,
    "TASK_DIR": TASK_INBOX,
}


class DockerEnvironment(Environment):
    backend = "docker"
    wrapper = "exec_wrapper.sh"  # how one command runs (scripts/); machine environments keep processes

    def __init__(self, engine, container_id: str, image: ImageInfo, what: str, inbox: Path | None):
        self.engine = engine
        self.container_id = container_id
        self.image = image
        self.what = what
        self.inbox = inbox  # host side of the read-only /run/task
        self.touched = False  # something ran or was copied in: the filesystem may differ from the image
        self._needs_kill = False  # a command may have left processes (stop() kills them)
        self._closed = False
        self._started = False
        self._start_lock = threading.Lock()
        self.workdir = APP_DIR  # where commands run
        self.pristine = True  # nothing ran and nothing was copied into /app yet
        # set by the backend: confirm(env) checks cached image facts in a fresh instance,
        # reprobe(why) probes the image again after a contradiction (True: the facts changed)
        self.confirm: Callable[[DockerEnvironment], None] | None = None
        self.reprobe: Callable[[str], bool] | None = None

    # the image's probed facts, read when used: a re-probe corrects every instance of the image
    @property
    def base_commit(self) -> str:
        return self.image.base_commit

    @property
    def baseline(self) -> str:
        return self.image.baseline_env

    def recheck(self) -> None:
        if self.reprobe is not None:
            self.reprobe(f"{self.what}: base commit {self.base_commit[:12]} unreadable")

    def ready(self) -> None:
        """Start the container on first use; in a fresh instance, confirm the image's cached facts."""
        if self._closed:
            raise HarnessError("environment already closed")
        with self._start_lock:
            if not self._started:
                self.engine.start(self.container_id, self.what)
                self._started = True
                if self.pristine and self.confirm is not None:
                    self.confirm(self)

    def started_elsewhere(self) -> None:
        """The container was started by other means (restored from a CRIU checkpoint): ready() does
        not start it again."""
        self._started = True

    def execute(self, command: str, *, timeout: float, env: dict[str, str] | None = None) -> ExecResult:
        if (refused := self.refused(command)) is not None:
            return refused
        self.ready()
        timeout = max(float(timeout), 0.01)
        self.touched = True
        self.pristine = False
        self._needs_kill = True
        started = time.monotonic()
        argv = ["bash", "-c", script(self.wrapper), "swe-residual-exec", f"{timeout:.3f}", command]
        environment = {**EXEC_ENV, **AGENT_GIT_IDENTITY, **(env or {})}
        watch = _StorageWatch(self, self.meter) if self.meter is not None else None
        try:
            rc, out, host_timeout = self._exec(argv, environment, timeout)
        finally:
            limit = watch.stop() if watch is not None else None
        if limit is None and self.meter is not None:
            limit = self.meter.after_command()
        duration = time.monotonic() - started
        timed_out = limit is None and (host_timeout or (rc == 137 and duration >= timeout - 0.05))
        if not host_timeout:
            self._needs_kill = False
        if limit is not None:
            self.limit_hit = limit
            out += f"\n[swe-residual: {limit}]\n".encode()
        return ExecResult(
            command=command,
            output=out.decode("utf-8", errors="replace"),
            exit_code=None if timed_out or limit else rc,
            duration_s=duration,
            timed_out=timed_out,
            limit=limit,
        )

    def execute_with_channel(
        self, command: str, *, timeout: float, env: dict[str, str] | None = None, limit: int = CHANNEL_LIMIT
    ) -> tuple[ExecResult, bytes | None]:
        """execute through scripts/exec_channel.sh: a reader in the container copies the fifo to
        this exec's stdout as it is written (the engine streams it to the host), the command's
        output follows once it ended; the stream is split at the script's trailer, from the end. A
        machine environment keeps its processes, as its own wrapper does."""
        self.ready()
        timeout = max(float(timeout), 0.01)
        self.touched = True
        self.pristine = False
        self._needs_kill = True
        started = time.monotonic()
        keep = "keep" if self.wrapper == "exec_machine.sh" else "kill"
        argv = [
            "bash",
            "-c",
            script("exec_channel.sh"),
            "swe-residual-exec",
            f"{timeout:.3f}",
            command,
            keep,
            str(limit),
        ]
        environment = {**EXEC_ENV, **AGENT_GIT_IDENTITY, **(env or {})}
        rc, out, host_timeout = self._exec(argv, environment, timeout)
        duration = time.monotonic() - started
        timed_out = host_timeout or (rc == 137 and duration >= timeout - 0.05)
        if not host_timeout:
            self._needs_kill = False
        channel, out = split_channel(out)
        return ExecResult(
            command=command,
            output=out.decode("utf-8", errors="replace"),
            exit_code=None if timed_out else rc,
            duration_s=duration,
            timed_out=timed_out,
        ), channel

    def _exec(self, argv: list[str], environment: dict[str, str], timeout: float) -> tuple[int, bytes, bool]:
        """One exec in the container; when the agent ended its PID 1 (the container exited), the
        container is started again and the exec tried once more. An exec the runtime could not
        start (exit 126) in a container that is no longer running - still stopping when the exec
        came - is tried again the same way, once it has exited."""
        try:
            result = self.engine.exec(
                self.container_id,
                argv,
                environment=environment,
                timeout=timeout + HOST_GRACE_S,
                workdir=self.workdir,
            )
        except HarnessError:
            if not self._started_again():
                raise
        else:
            if result[0] != 126 or not self._stopping() or not self._started_again():
                return result
        return self.engine.exec(
            self.container_id,
            argv,
            environment=environment,
            timeout=timeout + HOST_GRACE_S,
            workdir=self.workdir,
        )

    def _stopping(self) -> bool:
        """The container is not running (its PID 1 ended); waits (at most 30 s) until it has exited."""
        try:
            if (self.engine.api.inspect_container(self.container_id).get("State") or {}).get("Running"):
                return False
            self.engine.api.wait(self.container_id, timeout=30)
        except Exception:  # noqa: BLE001 - the engine is failing: the exec's own result stands
            return False
        return True

    def storage_used(self) -> int | None:
        """Bytes of the container's writable layer (what it wrote over its image)."""
        return self.engine.layer_size(self.container_id)

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
        if any(dest == APP_DIR or dest.startswith(APP_DIR + "/") for _, dest in items):
            self.pristine = False
        self.engine.put(
            self.container_id,
            "/",
            tar_path(*[(Path(src), str(PurePosixPath(dest).relative_to("/"))) for src, dest in items]),
        )

    def copy_out(self, src: str, dest: Path, *, limit: int = COPY_LIMIT) -> None:
        self.ready()
        stream = self.engine.archive(self.container_id, src.rstrip("/"))
        if stream is None:
            dest.mkdir(parents=True, exist_ok=True)
            return
        with stream:
            extract_tar(
                ChunkReader(stream), dest, strip=1, limit=limit, what=f"copying {src} out of {self.what}"
            )

    def read_file(self, path: str, *, limit: int = COPY_LIMIT) -> bytes | None:
        self.ready()
        stream = self.engine.archive(self.container_id, path)
        if stream is None:
            return None
        with stream, tarfile.open(fileobj=ChunkReader(stream), mode="r|") as tar:
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
            self.engine.exec(
                self.container_id,
                ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"],
                user="0",
                timeout=30,
                workdir="/",
            )
        except HarnessError:
            if not self._exited():
                raise
            # the agent ended PID 1: every process is gone already
        self._needs_kill = False

    def interrupt(self) -> None:
        """Remove the container at once (the reaper does it): whatever runs in it is killed."""
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self._start_lock:
                pass  # a start in progress finishes first
            self.engine.remove(self.container_id, background=True)
            if self.inbox is not None:
                shutil.rmtree(self.inbox, ignore_errors=True)


class _StorageWatch:
    """A thread beside one command: measures the container's writable layer every meter.interval
    seconds and, once it is over the limit, kills every process but PID 1 (as root)."""

    def __init__(self, env: DockerEnvironment, meter: StorageMeter):
        self.env, self.meter = env, meter
        self.limit: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="swe-residual-storage")
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.meter.interval):
            reason = self.meter.over()
            if reason is not None and not self._done.is_set():
                self.limit = reason
                try:
                    self.env.engine.exec(
                        self.env.container_id,
                        ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"],
                        user="0",
                        timeout=30,
                        workdir="/",
                    )
                except HarnessError:
                    pass  # the command's own deadline still ends it
                return

    def stop(self) -> str | None:
        """End the watch; why it stopped the command (None: it did not)."""
        self._done.set()
        self._thread.join(60)
        return self.limit


CHANNEL_TRAILER = b"\nswe-residual-channel "


def split_channel(out: bytes) -> tuple[bytes | None, bytes]:
    """(channel, output) of an exec_channel.sh stream: it ends with a trailer giving the length of
    the output before it; everything earlier is the channel. No trailer (the exec was cut off):
    no channel."""
    at = out.rfind(CHANNEL_TRAILER)
    if at < 0 or not out.endswith(b"\n"):
        return None, out
    try:
        size = int(out[at + len(CHANNEL_TRAILER) : -1])
    except ValueError:
        return None, out
    if not 0 <= size <= at:
        return None, out
    return out[: at - size], out[at - size : at]


class ChunkReader(io.RawIOBase):
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
