"""Runs exported task dirs through Harbor's own Trial API (harbor.trial.trial.Trial) on this
machine's Docker engine. Run by the harbor venv's python (tests/harbor_helpers.py
`harbor_venv_python`), never imported by the project's own venv (it imports harbor):

    python harbor_driver.py PLAN.json RESULTS.json    # a batch (tests/test_harbor_trial.py)
    python harbor_driver.py --serve                   # one trial per stdin line (benchmarks/bench_vs_harbor.py)

PLAN.json: {"concurrency": N, "trials": [{"task_dir", "agent", "jobs_dir", "trial_name"}]}.
RESULTS.json gets one entry per trial: its dir, Harbor's task name, reward, exception type and
`seconds`, the wall time of Trial.create + Trial.run in this process. --serve reads one such trial
spec (JSON) per line and answers each with one result line on stdout, so a caller can time trials
in a warm process, interleaved with its own work; whatever Harbor prints goes to stderr.

LocalDockerEnvironment is the minimal Harbor environment for this machine: Harbor's own Docker
environment drives Docker Compose v2 (and, for no-network tasks, an egress sidecar image pulled
from a registry), neither of which exists here; this one uses the docker CLI alone: the task's
environment/Dockerfile built with the classic builder, one container per trial (`--network none`
for no-network tasks), files moved with `docker cp`, commands run with `docker exec`. Its images
are kept (tag = Harbor's content hash of the environment dir) as a build cache for later runs.
"""

import asyncio
import json
import os
import re
import shlex
import sys
import time
import uuid
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.models.trial.paths import EnvironmentPaths
from harbor.trial.trial import Trial

LABEL = "swe-residual.test=harbor-trial"
IMAGE_REPO = "swe-residual-test/harbor-trial"


