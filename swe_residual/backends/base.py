"""The environment interface every backend implements (local sandbox, Docker, later remote).

An Environment is one isolated instance of a starting state with Harbor's fixed layout: the
repository at /app, the reference solution at /solution (only when the oracle asks for it),
hidden tests at /tests (only in verifier environments), logs under /logs/{agent,verifier,
artifacts}. Everything else (applying a state, running agents, collecting artifacts, the final
patch, verification) is written once on top of these few operations (swe_residual/backends/workspace.py,
swe_residual/run/verifier.py and grader.py).

Everything an environment produces is untrusted: copy_out copies regular files and directories
only (never a symlink, device or path outside the destination) and stops at a size limit.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from swe_residual.errors import HarnessError
from swe_residual.states import LoadedState
from swe_residual.tasks import Task

# Where things are, as commands inside an environment see them (Harbor's layout).
APP_DIR = "/app"
TASK_INBOX = "/run/task"  # read-only: the request (instruction.md), outside the workspace
SOLUTION_DIR = "/solution"
TESTS_DIR = "/tests"
ARTIFACTS_DIR = "/logs/artifacts"

COPY_LIMIT = 256 << 20  # bytes copy_out takes from an environment at most
CHANNEL_LIMIT = 16 << 20  # bytes a report channel carries at most (execute_with_channel)
STORAGE_POLL_S = 1.0  # how often an armed storage limit is measured (at most; see StorageMeter)
STORAGE_SLOW_S = 5.0  # ...and how seldom, while a measurement takes under STORAGE_SLOW_S / 2


@dataclass
class ExecResult:
    command: str
    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    limit: str | None = None  # the task's limit (storage_mb) that stopped the command, and by how much


class StorageMeter:
    """The task's storage limit on the agent's commands: what the instance holds beyond what it held
    when the agent started, measured by the backend's `storage_used` at most every STORAGE_POLL_S
    seconds, less often when a measurement is slow (up to a tenth of the time, every STORAGE_SLOW_S
    seconds at least while measuring takes under half of that)."""

    def __init__(self, env: Environment, limit: int):
        self.env, self.limit = env, limit
        self.last = time.monotonic()
        self.base = env.storage_used() or 0
        self.interval = STORAGE_POLL_S
        self.measured_s = 0.0

    def over(self) -> str | None:
        """Why the instance is over the limit now (one line), None while it is not or cannot be told."""
        t0 = self.last = time.monotonic()
        used = self.env.storage_used()
        self.measured_s = time.monotonic() - t0
        # a tenth of the time at most, but no more than STORAGE_SLOW_S between looks unless a look
        # itself takes longer than half of that
        self.interval = min(
            max(STORAGE_POLL_S, 10 * self.measured_s), max(STORAGE_SLOW_S, 2 * self.measured_s)
        )
        if used is None or used - self.base <= self.limit:
            return None
        wrote = used - self.base
        return (
            f"storage limit: the agent's commands wrote {wrote:,} bytes ({wrote / 2**20:.1f} MiB), over the "
            f"task's storage_mb = {self.limit >> 20} ({self.limit:,} bytes); the agent was stopped"
        )

    def after_command(self) -> str | None:
        """At the end of a command: over() when the last look is an interval old (many short
        commands are measured as often as one long one, and no more often)."""
        return self.over() if time.monotonic() - self.last >= self.interval else None


class Environment(ABC):
    """One isolated instance of a starting state, used by exactly one run (or one verification)."""

    backend: str
    base_commit: str = ""
    baseline: str = ""  # "<blob> <path>" lines: untracked files the clean state ships
    touched: bool = False  # a command ran or a file was copied in since materialize
    start_patch: bytes | None = None  # the starting state as a patch (b"" for a clean start)
    report: dict | None = None  # machine states: how this instance was restored (method, times, processes)
    storage_limit: int | None = None  # bytes the agent's commands may write ([environment] storage_mb)
    limit_hit: str | None = None  # why a limit the task declares stopped the agent (agent_limits)
    meter: StorageMeter | None = None  # set while agent_limits() is armed

    def path(self, harbor_path: str) -> str:
        """How commands inside see a Harbor path (identity except in the unsandboxed local mode)."""
        return harbor_path

    @property
    def app_dir(self) -> str:
        return self.path(APP_DIR)

    @property
    def inbox_dir(self) -> str:
        return self.path(TASK_INBOX)

    @property
    def tmp_dir(self) -> str:
        return self.path("/tmp")

    @abstractmethod
    def execute(self, command: str, *, timeout: float, env: dict[str, str] | None = None) -> ExecResult:
        """Run a shell command in /app; every process it started is gone on return."""

    def execute_with_channel(
        self, command: str, *, timeout: float, env: dict[str, str] | None = None, limit: int = CHANNEL_LIMIT
    ) -> tuple[ExecResult, bytes | None]:
        """execute, with a report channel: a fifo, its path in $SWE_RESIDUAL_CHANNEL, that the host
        reads while the command runs (at most `limit` bytes), so nothing in the environment can
        take back what was written there, and nothing written once the command ended counts. The
        bytes, or None where this backend has no channel (swe_residual/run/grading_channel.py)."""
        return self.execute(command, timeout=timeout, env=env), None

    @abstractmethod
    def copy_in(self, src: Path, dest: str) -> None:
        """Copy a host file or directory to `dest` (a Harbor path) inside the environment."""

    def copy_in_many(self, items: list[tuple[Path, str]]) -> None:
        """copy_in for several (host path, Harbor path) pairs (a backend may do it in one call)."""
        for src, dest in items:
            self.copy_in(src, dest)

    @abstractmethod
    def copy_out(self, src: str, dest: Path, *, limit: int = COPY_LIMIT) -> None:
        """Copy the directory `src` inside to the host directory `dest`: regular files and
        directories only, nothing outside dest, at most `limit` bytes (InfraError beyond)."""

    @abstractmethod
    def read_file(self, path: str, *, limit: int = COPY_LIMIT) -> bytes | None:
        """Contents of a regular file inside (a symlink or anything else reads as None)."""

    @abstractmethod
    def stop(self) -> None:
        """Kill every process started in the environment (idempotent)."""

    def ready(self) -> None:
        """Be ready to run commands now (a container starts); idempotent, implied by execute."""

    def storage_used(self) -> int | None:
        """Bytes of disk the instance's writable part holds now (None: this backend cannot tell)."""
        return None

    @contextlib.contextmanager
    def agent_limits(self) -> Iterator[None]:
        """While the agent works: the limits the task declares that the backend measures rather
        than the engine enforcing them (storage_mb) stop any command that goes over them, and
        limit_hit says why; once one stopped the agent, its further commands are refused at once.
        The harness's own steps afterwards (final diff, verification) run unmetered."""
        if self.storage_limit is None:
            yield
            return
        self.meter = StorageMeter(self, self.storage_limit)
        try:
            yield
        finally:
            self.meter = None

    def refused(self, command: str) -> ExecResult | None:
        """The answer to a command of an agent a limit stopped already (None: run it)."""
        if self.meter is None or self.limit_hit is None:
            return None
        return ExecResult(
            command=command,
            output=f"[swe-residual: {self.limit_hit}]\n",
            exit_code=None,
            duration_s=0.0,
            limit=self.limit_hit,
        )

    def recheck(self) -> None:
        """A case contradicted what the backend knows of the starting image (its base commit cannot
        be read): look again, once (base_commit and baseline may be new afterwards)."""

    def changes(self) -> list[dict] | None:
        """The file changes since the instance started ({"Path", "Kind": 0 changed, 1 added, 2
        deleted}), where the backend can tell (a machine state's container); else None."""
        return None

    def interrupt(self) -> None:
        """End what runs in this environment now, called from another thread and without waiting
        (nothing uses the environment afterwards; its user's close still follows). Default:
        nothing - the command runs to its end."""

    @abstractmethod
    def close(self) -> None:
        """Remove everything this environment created (idempotent)."""

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Backend(ABC):
    """Where environments come from. What a backend can do is declared here and checked once, in
    the plan (run/plan.py check_backend), before any case runs."""

    # its environments' interrupt() ends what runs in them (a re-grade beside the grade can be
    # stopped when the grade fails: run/regrade.py regrade_mode)
    interruptible: bool = False

    name: str
    host: str | None = None  # the engine it runs on, where there can be several
    supports_machine_states: bool = False  # can hold a whole machine (installed software, live processes)
    needs_task_repository: bool = (
        False  # runs only tasks that ship their repository (metadata.repository_dir)
    )

    @classmethod
    def hosts(cls, given: list[str] | None = None) -> list[str | None]:
        """The engines cases are spread over (None: the only one there is)."""
        return [None]

    @classmethod
    def check_available(cls, hosts: list[str | None], timeout: float = 5.0) -> None:
        """InputError (a usage error before any case) when an engine of `hosts` does not answer."""

    @classmethod
    def create(
        cls, *, work_root: Path | None = None, run_id: str | None = None, host: str | None = None
    ) -> Backend:
        """The backend for a run session's options (each backend takes the ones it uses)."""
        return cls()

    def check(self) -> None:
        """Raise InputError (a usage error before any case runs) when this backend cannot work."""

    @abstractmethod
    def prepare(self, task: Task, states: Iterable[LoadedState]) -> None:
        """Build what runs of this task share (idempotent; safe to call from several processes)."""

    @abstractmethod
    def materialize(self, task: Task, state: LoadedState | None, request: str | None = None) -> Environment:
        """A fresh environment at the task's clean state, plus the state's patch uncommitted; the
        request (default: the task's instruction) at /run/task/instruction.md."""

    @abstractmethod
    def verifier_environment(self, task: Task) -> Environment:
        """A fresh environment of the task's separate verifier (environment_mode = "separate")."""

    def snapshot(self, task: Task, state: LoadedState):
        """Machine-capable backends: the state's snapshot, built from its interactions (or reused)."""
        raise HarnessError(machine_refusal(self.name, task))

    def sweep(self) -> list[str]:
        """Remove what processes of this host that are gone left behind (containers, workspaces)."""
        return []

    def close(self) -> None:
        """Release session-level resources."""


def storage_limit(task: Task) -> int | None:
    """Bytes the agent's commands may write: the task's [environment] storage_mb, else no limit."""
    mb = task.config.environment.storage_mb
    return int(mb) << 20 if mb else None


def machine_refusal(backend: str, task: Task) -> str:
    """Why a backend that cannot hold machine states refuses a machine-track task (one line)."""
    return (
        f"--backend {backend}: task {task.id} of track {task.track!r} is a machine task: the {backend} backend "
        "cannot hold machine states (installed software, configuration, live processes), only a repository; "
        "use --backend docker"
    )
