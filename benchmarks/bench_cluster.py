"""Benchmark: the same cases at the same concurrency on a Ray cluster of 2 nodes (2 case slots
each, tests/cluster_machines.py: real nodes in namespaces of their own, each with its own dockerd)
and locally with `-n 4`, measured in one run, on the docker backend; plus the controller's own cost.

Cases: the demo track's tasks date-range-merge and ini-inline-comments from both starts (6 cases
per agent) with agents that sleep SLEEP_S seconds, so the harness's own cost shows. Measured:
- wall time of each run; the cluster's cost per case over the local one as a ratio (target <= 1.3x);
- the controller's CPU seconds and peak memory per case (the pytest process, from its rusage);
- how the controller's cost grows with the cases: CPU and peak memory of the controller planning,
  connecting and collecting 102 and 2,004 cases (`--collect-only --cluster`: nothing submitted),
  and of real cluster runs that dispatch 102 and DISPATCH cases (default 2,004; `BENCH_DISPATCH`)
  on the local backend on the nodes (bubblewrap: a case costs the nodes far less than a
  container, so thousands of cases dispatch in minutes; the controller's work per case - parcels
  out, record and artifacts back, the run dir - is the same for both backends).

    python3 -m pytest benchmarks/bench_cluster.py -s      # as root, with the cluster extra
    BENCH_DISPATCH=600 python3 -m pytest benchmarks/bench_cluster.py -s -k growth
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster_machines import Machines, task_images  # noqa: E402

TASKS = ["date-range-merge", "ini-inline-comments"]
SLEEP_S = 4
SELECT = ["-k", " or ".join(TASKS), "-p", "no:randomly", "-q", "--progress", "off"]


def agents(n: int, sleep: float = SLEEP_S) -> list[str]:
    """n distinct agents (distinct case ids) that each sleep `sleep` seconds and declare done."""
    return [a for i in range(n) for a in ("--agent", f"command:sleep {sleep} # {i}")]


def measured(cmd: list[str]) -> dict:
    """Wall seconds, CPU seconds and peak RSS (MiB) of the command's own process (wait4)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    return {
        "wall_s": time.monotonic() - t0,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "exit": os.waitstatus_to_exitcode(status),
        "tail": out[-1500:],
    }


def pytest_cmd(run_dir: Path, *args: str, backend: str = "docker") -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "suites/demo",
        *SELECT,
        "--backend",
        backend,
        "--run-dir",
        str(run_dir),
        *args,
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    hidden = tmp_path_factory.mktemp("bench-runs")
    images = task_images([ROOT / "suites/demo/tasks" / t for t in TASKS], "demo")
    machines = Machines(Path(f"/var/tmp/swe-residual-bench-{os.getpid()}"), hidden)
    try:
        machines.network()
        machines.start_head()
        machines.add_node("n1", 2, images)
        machines.add_node("n2", 2, images)
        yield machines, hidden
    finally:
        machines.close()


def test_cluster_against_local(cluster):
    machines, runs = cluster
    n_agents = 4  # 24 cases
    cases = 6 * n_agents
    local = measured(pytest_cmd(runs / "local", "-n", "4", *agents(n_agents)))
    remote = measured(pytest_cmd(runs / "cluster", "--cluster", machines.address, *agents(n_agents)))
    assert local["exit"] == remote["exit"] == 1, (local["tail"], remote["tail"])  # the sleeping agents fail
    ratio = remote["wall_s"] / local["wall_s"]
    print(
        f"\n{cases} cases, 4 at once: local -n 4 {local['wall_s']:.1f} s ({local['wall_s'] * 4 / cases:.2f} s/case-slot), "
        f"cluster 2x2 {remote['wall_s']:.1f} s ({remote['wall_s'] * 4 / cases:.2f} s/case-slot): ratio {ratio:.2f}x\n"
        f"cluster controller: {remote['cpu_s']:.1f} CPU s ({remote['cpu_s'] / cases * 1000:.0f} ms/case), "
        f"peak {remote['rss_mib']:.0f} MiB"
    )
    if os.environ.get("SWE_RESIDUAL_BENCH_STRICT") == "1":
        assert ratio <= 1.3


def test_controller_growth(cluster):
    machines, runs = cluster
    rows = []
    for n_agents in (17, 334):  # 102 and 2,004 planned cases
        m = measured(
            pytest_cmd(
                runs / f"plan-{n_agents}", "--cluster", machines.address, "--collect-only", *agents(n_agents)
            )
        )
        assert m["exit"] == 0, m["tail"]
        rows.append((6 * n_agents, m))
    for cases, m in rows:
        print(
            f"planned {cases:>5} cases (collect only): {m['cpu_s']:.1f} CPU s, peak {m['rss_mib']:.0f} MiB, {m['wall_s']:.1f} s"
        )
    dispatch = int(os.environ.get("BENCH_DISPATCH") or 2004)
    for n_agents in (17, dispatch // 6):
        cases = 6 * n_agents
        quick = [a for i in range(n_agents) for a in ("--agent", f"command:true # {i}")]
        real = measured(
            pytest_cmd(runs / f"real-{cases}", "--cluster", machines.address, *quick, backend="local")
        )
        assert real["exit"] == 1, real["tail"]  # `true` solves nothing
        recs = (runs / f"real-{cases}" / "results.jsonl").read_text().splitlines()
        assert len(recs) == cases, real["tail"]
        print(
            f"dispatched {cases:>5} cases (local backend on the nodes, agent `true`): {real['wall_s']:.1f} s; "
            f"controller {real['cpu_s']:.1f} CPU s ({real['cpu_s'] / cases * 1000:.0f} ms/case), "
            f"peak {real['rss_mib']:.0f} MiB"
        )
