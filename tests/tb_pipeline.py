"""The Terminal-Bench track end to end, as a user runs it, every step a real command on 127.0.0.1:

    1. tasks     the machine tasks in Terminal-Bench 2.1's layout (tasks/<id>/, dataset.toml with each
                 task's digest) served as a git repository over http; `swe-residual tasks fetch
                 terminal-bench --url` into a cache
    2. import    the leaderboard trials (tests/tb_leaderboard_fixture.py) served as the Hugging Face
                 dataset API; `residualize import --format tb-leaderboard`
    3. filter    `residualize filter --per-task N`
    4. review    two reviewers: one decides each candidate with the CLI, the other's decisions come
                 from another machine (`--export-decisions`, then `--import-decisions`)
    5. build     `residualize build -j J` (each state replayed twice, snapshotted, graded)
    6. validate  `swe-residual validate` of the built states
    7. pack      `swe-residual states pack` to a .tar.gz
    8. fetch     tasks and the pack fetched into a fresh cache
    9. suite     `pytest suites/terminal_bench` with that cache only (no --tasks-dir, no --states)
                 and a fresh snapshot cache: every state rebuilt a second time

Used by tests/test_tb_pipeline.py (a few tasks) and benchmarks/bench_tb_pipeline.py (every task,
20+ states, with the time of each step).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import drivers
from .tb_leaderboard_fixture import (
    SCALE_TASKS,
    make_leaderboard,
    scale_specs,
    serve,
    session_entries,
    task_dir,
)

TRACK = "terminal_bench"


@dataclass
class Pipeline:
    """The work of one end-to-end run under `root`; `steps`: seconds per step, in order."""

    root: Path
    tasks: tuple[str, ...] = SCALE_TASKS
    per_task: int = 6
    jobs: int = 2
    agents: tuple[str, ...] = ("oracle", "nop")
    until: str = "suite"  # or "validate": the states built and validated, not packed or run
    steps: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def states(self) -> Path:
        return self.work / "out" / "states.yaml"

    def cache(self, which: str) -> Path:
        return self.root / f"cache-{which}"

    def docker_cache(self, which: str) -> Path:
        return self.root / f"docker-cache-{which}"

    def env(self, which: str) -> dict[str, str | None]:
        return {"SWE_RESIDUAL_DOCKER_CACHE": str(self.docker_cache(which))}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.steps[name] = round(time.monotonic() - start, 1)
        print(f"[tb pipeline] {name}: {self.steps[name]:.1f} s", flush=True)

    def cli(self, *args: str, which: str = "build", check: int | None = 0, timeout: float = 3600):
        proc = drivers.cli(*args, cache=self.cache(which), env=self.env(which), check=check, timeout=timeout)
        self.outputs[" ".join(args[:2])] = proc.stdout
        return proc


def dataset_repo(root: Path, tasks: tuple[str, ...]) -> Path:
    """A bare git repository of `tasks` in Terminal-Bench 2.1's layout, ready for dumb http."""
    from swe_residual.tracks import task_digest

    src = root / "tb-2.1"
    (src / "tasks").mkdir(parents=True)
    lines = ['[dataset]\nname = "terminal-bench/terminal-bench-2-1"\n']
    for task in tasks:
        shutil.copytree(task_dir(task), src / "tasks" / task)
        lines.append(
            f'\n[[tasks]]\nname = "terminal-bench/{task}"\ndigest = "{task_digest(src / "tasks" / task)}"\n'
        )
    (src / "dataset.toml").write_text("".join(lines))
    git = ["git", "-c", "user.name=tb", "-c", "user.email=tb@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(src)], check=True)
    subprocess.run([*git, "-C", str(src), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(src), "commit", "-q", "-m", "Terminal-Bench 2.1"], check=True)
    bare = root / "www" / "terminal-bench-2.1.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    return bare


@contextlib.contextmanager
def serve_dir(directory: Path) -> Iterator[str]:
    """`directory` over http on 127.0.0.1 (a dumb git server); its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_pipeline(p: Pipeline) -> subprocess.CompletedProcess | None:
    """Every step of the module docstring up to `p.until`; the suite run's process (its records
    under root/run), None when it stops before."""
    selected = scale_specs(p.tasks)
    board = make_leaderboard(p.root / "leaderboard", hostile=True, specs=selected)
    bare = dataset_repo(p.root, p.tasks)
    with serve_dir(bare.parent) as base, serve(board.root) as hub:
        tasks_url = f"{base}/{bare.name}"
        with p.step("tasks fetch"):
            p.cli("tasks", "fetch", "terminal-bench", "--url", tasks_url)
        with p.step("import"):
            p.cli(
                "residualize", "import", "--format", "tb-leaderboard", "--track", TRACK, "-j", "4",
                hub.dataset_url, str(p.work), check=1,  # 1: the hostile entries were refused
            )  # fmt: skip
        with p.step("filter"):
            p.cli("residualize", "filter", "--per-task", str(p.per_task), str(p.work))
        with p.step("review"):
            review_twice(p)
        with p.step("build"):
            p.cli(
                "residualize", "build", "-j", str(p.jobs), "--states", str(p.states),
                *[a for glob in volatile_paths(p.tasks) for a in ("--volatile", glob)], str(p.work),
            )  # fmt: skip
        tasks_dir = p.cache("build") / "tasks" / TRACK / "tasks"
        with p.step("validate"):
            p.cli(
                "validate", "--track", TRACK, "--states", str(p.states), "--tasks-dir", str(tasks_dir),
                "-j", str(p.jobs), "--run-dir", str(p.root / "validate-run"),
            )  # fmt: skip
        if p.until == "validate":
            return None
        pack = p.root / "terminal-bench-states.tar.gz"
        with p.step("pack"):
            p.cli("states", "pack", "--states", str(p.states), "--track", TRACK, "--out", str(pack))
        with p.step("fetch"):
            p.cli("tasks", "fetch", "terminal-bench", "--url", tasks_url, which="suite")
            p.cli("states", "fetch", str(pack), "--track", TRACK, which="suite")
    with p.step("suite"):
        proc = drivers.run_suite(
            "-p", "no:randomly",
            suite="suites/terminal_bench",
            agents=list(p.agents),
            start="residual",
            workers=p.jobs,
            run_dir=p.root / "run",
            cache=p.cache("suite"),
            env=p.env("suite"),
            timeout=7200,
        )  # fmt: skip
    return proc


def volatile_paths(tasks: tuple[str, ...]) -> list[str]:
    """What the builder knows of these tasks' daemons: logs that grow by themselves."""
    sessions = session_entries()
    globs = [
        g for t in tasks for entry in sessions.get(t, {}).values() for g in entry.get("volatile_paths", [])
    ]
    return sorted(set(globs))


