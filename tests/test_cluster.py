"""Cluster runs on a real Ray cluster on this machine (tests/cluster_machines.py): a head and two
nodes, each in its own namespaces with its own dockerd, the controller's run dirs hidden from them.
Real suite runs (`pytest suites/demo --cluster ...`) on the docker backend. Needs root, `ip` and the
`cluster` extra; skipped without them unless SWE_RESIDUAL_REQUIRE_CLUSTER=1 (CI sets it)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from .cluster_machines import Machines, task_images, wait_for
from .drivers import ROOT, cli, records, run_suite, start_suite
from .test_grading_channels import FLIP

TASKS = ["date-range-merge", "ini-inline-comments"]
SELECT = ["-k", " or ".join(TASKS), "--backend", "docker", "--start", "clean"]

_missing = (
    "not root"
    if os.geteuid() != 0
    else "no `ip`/`nsenter`/`dockerd`"
    if not all(shutil.which(c) for c in ("ip", "nsenter", "unshare", "dockerd"))
    else "the cluster extra is not installed (pip install -e '.[cluster]')"
    if importlib.util.find_spec("ray") is None
    else ""
)
if _missing and os.environ.get("SWE_RESIDUAL_REQUIRE_CLUSTER") == "1":
    raise RuntimeError(f"SWE_RESIDUAL_REQUIRE_CLUSTER=1 but {_missing}")
# one cluster for the module, in one process: under xdist (-n) the tests leave it to their own run
_xdist = "runs one Ray cluster in one process: `pytest tests/test_cluster.py`, without -n"
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.skipif(bool(_missing), reason=_missing),
    pytest.mark.skipif(bool(os.environ.get("PYTEST_XDIST_WORKER")), reason=_xdist),
]


@pytest.fixture(scope="module")
def hidden(tmp_path_factory) -> Path:
    """The parent of every run dir these tests make: a tmpfs covers it in each node's namespace."""
    return tmp_path_factory.mktemp("cluster-runs")


MACHINE_TASK = ROOT / "suites/terminal_bench/tasks/sales-report"


@pytest.fixture(scope="module")
def cluster(hidden: Path, tmp_path_factory):
    images = task_images([ROOT / "suites/demo/tasks" / t for t in TASKS], "demo")
    images += task_images([MACHINE_TASK], "terminal_bench")  # built on the host (its apt needs a network)
    machines = Machines(Path(f"/var/tmp/swe-residual-cluster-{os.getpid()}"), hidden)
    try:
        machines.network()
        machines.start_head()
        machines.add_node("n1", 2, images)
        machines.add_node("n2", 2, images)
        yield machines
    finally:
        machines.close()


def _node_sees(node, path: Path) -> list[str]:
    """What a node's processes see in `path` (inside its mount namespace)."""
    pid = node.ray.pid
    out = subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "ls", "-A", str(path)], capture_output=True, text=True
    )
    return out.stdout.split()


def test_cluster_with_n_is_a_usage_error(hidden):
    proc = run_suite(*SELECT, "--cluster", "127.0.0.1:1", agents=["nop"], workers=2, run_dir=hidden / "n")
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "--cluster with -n" in proc.stderr


def test_a_dead_address_is_one_line_not_a_hang(hidden):
    t0 = time.monotonic()
    proc = run_suite(*SELECT, "--cluster", "127.0.0.1:1", agents=["nop"], run_dir=hidden / "dead")
    assert proc.returncode == 4 and time.monotonic() - t0 < 60
    assert "--cluster 127.0.0.1:1: no Ray head there" in proc.stderr


