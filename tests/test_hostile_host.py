"""What a dead or hostile run leaves on the host cannot break later runs: trees of any depth with
fifos and links are removed without recursion or following anything, and the image cache holds
only facts a probe verified (a poisoned entry is probed again, a failed probe caches nothing)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from swe_residual.backends.safecopy import copy_tree, remove_tree
from swe_residual.errors import HarnessError
from swe_residual.tasks import load_tasks

from .drivers import run_suite, world
from .taskfactory import docker_task, make_task

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

DEPTH = 3000


def deep_tree(top: Path, outside: Path, depth: int = DEPTH) -> None:
    """top/d/d/.../d (depth levels; the full path is far beyond PATH_MAX), with a fifo, a file and
    a symlink to `outside` near the top and at the bottom; built relative to open directories."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    cur = fd
    try:
        for level in range(depth):
            os.mkdir("d", dir_fd=cur)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            if level in (3, depth - 1):
                os.mkfifo("fifo", dir_fd=nxt)
                os.symlink(outside, "link", dir_fd=nxt)
                os.close(os.open("file", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=nxt))
            if cur != fd:
                os.close(cur)
            cur = nxt
    finally:
        if cur != fd:
            os.close(cur)
        os.close(fd)


@pytest.mark.slow
def test_remove_tree_takes_any_depth_and_follows_nothing(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    deep_tree(tmp_path / "left", outside)
    os.chmod(tmp_path / "left" / "d" / "d", 0)  # a directory made unreadable
    remove_tree(tmp_path / "left")
    assert not (tmp_path / "left").exists()
    assert (outside / "keep.txt").read_text() == "mine"  # the link's target is untouched
    remove_tree(tmp_path / "left")  # gone already: nothing to do, no error
    (tmp_path / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "fifo")
    remove_tree(tmp_path / "fifo")  # a fifo is unlinked, never opened
    assert not os.path.lexists(tmp_path / "fifo")


def test_copy_tree_stops_at_its_depth_and_skips_special_files(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host file")
    deep_tree(tmp_path / "src", outside, depth=400)
    copy_tree(tmp_path / "src", tmp_path / "dst", limit=1 << 20, what="test")
    levels, p = 0, tmp_path / "dst"
    while (p / "d").is_dir():
        p, levels = p / "d", levels + 1
    assert levels == 256  # MAX_DEPTH levels below the root, not 400
    near = tmp_path / "dst" / "d" / "d" / "d" / "d"
    assert sorted(x.name for x in near.iterdir()) == ["d", "file"]  # no fifo, no link
    remove_tree(tmp_path / "src")
    remove_tree(tmp_path / "dst")


@pytest.mark.slow
def test_a_dead_runs_deep_leftover_and_fifo_do_not_stop_the_next_run(tmp_path):
    # a scratch dir of a process that is gone (its pid no longer runs), 3,000 levels deep
    dead = subprocess.Popen(["true"])
    dead.wait()
    scratch = tmp_path / "tmp" / "swe-residual-local" / f"{socket.gethostname()}--{dead.pid}--1"
    deep_tree(scratch / "env-x", tmp_path)
    os.mkfifo(scratch / "fifo")
    world(tmp_path)
    proc = run_suite(world=tmp_path, agents=["oracle"], env={"TMPDIR": str(tmp_path / "tmp")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "run" / "report.html").is_file() and (tmp_path / "run" / "summary.json").is_file()
    assert not scratch.exists()  # swept at the end of the run


@pytest.mark.docker
def test_a_poisoned_image_cache_entry_is_probed_again(tmp_path, bookworm_image):
    from swe_residual.backends.docker.backend import DockerBackend
    from swe_residual.backends.workspace import final_state

    task_dir = docker_task(tmp_path)
    task = load_tasks(tmp_path / "tasks", "demo")[task_dir.name]
    cache = tmp_path / "cache"
    first = DockerBackend(cache_dir=cache, work_root=tmp_path / "w1")
    try:
        info = first.images.clean(task)
        meta = first.images.meta_path(info.id)
        good = json.loads(meta.read_text())
        assert len(good["base_commit"]) == 40
    finally:
        first.close()
    # what a transient probe failure once left in the cache: an empty base commit
    meta.write_text(json.dumps({"base_commit": "", "baseline": []}))
    second = DockerBackend(cache_dir=cache, work_root=tmp_path / "w2")
    try:
        again = second.images.clean(task)
        assert again.base_commit == good["base_commit"]  # probed again, not believed
        assert json.loads(meta.read_text()) == good  # and the entry repaired
        with second.materialize(task, None) as env:
            env.execute("echo more >> calc.py", timeout=60)
            fs = final_state(env)
        assert fs.problem is None and b"+more" in fs.patch  # the case can be diffed and graded
    finally:
        second.close()


@pytest.mark.docker
def test_a_probe_that_finds_no_commit_caches_nothing(tmp_path, bookworm_image):
    from swe_residual.backends.docker.backend import DockerBackend

    task_dir = make_task(tmp_path, task_id="nocommit")
    # /app exists but holds no git commit: the probe cannot give a base commit
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN mkdir -p /app\n")
    task = load_tasks(tmp_path / "tasks", "demo")["nocommit"]
    backend = DockerBackend(cache_dir=tmp_path / "cache", work_root=tmp_path / "w")
    try:
        for _ in range(2):  # each case probes again
            with pytest.raises(HarnessError, match="has no commit"):
                backend.images.clean(task)
        meta_dir = tmp_path / "cache" / "meta"
        assert not meta_dir.exists() or list(meta_dir.iterdir()) == []
    finally:
        backend.close()
