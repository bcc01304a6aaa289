"""DockerBackend: task images, one container per environment, the limits a task asks for."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swe_residual.backends import docker_hosts
from swe_residual.backends.base import Backend, Environment, storage_limit
from swe_residual.backends.docker.engine import IMG_KEY, IMG_KIND, IMG_RUN, IMG_TASK, Engine, check_engine
from swe_residual.backends.docker.environment import DockerEnvironment
from swe_residual.backends.docker.images import ImageInfo, TaskImages
from swe_residual.backends.docker.machine import MachineEnvironment, MachineStates
from swe_residual.backends.machine.snapshot import Snapshot
from swe_residual.backends.sandbox import PIDS_MAX
from swe_residual.backends.workspace import apply_state
from swe_residual.states import LoadedState
from swe_residual.tasks import Task

QUOTA_HEADROOM_MB = 256  # engine quota beyond the task's storage_mb (at least this, else a quarter)


class DockerBackend(Backend):
    name = "docker"
    interruptible = True  # DockerEnvironment.interrupt removes the container
    supports_machine_states = True

    @classmethod
    def hosts(cls, given: list[str] | None = None) -> list[str | None]:
        return docker_hosts(given)

    @classmethod
    def check_available(cls, hosts: list[str | None], timeout: float = 5.0) -> None:
        for host in hosts:
            check_engine(timeout=timeout, base_url=host)

    @classmethod
    def create(
        cls, *, work_root: Path | None = None, run_id: str | None = None, host: str | None = None
    ) -> DockerBackend:
        return cls(run_id=run_id, host=host)

    def __init__(
        self,
        run_id: str | None = None,
        cache_dir: Path | None = None,
        work_root: Path | None = None,
        sweep: bool = True,
        host: str | None = None,
    ):
        self.engine = Engine(run_id, cache_dir, work_root, sweep, base_url=host)
        self.images = TaskImages(self.engine)
        self.host = self.engine.base_url
        self.machine = MachineStates(self.engine, self.images, self.container_limits)

    def check(self) -> None:
        check_engine(base_url=self.host)

    # -- images ---------------------------------------------------------------------------------
    def prepare(self, task: Task, states: Iterable[LoadedState]) -> None:
        self.images.clean(task)
        if task.config.verifier.environment_mode == "separate":
            self.images.verifier(task)
        for state in states:
            if state.kind == "machine":
                self.machine.snapshot(task, state)
            else:
                self.state_image(task, state)

    def snapshot(self, task: Task, state: LoadedState) -> Snapshot:
        return self.machine.snapshot(task, state)

    def state_image(self, task: Task, state: LoadedState) -> ImageInfo:
        def build(clean: ImageInfo, state: LoadedState, tag: str) -> str:
            env = self._environment(task, clean, f"build:{state.id}", network="none")
            try:
                apply_state(env, state)
                env.stop()
                labels = {
                    IMG_KIND: "residual",
                    IMG_KEY: tag,
                    IMG_TASK: task.id,
                    IMG_RUN: self.engine.run_id,
                    "swe-residual.image.state": state.id,
                }
                repo, tg = tag.rsplit(":", 1)
                return self.engine.commit(
                    env.container_id,
                    repository=repo,
                    tag=tg,
                    conf=self.images.commit_conf(clean, labels),
                    message=f"swe-residual: state {state.id} applied uncommitted",
                )
            finally:
                env.close()

        return self.images.state(task, state, build)

    # -- environments ---------------------------------------------------------------------------
    def _environment(
        self,
        task: Task,
        image: ImageInfo,
        what: str,
        *,
        role: str = "agent",
        network: str | None = None,
        inbox: Path | None = None,
        quota: bool = False,
    ) -> DockerEnvironment:
        limits = self.container_limits(task, role)
        if quota and (limit := storage_limit(task)) is not None:
            # the engine's hard stop, where the storage driver has one, above the measured limit
            # (what the harness does in the container afterwards needs room too)
            limits["storage_opt"] = {"size": f"{(limit >> 20) + max(QUOTA_HEADROOM_MB, (limit >> 20) // 4)}m"}
        if network is not None:
            limits["network_mode"] = network
        binds = {str(inbox): {"bind": "/run/task", "mode": "ro"}} if inbox is not None else {}
        cid = self.engine.create(image.id, case=what, what=f"task {task.id} ({what})", binds=binds, **limits)
        env = DockerEnvironment(self.engine, cid, image, f"task {task.id} ({what})", inbox)
        env.confirm = lambda e: self.images.confirm(task, e)
        env.reprobe = lambda why: self.images.reprobe(task, why)
        return env

    def materialize(self, task: Task, state: LoadedState | None, request: str | None = None) -> Environment:
        if task.kind == "machine":  # (machine states carry no predecessor trajectory: no handoff request)
            env = self.machine.restore(task, state) if state is not None else self.machine.fresh(task)
            env.storage_limit = storage_limit(task)  # measured only: a restored delta is in the layer too
            return env
        image = self.state_image(task, state) if state is not None else self.images.clean(task)
        # the request in a read-only /run/task, outside the repository
        inbox = Path(tempfile.mkdtemp(prefix="inbox-", dir=self.engine.work_root))
        inbox.chmod(0o755)
        (inbox / "instruction.md").write_text(request or task.instruction, encoding="utf-8")
        (inbox / "instruction.md").chmod(0o644)
        try:
            env = self._environment(
                task,
                image,
                f"{task.id}/{state.id if state is not None else 'clean'}",
                inbox=inbox,
                quota=True,
            )
            env.start_patch = state.patch if state is not None else b""
            env.storage_limit = storage_limit(task)
            return env
        except BaseException:
            shutil.rmtree(inbox, ignore_errors=True)
            raise

    def verifier_environment(self, task: Task) -> Environment:
        separate = task.config.verifier.environment_mode == "separate"
        image = self.images.verifier(task) if separate else self.images.clean(task)
        return self._environment(task, image, "verifier", role="verifier")

    # -- limits ---------------------------------------------------------------------------------
    @staticmethod
    def _network_mode(task: Task, role: str) -> str:
        cfg = task.config
        section = cfg.agent if role == "agent" else cfg.verifier
        mode = (section.model_extra or {}).get("network_mode")
        if role == "verifier" and not mode:
            venv = (cfg.verifier.model_extra or {}).get("environment") or {}
            mode = venv.get("network_mode") if isinstance(venv, dict) else None
            if isinstance(venv, dict) and mode is None and venv.get("allow_internet") is False:
                mode = "no-network"
        if not mode:
            env = cfg.environment
            if "network_mode" in env.model_fields_set:
                mode = env.network_mode
            elif (env.model_extra or {}).get("allow_internet") is False:
                mode = "no-network"
            else:
                mode = env.network_mode
        # "allowlist" needs a filtering proxy Harbor brings and we do not: no network is the safe side.
        return "none" if mode in ("no-network", "allowlist") else "bridge"

    def container_limits(self, task: Task, role: str) -> dict[str, Any]:
        """The engine's limits and network for a container of `task` in `role` (agent or verifier)."""
        env = task.config.environment
        cpus, mem = env.cpus, env.memory_mb
        if role == "verifier":
            venv = (task.config.verifier.model_extra or {}).get("environment") or {}
            if isinstance(venv, dict):
                cpus = venv.get("cpus", cpus)
                mem = venv.get("memory_mb", mem)
        out: dict[str, Any] = {"network_mode": self._network_mode(task, role), "pids_limit": PIDS_MAX}
        if cpus:
            out["nano_cpus"] = int(min(float(cpus), self.engine.ncpu) * 1e9)
        if mem:
            out["mem_limit"] = f"{int(mem)}m"
            out["memswap_limit"] = f"{int(mem)}m"
        return out

    def sweep(self) -> list[str]:
        return self.engine.sweep()

    def close(self) -> None:
        self.engine.close()


__all__ = ["DockerBackend", "DockerEnvironment", "ImageInfo", "MachineEnvironment"]
