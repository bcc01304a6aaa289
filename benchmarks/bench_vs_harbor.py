"""Benchmark: one case on Docker, ours against Harbor's Trial on the same exported task.

One demo task (default date-range-merge, clean start), exported once with `swe-residual export
harbor --start clean`. Every round runs each contender once, in a shuffled order (seeded per
round) so machine noise hits all alike; the figures are medians over the rounds:

Floors (one process each, the docker CLI):

* ``floor``   - one bare ``docker run --rm`` of our clean image running the hidden tests
  (``bash /tests/test.sh``, tests and logs bind-mounted), as in bench_docker_overhead.py
* ``floor2``  - two bare runs: ``docker run --rm IMAGE true`` (an agent's container running one
  command), then the floor: the least a harness pays to grade on a fresh instance

In process (warm: imports done, images built, one long-lived process per side):

* ours: ``run_case`` with the built-in ``nop``, the inline ``command:true`` and the built-in
  ``oracle`` on a DockerBackend; the figure is the record's ``duration_s`` (the wall time around
  ``run_case`` is kept too); the hardened re-grade placed as a one-case run places it
  (regrade.regrade_mode: beside the grade with two CPUs or more; SWE_RESIDUAL_REGRADE=after
  to measure the other place)
* Harbor: ``Trial.create`` + ``Trial.run`` with Harbor's ``nop`` and ``oracle`` agents, timed
  inside a Harbor venv process (tests/harbor_driver.py ``--serve``, the Compose-free
  LocalDockerEnvironment that tests/test_harbor_trial.py uses too)

Whole processes (interpreter start to exit, what a user waits for):

* ours: ``python -m pytest suites/demo --agent A --backend docker -k date-range-merge-clean
  --run-dir TMP`` for each agent, and ``... --collect-only -q`` of the same one case (nop)
* Harbor: a fresh ``python tests/harbor_driver.py PLAN.json RESULTS.json`` running one trial

Our whole process is broken down as: interpreter + collection (the ``--collect-only`` process),
the case (its record's ``duration_s``), end of run (total - the two); and, from the run's own
timeline, before the case (process start to the case's start: the mtime of results.jsonl, written
once as the case ends, minus ``duration_s``) and after it (that mtime to exit). Harbor's: the
trial (the driver's own timing) and the rest (interpreter, imports, asyncio).

Targets (issue 20): the one-command case in process <= x1.2 of the two-run floor; our whole
process faster than Harbor's on the same task.

Every result is checked (our verdicts and exit statuses, Harbor's reward and exception); any
surprise stops the benchmark. Needs a Docker engine and the harbor venv (made on first use, see
tests/harbor_helpers.py).

    python3 benchmarks/bench_vs_harbor.py [--rounds 10] [--warmup 1] [--task date-range-merge] [--json out.json]
    python3 -m pytest benchmarks/bench_vs_harbor.py -s      # the same, 3 rounds (SWE_RESIDUAL_BENCH_RUNS=N), as a test
    SWE_RESIDUAL_BENCH_STRICT=1 ...                         # the test also fails when a target is missed
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_docker_overhead import floor_run  # noqa: E402

from swe_residual.agents import AgentRegistry  # noqa: E402
from swe_residual.backends.docker.backend import DockerBackend  # noqa: E402
from swe_residual.run.attempt import Case, RunSettings, run_case  # noqa: E402
from swe_residual.run.reference import ReferenceChecks  # noqa: E402
from swe_residual.run.regrade import regrade_mode  # noqa: E402
from swe_residual.tasks import load_tasks  # noqa: E402

ONE_CMD_TARGET = 1.2  # one-command case in process / two-run floor
WHOLE_TARGET = 1.0  # our whole process / Harbor's, per agent
OURS = {"nop": "nop", "1-cmd": "command:true", "oracle": "oracle"}  # label -> --agent
EXPECT = {"nop": (1, "fail"), "1-cmd": (1, "fail"), "oracle": (0, "pass")}  # (pytest exit status, verdict)
HARBOR = {"nop": 0.0, "oracle": 1.0}  # Harbor agent -> its reward on the task
TIMEOUT = 600


class BenchError(RuntimeError):
    pass


def clean_env() -> dict[str, str]:
    """The environment for our pytest processes: none of a surrounding pytest's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


