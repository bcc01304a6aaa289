"""Hostile inputs cost the host bounded memory and time (issue 29, Build point 6).

A real suite run whose `command:` agents leave a 250 MB junit.xml (written by code the verifier
imports, after pytest wrote its own), 300,000 empty directories and a trajectory whose token counts
sum past the 4,300 digits Python writes as an int: the harness (every process of the run) peaks
below 1 GiB, each case ends within the task's limits plus 60 s, each has exactly one record, and
the run dir reads. The index of a DeepSWE release and the downloads have their own tests below:
a 500 MiB index is refused in one line, and a server that sends a byte every few seconds is cut off
at the download's deadline, naming the URL.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from swe_residual.results import iter_records
from swe_residual.safe_read import MAX_INT

from .deepswe_release_fixture import copy_tasks
from .drivers import cli, measured, records, suite_command, world

AGENT_LIMIT = VERIFIER_LIMIT = 60  # make_task's defaults: the task's limits
PEAK_LIMIT_MIB = 1024
COMMIT = "\ngit add -A >/dev/null 2>&1; git commit -qm work >/dev/null 2>&1; true"

# appended to calc.py, which the hidden tests import: once pytest has written junit.xml and exits,
# a 250 MB junit.xml of valid JUnit replaces it (the whole of it parsed took 2.5 GiB)
BIG_REPORT = """
import atexit as _atexit, os as _os
def _bloat():
    chunk = '<testcase classname="tests.test_calc" name="test_x"/>' * 20000
    with open(_os.environ.get("LOGS_DIR", "/logs/verifier") + "/junit.xml", "w") as fh:
        fh.write("<testsuites><testsuite>")
        for _ in range(250 * 1000 * 1000 // len(chunk)):
            fh.write(chunk)
        fh.write("</testsuite></testsuites>")
_atexit.register(_bloat)
"""
DIRS = 300_000
# 20 steps of 4,299-digit token counts: each reads as JSON, their sum is 4,300 digits and more
TOKENS = (
    "python3 - <<'PY'\nimport json, os\nbig = int('9' * 4299)\n"
    "steps = [{'step_id': i, 'source': 'agent', 'message': 'm',"
    " 'metrics': {'prompt_tokens': big, 'completion_tokens': big, 'cost_usd': 1e308}} for i in range(1, 21)]\n"
    "json.dump({'schema_version': 'ATIF-v1.4', 'agent': {'name': 'greedy'}, 'steps': steps},"
    " open(os.environ['AGENT_TRAJECTORY'], 'w'))\nPY"
)
AGENTS = {
    "big-report": {"harness": "command", "command": f"cat >> calc.py <<'PY'\n{BIG_REPORT}\nPY{COMMIT}"},
    "many-dirs": {
        "harness": "command",
        "command": f"mkdir junk && python3 -c 'import os\nfor i in range({DIRS}): os.mkdir(\"junk/%d\" % i)'",
    },
    "huge-tokens": {"harness": "command", "command": TOKENS},
}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_hostile_outputs_of_a_run_cost_bounded_memory_and_time(tmp_path, backend):
    if backend == "docker":
        from .docker_helpers import require_docker

        require_docker()
    world(tmp_path, backend=backend, agents=AGENTS)
    # local: the environments on tmpfs, so the test measures the harness, not this machine's disk
    # (300,000 mkdirs on its ext4 under load take longer than the agent's 60 s)
    scratch = Path("/dev/shm" if os.path.isdir("/dev/shm") else tmp_path) / f"bounded-{os.getpid()}"
    scratch.mkdir()
    try:
        run = measured(
            suite_command(world=tmp_path, start="clean", agents=list(AGENTS), backend=backend),
            env={"TMPDIR": str(scratch)} if backend == "local" else None,
        )
        left = (
            list((scratch / "swe-residual-local").glob("*"))
            if (scratch / "swe-residual-local").exists()
            else []
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out = run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    recs = records(tmp_path / "run")
    print(
        f"\nharness peak {run.peak_mib:.0f} MiB, run {run.seconds:.1f} s; "
        + "; ".join(f"{r['agent']}: {r['duration_s']} s ({r['rule']})" for r in recs),
        file=sys.stderr,
    )
    assert run.proc.returncode == 1, out  # the cases' failures, no error
    assert sorted(r["case_id"] for r in recs) == sorted(f"{a}-calc-clean" for a in AGENTS), out  # one each
    by = {r["agent"]: r for r in recs}
    assert run.peak_mib < PEAK_LIMIT_MIB
    for r in recs:
        assert r["duration_s"] < AGENT_LIMIT + VERIFIER_LIMIT + 60, r
        assert r["verdict"] != "infra_error", r

    big = by["big-report"]
    assert (big["outcome"], big["rule"]) == (0, "verifier_agent_caused"), big
    assert "junit.xml is" in big["verdict_note"] and "over the 128 MiB" in big["verdict_note"], big

    dirs = by["many-dirs"]
    assert dirs["outcome"] == 0, dirs
    if dirs["termination"] != "budget":  # a slow disk may stop the agent at its 60 s: its limit
        assert dirs["rule"] == "verifier_agent_caused", dirs
        assert "more than 100000 files and directories" in dirs["verdict_note"], dirs
    assert left == [], left  # every environment removed

    tokens = by["huge-tokens"]
    assert (tokens["prompt_tokens"], tokens["completion_tokens"]) == (MAX_INT, MAX_INT), tokens
    assert tokens["cost_usd"] is None and tokens["rule"] == "verdict", tokens

    bad: list[str] = []
    assert len(list(iter_records(tmp_path / "run", bad))) == 3 and bad == []
    report = cli("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert "huge-tokens" in report.stdout
    gate = cli("gate", str(tmp_path / "run"))  # every case has its record: not an invalid run (11)
    assert gate.returncode == 0, gate.stdout[-2000:] + gate.stderr[-2000:]


class Trickle(http.server.BaseHTTPRequestHandler):
    """Answers every GET at once with 200 and a 1 MB body, then sends it a byte every 0.5 s; under
    /headers/, sends the status line, then a header a byte every 0.5 s (also as a proxy, asked
    for http://<any host>/headers/...)."""

    def do_GET(self):
        if "/headers/" in self.path:
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(240):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass
            return
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            for _ in range(240):
                self.wfile.write(b"{")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass  # the client gave up: what the test wants

    def log_message(self, *a):
        pass


@pytest.fixture
def trickling():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


DEADLINE = 3  # seconds: $SWE_RESIDUAL_DOWNLOAD_DEADLINE for the tests (600 by default)
NO_PROXY = {"no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1", "SWE_RESIDUAL_DOWNLOAD_DEADLINE": str(DEADLINE)}


def _errors(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]


@pytest.mark.slow
def test_a_trickling_server_is_cut_off_at_the_download_deadline(tmp_path, trickling):
    """`states fetch` and `residualize import` over http: one line naming the URL and the deadline,
    within the deadline plus a few seconds (a byte every 5 s held them 150 s and 90 s)."""
    url = f"{trickling}/states.tar.gz"
    t0 = time.monotonic()
    proc = cli("states", "fetch", url, env=NO_PROXY, cache=tmp_path / "cache")
    fetch_s = time.monotonic() - t0
    assert proc.returncode != 0 and _errors(proc) == [
        f"error: states fetch: {url}: not downloaded within {DEADLINE} s (the deadline of one download, "
        "$SWE_RESIDUAL_DOWNLOAD_DEADLINE); check the URL and your network; nothing installed"
    ], proc.stderr[-2000:]

    tasks = copy_tasks(tmp_path / "tasks")
    release = f"{trickling}/release.json"
    t0 = time.monotonic()
    proc = cli(
        "residualize", "import", "--format", "deepswe-release", "--release", release,
        "--track", "deepswe", "--tasks-dir", str(tasks), str(tmp_path / "work"),
        env=NO_PROXY, cache=tmp_path / "cache",
    )  # fmt: skip
    import_s = time.monotonic() - t0
    headers = f"{trickling}/headers/release.json"
    t0 = time.monotonic()
    slow = cli(
        "residualize", "import", "--format", "deepswe-release", "--release", headers,
        "--track", "deepswe", "--tasks-dir", str(tasks), str(tmp_path / "work2"),
        env=NO_PROXY, cache=tmp_path / "cache",
    )  # fmt: skip
    headers_s = time.monotonic() - t0
    assert slow.returncode != 0 and _errors(slow) == [
        f"error: {headers}: release manifest cannot be fetched: not downloaded within {DEADLINE} s "
        "(the deadline of one download, $SWE_RESIDUAL_DOWNLOAD_DEADLINE)"
    ], slow.stderr[-2000:]
    assert headers_s < DEADLINE + 10, headers_s
    print(
        f"\nstates fetch cut off after {fetch_s:.1f} s, residualize import after {import_s:.1f} s",
        file=sys.stderr,
    )
    assert proc.returncode != 0
    (line,) = _errors(proc)
    assert line.startswith(
        f"error: {release}: release manifest cannot be fetched: not downloaded within {DEADLINE} s"
    )
    assert fetch_s < DEADLINE + 10 and import_s < DEADLINE + 10


def _index_rows(n: int) -> list[dict]:
    """n index rows like the published ones, each with per-test lists (what made a 48 MiB index
    take 2.3 GiB parsed whole)."""
    from .deepswe_release_fixture import DEFAULT_TRIALS, row_of

    spec = DEFAULT_TRIALS[0]
    base = row_of(
        spec,
        {"reward": 1.0, "f2p_total": 3, "f2p_passed": 3},
        {"model.patch": True, "trajectory.json": True, "verifier": True},
        5,
    )
    tests = [f"tests/test_module_{i}.py::TestClass::test_case_{i}" for i in range(60)]
    return [{**base, "trial_name": f"{base['trial_name']}-{i}", "f2p": tests, "p2p": tests} for i in range(n)]


@pytest.mark.slow
def test_a_large_release_index_is_read_in_bounded_memory_and_a_huge_one_refused(tmp_path):
    """A ~48 MiB index (the size of the published one) peaks well below 1 GiB; a 500 MiB one is
    refused in one line naming it and the bound, before it is read."""
    from .deepswe_release_fixture import make_release

    rel = tmp_path / "rel"
    make_release(rel, copy_tasks(tmp_path / "tasks"))
    rows = _index_rows(6500)
    (rel / "trials.json").write_text(json.dumps({"rows": rows}))
    size = (rel / "trials.json").stat().st_size
    assert 40 << 20 < size < 60 << 20, size
    probe = (
        "import sys; from swe_residual.sources.deepswe_release import Http, open_release\n"
        "r = open_release(sys.argv[1], Http()); print(len(r.rows), sorted(r.rows[0])[:3])"
    )
    run = measured([sys.executable, "-c", probe, str(rel)])
    print(
        f"\nrelease index of {size >> 20} MiB: peak {run.peak_mib:.0f} MiB, {run.seconds:.1f} s",
        file=sys.stderr,
    )
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    assert run.proc.stdout.startswith("6500 ")
    assert run.peak_mib < 512

    with open(rel / "trials.json", "wb") as fh:
        fh.truncate(500 << 20)  # sparse: no disk used
    t0 = time.monotonic()
    proc = cli(
        "residualize", "import", "--format", "deepswe-release", "--release", str(rel),
        "--track", "deepswe", "--tasks-dir", str(tmp_path / "tasks"), str(tmp_path / "work"),
        cache=tmp_path / "cache",
    )  # fmt: skip
    assert proc.returncode != 0
    assert _errors(proc) == [
        f"error: {rel / 'trials.json'}: {500 << 20} bytes, over the 128 MiB bound; not read"
    ], proc.stderr[-2000:]
    assert time.monotonic() - t0 < 30


def test_any_value_an_agent_claims_is_written_and_reads_back(tmp_path):
    """Token counts of any size, costs JSON cannot hold, nesting past any reader's depth and keys
    of any type: the record is written (a count beyond 2**63 - 1 as that bound) and reads back."""
    from swe_residual.results import Record, append_line, append_record

    rec = Record(case_id="c", agent="a", track="t", task="k", start="clean", verdict="fail")
    rec.prompt_tokens, rec.completion_tokens, rec.cost_usd = 10**5000, -(10**30), float("nan")
    append_record(tmp_path, rec)
    (back,) = iter_records(tmp_path)
    assert (back.prompt_tokens, back.completion_tokens, back.cost_usd) == (MAX_INT, -MAX_INT, None)

    deep: list = []
    node = deep
    for _ in range(10_000):
        node.append([])
        node = node[0]
    append_line(tmp_path / "lines.jsonl", {"deep": deep, "n": {10**5000: 1, None: 2, 3: float("inf")}})
    line = json.loads((tmp_path / "lines.jsonl").read_text())
    assert line["n"] == {str(MAX_INT): 1, "None": 2, "3": None}
    depth, node = 0, line["deep"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert depth == 199 and node.startswith("[nested more than 200 levels deep: cut]")


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_reports_over_their_bounds_are_a_verifier_problem_naming_the_file(tmp_path):
    from swe_residual.errors import VerifierError
    from swe_residual.verdicts import MAX_TESTS, parse_ctrf, parse_junit, read_reward

    with pytest.raises(VerifierError, match=r"JUnit report junit.xml is 262144000 bytes, over the 128 MiB"):
        parse_junit(_sparse(tmp_path / "junit.xml", 250 << 20))
    with pytest.raises(VerifierError, match=r"CTRF report ctrf.json is 34603008 bytes, over the 32 MiB"):
        parse_ctrf(_sparse(tmp_path / "ctrf.json", 33 << 20))
    logs = tmp_path / "logs"
    logs.mkdir()
    _sparse(logs / "reward.txt", 2 << 20)
    with pytest.raises(VerifierError, match=r"reward file reward.txt is 2097152 bytes, over the 1 MiB"):
        read_reward(logs)

    many = tmp_path / "many.xml"
    many.write_text(
        "<testsuite>" + "".join(f'<testcase name="t{i}"/>' for i in range(MAX_TESTS + 1)) + "</testsuite>"
    )
    with pytest.raises(VerifierError, match=f"names more than {MAX_TESTS} tests"):
        parse_junit(many)
    # streamed: every case read once, the worst status of a test reported twice kept
    ok = tmp_path / "ok.xml"
    ok.write_text(
        '<testsuites><testsuite><properties><property name="p" value="v"/></properties>'
        + "".join(
            f'<testcase classname="m" name="t{i}"><system-out>{"x" * 100}</system-out></testcase>'
            for i in range(50_000)
        )
        + '<testcase classname="m" name="t7"><error/></testcase><testcase name="s"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    got = parse_junit(ok)
    assert (
        len(got) == 50_001 and got["m.t7"] == "failed" and got["s"] == "skipped" and got["m.t8"] == "passed"
    )
    # a lone surrogate escape in a CTRF name (json.loads took it; the bounded decoder too)
    ctrf = tmp_path / "lone.json"
    ctrf.write_bytes(
        b'{"results": {"tests": [{"name": "[f2p] a\\ud800", "status": "passed"}, {"name": "b\\ud83d\\ude00"}]}}'
    )
    assert parse_ctrf(ctrf) == {"a\\ud800": "passed", "b\U0001f600": "failed"}


@pytest.mark.slow
def test_a_wide_tree_is_removed_in_seconds(tmp_path):
    """50,000 empty directories side by side (the old walker listed the parent again after each:
    44.5 s on tmpfs), one unreadable with a file in it, and a symlink out that is not followed."""
    from swe_residual.backends.safecopy import remove_tree

    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path
    top = base / f"wide-{os.getpid()}"
    top.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    try:
        fd = os.open(top, os.O_RDONLY)
        for i in range(50_000):
            os.mkdir(str(i), dir_fd=fd)
        os.close(fd)
        (top / "locked").mkdir()
        (top / "locked" / "f").write_text("x")
        (top / "locked").chmod(0)
        (top / "out").symlink_to(outside)
        t0 = time.monotonic()
        remove_tree(top)
        seconds = time.monotonic() - t0
    finally:
        if (top / "locked").exists():
            (top / "locked").chmod(0o700)
        shutil.rmtree(top, ignore_errors=True)
    print(f"\n50,000 empty directories removed in {seconds:.1f} s", file=sys.stderr)
    assert not os.path.lexists(top) and (outside / "kept").read_text() == "x"
    assert seconds < 20


@pytest.mark.slow
def test_a_server_that_trickles_its_headers_is_cut_off_at_the_download_deadline(tmp_path, trickling):
    """The deadline covers the status line and headers too: `states fetch` from a server that sends
    its headers a byte every 0.5 s, and `residualize import` through a proxy that does (urllib's
    path), each end with one line naming the URL and the deadline, within the deadline plus a
    margin (a per-read timeout alone let them run until the server stopped: 120 s)."""
    url = f"{trickling}/headers/states.tar.gz"
    t0 = time.monotonic()
    proc = cli("states", "fetch", url, env=NO_PROXY, cache=tmp_path / "cache")
    fetch_s = time.monotonic() - t0
    assert proc.returncode != 0 and _errors(proc) == [
        f"error: states fetch: {url}: not downloaded within {DEADLINE} s (the deadline of one download, "
        "$SWE_RESIDUAL_DOWNLOAD_DEADLINE); check the URL and your network; nothing installed"
    ], proc.stderr[-2000:]
    tasks = copy_tasks(tmp_path / "tasks")
    release = "http://releases.swe-residual.invalid/headers/release.json"
    t0 = time.monotonic()
    proxied = cli(
        "residualize", "import", "--format", "deepswe-release", "--release", release,
        "--track", "deepswe", "--tasks-dir", str(tasks), str(tmp_path / "work"),
        env={**NO_PROXY, "http_proxy": trickling, "HTTP_PROXY": trickling}, cache=tmp_path / "cache",
    )  # fmt: skip
    import_s = time.monotonic() - t0
    assert proxied.returncode != 0 and _errors(proxied) == [
        f"error: {release}: release manifest cannot be fetched: not downloaded within {DEADLINE} s "
        "(the deadline of one download, $SWE_RESIDUAL_DOWNLOAD_DEADLINE)"
    ], proxied.stderr[-2000:]
    print(
        f"\nheaders trickled: states fetch cut off after {fetch_s:.1f} s, residualize import (proxy) "
        f"after {import_s:.1f} s",
        file=sys.stderr,
    )
    assert fetch_s < DEADLINE + 10 and import_s < DEADLINE + 10


@pytest.mark.slow
def test_a_wide_final_tree_leaves_the_case_path_at_once_and_is_removed_behind_it(tmp_path):
    """An environment whose tree holds 50,000 empty directories, on the real disk (300,000 took
    about 75 s to remove on ext4, on the case's path): its close returns at once, the tree is set
    aside in its own directory and removed on a background thread; the backend's close waits for
    it. A tree a killed run set aside goes with its dead owner's scratch dir at the next start."""
    from swe_residual.backends.local import LocalBackend, LocalEnvironment
    from swe_residual.backends.owners import sweep_dirs
    from swe_residual.backends.safecopy import DISCARDED, discard_tree, wait_discarded

    work = tmp_path / "work"  # tmp_path: the disk pytest's tmp dir is on, not a tmpfs
    backend = LocalBackend(work_root=work)
    (work / "env-wide").mkdir()
    env = LocalEnvironment(work / "env-wide", None, "0" * 40)
    fd = os.open(env.workspace, os.O_RDONLY)
    for i in range(50_000):
        os.mkdir(str(i), dir_fd=fd)
    os.close(fd)
    t0 = time.monotonic()
    env.close()
    close_s = time.monotonic() - t0
    assert not (work / "env-wide").exists()
    aside = [p.name for p in work.iterdir()]
    assert all(n.startswith(f"{DISCARDED}env-wide-") for n in aside), aside
    t0 = time.monotonic()
    assert wait_discarded(work, 600)
    removed_s = time.monotonic() - t0
    assert list(work.iterdir()) == [], aside
    print(
        f"\n50,000 dirs: close {close_s * 1000:.0f} ms, removed behind it in {removed_s:.1f} s",
        file=sys.stderr,
    )
    assert close_s < 1.0
    backend.close()
    # a killed run: its tree set aside and not removed; the next start's sweep removes its scratch dir
    dead = tmp_path / "root" / f"{socket.gethostname()}--999999999--1"
    (dead / f"{DISCARDED}env-x-0000" / "app" / "d").mkdir(parents=True)
    assert sweep_dirs(tmp_path / "root") == [dead] and not dead.exists()
    discard_tree(tmp_path / "missing")  # nothing there: nothing to do
