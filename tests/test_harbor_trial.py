"""Exported tasks through Harbor's own Trial API: every exported task of the demo track, on Docker.

`swe-residual export harbor --track demo` writes 25 task dirs (8 clean starts, 17 residual). Each
runs through `harbor.trial.trial.Trial` (Harbor from PyPI, in the Python >= 3.12 venv of
harbor_helpers) twice, with Harbor's own `oracle` and `nop` agents: the oracle must score reward
1 on every dir (a residual dir's reference solution must work from the residual state), nop 0
(on the residual dirs the inherited work must not pass the hidden tests; on the clean ones nothing
does). The trial dirs are then imported with `swe-residual import harbor-job` and reported with
`swe-residual report`; Table 3 and every case's verdict and per-test statuses must equal those of
a local run of the same cases (`pytest suites/demo --agent oracle --agent nop`, run here as a
subprocess alongside the trials).

Harbor's own Docker environment needs Docker Compose v2 (and for no-network tasks an egress
sidecar image from a registry); neither is on these machines, so the trials run in
LocalDockerEnvironment, a minimal Harbor environment written here (TRIAL_DRIVER): docker CLI,
classic builder, one container per trial, `--network none` for no-network tasks. Its images are
kept (tag = Harbor's content hash of the environment dir) as a build cache for later runs.

Skips with the reason without Docker (fails with SWE_RESIDUAL_REQUIRE_DOCKER=1) or without a
Python >= 3.12 / the harbor package (fails with SWE_RESIDUAL_REQUIRE_HARBOR=1).
SWE_RESIDUAL_HARBOR_TRIALS=N runs N trials at a time (default 4).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .harbor_helpers import harbor_venv_python

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
DEMO_TASKS, DEMO_STATES = 8, 17
AGENTS = ("oracle", "nop")
CONCURRENCY = int(os.environ.get("SWE_RESIDUAL_HARBOR_TRIALS", "4"))

# Run by the harbor venv's python: PLAN.json -> RESULTS.json, one Harbor Trial per plan entry.
TRIAL_DRIVER = r'''"""Runs exported task dirs through Harbor's own Trial API (harbor.trial.trial.Trial) on this
machine's Docker engine. Run with the harbor venv's python:

    python harbor_trial_driver.py PLAN.json RESULTS.json

PLAN.json: {"concurrency": N, "trials": [{"task_dir", "agent", "jobs_dir", "trial_name"}]}.
RESULTS.json gets one entry per trial: its dir, Harbor's task name, reward, exception type.

LocalDockerEnvironment is the minimal Harbor environment for this machine: Harbor's own Docker
environment drives Docker Compose v2 (and, for no-network tasks, an egress sidecar image pulled
from a registry), neither of which exists here; this one uses the docker CLI alone: the task's
environment/Dockerfile built with the classic builder, one container per trial (`--network none`
for no-network tasks), files moved with `docker cp`, commands run with `docker exec`.
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
        "docker", *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DOCKER_BUILDKIT": "0"})
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
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
            self._name = "swr-harbor-" + re.sub(r"[^a-z0-9_.-]", "-", self.session_id.lower())[:40] + \
                "-" + uuid.uuid4().hex[:6]
        return self._name

    async def _image(self, force_build: bool) -> str:
        if not (self.environment_dir / "Dockerfile").is_file():
            return self.task_env_config.docker_image          # prebuilt image only
        tag = f"{IMAGE_REPO}:{re.sub(r'[^a-z0-9]', '', str(self.environment_id).lower())[:32]}"
        lock = self._build_locks.setdefault(tag, asyncio.Lock())
        async with lock:                                      # one build per environment definition
            rc, _, _ = await docker("image", "inspect", tag)
            if rc != 0 or force_build:
                # The Dockerfile as it is, plus one LABEL right after its first FROM: the layers of
                # these images then descend from no other test's image (tests that build the same
                # Dockerfile remove their image by id, which a child image would block).
                text = (self.environment_dir / "Dockerfile").read_text()
                m = re.search(r"(?im)^\s*FROM\s[^\n]*\n", text)
                text = text[:m.end()] + f"LABEL {LABEL}\n" + text[m.end():] if m else text
                await docker_ok("build", "-q", "-t", tag, "-f", "-", str(self.environment_dir),
                                stdin=text.encode(), timeout=self.task_env_config.build_timeout_sec)
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
            task=TaskConfig(path=Path(spec["task_dir"])), trial_name=spec["trial_name"],
            trials_dir=Path(spec["jobs_dir"]), agent=AgentConfig(name=spec["agent"]),
            environment=EnvironmentConfig(import_path="__main__:LocalDockerEnvironment", delete=True))
        trial = await Trial.create(config)
        result = await trial.run()
        rewards = result.verifier_result.rewards if result.verifier_result else None
        return {"task_dir": spec["task_dir"], "agent": spec["agent"], "trial_dir": str(trial.paths.trial_dir),
                "task_name": result.task_name, "reward": (rewards or {}).get("reward"),
                "exception": result.exception_info.exception_type if result.exception_info else None,
                "exception_message": result.exception_info.exception_message[:500] if result.exception_info else None,
                "seconds": round(time.monotonic() - started, 1)}


