"""The embedded local backend: git workspaces on the host, every command inside bubblewrap.

An environment is a directory outside the project and the run dir whose subdirectories are
mounted at Harbor's paths: app/ at /app (a copy of the task's base repository, built once per
process with a fixed commit date so its hash is stable), tmp/ at /tmp, inbox/ at /run/task
(read-only request), logs/ at /logs, and - only once something is copied there - solution/ at
/solution and tests/ at /tests. The host only copies files; every git command runs in the sandbox.
Without bwrap, commands run unsandboxed on the host paths (one warning per session): tasks that
hard-code Harbor paths need bwrap or the docker backend. Run as root, every command tree also gets
a pids limit and the task's memory limit through cgroups (swe_residual/backends/sandbox.py). The
task's storage_mb is measured (du of the environment's root) while the agent's commands run.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path

from swe_residual.backends import repo
from swe_residual.backends.base import (
    CHANNEL_LIMIT,
    COPY_LIMIT,
    Backend,
    Environment,
    ExecResult,
    machine_refusal,
    storage_limit,
)
from swe_residual.backends.owners import owner_name, sweep_dirs
from swe_residual.backends.safecopy import (
    RM_TIMEOUT_S,
    copy_tree,
    discard_tree,
    disk_usage,
    remove_tree,
    wait_discarded,
)
from swe_residual.backends.sandbox import Bind, SandboxSpec, bwrap_argv, bwrap_path, run_tree, runtime_path
from swe_residual.backends.workspace import AGENT_GIT_IDENTITY, apply_state
from swe_residual.errors import HarnessError, InputError
from swe_residual.states import LoadedState
from swe_residual.tasks import Task

_WARNED = False
_WARN_LOCK = threading.Lock()

# Harbor path -> (subdirectory of the environment root, writable by commands)
MOUNTS = {
    "/app": ("app", True),
    "/tmp": ("tmp", True),
    "/run/task": ("inbox", False),
    "/logs": ("logs", True),
    "/solution": ("solution", False),
    "/tests": ("tests", False),
    "/opt/agent": ("agent", False),  # a command agent's own files (its config's `install:`)
}
ALWAYS = ("app", "tmp", "inbox", "logs", "logs/agent", "logs/verifier", "logs/artifacts")


def warn_unsandboxed_once() -> None:
    global _WARNED
    with _WARN_LOCK:
        if not _WARNED:
            _WARNED = True
            warnings.warn(
                "bubblewrap (bwrap) not found: the local backend runs agents UNSANDBOXED; "
                "install it (apt-get install bubblewrap) to hide the host from agents",
                RuntimeWarning,
                stacklevel=3,
            )


class LocalEnvironment(Environment):
    backend = "local"

    def __init__(self, root: Path, bwrap: str | None, base_commit: str, memory_mb: int | None = None):
        self.root = root
        self.memory_bytes = memory_mb << 20 if memory_mb else None
        self.workspace = root / "app"
        self.bwrap = bwrap
        self.base_commit = base_commit
        for sub in ALWAYS:
            (root / sub).mkdir(exist_ok=True)
        self._closed = False

    def _host(self, path: str) -> Path:
        """The host path behind a Harbor path (HarnessError for paths outside the mounts)."""
        for inner in sorted(MOUNTS, key=len, reverse=True):
            if path == inner or path.startswith(inner + "/"):
                rest = path[len(inner) :].lstrip("/")
                if ".." in Path(rest).parts:
                    break
                return self.root / MOUNTS[inner][0] / rest
        raise HarnessError(f"{path}: not a path of a local environment ({', '.join(MOUNTS)})")

    def path(self, harbor_path: str) -> str:
        return harbor_path if self.bwrap else str(self._host(harbor_path))

    def execute(self, command: str, *, timeout: float, env: dict[str, str] | None = None) -> ExecResult:
        if self._closed:
            raise HarnessError("environment already closed")
        if (refused := self.refused(command)) is not None:
            return refused
        home = self.path("/tmp")
        env_vars = {
            "PATH": runtime_path(bool(self.bwrap)),
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "TERM": "dumb",
            **AGENT_GIT_IDENTITY,
            "APP_DIR": self.app_dir,
            "TASK_DIR": self.inbox_dir,
            **(env or {}),
        }
        if self.bwrap:
            binds = [
                Bind(self.root / sub, inner, writable=rw)
                for inner, (sub, rw) in MOUNTS.items()
                if (self.root / sub).is_dir()
            ]
            argv = bwrap_argv(
                SandboxSpec(binds=binds, cwd="/app", env=env_vars), ["bash", "-c", command], self.bwrap
            )
            proc_env, cwd = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, None
        else:
            argv, proc_env, cwd = ["bash", "-c", command], env_vars, self.workspace
        self.touched = True
        res = run_tree(
            argv,
            timeout=timeout,
            cwd=cwd,
            env=proc_env,
            output_path=self.root / "last-output",
            memory_bytes=self.memory_bytes,
            watch=self.meter,
        )
        if res.limit is None and self.meter is not None:
            res.limit = self.meter.after_command()
        if res.limit is not None:
            self.limit_hit = res.limit
        return ExecResult(
            command=command,
            output=res.output,
            exit_code=res.exit_code,
            duration_s=res.duration_s,
            timed_out=res.timed_out,
            limit=res.limit,
        )

    def execute_with_channel(
        self, command: str, *, timeout: float, env: dict[str, str] | None = None, limit: int = CHANNEL_LIMIT
    ) -> tuple[ExecResult, bytes | None]:
        """execute with a fifo in /tests (read-only to the command: it cannot be replaced; in /tmp
        when there is no /tests) that a thread here reads while the command runs. Once run_tree
        returned every process of the sandbox is gone (its pid namespace), so what the fifo holds
        then is all there is; reading stops there."""
        sub = "tests" if (self.root / "tests").is_dir() else "tmp"
        name = f".swe-residual-channel-{secrets.token_hex(6)}"
        fifo = self.root / sub / name
        os.mkfifo(fifo)
        os.chmod(fifo, 0o666)  # the sandbox's user writes it
        try:
            reader = _FifoReader(fifo, limit)
            try:
                res = self.execute(
                    command,
                    timeout=timeout,
                    env={**(env or {}), "SWE_RESIDUAL_CHANNEL": self.path(f"/{sub}/{name}")},
                )
            finally:
                data = reader.finish()
        finally:
            fifo.unlink(missing_ok=True)
        return res, data

    def storage_used(self) -> int | None:
        """Everything under the environment's root: the workspace, /tmp, /logs (what bwrap shows
        the commands writable)."""
        return disk_usage(self.root)

    def copy_in(self, src: Path, dest: str) -> None:
        self.touched = True
        target = self._host(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(src).is_dir():
            shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target)

    def copy_out(self, src: str, dest: Path, *, limit: int = COPY_LIMIT) -> None:
        host = self._host(src)
        if host.is_symlink() or not host.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            return
        copy_tree(host, dest, limit=limit, what=f"copying {src} out of the environment")

    def read_file(self, path: str, *, limit: int = COPY_LIMIT) -> bytes | None:
        try:
            fd = os.open(self._host(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > limit:
                return None
            return fh.read(limit)

    def stop(self) -> None:
        # run_tree kills each command's process group (and bwrap's pid namespace) on return.
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            discard_tree(self.root)  # off the case's path: an agent's tree may take a minute to remove


class _FifoReader:
    """Reads a fifo on a thread into memory (at most `limit` bytes kept, the rest read and dropped).
    It is opened read-write, so it never reads as ended while no writer has it open yet."""

    def __init__(self, path: Path, limit: int):
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.limit, self.data = limit, bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="swe-residual-channel")
        self._thread.start()

    def _read_ready(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            self.data += chunk[: max(self.limit - len(self.data), 0)]

    def _run(self) -> None:
        while not self._stop.is_set():
            if select.select([self.fd], [], [], 0.1)[0]:
                self._read_ready()
        self._read_ready()  # what was written before the command ended

    def finish(self) -> bytes:
        self._stop.set()
        self._thread.join()
        os.close(self.fd)
        return bytes(self.data)


LOCAL_ROOT = Path(tempfile.gettempdir()) / "swe-residual-local"


class LocalBackend(Backend):
    name = "local"
    needs_task_repository = True

    @classmethod
    def create(
        cls, *, work_root: Path | None = None, run_id: str | None = None, host: str | None = None
    ) -> LocalBackend:
        return cls(work_root=work_root)

    def __init__(self, work_root: Path | None = None):
        self.bwrap = bwrap_path()
        if not self.bwrap:
            warn_unsandboxed_once()
        self._own_root = work_root is None
        # <tmp>/swe-residual-local/<host>--<pid>--<start>: a dead worker's leftovers are swept
        self.root = Path(work_root or LOCAL_ROOT / owner_name())
        self.root.mkdir(parents=True, exist_ok=True)
        if self._own_root:  # what a killed run left (its trees set aside included), off this run's path
            threading.Thread(
                target=sweep_dirs, args=(LOCAL_ROOT,), name="swe-residual-sweep", daemon=True
            ).start()
        self._bases: dict[str, tuple[Path, str]] = {}
        self._lock = threading.Lock()

    def prepare(self, task: Task, states: Iterable[LoadedState]) -> None:
        self.base_repo(task)

    def base_repo(self, task: Task) -> tuple[Path, str]:
        """The task's clean repository (built once per process from the task's own files)."""
        key = f"{task.track}/{task.id}"
        with self._lock:
            if key not in self._bases:
                if task.kind == "machine":
                    raise InputError(machine_refusal(self.name, task))
                src = task.repository_dir
                if src is None:
                    raise InputError(
                        f"{task.path / 'task.toml'}: metadata.repository_dir: the local backend "
                        "needs a repository shipped with the task (use --backend docker)"
                    )
                dest = Path(tempfile.mkdtemp(prefix=f"base-{task.id}-", dir=self.root)) / "app"
                commit = repo.init_base_repo(src, dest)
                task.check_base_commit(commit, f"the commit built from {src}")
                self._bases[key] = (dest, commit)
            return self._bases[key]

    def _new(self, app: Path, commit: str, memory_mb: int | None) -> LocalEnvironment:
        root = Path(tempfile.mkdtemp(prefix="env-", dir=self.root))
        try:
            shutil.copytree(app, root / "app", symlinks=True)
            return LocalEnvironment(root, self.bwrap, commit, memory_mb)
        except BaseException:
            remove_tree(root)
            raise

    def materialize(self, task: Task, state: LoadedState | None, request: str | None = None) -> Environment:
        base, commit = self.base_repo(task)
        env = self._new(base, commit, task.config.environment.memory_mb)
        try:
            (env.root / "inbox" / "instruction.md").write_text(request or task.instruction, encoding="utf-8")
            env.start_patch = b""
            if state is not None:
                apply_state(env, state)
            env.touched = False  # the starting state: nothing of the agent's yet
            env.storage_limit = storage_limit(task)
            return env
        except BaseException:
            env.close()
            raise

    def verifier_environment(self, task: Task) -> Environment:
        return self.materialize(task, None)

    def sweep(self) -> list[str]:
        return [str(d) for d in sweep_dirs(LOCAL_ROOT)]

    def close(self) -> None:
        if self._own_root:
            remove_tree(self.root)  # the environments' trees being removed in the background too
        else:
            wait_discarded(self.root, RM_TIMEOUT_S)