async def docker(*args, stdin=None, timeout=None):
    """(exit code, stdout, stderr) of one docker CLI call."""
    proc = await asyncio.create_subprocess_exec(
        "docker",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def docker_ok(*args, stdin=None, timeout=None):
    rc, out, err = await docker(*args, stdin=stdin, timeout=timeout)
    if rc != 0:
        raise RuntimeError(f"docker {' '.join(args[:2])} failed ({rc}): {(err or out).strip()[-2000:]}")
    return out


class LocalDockerEnvironment(BaseEnvironment):
    _build_locks: dict = {}

    @staticmethod
    def type() -> str:
        return "swe-residual-local-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    def _validate_definition(self):
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'}: missing (and no docker_image)")
        if (self.environment_dir / "docker-compose.yaml").exists():
            raise ValueError("compose environments need Docker Compose; not supported here")

    @property
    def _container(self) -> str:
        if not hasattr(self, "_name"):
            self._name = (
                "swr-harbor-"
                + re.sub(r"[^a-z0-9_.-]", "-", self.session_id.lower())[:40]
                + "-"
                + uuid.uuid4().hex[:6]
            )
        return self._name

    async def _image(self, force_build: bool) -> str:
        if not (self.environment_dir / "Dockerfile").is_file():
            return self.task_env_config.docker_image  # prebuilt image only
        tag = f"{IMAGE_REPO}:{re.sub(r'[^a-z0-9]', '', str(self.environment_id).lower())[:32]}"
        lock = self._build_locks.setdefault(tag, asyncio.Lock())
        async with lock:  # one build per environment definition
            rc, _, _ = await docker("image", "inspect", tag)
            if rc != 0 or force_build:
                # The Dockerfile as it is, plus one LABEL right after its first FROM: the layers of
                # these images then descend from no other test's image (tests that build the same
                # Dockerfile remove their image by id, which a child image would block).
                text = (self.environment_dir / "Dockerfile").read_text()
                m = re.search(r"(?im)^\s*FROM\s[^\n]*\n", text)
                text = text[: m.end()] + f"LABEL {LABEL}\n" + text[m.end() :] if m else text
                await docker_ok(
                    "build",
                    "-q",
                    "-t",
                    tag,
                    "-f",
                    "-",
                    str(self.environment_dir),
                    stdin=text.encode(),
                    timeout=self.task_env_config.build_timeout_sec,
                )
        return tag

    async def start(self, force_build: bool) -> None:
        image = await self._image(force_build)
        args = ["run", "-d", "--name", self._container, "--label", LABEL, "--entrypoint", "sleep"]
        if self.network_policy.network_mode == NetworkMode.NO_NETWORK:
            args += ["--network", "none"]
        if self._effective_cpus:
            args += ["--cpus", str(self._effective_cpus)]
        if self._effective_memory_mb:
            args += ["--memory", f"{self._effective_memory_mb}m"]
        if self.task_env_config.workdir:
            args += ["-w", self.task_env_config.workdir]
        for key, value in self._startup_env().items():
            args += ["-e", f"{key}={value}"]
        await docker_ok(*args, image, "infinity", timeout=120)
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs([paths.agent_dir, paths.verifier_dir, paths.artifacts_dir])

    async def stop(self, delete: bool):
        await docker("rm", "-f", "-v", self._container, timeout=120)

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        args = ["exec"]
        cwd = cwd or self.task_env_config.workdir
        if cwd:
            args += ["-w", cwd]
        for key, value in (self._merge_env(env) or {}).items():
            args += ["-e", f"{key}={value}"]
        user = self._resolve_user(user)
        if user is not None:
            args += ["-u", str(user)]
        rc, out, err = await docker(*args, self._container, "bash", "-c", command, timeout=timeout_sec)
        return ExecResult(stdout=out, stderr=err, return_code=rc)

    async def upload_file(self, source_path, target_path):
        await self.exec(f"mkdir -p {shlex.quote(str(Path(target_path).parent))}", user="root")
        await docker_ok("cp", str(source_path), f"{self._container}:{target_path}", timeout=300)

    async def upload_dir(self, source_dir, target_dir):
        await self.exec(f"mkdir -p {shlex.quote(str(target_dir))}", user="root")
        await docker_ok("cp", f"{source_dir}/.", f"{self._container}:{target_dir}", timeout=300)

    async def download_file(self, source_path, target_path):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await docker_ok("cp", f"{self._container}:{source_path}", str(target_path), timeout=300)

    async def download_dir(self, source_dir, target_dir):
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        await docker_ok("cp", f"{self._container}:{source_dir}/.", str(target_dir), timeout=300)


async def run_trial(spec: dict, slots: asyncio.Semaphore) -> dict:
    async with slots:
        started = time.monotonic()
        config = TrialConfig(
            task=TaskConfig(path=Path(spec["task_dir"])),
            trial_name=spec["trial_name"],
            trials_dir=Path(spec["jobs_dir"]),
            agent=AgentConfig(name=spec["agent"]),
            environment=EnvironmentConfig(import_path="__main__:LocalDockerEnvironment", delete=True),
        )
        trial = await Trial.create(config)
        result = await trial.run()
        seconds = time.monotonic() - started
        rewards = result.verifier_result.rewards if result.verifier_result else None
        return {
            "task_dir": spec["task_dir"],
            "agent": spec["agent"],
            "trial_dir": str(trial.paths.trial_dir),
            "task_name": result.task_name,
            "reward": (rewards or {}).get("reward"),
            "exception": result.exception_info.exception_type if result.exception_info else None,
            "exception_message": result.exception_info.exception_message[:500]
            if result.exception_info
            else None,
            "seconds": round(seconds, 4),
        }


async def main(plan_path: str, out_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    slots = asyncio.Semaphore(int(plan.get("concurrency", 4)))
    results = await asyncio.gather(*(run_trial(t, slots) for t in plan["trials"]), return_exceptions=True)
    out = [
        r
        if isinstance(r, dict)
        else {"task_dir": t["task_dir"], "agent": t["agent"], "driver_error": repr(r)}
        for t, r in zip(plan["trials"], results)
    ]
    Path(out_path).write_text(json.dumps(out, indent=1))
    return 0


async def serve() -> int:
    """One trial per stdin line, one result line per trial on the original stdout."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # Harbor's own prints go to stderr
    slots = asyncio.Semaphore(1)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if not line.strip():
            continue
        spec = json.loads(line)
        try:
            result = await run_trial(spec, slots)
        except Exception as exc:  # reported to the caller, the server goes on
            result = {"task_dir": spec.get("task_dir"), "agent": spec.get("agent"), "driver_error": repr(exc)}
        answers.write(json.dumps(result) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        sys.exit(asyncio.run(serve()))
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} PLAN.json RESULTS.json | --serve")
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