async def main(plan_path: str, out_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    slots = asyncio.Semaphore(int(plan.get("concurrency", 4)))
    results = await asyncio.gather(*(run_trial(t, slots) for t in plan["trials"]), return_exceptions=True)
    out = [r if isinstance(r, dict) else {"task_dir": t["task_dir"], "agent": t["agent"], "driver_error": repr(r)}
           for t, r in zip(plan["trials"], results)]
    Path(out_path).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
'''


@pytest.fixture(scope="module")
def harbor_python() -> str:
    return harbor_venv_python()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swe_residual.cli", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600, check=False)


def table3(report_text: str) -> str:
    """The Table 3 block of `swe-residual report`'s text output."""
    m = re.search(r"^Table 3 - success by track.*?(?=\n\n|\Z)", report_text, re.S | re.M)
    assert m, report_text[:2000]
    return m.group(0)


def records(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    out = {}
    for line in lines:
        r = json.loads(line)
        out[r["case_id"]] = r
    assert len(out) == len(lines)          # one attempt per case
    return out


def local_run(run_dir: Path, log: Path) -> subprocess.Popen:
    """`pytest suites/demo --agent oracle --agent nop --run-dir RUN`, as a user runs it."""
    env = {k: v for k, v in ENV.items() if not k.startswith(("PYTEST_", "PYTEST"))}
    with open(log, "w") as fh:
        return subprocess.Popen([sys.executable, "-m", "pytest", "suites/demo", "--agent", "oracle", "--agent", "nop",
                                 "--run-dir", str(run_dir), "-q", "-p", "no:cacheprovider"],
                                cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)


@pytest.mark.docker
def test_exported_demo_track_through_harbors_trial(harbor_python, docker_client, bookworm_image, tmp_path):
    started = time.monotonic()
    export = tmp_path / "export"
    res = cli("export", "harbor", "--track", "demo", "--out", str(export))
    assert res.returncode == 0, res.stderr
    entries = json.loads((export / "export.json").read_text())["tasks"]
    residual = [e for e in entries if e["start"] == "residual"]
    assert len(entries) == DEMO_TASKS + DEMO_STATES and len(residual) == DEMO_STATES

    local_dir, local_log = tmp_path / "local-run", tmp_path / "local-run.log"
    local = local_run(local_dir, local_log)
    try:
        # every exported dir, with Harbor's oracle and with nop; trial names as Harbor makes them
        jobs = {agent: tmp_path / "jobs" / f"demo-{agent}" for agent in AGENTS}
        plan = {"concurrency": CONCURRENCY, "trials": [
            {"task_dir": str(export / e["name"]), "agent": agent, "jobs_dir": str(jobs[agent]),
             "trial_name": f"{e['name'][:32]}__{uuid.uuid4().hex[:7]}"} for agent in AGENTS for e in entries]}
        (tmp_path / "driver.py").write_text(TRIAL_DRIVER)
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        run = subprocess.run([harbor_python, str(tmp_path / "driver.py"), str(tmp_path / "plan.json"),
                              str(tmp_path / "trials.json")], cwd=tmp_path, capture_output=True, text=True,
                             timeout=1500, check=False)
        assert run.returncode == 0, run.stderr[-4000:]
        trials_s = time.monotonic() - started
        local.wait(timeout=900)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    out = local_log.read_text()
    assert local.returncode == 1 and re.search(r"\b25 failed, 25 passed\b", out), out[-3000:]   # nop fails

    trials = json.loads((tmp_path / "trials.json").read_text())
    by_name = {e["name"]: e for e in entries}
    got: dict[tuple[str, str], float | None] = {}
    for t in trials:
        assert "driver_error" not in t, t
        e = by_name[Path(t["task_dir"]).name]
        assert t["exception"] is None, t
        assert t["task_name"] == e["harbor_name"]
        got[(e["name"], t["agent"])] = t["reward"]
        trial_dir = Path(t["trial_dir"])
        assert (trial_dir / "verifier" / "reward.txt").is_file() and (trial_dir / "verifier" / "ctrf.json").is_file()
        if t["agent"] == "oracle" and e["start"] == "residual":   # the state reverse-applied, no fallback
            assert "do not reverse-apply" not in (trial_dir / "agent" / "oracle.txt").read_text()
    assert len(got) == 2 * len(entries)
    oracle_ones = [n for n in by_name if got[(n, "oracle")] == 1.0]
    nop_zeros = [n for n in by_name if got[(n, "nop")] == 0.0]
    assert sorted(oracle_ones) == sorted(by_name), {n: got[(n, "oracle")] for n in by_name}           # 25/25
    assert sorted(nop_zeros) == sorted(by_name), {n: got[(n, "nop")] for n in by_name}
    assert len([n for n in nop_zeros if by_name[n]["start"] == "residual"]) == DEMO_STATES            # 17/17

    # Harbor's trial dirs -> our run dir; the same report as the local run of the same cases
    harbor_dir = tmp_path / "harbor-run"
    res = cli("import", "harbor-job", *(str(jobs[a]) for a in AGENTS), "--run-dir", str(harbor_dir))
    assert res.returncode == 0 and "imported 50 trials (50 cases), 0 already imported, 0 failed" in res.stdout, \
        res.stdout[-3000:] + res.stderr[-2000:]
    reports = {}
    for name, run_dir in (("harbor", harbor_dir), ("local", local_dir)):
        res = cli("report", str(run_dir))
        assert res.returncode == 0, res.stderr
        reports[name] = table3(res.stdout)
    assert reports["harbor"] == reports["local"], "\n".join(f"--- {k}\n{v}" for k, v in reports.items())
    rows = {tuple(line.split()[:4]) for line in reports["local"].splitlines()}
    assert ("demo", "oracle", "100.0*", "100.0*") in rows and ("demo", "nop", "0.0", "0.0") in rows
    imported, local_records = records(harbor_dir), records(local_dir)
    assert sorted(imported) == sorted(local_records) and len(imported) == 50
    same = ("agent", "task", "start", "state", "predecessor", "outcome", "verdict", "rule", "termination", "tests",
            "missing_tests", "integrity", "error")
    for case, r in imported.items():
        assert {k: r[k] for k in same} == {k: local_records[case][k] for k in same}, case
        assert r["tests"] and r["harness"] == f"harbor/{r['agent']}"    # per-test detail came through
    (tmp_path / "timing.txt").write_text(f"trials {trials_s:.0f}s, all {time.monotonic() - started:.0f}s\n")
    print(f"Harbor trials: {len(trials)} in {trials_s:.0f}s; test {time.monotonic() - started:.0f}s")