def test_a_run_without_cluster_never_imports_ray(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "rayprobe.py").write_text(
        "import sys\n\ndef pytest_unconfigure(config):\n"
        f"    open({str(tmp_path / 'ray.txt')!r}, 'w').write(str('ray' in sys.modules))\n"
    )
    proc = run_suite(
        "-k",
        "date-range-merge-clean",
        "-p",
        "rayprobe",
        agents=["nop"],
        run_dir=tmp_path / "run",
        env={"PYTHONPATH": f"{probe}:{ROOT}"},
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert (tmp_path / "ray.txt").read_text() == "False"


AGENTS = {
    # makes the hidden tests' report say passed with a conftest.py hook (the task stays unsolved)
    "forger": {"harness": "command", "command": f"printf '%s' {shlex.quote(FLIP)} > conftest.py"},
    # keeps the request it was given in the repository: the final patch shows what it read
    "reader": {"harness": "command", "command": 'cp "$TASK_DIR/instruction.md" request-seen.md'},
}


@pytest.fixture(scope="module")
def demo_run(cluster, hidden) -> tuple[Path, subprocess.CompletedProcess]:
    """One cluster run that the tests below read: oracle, nop and the forger on both tasks from the
    clean start, and the reader from date-range-merge's states with the summary handoff view."""
    run = hidden / "spread"
    config = hidden / "agents.yaml"
    config.write_text(yaml.safe_dump({"agents": AGENTS}))
    select = (
        "(date-range-merge or ini-inline-comments) and clean and not reader"
        " or reader and date-range-merge and summary"
    )
    proc = run_suite(
        "-k",
        select,
        "--backend",
        "docker",
        "--handoff-view",
        "summary",
        "--cluster",
        cluster.address,
        "--progress",
        "plain",
        "--progress-interval",
        "1",
        agents=["oracle", "nop", "forger", "reader"],
        agent_config=config,
        run_dir=run,
    )
    return run, proc


def test_cases_spread_over_both_nodes(cluster, hidden, demo_run):
    run, proc = demo_run
    assert proc.returncode == 1, proc.stdout[-3000:]  # nop's failures
    recs = records(run)
    assert sorted(r["case_id"] for r in recs) == sorted({r["case_id"] for r in recs})  # each once
    assert len(recs) == 8 and all(r["verdict"] in ("pass", "fail") for r in recs), recs
    assert {r["node"] for r in recs} == {"n1", "n2"}
    for r in recs:
        assert r["artifacts"] and all((run / p).is_file() for p in r["artifacts"].values())
    assert all(n.containers() == [] for n in cluster.nodes)
    assert all(_node_sees(n, hidden) == [] for n in cluster.nodes)  # the run dirs are not theirs to read


def test_progress_shows_the_cases_per_node(demo_run):
    run, proc = demo_run
    lines = [line for line in proc.stdout.splitlines() if line.startswith("swe-residual: ")]
    assert lines[0].startswith("swe-residual: running 8 cases on the cluster at "), lines
    assert any(re.search(r"nodes: n1 \d running, \d done, n2 \d running, \d done", line) for line in lines), (
        lines
    )
    per_node = Counter(r["node"] for r in records(run))
    final = next(line for line in lines if " cases done in " in line)
    assert final.endswith(f"cases per node: n1 {per_node['n1']}, n2 {per_node['n2']}"), final


def test_run_page_and_case_pages_name_the_node(demo_run):
    from swe_residual.report.html.run_page import page_name

    run, _ = demo_run
    html = (run / "report.html").read_text()
    data = json.loads(
        re.search(r'<script type="application/json" id="case-data">(.*?)</script>', html).group(1)
    )
    assert sorted(data["nodes"]) == ["n1", "n2"] and '<th data-k="node"' in html
    recs = records(run)
    shown = {data["nodes"][row[11]] for row in data["rows"]}
    assert shown == {r["node"] for r in recs}
    for r in recs:
        page = (run / "pages" / page_name(r["case_id"])).read_text()
        assert f"cluster node {r['node']}" in page, r["case_id"]


@pytest.mark.browser
def test_case_list_shows_and_sorts_by_node_in_chromium(demo_run, tmp_path):
    from .chromium_cdp import Browser
    from .test_html_report import chromium

    run, _ = demo_run
    node_of = {r["case_id"]: r["node"] for r in records(run)}
    browser = Browser(chromium(), str(tmp_path / "profile"))
    try:
        page = browser.new_page()
        page.goto((run / "report.html").as_uri())
        rows = "[...document.querySelectorAll('#cl-body tr')].map(r => [...r.cells].map(c => c.textContent))"
        assert {r[0]: r[-1] for r in page.eval(rows)} == node_of  # the last column: the case's node
        page.click('#cl-table th[data-k="node"]')
        nodes = [r[-1] for r in page.eval(rows)]
        assert nodes == sorted(nodes) and set(nodes) == {"n1", "n2"}
    finally:
        browser.close()


def test_integrity_checks_and_the_hardened_regrade_run_on_the_node(demo_run):
    run, _ = demo_run
    for r in (r for r in records(run) if r["agent"] == "forger"):
        # the forged report gives outcome 1; the node's hardened re-grade (no conftest.py) fails it
        assert (r["verdict"], r["outcome"]) == ("pass", 1), r
        assert any(s.startswith("hardened-regrade-differs: outcome 1 -> 0") for s in r["integrity"]), r
        assert (run / r["artifacts"]["hardened_log"]).is_file()
    honest = [r for r in records(run) if r["agent"] == "oracle"]
    assert honest and all(r["outcome"] == 1 and r["integrity"] == [] for r in honest)


def test_gates_read_a_cluster_run(demo_run):
    run, _ = demo_run
    flagged = cli("gate", str(run), "--max-flagged", "0", "--max-infra", "0")
    assert flagged.returncode == 10, flagged.stdout + flagged.stderr
    assert "GATE: demo/forger: 2 runs with integrity flags" in flagged.stdout  # its forged passes
    assert "gates: failed, exit status 10 (1 of " in flagged.stdout  # every other check holds
    assert cli("gate", str(run), "--max-flagged", "2", "--max-infra", "0").returncode == 0


def test_a_handoff_view_reaches_the_node(demo_run):
    run, _ = demo_run
    readers = [r for r in records(run) if r["agent"] == "reader"]
    assert len(readers) == 2 and all(r["start"] == "residual+summary" for r in readers), readers
    for r in readers:
        patch = (run / r["artifacts"]["patch"]).read_text()
        assert "+## Handoff from the previous attempt" in patch, r[
            "case_id"
        ]  # made on the node from the trajectory


def test_the_machine_track_snapshots_on_the_node(cluster, hidden):
    run = hidden / "machine"
    proc = run_suite(
        "-k",
        "sales-report",
        "--start",
        "residual",
        "--cluster",
        cluster.address,
        suite="suites/terminal_bench",
        agents=["oracle", "nop"],
        run_dir=run,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]  # nop's failure
    recs = records(run, by="agent")
    assert (recs["oracle"]["outcome"], recs["nop"]["outcome"]) == (1, 0), recs
    for r in recs.values():
        node = next(n for n in cluster.nodes if n.name == r["node"])
        snaps = node.docker("images", "-q", "swe-residual/machine-sales-report").stdout.split()
        assert snaps, f"no snapshot image on {node.name}, where {r['case_id']} ran"
    assert all(n.containers() == [] for n in cluster.nodes)


def test_join_checks_the_engine_and_loads_images_with_progress(cluster, hidden):
    for node in cluster.nodes:  # what each node's join printed before it joined
        log = (node.dir / "join.log").read_text()
        assert "docker backend: available" in log, log
        assert re.search(r"images: loading \S+ from unix:///run/docker.sock \(1/\d+\)", log), log
        assert re.search(r"images: \d+ present, \d+ loaded", log), log
    dead = cli(
        "cluster",
        "join",
        cluster.address,
        "--slots",
        "1",
        "--name",
        "no-engine",
        env={"DOCKER_HOST": f"unix://{hidden}/no-engine.sock"},
    )
    assert dead.returncode == 2, dead.stdout + dead.stderr  # the CLI's usage error
    err = dead.stderr.strip().splitlines()
    assert len(err) == 1 and f"no Docker engine answers at unix://{hidden}/no-engine.sock" in err[0], err
    assert "no-engine" not in cluster.alive()


def test_controller_killed_then_resume(cluster, hidden):
    run = hidden / "killed"
    args = [*SELECT, "--cluster", cluster.address]
    proc = start_suite(
        *args, agents=["command:sleep 60"], run_dir=run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for("a case running on a node", lambda: any(n.containers(running=True) for n in cluster.nodes), 120)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.monotonic()
    wait_for(
        "the killed controller's cases to stop",
        lambda: not any(n.containers(running=True) for n in cluster.nodes),
        5,
        every=0.2,
    )
    assert time.monotonic() - t0 <= 5
    wait_for("their containers to go", lambda: not any(n.containers() for n in cluster.nodes), 30)
    # the same cases again, the agent's budget cut to 3 s: each ends with a verdict (budget)
    done = run_suite(*args, "--agent-timeout", "3", agents=["command:sleep 60"], run_dir=run, resume=True)
    assert done.returncode == 1, done.stdout[-3000:]
    recs = records(run)
    assert len(recs) == 2 and all(r["verdict"] == "fail" and r["rule"] == "budget" for r in recs)


def test_a_case_with_no_result_in_time_is_cancelled_and_run_elsewhere(cluster, hidden):
    # date-range-merge with a 10 s verifier: no result within 3 + 2 x 10 + 15 s is a timeout
    tasks = hidden / "short-verifier"
    shutil.copytree(ROOT / "suites/demo/tasks/date-range-merge", tasks / "date-range-merge")
    toml = tasks / "date-range-merge/task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 120", "timeout_sec = 10"))
    run = hidden / "timeout"
    proc = start_suite(
        *SELECT,
        "--tasks-dir",
        str(tasks),
        "--cluster",
        cluster.address,
        "--agent-timeout",
        "3",
        agents=["command:sleep 60"],
        run_dir=run,
        env={"SWE_RESIDUAL_CLUSTER_MARGIN_S": "15"},
    )
    stopped: list[int] = []
    try:
        # the node's worker freezes mid-case (a hung node): nothing it runs ends, nothing reports
        busy = wait_for(
            "a case running on a node",
            lambda: next((n for n in cluster.nodes if n.containers(running=True) and n.workers()), None),
            120,
            every=0.2,
        )
        for pid in busy.workers():
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        out, _ = proc.communicate(timeout=240)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode == 1, out[-3000:]  # as a normal run: the sleeping agent fails the task
    first, second = records(run)
    assert (first["rule"], first["node"], first["attempt"]) == ("infra_harness", busy.name, 1), first
    assert f"no result from node {busy.name} within" in first["error"] and "cancelled" in first["error"]
    assert (second["attempt"], second["rule"]) == (2, "budget") and second["node"] != busy.name, second
    wait_for("the frozen worker's containers to go", lambda: not busy.containers(), 30)


