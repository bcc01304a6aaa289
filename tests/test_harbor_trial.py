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
LocalDockerEnvironment, a minimal Harbor environment of tests/harbor_driver.py (run by the harbor
venv's python; benchmarks/bench_vs_harbor.py times the same driver): docker CLI, classic builder,
one container per trial, `--network none` for no-network tasks. Its images are kept (tag =
Harbor's content hash of the environment dir) as a build cache for later runs.

Skips with the reason without Docker (fails with SWE_RESIDUAL_REQUIRE_DOCKER=1) or without a
Python >= 3.12 / the harbor package (fails with SWE_RESIDUAL_REQUIRE_HARBOR=1).
SWE_RESIDUAL_HARBOR_TRIALS=N runs N trials at a time (default 4).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from .drivers import ON_PYTHONPATH, cli, records, start_suite
from .harbor_helpers import HARBOR_DRIVER, harbor_venv_python

DEMO_TASKS, DEMO_STATES = 8, 17
AGENTS = ("oracle", "nop")
CONCURRENCY = int(os.environ.get("SWE_RESIDUAL_HARBOR_TRIALS", "4"))


@pytest.fixture(scope="module")
def harbor_python() -> str:
    return harbor_venv_python()


def table3(report_text: str) -> str:
    """The Table 3 block of `swe-residual report`'s text output."""
    m = re.search(r"^Table 3 - success by track.*?(?=\n\n|\Z)", report_text, re.S | re.M)
    assert m, report_text[:2000]
    return m.group(0)


def by_case(run_dir: Path) -> dict[str, dict]:
    out = records(run_dir, by="case_id")
    assert len(out) == len(records(run_dir))  # one attempt per case
    return out


def local_run(run_dir: Path, log: Path) -> subprocess.Popen:
    """`pytest suites/demo --agent oracle --agent nop --run-dir RUN`, as a user runs it."""
    env = {**ON_PYTHONPATH, **{k: None for k in os.environ if k.startswith("PYTEST")}}
    with open(log, "w") as fh:
        return start_suite(
            "-q",
            "-p",
            "no:cacheprovider",
            agents=list(AGENTS),
            run_dir=run_dir,
            random_order=True,
            env=env,
            stdout=fh,
            text=False,
        )


@pytest.mark.docker
def test_exported_demo_track_through_harbors_trial(harbor_python, docker_client, bookworm_image, tmp_path):
    started = time.monotonic()
    export = tmp_path / "export"
    res = cli("export", "harbor", "--track", "demo", "--out", str(export), env=ON_PYTHONPATH)
    assert res.returncode == 0, res.stderr
    entries = json.loads((export / "export.json").read_text())["tasks"]
    residual = [e for e in entries if e["start"] == "residual"]
    assert len(entries) == DEMO_TASKS + DEMO_STATES and len(residual) == DEMO_STATES

    local_dir, local_log = tmp_path / "local-run", tmp_path / "local-run.log"
    local = local_run(local_dir, local_log)
    try:
        # every exported dir, with Harbor's oracle and with nop; trial names as Harbor makes them
        jobs = {agent: tmp_path / "jobs" / f"demo-{agent}" for agent in AGENTS}
        plan = {
            "concurrency": CONCURRENCY,
            "trials": [
                {
                    "task_dir": str(export / e["name"]),
                    "agent": agent,
                    "jobs_dir": str(jobs[agent]),
                    "trial_name": f"{e['name'][:32]}__{uuid.uuid4().hex[:7]}",
                }
                for agent in AGENTS
                for e in entries
            ],
        }
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        run = subprocess.run(
            [harbor_python, str(HARBOR_DRIVER), str(tmp_path / "plan.json"), str(tmp_path / "trials.json")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        trials_s = time.monotonic() - started
        local.wait(timeout=900)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    out = local_log.read_text()
    assert local.returncode == 1 and re.search(r"\b25 failed, 25 passed\b", out), out[-3000:]  # nop fails

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
        assert (trial_dir / "verifier" / "reward.txt").is_file() and (
            trial_dir / "verifier" / "ctrf.json"
        ).is_file()
        if t["agent"] == "oracle" and e["start"] == "residual":  # the state reverse-applied, no fallback
            assert "do not reverse-apply" not in (trial_dir / "agent" / "oracle.txt").read_text()
    assert len(got) == 2 * len(entries)
    oracle_ones = [n for n in by_name if got[(n, "oracle")] == 1.0]
    nop_zeros = [n for n in by_name if got[(n, "nop")] == 0.0]
    assert sorted(oracle_ones) == sorted(by_name), {n: got[(n, "oracle")] for n in by_name}  # 25/25
    assert sorted(nop_zeros) == sorted(by_name), {n: got[(n, "nop")] for n in by_name}
    assert len([n for n in nop_zeros if by_name[n]["start"] == "residual"]) == DEMO_STATES  # 17/17

    # Harbor's trial dirs -> our run dir; the same report as the local run of the same cases
    harbor_dir = tmp_path / "harbor-run"
    res = cli(
        "import",
        "harbor-job",
        *(str(jobs[a]) for a in AGENTS),
        "--run-dir",
        str(harbor_dir),
        env=ON_PYTHONPATH,
    )
    assert (
        res.returncode == 0 and "imported 50 trials (50 cases), 0 already imported, 0 failed" in res.stdout
    ), res.stdout[-3000:] + res.stderr[-2000:]
    reports = {}
    for name, run_dir in (("harbor", harbor_dir), ("local", local_dir)):
        res = cli("report", str(run_dir), env=ON_PYTHONPATH)
        assert res.returncode == 0, res.stderr
        reports[name] = table3(res.stdout)
    assert reports["harbor"] == reports["local"], "\n".join(f"--- {k}\n{v}" for k, v in reports.items())
    rows = {tuple(line.split()[:4]) for line in reports["local"].splitlines()}
    assert ("demo", "oracle", "100.0*", "100.0*") in rows and ("demo", "nop", "0.0", "0.0") in rows
    imported, local_records = by_case(harbor_dir), by_case(local_dir)
    assert sorted(imported) == sorted(local_records) and len(imported) == 50
    same = (
        "agent",
        "task",
        "start",
        "state",
        "predecessor",
        "outcome",
        "verdict",
        "rule",
        "termination",
        "tests",
        "missing_tests",
        "integrity",
        "error",
    )
    for case, r in imported.items():
        assert {k: r[k] for k in same} == {k: local_records[case][k] for k in same}, case
        assert r["tests"] and r["harness"] == f"harbor/{r['agent']}"  # per-test detail came through
    (tmp_path / "timing.txt").write_text(f"trials {trials_s:.0f}s, all {time.monotonic() - started:.0f}s\n")
    print(f"Harbor trials: {len(trials)} in {trials_s:.0f}s; test {time.monotonic() - started:.0f}s")
