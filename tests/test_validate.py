"""`swe-residual validate` on real tasks: a valid state passes, a mis-recorded one is reported."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .drivers import ROOT, cli, world
from .taskfactory import make_patch, make_task, partial_state_patch, state_entry, write_states


def _validate(tmp: Path) -> subprocess.CompletedProcess:
    tasks, states = str(tmp / "tasks"), str(tmp / "states.yaml")
    return cli(
        "validate",
        "--track",
        "demo",
        "--tasks-dir",
        tasks,
        "--states",
        states,
        "--run-dir",
        str(tmp / "runs"),
    )


@pytest.mark.slow
def test_validate_accepts_a_valid_state_and_rejects_wrong_records(tmp_path):
    task = make_task(tmp_path)
    patch = partial_state_patch(task)
    good = state_entry(tmp_path, task, patch)
    # recorded failing set is wrong: test_div is listed, but only test_div_by_zero fails
    wrong = state_entry(
        tmp_path,
        task,
        patch,
        state_id="calc--wrong-record",
        initial_verdict={"failing_tests": ["tests.test_new.test_div"]},
    )
    # a state that is no residual state at all: it solves the task
    solved = state_entry(
        tmp_path, task, (task / "solution" / "solution.patch").read_bytes(), state_id="calc--solved"
    )
    # a state that only claims the work: it passes what the clean repository passes (none of 5)
    notes = make_patch(task / "environment" / "repo", lambda w: (w / "NOTES.md").write_text("All done.\n"))
    untouched = state_entry(
        tmp_path,
        task,
        notes,
        state_id="calc--notes-only",
        initial_verdict={
            "failing_tests": [
                "tests.test_new.test_div",
                "tests.test_new.test_div_by_zero",
                "tests.test_new.test_sub",
            ]
        },
    )
    write_states(tmp_path, [good, wrong, solved, untouched])
    proc = _validate(tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "ok   calc--partial  (hidden tests passing on the state: 4 of 5, 80.0%)" in out
    assert "FAIL calc--wrong-record" in out
    assert (
        "recorded failing tests differ from a fresh verification: now failing but not recorded "
        "['tests.test_new.test_div_by_zero'], recorded but passing ['tests.test_new.test_div']"
    ) in out
    assert "FAIL calc--solved" in out and "the state passes every hidden test (nop succeeds from it)" in out
    assert (
        "FAIL calc--notes-only" in out
        and (
            "the state passes only 0 of 5, 0.0% hidden tests (needs >= 50%: min_state_pass_fraction of track demo)"
        )
        in out
    )
    assert "1/4 states valid" in out


@pytest.mark.slow
def test_validate_passes_on_valid_states_only(tmp_path):
    world(tmp_path)
    proc = _validate(tmp_path)
    assert proc.returncode == 0 and "1/1 states valid" in proc.stdout


DEEPSWE = ROOT / "tests" / "fixtures" / "deepswe"


def _validate_deepswe(tasks: Path, states: Path, run_dir: Path) -> subprocess.CompletedProcess:
    where = ["--tasks-dir", str(tasks), "--states", str(states), "--run-dir", str(run_dir)]
    return cli("validate", "--track", "deepswe", *where, "--backend", "docker")


def test_validate_accepts_the_deepswe_format_state_on_docker(tmp_path, docker_client, bookworm_image):
    # the task dir runs unchanged: solve.sh applies /solution/solution.patch (no set -e, `|| true`),
    # the inline collect hook diffs base..HEAD, the separate verifier grades the collected patch
    proc = _validate_deepswe(DEEPSWE, DEEPSWE / "states.yaml", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok   wordstats-top-words--ties-by-first-seen" in proc.stdout and "1/1 states valid" in proc.stdout


def test_validate_says_what_a_silently_failing_oracle_printed(tmp_path, docker_client, bookworm_image):
    import shutil

    tasks = tmp_path / "tasks"
    shutil.copytree(DEEPSWE / "wordstats-top-words", tasks / "wordstats-top-words")
    shutil.copytree(DEEPSWE / "states", tmp_path / "states")
    shutil.copy(DEEPSWE / "states.yaml", tmp_path / "states.yaml")
    patch = tasks / "wordstats-top-words" / "solution" / "solution.patch"
    patch.write_text("diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    proc = _validate_deepswe(tasks, tmp_path / "states.yaml", tmp_path / "runs")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "oracle from clean failed" in ln)
    assert "solve.sh output ends:" in line and "nope.py: No such file or directory" in line, line


def test_validate_unknown_track_is_a_usage_error(tmp_path):
    proc = cli("validate", "--track", "no-such-track")
    assert (
        proc.returncode == 2
        and "--track no-such-track: unknown track 'no-such-track' (known: " in proc.stderr
    )


@pytest.mark.slow
def test_validate_takes_the_track_of_the_states_file_and_names_no_pytest_option(tmp_path):
    deepswe_states = ROOT / "tests" / "fixtures" / "deepswe" / "states.yaml"
    proc = cli("validate", "--states", str(deepswe_states), cache=tmp_path / "cache")
    # the file's states are DeepSWE's: its track, not the demo default (no tasks fetched here)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "error: no tasks for track 'deepswe': fetch them with `swe-residual tasks fetch deepswe`"
    ), proc.stderr
    proc = cli("validate", "--track", "demo", "--states", str(deepswe_states), cache=tmp_path / "cache")
    assert proc.returncode == 2 and proc.stderr == (
        f"error: --states {deepswe_states}: no states of track 'demo' to validate (of its tasks); "
        "pass --track TRACK or --states FILE\n"
    ), proc.stderr
    assert "--start" not in proc.stderr


def test_a_share_of_passing_tests_is_never_rounded_to_all_or_none():
    from swe_residual.run.validate import StateCheck

    def shown(part: int, whole: int) -> str:
        return StateCheck("s", passed=(part, whole)).passes()

    assert shown(350, 351) == "350 of 351, 99.7%"
    assert shown(9999, 10000) == "9999 of 10000, 99.9%"  # not 100.0%
    assert shown(1, 10000) == "1 of 10000, 0.1%"  # not 0.0%
    assert (shown(351, 351), shown(0, 5)) == ("351 of 351, 100.0%", "0 of 5, 0.0%")
    assert StateCheck("s").passes() == "n/a"
