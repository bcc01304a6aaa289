"""The whole DeepSWE path a user with internet takes (suites/deepswe/README.md), offline: a
fixture release in the published layout served from 127.0.0.1 (tests/deepswe_release_fixture.py)
-> `tasks fetch` (a local git URL) -> `residualize import --format deepswe-release` -> `filter
--per-task 1` -> two reviewers -> `build` (docker, the track's default) -> `validate` -> `states
pack` -> `tasks fetch` + `states fetch` into a fresh cache -> `pytest suites/deepswe` runs the
fetched states without --tasks-dir or --states. Real commands in subprocesses, a real engine.

Each step's wall time is printed (`-s`) for suites/deepswe/README.md."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

from tests.deepswe_release_fixture import copy_tasks, make_release, serve

from .drivers import cli, records, run_suite


def _git_repo(tasks: Path) -> Path:
    upstream = tasks.parent
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tasks"],
    ):
        subprocess.run(["git", *args], cwd=upstream, check=True, capture_output=True)
    return upstream


class Steps:
    """Runs the CLI and pytest against one cache, timing each step."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.times: dict[str, float] = {}

    def run(self, step: str, driver, *args: str, **kw) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        proc = driver(*args, cache=self.cache, **kw)
        self.times[step] = self.times.get(step, 0.0) + time.monotonic() - t0
        return proc

    def cli(self, step: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = self.run(step, cli, *args)
        if ok:
            assert proc.returncode == 0, f"{step}: {args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc


def test_release_to_fetched_pack_to_a_suite_run(tmp_path: Path, bookworm_image):
    from .docker_helpers import require_docker

    require_docker()
    tasks = copy_tasks(tmp_path / "upstream" / "tasks")
    upstream = _git_repo(tasks)
    fx = make_release(tmp_path / "release", tasks)
    maker = Steps(tmp_path / "cache-maker")
    maker.cli("tasks fetch", "tasks", "fetch", "deepswe", "--url", upstream.as_uri())
    work = tmp_path / "work"
    with serve(fx) as server:
        proc = maker.cli(
            "import",
            "residualize",
            "import",
            "--format",
            "deepswe-release",
            "--release",
            server.manifest_url,
            "--track",
            "deepswe",
            "-j",
            "8",
            str(work),
        )
    assert "imported" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    maker.cli("filter", "residualize", "filter", "--per-task", "1", "--seed", "1", str(work))
    status = json.loads(maker.cli("status", "residualize", "status", "--format", "json", str(work)).stdout)
    candidates = status["candidates"]
    # one candidate per task at most (the three fixture tasks each have failing, declared-complete runs)
    tasks_of = [c["task"] for c in candidates]
    assert len(candidates) == 3 and len(set(tasks_of)) == 3, candidates
    for reviewer in ("ana", "ben"):
        for cand in candidates:
            maker.cli(
                "review",
                "residualize",
                "review",
                "--reviewer",
                reviewer,
                "--candidate",
                cand["id"],
                "--task-directed",
                "yes",
                "--consistent",
                "yes",
                str(work),
            )
    out = maker.cli("build", "residualize", "build", "-j", "2", str(work)).stdout
    states_file = work / "states" / "states.yaml"  # build's default target: the work dir's states file
    states = yaml.safe_load(states_file.read_text())["states"]
    assert len(states) >= 1 and "included" in out, out
    included = {s["id"] for s in states}
    proc = maker.cli("validate", "validate", "--track", "deepswe", "--states", str(states_file))
    assert f"{len(states)}/{len(states)} states valid" in proc.stdout, proc.stdout
    pack = tmp_path / "deepswe-states.tar.gz"
    maker.cli(
        "pack", "states", "pack", "--states", str(states_file), "--track", "deepswe", "--out", str(pack)
    )

    user = Steps(tmp_path / "cache-user")  # another machine: a fresh cache
    user.cli("tasks fetch", "tasks", "fetch", "deepswe", "--url", upstream.as_uri())
    user.cli("states fetch", "states", "fetch", str(pack), "--track", "deepswe")
    run = tmp_path / "run"
    proc = user.run(
        "suite run",
        run_suite,
        suite="suites/deepswe",
        workers=2,
        agents=["oracle"],
        run_dir=run,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    recs = records(run)
    clean = sorted(r["task"] for r in recs if r["start"] == "clean")
    residual = sorted(r["state"] for r in recs if r["start"] == "residual")
    # every fixture task from the clean state, every fetched state from the residual start, all solved
    assert clean == sorted(tasks_of) and residual == sorted(included), (clean, residual)
    assert all(r["outcome"] == 1 and r["backend"] == "docker" for r in recs), recs
    timings = {
        **{f"maker {k}": v for k, v in maker.times.items()},
        **{f"user {k}": v for k, v in user.times.items()},
    }
    print("\n" + "\n".join(f"{k:24} {v:7.1f} s" for k, v in timings.items()))
