"""Real pytest runs of the suite (subprocess, with xdist): records, summary, HTML, errors."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from .drivers import records, run_suite, world
from .taskfactory import make_task, partial_state_patch, state_entry, write_states

pytestmark = pytest.mark.slow  # every test here starts a suite or takes seconds (README: test tiers)

FIELDS = {
    "agent",
    "track",
    "task",
    "start",
    "state",
    "predecessor",
    "attempt",
    "outcome",
    "verdict",
    "tests",
    "declared_complete",
    "termination",
    "steps",
    "duration_s",
    "artifacts",
}


def test_suite_run_with_xdist_records_every_case(tmp_path):
    world(tmp_path)
    proc = run_suite(world=tmp_path, agents=["oracle", "nop"], workers=2)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr  # nop's failures are test failures...
    assert (
        "2 failed, 2 passed" in out and " error" not in out.split("short test summary")[-1]
    )  # ...not errors
    run = tmp_path / "run"
    recs = records(run, by="case_id")
    assert sorted(recs) == [
        "nop-calc-clean",
        "nop-calc-residual-calc--partial",
        "oracle-calc-clean",
        "oracle-calc-residual-calc--partial",
    ]
    for r in recs.values():
        assert FIELDS <= set(r)
        for rel in r["artifacts"].values():
            assert (run / rel).exists()
    assert recs["nop-calc-residual-calc--partial"]["verdict"] == "fail"
    assert recs["nop-calc-clean"]["tests"]["tests.test_new.test_sub"] == "failed"
    summary = json.loads((run / "summary.json").read_text())
    demo = summary["tracks"]["demo"]
    assert (demo["oracle"]["residual"], demo["oracle"]["clean"], demo["oracle"]["gap"]) == (1.0, 1.0, 0.0)
    assert (demo["nop"]["residual"], demo["nop"]["clean"]) == (0.0, 0.0)
    assert summary["cases"]["missing"] == [] and summary["cases"]["recorded"] == 4
    # the table is printed at the end of the run, followed by the report path
    assert "Table 3 - success by track" in out and re.search(r"demo +oracle +100\.0\* +100\.0\* +0\.0", out)
    assert f"report:  {run / 'report.html'}" in out
    html = (run / "report.html").read_text()
    assert 'class="swe-residual-report"' in html and "Table 4 - acceptance bias" in html
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["states"]["calc--partial"]["failing_tests"] == ["tests.test_new.test_div_by_zero"]
    assert (run / manifest["states"]["calc--partial"]["patch"]).is_file()


def test_malformed_states_file_is_a_one_line_usage_error(tmp_path):
    world(tmp_path)
    import yaml

    states = tmp_path / "states.yaml"
    data = yaml.safe_load(states.read_text())
    data["states"][0]["artifact"]["sha256"] = "1" * 64
    states.write_text(yaml.safe_dump(data))
    proc = run_suite(world=tmp_path, agents=["nop"])
    assert proc.returncode == 4
    err = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(err) == 1 and "states[0] (id 'calc--partial'): artifact.sha256: does not match" in err[0]
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_infra_error_is_a_pytest_error_with_no_outcome(tmp_path):
    world(tmp_path, test_sh="#!/bin/bash\nsleep 600\n", verifier_timeout=1)
    proc = run_suite("--infra-retries", "0", world=tmp_path, agents=["nop"], start="residual")
    assert proc.returncode == 1
    assert "1 error" in proc.stdout
    assert (
        "InfraError: verifier timed out after 1s running tests/test.sh (twice; the verifier fails on the reference"
        in proc.stdout
    )
    (rec,) = records(tmp_path / "run")
    assert rec["verdict"] == "infra_error" and rec["outcome"] is None
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cases"]["infra_errors"] == ["nop-calc-residual-calc--partial"]
    assert summary["tracks"]["demo"]["nop"]["residual"] is None


def test_resume_reruns_only_infra_errors_and_appends(tmp_path):
    # first run: the verifier hangs, so both cases are infra errors (no outcome recorded)
    world(tmp_path, test_sh="#!/bin/bash\nsleep 600\n", verifier_timeout=1)
    proc = run_suite("--infra-retries", "0", world=tmp_path, agents=["oracle", "nop"], start="residual")
    assert "2 error" in proc.stdout
    # repair the verifier, resume: both are rerun as attempt 2 and appended
    from .taskfactory import TEST_SH

    (tmp_path / "tasks" / "calc" / "tests" / "test.sh").write_text(TEST_SH)
    toml = tmp_path / "tasks" / "calc" / "task.toml"
    toml.write_text(
        toml.read_text().replace("[verifier]\ntimeout_sec = 1\n", "[verifier]\ntimeout_sec = 60\n")
    )
    resume = dict(world=tmp_path, resume=True, agents=["oracle", "nop"], start="residual")
    proc = run_suite(**resume)
    assert "1 failed, 1 passed" in proc.stdout
    lines = records(tmp_path / "run")
    assert [(r["agent"], r["attempt"], r["verdict"]) for r in lines][2:] in (
        [("oracle", 2, "pass"), ("nop", 2, "fail")],
        [("nop", 2, "fail"), ("oracle", 2, "pass")],
    )
    # a third resume has nothing left to run and keeps the numbers
    proc = run_suite(**resume)
    assert "2 deselected" in proc.stdout and len(records(tmp_path / "run")) == 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["tracks"]["demo"]["oracle"]["residual"] == 1.0 and summary["cases"]["missing"] == []


CRASH_PLUGIN = """
import os, signal
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # a real worker crash as the case starts (xdist reports it through pytest_handlecrashitem)
    if hasattr(item.config, "workerinput") and item.nodeid.endswith("[nop-calc-clean]"):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_worker_crash_leaves_a_complete_infra_record_and_a_consistent_summary(tmp_path, backend):
    world(tmp_path, backend=backend)
    (tmp_path / "crashplug.py").write_text(CRASH_PLUGIN)
    run = dict(world=tmp_path, workers=2, agents=["oracle", "nop"], backend=backend)
    proc = run_suite("-p", "crashplug", env={"PYTHONPATH": str(tmp_path)}, **run)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "crashed while running" in proc.stdout
    lines = records(tmp_path / "run")
    crashed = [r for r in lines if r["case_id"] == "nop-calc-clean"]
    assert (
        len(crashed) == 1 and crashed[0]["rule"] == "infra_crash" and crashed[0]["verdict"] == "infra_error"
    )
    assert (crashed[0]["attempt"], crashed[0]["harness"], crashed[0]["agent"], crashed[0]["start"]) == (
        1,
        "builtin",
        "nop",
        "clean",
    )
    # every collected case has a record, and the summary agrees with results.jsonl
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cases"]["missing"] == [] and summary["cases"]["collected"] == 4
    assert summary["cases"]["infra_errors"] == ["nop-calc-clean"]
    assert sorted({r["case_id"] for r in lines}) == sorted(
        [
            "nop-calc-clean",
            "nop-calc-residual-calc--partial",
            "oracle-calc-clean",
            "oracle-calc-residual-calc--partial",
        ]
    )
    # --resume reruns the crashed case as attempt 2 (without the crash plugin)
    proc = run_suite(resume=True, **run)
    again = records(tmp_path / "run")[len(lines) :]
    assert [(r["case_id"], r["attempt"], r["verdict"]) for r in again] == [("nop-calc-clean", 2, "fail")]