def review_twice(p: Pipeline) -> None:
    """Reviewer ana decides every candidate here: a run that typed one of the fixture's residual
    sessions is directed at the task, one that only looked around (or a hostile entry) is not.
    Reviewer ben's decisions arrive as another machine's export."""
    p.cli("residualize", "review", str(p.work))  # the packets
    last = {}  # a run filtered again: its last decision counts
    for line in (p.work / "stage2.jsonl").read_text().splitlines():
        decision = json.loads(line)
        last[decision["run"]] = decision["result"]
    directed = {s.trial for s in scale_specs(p.tasks) if s.session is not None}
    trials = {
        r["id"]: r["source"]["trial"]
        for r in map(json.loads, (p.work / "stage1.jsonl").read_text().splitlines())
    }
    for cand in [run for run, result in last.items() if result == "candidate"]:
        p.cli(
            "residualize", "review", "--reviewer", "ana", "--candidate", cand,
            "--task-directed", "yes" if trials[cand] in directed else "no", "--consistent", "yes", str(p.work),
        )  # fmt: skip
    exported = p.root / "ana.jsonl"
    p.cli("residualize", "review", "--export-decisions", str(exported), "--reviewer", "ana", str(p.work))
    theirs = p.root / "ben.jsonl"
    theirs.write_text(
        "".join(
            json.dumps({**json.loads(line), "reviewer": "ben"}) + "\n"
            for line in exported.read_text().splitlines()
        )
    )
    p.cli("residualize", "review", "--import-decisions", str(theirs), str(p.work))


def built_states(p: Pipeline) -> dict[str, dict]:
    return {s["id"]: s for s in yaml.safe_load(p.states.read_text())["states"]}


def snapshot_digests(docker_cache: Path) -> dict[str, str]:
    """State id -> the digest of its rebuilt machine (the snapshots one engine cache holds)."""
    out: dict[str, str] = {}
    for meta in sorted((docker_cache / "snapshots").glob("*.json")):
        snap = json.loads(meta.read_text())
        out[snap["state"]] = snap["digest"]
    return out


def stage4(p: Pipeline) -> list[dict]:
    return [json.loads(x) for x in (p.work / "stage4.jsonl").read_text().splitlines() if x.strip()]