def two_bare_runs(image: str, tests_dir: Path, work: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(["docker", "run", "--rm", image, "true"], capture_output=True)
    if proc.returncode != 0:
        raise BenchError(f"docker run {image} true: {proc.stderr.decode(errors='replace')[-500:]}")
    return time.monotonic() - t0 + floor_run(image, tests_dir, work)


def one_record(run_dir: Path) -> dict:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    if len(lines) != 1:
        raise BenchError(f"{run_dir}: expected one record, got {len(lines)}")
    return json.loads(lines[0])


class Harbor:
    """Harbor's side: a warm driver process (--serve) for in-process trials, fresh ones for whole processes."""

    def __init__(self, python: str, driver: Path, task_dir: Path, work: Path):
        self.python, self.driver, self.task_dir, self.work = python, driver, task_dir, work
        self.log = open(work / "harbor-serve.log", "w")
        self.server = subprocess.Popen(
            [python, str(driver), "--serve"],
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def spec(self, agent: str) -> dict:
        jobs = Path(tempfile.mkdtemp(prefix=f"jobs-{agent}-", dir=self.work))
        return {
            "task_dir": str(self.task_dir),
            "agent": agent,
            "jobs_dir": str(jobs),
            "trial_name": f"{self.task_dir.name[:32]}__{uuid.uuid4().hex[:7]}",
        }

    def check(self, agent: str, result: dict) -> float:
        shutil.rmtree(Path(result.get("trial_dir") or self.work / "none").parent, ignore_errors=True)
        if result.get("driver_error") or result.get("exception") or result.get("reward") != HARBOR[agent]:
            raise BenchError(f"Harbor {agent} trial: expected reward {HARBOR[agent]}, got {result}")
        return float(result["seconds"])

    def in_process(self, agent: str) -> float:
        self.server.stdin.write(json.dumps(self.spec(agent)) + "\n")
        self.server.stdin.flush()
        line = self.server.stdout.readline()
        if not line:
            raise BenchError(f"the Harbor driver ended; see {self.log.name}")
        return self.check(agent, json.loads(line))

    def whole_process(self, agent: str) -> tuple[float, float]:
        """(wall seconds of a fresh driver process running one trial, the trial's own seconds)."""
        plan, out = (
            Path(tempfile.mkstemp(suffix=".json", dir=self.work)[1]),
            self.work / f"out-{uuid.uuid4().hex}.json",
        )
        plan.write_text(json.dumps({"concurrency": 1, "trials": [self.spec(agent)]}))
        t0 = time.monotonic()
        proc = subprocess.run(
            [self.python, str(self.driver), str(plan), str(out)],
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise BenchError(f"Harbor driver ({agent}): exit {proc.returncode}: {proc.stderr[-2000:]}")
        trial = self.check(agent, json.loads(out.read_text())[0])
        plan.unlink()
        out.unlink()
        return wall, trial

    def close(self) -> None:
        if self.server.poll() is None:
            self.server.stdin.close()
            try:
                self.server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.log.close()


class Ours:
    def __init__(self, task, work: Path):
        self.task, self.work = task, work
        self.backend = DockerBackend(run_id=f"bench-vs-harbor-{os.getpid()}", work_root=work / "backend")
        registry = AgentRegistry()
        self.agents = {label: registry.get(name) for label, name in OURS.items()}
        self.image = self.backend.images.clean(task).ref
        self.selection = f"{task.id}-clean"
        self.regrade = regrade_mode(1)  # as a one-case run (one worker) places the hardened re-grade

    def in_process(self, label: str) -> tuple[float, float]:
        """(the record's duration_s, wall seconds around run_case)."""
        run_dir = Path(tempfile.mkdtemp(prefix=f"case-{label}-", dir=self.work))
        t0 = time.monotonic()
        rec = run_case(
            Case(OURS[label], self.task, "clean"),
            RunSettings(run_dir, ReferenceChecks(run_dir), regrade_mode=self.regrade),
            agent=self.agents[label],
            backend=self.backend,
        )
        wall = time.monotonic() - t0
        if rec.verdict != EXPECT[label][1]:
            raise BenchError(f"ours {label}: expected verdict {EXPECT[label][1]}, got {rec}")
        shutil.rmtree(run_dir, ignore_errors=True)
        return rec.duration_s, wall

    def command(self, label: str, run_dir: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            "suites/demo",
            "--agent",
            OURS[label],
            "--backend",
            "docker",
            "-k",
            self.selection,
            "--run-dir",
            str(run_dir),
            *extra,
        ]

    def whole_process(self, label: str) -> dict:
        """Wall seconds of a fresh one-case pytest run, with its record's timeline."""
        run_dir = Path(tempfile.mkdtemp(prefix=f"run-{label}-", dir=self.work)) / "run"
        t0_wall, t0 = time.time(), time.monotonic()
        proc = subprocess.run(
            self.command(label, run_dir),
            cwd=ROOT,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        wall, t1_wall = time.monotonic() - t0, time.time()
        if proc.returncode != EXPECT[label][0]:
            raise BenchError(
                f"ours {label} (whole process): exit {proc.returncode}, expected {EXPECT[label][0]}:\n"
                f"{proc.stdout[-3000:]}{proc.stderr[-1000:]}"
            )
        rec = one_record(run_dir)
        recorded = (run_dir / "results.jsonl").stat().st_mtime  # the record is appended as the case ends
        if rec["verdict"] != EXPECT[label][1]:
            raise BenchError(f"ours {label} (whole process): expected verdict {EXPECT[label][1]}, got {rec}")
        shutil.rmtree(run_dir.parent, ignore_errors=True)
        case = rec["duration_s"]
        return {"wall": wall, "case": case, "before": recorded - case - t0_wall, "after": t1_wall - recorded}

    def collect_only(self) -> float:
        run_dir = Path(tempfile.mkdtemp(prefix="collect-", dir=self.work)) / "run"
        t0 = time.monotonic()
        proc = subprocess.run(
            self.command("nop", run_dir, "--collect-only", "-q"),
            cwd=ROOT,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        wall = time.monotonic() - t0
        if proc.returncode != 0 or not re.search(r"^1/\d+ tests collected", proc.stdout, re.M):
            raise BenchError(
                f"--collect-only: exit {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-1000:]}"
            )
        shutil.rmtree(run_dir.parent, ignore_errors=True)
        return wall

    def close(self) -> None:
        self.backend.close()


def export_task(task_id: str, out: Path) -> Path:
    """`swe-residual export harbor --track demo --start clean`, as a user runs it; the task's dir."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "swe_residual.cli",
            "export",
            "harbor",
            "--track",
            "demo",
            "--start",
            "clean",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if proc.returncode != 0:
        raise BenchError(f"swe-residual export harbor: {proc.stderr[-2000:]}")
    entries = [e for e in json.loads((out / "export.json").read_text())["tasks"] if e["task"] == task_id]
    if len(entries) != 1:
        raise BenchError(f"export: expected one clean dir of {task_id}, got {entries}")
    return out / entries[0]["name"]


def load() -> float:
    return os.getloadavg()[0]


def measure(
    python: str,
    driver: Path,
    task_id: str = "date-range-merge",
    rounds: int = 10,
    warmup: int = 1,
    seed: int = 0,
    log=print,
) -> dict:
    task = load_tasks(ROOT / "suites" / "demo" / "tasks", "demo")[task_id]
    work = Path(tempfile.mkdtemp(prefix="bench-vs-harbor-"))
    load0 = load()
    ours = harbor = None
    try:
        task_dir = export_task(task_id, work / "export")
        ours = Ours(task, work)
        harbor = Harbor(python, driver, task_dir, work)
        steps = {
            "floor": lambda: floor_run(ours.image, task.tests_dir, work),
            "floor2": lambda: two_bare_runs(ours.image, task.tests_dir, work),
            "collect": ours.collect_only,
            **{f"ours:{a}": (lambda a=a: ours.in_process(a)) for a in OURS},
            **{f"ours-proc:{a}": (lambda a=a: ours.whole_process(a)) for a in OURS},
            **{f"harbor:{a}": (lambda a=a: harbor.in_process(a)) for a in HARBOR},
            **{f"harbor-proc:{a}": (lambda a=a: harbor.whole_process(a)) for a in HARBOR},
        }
        samples: dict[str, list] = {k: [] for k in steps}
        for i in range(warmup + rounds):
            order = list(steps)
            random.Random(seed * 1000 + i).shuffle(order)
            t0 = time.monotonic()
            for name in order:
                value = steps[name]()
                if i >= warmup:
                    samples[name].append(value)
            log(
                f"round {i + 1 - warmup if i >= warmup else 'warm-up'}: {time.monotonic() - t0:.1f} s, "
                f"load {load():.1f}"
            )
    finally:
        if harbor:
            harbor.close()
        if ours:
            ours.close()
        shutil.rmtree(work, ignore_errors=True)
    res = summarize(samples)
    res.update(
        task=task_id,
        rounds=rounds,
        warmup=warmup,
        seed=seed,
        load_avg=[round(load0, 2), round(load(), 2)],
        regrade_mode=ours.regrade,
        image=ours.image,
        command="python " + " ".join(ours.command("1-cmd", Path("TMP"))[1:]),
    )
    return res


def med(xs) -> float:
    return round(statistics.median(xs), 3)


def summarize(samples: dict[str, list]) -> dict:
    m: dict = {
        "floor": med(samples["floor"]),
        "floor2": med(samples["floor2"]),
        "collect_only": med(samples["collect"]),
    }
    for a in OURS:
        m[f"ours:{a}"] = med(d for d, _ in samples[f"ours:{a}"])
        m[f"ours:{a}:wall"] = med(w for _, w in samples[f"ours:{a}"])
        proc = samples[f"ours-proc:{a}"]
        for k in ("wall", "case", "before", "after"):
            m[f"ours-proc:{a}:{k}"] = med(p[k] for p in proc)
        m[f"ours-proc:{a}:end"] = med(p["wall"] - p["case"] - c for p, c in zip(proc, samples["collect"]))
    for a in HARBOR:
        m[f"harbor:{a}"] = med(samples[f"harbor:{a}"])
        m[f"harbor-proc:{a}:wall"] = med(w for w, _ in samples[f"harbor-proc:{a}"])
        m[f"harbor-proc:{a}:trial"] = med(t for _, t in samples[f"harbor-proc:{a}"])
    ratios = {
        "1-cmd / floor2 (in process)": m["ours:1-cmd"] / m["floor2"],
        "nop / floor (in process)": m["ours:nop"] / m["floor"],
    }
    for a in HARBOR:
        ratios[f"ours {a} / Harbor {a} (in process)"] = m[f"ours:{a}"] / m[f"harbor:{a}"]
        ratios[f"ours {a} / Harbor {a} (whole process)"] = (
            m[f"ours-proc:{a}:wall"] / m[f"harbor-proc:{a}:wall"]
        )
    ratios = {k: round(v, 3) for k, v in ratios.items()}
    targets = {
        "one command in process <= x1.2 of two bare runs": ratios["1-cmd / floor2 (in process)"]
        <= ONE_CMD_TARGET,
        "whole process faster than Harbor's (nop and oracle)": all(
            ratios[f"ours {a} / Harbor {a} (whole process)"] < WHOLE_TARGET for a in HARBOR
        ),
    }
    return {
        "median_s": m,
        "ratios": ratios,
        "targets_met": targets,
        "samples": {k: v for k, v in samples.items()},
    }


def table(res: dict) -> str:
    m, r = res["median_s"], res["ratios"]

    def trio(fmt: str) -> str:
        return " / ".join(f"{m[fmt.format(a)]:.2f}" for a in OURS)

    lines = [
        f"task {res['task']} (clean start), {res['rounds']} rounds, medians; load average "
        f"{res['load_avg'][0]} -> {res['load_avg'][1]}; hardened re-grade {res['regrade_mode']} the grade",
        "| contender | in process per case | whole process |",
        "|---|---:|---:|",
        f"| one bare `docker run` (floor) | - | {m['floor']:.2f} s |",
        f"| two bare runs (fresh-instance floor) | - | {m['floor2']:.2f} s |",
        f"| ours, nop / one command / oracle (record `duration_s`) | {trio('ours:{}')} s | "
        f"{trio('ours-proc:{}:wall')} s |",
        f"| Harbor trial, nop / oracle | {m['harbor:nop']:.2f} / {m['harbor:oracle']:.2f} s | "
        f"{m['harbor-proc:nop:wall']:.2f} / {m['harbor-proc:oracle:wall']:.2f} s |",
        "",
        "ratios: " + "; ".join(f"{k} x{v:.2f}" for k, v in r.items()),
        "targets: " + "; ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in res["targets_met"].items()),
        "",
        "our whole process, nop / one command / oracle (s):",
        f"  total {trio('ours-proc:{}:wall')}; interpreter + collection (--collect-only -q, one process) "
        f"{m['collect_only']:.2f}; the case {trio('ours-proc:{}:case')}; end of run (total - collection - "
        f"case) {trio('ours-proc:{}:end')}",
        f"  timeline of the run itself: before the case {trio('ours-proc:{}:before')}; after the case "
        f"{trio('ours-proc:{}:after')}",
        f"Harbor's whole process, nop / oracle (s): the trial {m['harbor-proc:nop:trial']:.2f} / "
        f"{m['harbor-proc:oracle:trial']:.2f}; interpreter, imports and the rest "
        f"{m['harbor-proc:nop:wall'] - m['harbor-proc:nop:trial']:.2f} / "
        f"{m['harbor-proc:oracle:wall'] - m['harbor-proc:oracle:trial']:.2f}",
        f"(in process, wall around run_case: {trio('ours:{}:wall')} s)",
        f"our command: {res['command']}",
    ]
    return "\n".join(lines)


def harbor_python() -> str:
    """The harbor venv's python (made on first use); skips or fails the same way the tests do."""
    from tests.harbor_helpers import harbor_venv_python

    return harbor_venv_python()


def test_ours_against_harbors_trial():
    """Reports the figures (run with -s to see them); the targets are enforced only when strict."""
    from tests.docker_helpers import require_docker
    from tests.harbor_helpers import HARBOR_DRIVER

    require_docker()
    res = measure(harbor_python(), HARBOR_DRIVER, rounds=int(os.environ.get("SWE_RESIDUAL_BENCH_RUNS", "3")))
    print(table(res))
    if os.environ.get("SWE_RESIDUAL_BENCH_STRICT") == "1":
        assert all(res["targets_met"].values()), res["ratios"]


def main(argv: list[str] | None = None) -> int:
    import pytest

    from tests.harbor_helpers import HARBOR_DRIVER

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="date-range-merge", help="demo task id (default: date-range-merge)")
    ap.add_argument("--rounds", type=int, default=10, help="measured rounds (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of each round's order (default 0)")
    ap.add_argument("--json", type=Path, help="also write the figures and every sample as JSON")
    args = ap.parse_args(argv)
    try:
        python = harbor_python()
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        print(f"error: no harbor venv: {exc}", file=sys.stderr)
        return 2
    try:
        res = measure(python, HARBOR_DRIVER, args.task, args.rounds, args.warmup, args.seed)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(table(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
