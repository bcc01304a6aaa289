"""Stage IV at scale, through the CLI on the real local backend: candidates grouped by task (each
task's environment prepared once), -j 2 with per-candidate timings, a build killed mid-way (a real
SIGKILL to its process group) and run again that loses nothing and repeats nothing, an existing
states file whose comments and layout stay byte for byte, a patch byte-identical to a state already
there refused, and the work dir's own states file when --states is not given."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from swe_residual.residualize.records import PredecessorRun
from swe_residual.residualize.workdir import STAGE1, STAGE4, WorkDir

from .drivers import CLI, ROOT, cli

pytestmark = pytest.mark.slow  # every test here starts a suite or takes seconds (README: test tiers)

TASKS = ROOT / "suites" / "demo" / "tasks"
DEMO = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())
BUNDLED = ROOT / "suites" / "demo" / "states" / "ttl-cache" / "five-minute-default.patch"


# `swe-residual residualize ARGS`, exit 0 asserted unless check= says otherwise
residualize = functools.partial(cli, "residualize", check=0, timeout=1800)


def note_patch(i: int) -> bytes:
    """A new file: applies at every task's base commit and leaves its hidden tests failing."""
    return (
        f"diff --git a/notes/attempt-{i:03d}.md b/notes/attempt-{i:03d}.md\nnew file mode 100644\n"
        f"--- /dev/null\n+++ b/notes/attempt-{i:03d}.md\n@@ -0,0 +1 @@\n+attempt {i}\n"
    ).encode()


def work_dir(tmp_path: Path, runs: list[tuple[str, str, bytes]]) -> Path:
    """Stage I runs (id, task, patch) that declared completion and failed; filtered and kept by two
    reviewers, whose decisions come in as one decisions file."""
    wd = WorkDir(tmp_path / "work", create=True)
    for run_id, task, patch in runs:
        d = wd.run_dir(run_id)
        d.mkdir(parents=True)
        (d / "final.patch").write_bytes(patch)
        wd.append(
            STAGE1,
            PredecessorRun(
                id=run_id,
                track="demo",
                task=task,
                predecessor={"agent": "gen", "model_family": "gen"},
                source={"format": "run"},
                termination="submitted",
                declared_complete=True,
                verdict="fail",
                outcome=0,
                tests={"t": "failed"},
                patch=wd.rel(d / "final.patch"),
            ),
        )
    (wd.path / "tasks.json").write_text(json.dumps({"demo": str(TASKS)}))
    residualize("filter", str(wd.path))
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_text(
        "".join(
            json.dumps({"candidate": run_id, "reviewer": who, "task_directed": True, "consistent": True})
            + "\n"
            for run_id, _, _ in runs
            for who in ("ana", "ben")
        )
    )
    out = residualize("review", "--import-decisions", str(decisions), str(wd.path)).stdout
    assert f"{2 * len(runs)} imported" in out
    return wd.path


def stage4(work: Path) -> list[dict]:
    text = (work / STAGE4).read_text() if (work / STAGE4).exists() else ""
    assert text == "" or text.endswith("\n")  # never a torn line
    return [json.loads(line) for line in text.splitlines()]


# An existing states file: comments at the top, between and inside entries, flow and block style.
EXISTING = """# Our hand-made states; keep this comment.
# yaml-language-server: $schema=states.schema.json

states:
  # the bundled ttl-cache state, as a copy
  - id: ttl-cache--five-minute-default
    track: demo      # aligned comment
    task: ttl-cache
    predecessor: {agent: handwritten, model_family: handwritten}
    artifact: {patch: bundled/five-minute-default.patch, sha256: %s}
    initial_verdict:
      failing_tests: ["tests.test_ttl.test_no_ttl_by_default"]
"""

N_PER_TASK = 3