FILL_PLUGIN = """
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # the run dir's filesystem fills up while the run is going (another process wrote a big file)
    path = os.path.join(os.environ["SWE_TEST_FILL_DIR"], "filler")
    if not os.path.exists(path):
        with open(path, "wb") as fh:
            try:
                while True:
                    fh.write(b"\\0" * (1 << 20))
                    fh.flush()
            except OSError:
                pass
"""


@pytest.fixture
def small_fs(tmp_path):
    """A 70 MiB tmpfs (root only): a run dir whose filesystem can really fill up."""
    import os

    mnt = tmp_path / "fs"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=70m", "tmpfs", str(mnt)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs root to mount a small tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_run_dir_that_fills_up_is_an_invalid_run_and_resume_completes_it(tmp_path, small_fs, backend):
    world(tmp_path, backend=backend)
    (tmp_path / "fillplug.py").write_text(FILL_PLUGIN)
    run = small_fs / "run"
    base = dict(world=tmp_path, run_dir=run, agents=["oracle", "nop"], backend=backend)
    env = {"PYTHONPATH": str(tmp_path), "SWE_TEST_FILL_DIR": str(small_fs)}
    proc = run_suite("-p", "fillplug", "--gate-max-infra", "0", env=env, **base)
    assert proc.returncode == 11, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "InfraError: cannot write" in proc.stdout and "No space left on device" in proc.stdout
    invalid = [line for line in proc.stdout.splitlines() if line.startswith("INVALID RUN (exit 11)")]
    assert len(invalid) == 1 and str(run) in invalid[0]
    records(run, missing_ok=True)  # whatever was written is whole lines (each reads as JSON)
    # space again: --resume runs what is missing and the numbers are complete
    (small_fs / "filler").unlink()
    proc = run_suite(resume=True, **base)
    assert proc.returncode == 1, proc.stdout[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cases"]["missing"] == [] and summary["cases"]["recorded"] == 4
    assert summary["tracks"]["demo"]["oracle"]["residual"] == 1.0


def test_run_dir_on_an_almost_full_filesystem_is_a_usage_error(tmp_path, small_fs):
    world(tmp_path)
    with open(small_fs / "filler", "wb") as fh:
        fh.write(b"\0" * (20 << 20))
    proc = run_suite(world=tmp_path, run_dir=small_fs / "run", agents=["nop"])
    assert proc.returncode == 4
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert "MiB free on its filesystem" in error


@pytest.mark.parametrize("workers", [["-n", "2"], []], ids=["xdist", "no-xdist"])
def test_state_patch_that_does_not_apply_is_a_usage_error_before_any_case(tmp_path, workers, monkeypatch):
    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "cache"))
    task = make_task(tmp_path)
    bad = state_entry(
        tmp_path,
        task,
        b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
        b"@@ -1,2 +1,2 @@\n-def nothing_like_this():\n+def x():\n     return a + b\n",
        state_id="bad",
    )
    good = state_entry(tmp_path, task, partial_state_patch(task), state_id="good")
    write_states(tmp_path, [good, bad])
    proc = run_suite(*workers, world=tmp_path, agents=["nop"])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert (
        error.startswith("ERROR: state bad: patch ")
        and "does not apply at the base commit of task calc" in error
    )
    assert not (tmp_path / "run" / "results.jsonl").exists()
    # the patch that applied is remembered; the failing one is not (it is checked, and named, every time)
    assert len(list((tmp_path / "cache" / "checks" / "patch-applies").iterdir())) == 1
    if not workers:
        # without xdist only the selected cases' states are checked: the run dir it made is gone, and a
        # selection that leaves the bad state out runs
        assert not (tmp_path / "run").exists()
        proc = run_suite("-k", "not bad", world=tmp_path, agents=["nop"])
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # nop fails the residual case
        recorded = [r["case_id"] for r in records(tmp_path / "run")]
        assert sorted(recorded) == ["nop-calc-clean", "nop-calc-residual-good"], recorded


def test_nothing_to_run_starts_no_workers(tmp_path):
    world(tmp_path)
    first = run_suite(world=tmp_path, agents=["oracle"], start="clean")
    assert first.returncode == 0, first.stdout[-2000:]
    proc = run_suite(world=tmp_path, resume=True, agents=["oracle"], start="clean", workers=2)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "workers" not in proc.stdout and "1 deselected" in proc.stdout
    # a track without tasks (an empty task cache): exit 4 before any worker, naming the fetch command
    proc = run_suite(
        "-rs", suite="suites/deepswe", workers=2, run_dir=tmp_path / "run2", cache=tmp_path / "cache"
    )
    # naming the track on the command line and getting nothing to run is a usage error, not a green skip
    assert proc.returncode == 4 and "workers" not in proc.stdout, proc.stdout[-2000:]
    assert "`swe-residual tasks fetch deepswe`" in proc.stderr
