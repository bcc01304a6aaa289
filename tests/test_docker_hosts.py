"""Several Docker hosts: cases spread over engines, and a host that stops answering mid-run.

The second engine is a private dockerd on this machine (own socket, data root and network
namespace; tests/docker_helpers.private_dockerd). It has no network, so the demo tasks' images
are built on the main engine and loaded into it; residual images are made on each engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .drivers import records, start_suite

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["date-range-merge", "ttl-cache", "slugify-unicode", "semver-prerelease"]


@pytest.fixture
def two_hosts(docker_client, bookworm_image):
    from swe_residual.backends.docker.backend import DockerBackend
    from swe_residual.tasks import load_tasks

    from .docker_helpers import private_dockerd

    with private_dockerd() as (second, start, stop):
        main = DockerBackend(run_id=f"hosts-{os.getpid()}", sweep=False)
        try:
            tasks = load_tasks(ROOT / "suites" / "demo" / "tasks", "demo")
            tags = [main.images.clean(tasks[t]).ref for t in TASKS]
        finally:
            main.close()
        subprocess.run(
            f"docker save {' '.join(tags)} debian:bookworm-slim | docker -H {second} load -q",
            shell=True,
            check=True,
            capture_output=True,
        )
        first = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        yield first, second, stop


def suite(run_dir: Path, hosts: list[str], *extra: str) -> subprocess.Popen:
    """The demo suite on TASKS, spread over `hosts`, left running (output: stdout, stderr in it)."""
    on_hosts = [a for h in hosts for a in ("--docker-host", h)]
    return start_suite(
        "-k", " or ".join(TASKS), *extra, *on_hosts, backend="docker", workers=2, run_dir=run_dir
    )


def test_cases_are_spread_over_hosts(tmp_path, two_hosts):
    first, second, _ = two_hosts
    run = tmp_path / "hosts-spread-run"  # containers are found below by the run dir's name
    proc = suite(run, [first, second], "--agent", "oracle", "--agent", "nop")
    out, _ = proc.communicate(timeout=900)
    recs = records(run)
    # 4 tasks x (clean + their states) x 2 agents, every one valid, on both engines
    states = [s for s in yaml.safe_load((ROOT / "states.yaml").read_text())["states"] if s["task"] in TASKS]
    errors = [(r["case_id"], r["host"], r["error"]) for r in recs if r["verdict"] == "infra_error"]
    assert errors == [] and len(recs) == 2 * (len(TASKS) + len(states)), (errors, out[-3000:])
    assert {r["host"] for r in recs} == {first, second}
    assert {r["outcome"] for r in recs if r["agent"] == "oracle"} == {1}
    assert {r["outcome"] for r in recs if r["agent"] == "nop" and r["start"] == "residual"} == {0}
    from .docker_helpers import left_behind

    for host in (first, second):  # nothing of the run left on either engine
        assert left_behind(run.name, host) == []


def test_host_stopping_mid_run_is_infra_and_retried_on_the_other(tmp_path, two_hosts):
    first, second, stop = two_hosts
    agents = tmp_path / "agents.yaml"
    agents.write_text(
        yaml.safe_dump({"agents": {"slow": {"harness": "command", "command": "sleep 3; true"}}})
    )
    proc = suite(
        tmp_path / "run",
        [first, second],
        "--agent-config",
        str(agents),
        "--agent",
        "slow",
        "--start",
        "clean",
        "--infra-retries",
        "2",
    )
    deadline = time.monotonic() + 300
    while (
        time.monotonic() < deadline
        and not subprocess.run(
            ["docker", "-H", second, "ps", "-q", "--filter", "label=swe-residual.case"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    ):
        time.sleep(0.2)
    stop()  # the second engine goes away under a running case
    out, _ = proc.communicate(timeout=900)
    recs = records(tmp_path / "run")
    lost = [r for r in recs if r["verdict"] == "infra_error"]
    # the case running there became an infra error (never the agent's failure) ...
    assert lost and all(r["host"] == second and r["rule"] == "infra_harness" for r in lost), out[-3000:]
    # ... and ran again on the first engine; every case ends with a counted outcome
    final = {}
    for r in recs:
        final[r["case_id"]] = r
    assert len(final) == len(TASKS) and all(
        r["verdict"] == "fail" and r["outcome"] == 0 for r in final.values()
    )
    assert all(final[r["case_id"]]["host"] == first for r in lost)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cases"]["missing"] == [] and summary["cases"]["infra_errors"] == []
    assert proc.returncode == 1, out[-3000:]  # nop-like failures: tests failed, run valid