def test_build_at_scale_resumes_after_a_kill_and_keeps_the_states_file(tmp_path: Path):
    runs = [
        (f"gen-{DEMO[i % len(DEMO)]}-{i:03d}", DEMO[i % len(DEMO)], note_patch(i))
        for i in range(N_PER_TASK * len(DEMO))
    ]
    runs.append(("gen-ttl-cache-copy", "ttl-cache", BUNDLED.read_bytes()))  # identical to a state there
    runs.append(
        (
            "gen-slugify-unicode-stale",
            "slugify-unicode",  # does not apply
            b"diff --git a/slug.py b/slug.py\n--- a/slug.py\n+++ b/slug.py\n@@ -1 +1 @@\n-nothing here\n+x\n",
        )
    )
    work = work_dir(tmp_path, runs)
    states = tmp_path / "shared" / "states.yaml"
    (states.parent / "bundled").mkdir(parents=True)
    (states.parent / "bundled" / BUNDLED.name).write_bytes(BUNDLED.read_bytes())
    original = EXISTING % hashlib.sha256(BUNDLED.read_bytes()).hexdigest()
    states.write_text(original)

    # first build: killed (SIGKILL to its whole process group) once a few candidates are decided
    proc = subprocess.Popen(
        [*CLI, "residualize", "build", "--backend", "local", "-j", "2", "--states", str(states), str(work)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 900
    while len(stage4(work)) < 6 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the build ended before it could be killed:\n" + proc.stdout.read()
    os.killpg(proc.pid, signal.SIGKILL)
    first_out = proc.communicate(timeout=60)[0]
    decided = stage4(work)
    assert 6 <= len(decided) < len(runs) - 1, first_out
    assert (
        "skip gen-ttl-cache-copy: its patch is byte-identical to state ttl-cache--five-minute-default of task "
        f"ttl-cache already in {states}; not added again" in first_out
    )
    # what was decided is kept: every included outcome is in the states file, which still starts
    # with the original text byte for byte and loads
    text = states.read_text()
    assert text.startswith(original)
    written = [e["id"] for e in yaml.safe_load(text)["states"]]
    included = [o["state"] for o in decided if o["result"] == "included"]
    assert set(included) <= set(written) and len(written) == len(set(written))
    assert len(written) - 1 - len(included) <= 1  # at most the one added just before the kill

    # the rerun: skips what has an outcome, finishes the rest, adds nothing twice
    t = time.monotonic()
    out = residualize("build", "--backend", "local", "-j", "2", "--states", str(states), str(work)).stdout
    rerun_s = time.monotonic() - t
    assert f"stage IV: {len(decided)} kept candidates have an outcome already (skipped)" in out
    outcomes = stage4(work)
    by_id = {o["candidate"]: o for o in outcomes}
    assert len(outcomes) == len(by_id) == len(runs) - 1  # one each; the copy has none
    assert "gen-ttl-cache-copy" not in by_id and "skip gen-ttl-cache-copy" in out
    assert by_id["gen-slugify-unicode-stale"]["result"] == "rebuild_failed"
    gen = [o for c, o in by_id.items() if c.startswith("gen-") and c[-3:].isdigit()]
    assert [o["result"] for o in gen] == ["included"] * N_PER_TASK * len(DEMO)
    final = states.read_text()
    assert final.startswith(original)  # comments and layout untouched
    entries = yaml.safe_load(final)["states"]
    assert [e["id"] for e in entries][0] == "ttl-cache--five-minute-default"
    assert sorted(e["id"] for e in entries[1:]) == sorted(o["state"] for o in gen)
    for e in entries[1:]:
        assert (states.parent / e["artifact"]["patch"]).is_file()
        assert e["initial_verdict"]["failing_tests"]  # measured, not the placeholder
    # the environment of each task was prepared once per build, for all its candidates
    task_of = {run_id: task for run_id, task, _ in runs}
    first = {o["candidate"] for o in decided}
    rebuilt_now = {task_of[c] for c, o in by_id.items() if c not in first and o["timings"]}
    prepared = [line.split()[1].rstrip(":") for line in out.splitlines() if ": images ready in " in line]
    assert sorted(prepared) == sorted(rebuilt_now)
    # per-candidate timings in every outcome of a rebuilt candidate, and the summary at the end
    for o in gen:
        assert set(o["timings"]) == {"task_images", "state", "probe", "verify"}, o
        assert all(v >= 0 for v in o["timings"].values()) and o["timings"]["verify"] > 0
    assert "stage IV timings (" in out and "slowest: " in out
    verify = sorted(o["timings"]["verify"] for o in gen)
    print(
        f"build of {len(gen)} candidates (-j 2, local): rerun {rerun_s:.1f} s; per candidate verify "
        f"median {verify[len(verify) // 2]:.2f} s, max {verify[-1]:.2f} s; "
        + next(line for line in out.splitlines() if line.startswith("stage IV timings"))
    )

    # status: the refused copy still waits for a build (into another states file)
    status = json.loads(residualize("status", "--format", "json", str(work)).stdout)
    assert status["by_stage_result"] == {
        "included": N_PER_TASK * len(DEMO),
        "rebuild_failed": 1,
        "pending_build": 1,
    }
    # a third build: only the copy is left, and it is refused again; the file does not change
    out = residualize("build", "--backend", "local", "--states", str(states), str(work)).stdout
    assert "skip gen-ttl-cache-copy: its patch is byte-identical" in out
    assert f"states file: {states} (0 added, 1 skipped)" in out and states.read_text() == final


def test_build_writes_the_work_dirs_states_file_by_default(tmp_path: Path):
    work = work_dir(
        tmp_path,
        [
            ("gen-ttl-cache-001", "ttl-cache", note_patch(1)),
            ("gen-ttl-cache-002", "ttl-cache", note_patch(2)),
        ],
    )
    out = residualize("build", "--backend", "local", str(work)).stdout
    states = work / "states" / "states.yaml"
    assert f"states file: {states} (2 added)" in out
    text = states.read_text()
    assert text.startswith("# Residual States (swe-residual states schema prints the schema)")
    # in the order they were decided (-j 2: either may finish first)
    assert sorted(e["id"] for e in yaml.safe_load(text)["states"]) == [
        "gen-ttl-cache-001",
        "gen-ttl-cache-002",
    ]
    assert (work / "states" / "states" / "demo" / "ttl-cache" / "gen-ttl-cache-001.patch").is_file()
    assert (
        "stage IV: nothing to build (2 built already)"
        in residualize("build", "--backend", "local", str(work)).stdout
    )
    assert states.read_text() == text

    # a build that died between adding a state and writing its stage4.jsonl line: the rerun finds
    # the state it wrote and records it, without building it again or adding it twice
    lines = (work / STAGE4).read_text().splitlines(keepends=True)
    (work / STAGE4).write_text(lines[0])
    out = residualize("build", "--backend", "local", str(work)).stdout
    lost = json.loads(lines[1])["candidate"]
    assert (
        f"  {lost}: included - already in {states} (added by a build that stopped before recording it)" in out
    )
    assert "stage IV: rebuilding" not in out and states.read_text() == text
    again = stage4(work)[1]
    assert again["candidate"] == lost and again["failing_tests"] == json.loads(lines[1])["failing_tests"]


def test_a_states_file_that_cannot_be_added_to_is_refused_before_any_build(tmp_path: Path):
    work = work_dir(tmp_path, [("gen-ttl-cache-001", "ttl-cache", note_patch(1))])
    states = tmp_path / "flow.yaml"
    states.write_text("states: [{id: x, track: demo}]\n")
    proc = residualize("build", "--backend", "local", "--states", str(states), str(work), check=None)
    assert proc.returncode != 0
    assert f"{states}: states: entries can be added only to a block list" in proc.stderr
    assert states.read_text() == "states: [{id: x, track: demo}]\n" and stage4(work) == []


@pytest.mark.docker
def test_docker_build_prepares_each_tasks_images_once(tmp_path: Path, bookworm_image):
    """Two tasks, three candidates each, on the docker backend: one `images ready` line per task,
    then its three candidates, each with its own timings."""
    from .docker_helpers import require_docker

    require_docker()
    runs = [
        (f"gen-{task}-{i:03d}", task, note_patch(i))
        for task in ("ttl-cache", "slugify-unicode")
        for i in range(3)
    ]
    work = work_dir(tmp_path, runs)
    out = residualize("build", "--backend", "docker", "-j", "2", str(work)).stdout
    prepared = [line.split()[1].rstrip(":") for line in out.splitlines() if ": images ready in " in line]
    assert sorted(prepared) == ["slugify-unicode", "ttl-cache"], out
    outcomes = stage4(work)
    assert [o["result"] for o in outcomes] == ["included"] * 6, outcomes
    for o in outcomes:
        assert set(o["timings"]) == {"task_images", "state", "probe", "verify"}
    print(next(line for line in out.splitlines() if line.startswith("stage IV timings")))