def test_node_killed_mid_case_retries_on_the_other(cluster, hidden):
    run = hidden / "node-lost"
    args = [*SELECT, "-k", "date-range-merge", "--cluster", cluster.address]
    proc = start_suite(
        *args,
        agents=["command:sleep 10"],
        run_dir=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    busy = wait_for(
        "a case running on a node",
        lambda: next((n for n in cluster.nodes if n.containers()), None),
        120,
        every=0.2,
    )
    busy.kill()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out[-3000:]  # as a normal run: the sleeping agent fails the task
    recs = records(run)
    crash = [r for r in recs if r["rule"] == "infra_crash"]
    assert len(crash) == 1 and crash[0]["node"] == busy.name and busy.name in crash[0]["error"]
    again = [r for r in recs if r["attempt"] == 2]
    assert len(again) == 1 and again[0]["verdict"] == "fail" and again[0]["node"] != busy.name


def test_every_node_killed_stops_like_an_interrupt(cluster, hidden):
    run = hidden / "all-lost"
    args = [*SELECT, "--cluster", cluster.address]
    proc = start_suite(
        *args,
        agents=["command:sleep 60"],
        run_dir=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for("a case running", lambda: any(n.containers() for n in cluster.nodes if n.ray), 120, every=0.2)
    t0 = time.monotonic()
    for node in cluster.nodes:
        node.kill()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:]
    assert time.monotonic() - t0 < 60
    assert f"--resume {run}" in out


def test_the_head_gone_stops_like_an_interrupt(cluster, hidden):
    node = cluster.nodes[0]
    cluster.restart(node, 2)  # the test before killed every node
    run = hidden / "head-lost"
    proc = start_suite(
        *SELECT,
        "--cluster",
        cluster.address,
        agents=["command:sleep 60"],
        run_dir=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for("a case running", lambda: node.containers(running=True), 120, every=0.2)
    t0 = time.monotonic()
    cluster.kill_head()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:] + err[-2000:]
    assert time.monotonic() - t0 < 60
    assert "stopped answering" in out + err and f"--resume {run}" in out
