"""Benchmark: `swe-residual report RUN --format json` against the floor of parsing its files.

Cases (each one run dir):

* `100k` (and any other size N): the generator below, N paper-shaped result lines without
  trajectories: 5 agents x 2 tracks x N/30 tasks x (1 clean run + K states, K cycling 1/2/3),
  per-test outcomes and step counts on every line, real patch files for the repository track's
  states.
* `demo5k`: real records: one run of the demo suite (`pytest suites/demo --agent oracle --agent
  nop --agent scripted-trust -n 2`, 75 records) replicated to 5,000 lines with distinct case ids
  and their own copies of every file the report reads (final patch, trajectory); or pass
  `--demo-run DIR` to replicate an existing run dir.
* `1M`: the generator at 1,000,000 lines (no trajectories; 1M with trajectories, ~13 GB of
  files, is not measured).

Contenders, each a fresh process, interleaved round by round (medians over the rounds): the
floor - a Python process that parses every JSON file the report reads with the stdlib `json`
(results.jsonl line by line, manifest.json, every trajectory the records name; patch files are
read by the report but not by the floor, which only makes the floor lower) and keeps what it
parsed - once with the garbage collector on (the default) and once with `gc.disable()`; and ours,
`python -m swe_residual.cli report RUN --format json`. Wall time, CPU time (user + system of the
process, and of a child it forks) and peak memory (ru_maxrss, os.wait4). The ratio that counts
is ours / the gc-off floor. "ours, no CLI" is the same report without the CLI's argument parser
(`build_parser` imports every subcommand's module), to tell the report's cost from the CLI's;
"ours, one CPU" the CLI pinned to one CPU (`taskset -c 0`), where the report forks no second
process.
At 1M the floors are left out (holding 1M parsed lines takes ~4.5 GB); the targets there are
absolute (< 10 s, < 1 GiB).

    python3 benchmarks/bench_report.py [100k] [demo5k] [1M] [--rounds 5] [--keep DIR] [--demo-run DIR]
    python3 -m pytest benchmarks/bench_report.py -s      # 100k, 3 rounds
    SWE_RESIDUAL_BENCH_STRICT=1 ... additionally fails when ours > 2x the gc-off floor
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parent.parent
AGENTS = [f"agent-{i}" for i in range(5)]
TRACKS = ["repo", "machine"]
TESTS = [f"test_{i}" for i in range(6)]
FAMILIES = ["DS", "QW", "GLM"]
TARGET_RATIO = 2.0  # ours / the gc-off floor
DEMO_AGENTS = ["oracle", "nop", "scripted-trust"]

MODULES = ["src/a.py", "src/b.py", "src/util.py", "src/cli.py", "tests/test_a.py", "tests/test_cli.py"]
CODE = [
    "import os",
    "def run(x):",
    "    return x + 1",
    "class Cache:",
    "    ttl = 300",
    "# helper",
    "    if not x:",
    "        raise ValueError(x)",
    "from .util import load",
    "    return None",
]


def _lines(rng: random.Random, n: int) -> str:
    return "\n".join(rng.choice(CODE) for _ in range(n)) + "\n"


def _action(rng: random.Random, inherited: bool) -> dict:
    """One realistic agent action; `inherited` ones look at the predecessor's file or run git."""
    if inherited:
        kind = rng.randrange(4)
        if kind == 0:
            return {
                "command": "git diff",
                "output": "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n"
                "@@ -1,2 +1,3 @@\n import os\n+TTL = 300\n def run(x):\n",
            }
        if kind == 1:
            return {"command": "git status --short", "output": " M src/a.py\n?? notes.txt\n"}
        if kind == 2:
            return {"command": "cat src/a.py", "output": _lines(rng, 12)}
        return {"command": "view", "kind": "view", "path": "/app/src/a.py", "output": _lines(rng, 8)}
    other = rng.choice([m for m in MODULES if m not in ("src/a.py", "src/b.py")])
    kind = rng.randrange(8)
    if kind == 0:
        return {"command": f"cat {other}", "output": _lines(rng, rng.randint(5, 20))}
    if kind == 1:
        return {
            "command": f"grep -rn 'def {rng.choice(['run', 'load', 'main'])}' src/",
            "output": f"{other}:{rng.randint(1, 90)}:def run(x):\nsrc/util.py:3:def load(p):\n",
        }
    if kind == 2:
        a = rng.randint(1, 80)
        return {"command": f"sed -n '{a},{a + 30}p' {other}", "output": _lines(rng, 10)}
    if kind == 3:
        return {
            "command": "python -m pytest tests/ -x -q",
            "output": "..F.\n_____ test_run _____\ntests/test_a.py:12: in test_run\n    assert run(1) == 3\n"
            "E   assert 2 == 3\n1 failed, 3 passed in 0.12s\n",
        }
    if kind == 4:
        return {"command": "ls -la src tests", "output": "a.py\nb.py\nutil.py\ncli.py\ntest_a.py\n"}
    if kind == 5:
        return {
            "command": f"cd src && grep -n 'return' {other.rsplit('/', 1)[-1]}",
            "output": "3:    return x + 1\n",
        }
    if kind == 6:
        return {"command": "str_replace", "kind": "edit", "path": f"/app/{other}", "output": "edited"}
    return {"command": f'python -c "import {other[:-3].replace("/", ".")}"', "output": ""}


def _trajectory(rng: random.Random, agent: str, inspects: bool) -> bytes:
    n = rng.randint(10, 100)
    at = rng.randrange(n) if inspects else -1
    steps = [{"index": i, "message": "next", "actions": [_action(rng, i == at)]} for i in range(n)]
    return msgspec.json.encode(
        {"format": "swe-residual-trajectory-1", "agent": agent, "harness": "bench", "steps": steps}
    )


def generate(run: Path, n_records: int = 100_000, trajectories: bool = True, seed: int = 0) -> int:
    """Write results.jsonl, manifest.json, state patches and (optionally) one trajectory file per
    record; return the number of result lines."""
    rng = random.Random(seed)
    n_tasks = max(1, round(n_records / (len(AGENTS) * len(TRACKS) * 3)))
    run.mkdir(parents=True, exist_ok=True)
    (run / "states").mkdir(exist_ok=True)
    tasks, states = {}, {}
    for track in TRACKS:
        for t in range(n_tasks):
            task = f"task{t}"
            tasks[f"{track}/{task}"] = {
                "track": track,
                "tests": TESTS,
                "solution_files": ["src/a.py", "src/b.py"],
            }
            for k in range(t % 3 + 1):
                sid = f"{track}-{task}-s{k}"
                patch = ""
                if track == "repo":
                    patch = f"states/{sid}.patch"
                    (run / patch).write_text(
                        "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n"
                        "@@ -1,1 +1,3 @@\n base\n+added one\n+added two\n"
                    )
                states[sid] = {
                    "track": track,
                    "task": task,
                    "failing_tests": TESTS[: 1 + k],
                    "patch": patch,
                    "predecessor": {"agent": f"p{k}", "model_family": FAMILIES[k]},
                    "changed_files": ["src/a.py"],
                }
    n = 0
    cases = []
    with open(run / "results.jsonl", "w", encoding="utf-8") as fh:
        for agent in AGENTS:
            skill = 0.3 + 0.1 * AGENTS.index(agent)
            for track in TRACKS:
                for t in range(n_tasks):
                    task = f"task{t}"
                    starts = [("clean", None, None)] + [
                        ("residual", f"{track}-{task}-s{k}", FAMILIES[k]) for k in range(t % 3 + 1)
                    ]
                    for start, sid, fam in starts:
                        ok = rng.random() < (skill + 0.3 if start == "clean" else skill)
                        tests = {name: ("passed" if ok or rng.random() < 0.6 else "failed") for name in TESTS}
                        case = f"{agent}::{track}::{task}::{start}::{sid}"
                        cases.append(case)
                        artifacts = {}
                        if trajectories:
                            rel = f"cases/{agent}/{track}/{task}-{start}-{sid}.json"
                            path = run / rel
                            path.parent.mkdir(parents=True, exist_ok=True)
                            path.write_bytes(_trajectory(rng, agent, rng.random() < 0.5))
                            artifacts["trajectory"] = rel
                        line = {
                            "case_id": case,
                            "agent": agent,
                            "harness": "bench",
                            "track": track,
                            "task": task,
                            "start": start,
                            "state": sid,
                            "attempt": 1,
                            "predecessor": {"agent": "p", "model_family": fam} if fam else None,
                            "outcome": int(ok),
                            "verdict": "pass" if ok else "fail",
                            "tests": tests,
                            "missing_tests": [],
                            "declared_complete": True,
                            "termination": "submitted",
                            "steps": rng.randint(5, 150),
                            "duration_s": rng.uniform(10, 3000),
                            "rule": "verdict",
                            "integrity": [],
                            "artifacts": artifacts,
                            "finished_at": 0.0,
                        }
                        fh.write(json.dumps(line, separators=(",", ":")) + "\n")
                        n += 1
    (run / "manifest.json").write_text(
        json.dumps({"cases": cases, "tasks": tasks, "states": states}), encoding="utf-8"
    )
    return n


# -- the demo case: real records, replicated ------------------------------------------------------


def demo_run(where: Path) -> Path:
    """One run of the demo suite with three agents (75 records), made once."""
    run = where / "demo-run"
    if not (run / "results.jsonl").exists():
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "suites/demo",
                *(a for agent in DEMO_AGENTS for a in ("--agent", agent)),
                "-n",
                "2",
                "-p",
                "no:randomly",
                "-q",
                "--run-dir",
                str(run),
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=1800,
        )
        assert (run / "results.jsonl").exists(), "the demo run wrote no results"
        print(
            f"demo suite run: {sum(1 for _ in open(run / 'results.jsonl'))} records in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return run


READ = ("patch", "trajectory")  # the artifacts the report reads (Kept, left-out files, inspection)


def replicate(src: Path, out: Path, n_lines: int) -> int:
    """`src`'s records repeated to n_lines lines, each copy with its own case id and its own copy
    of every artifact file the report reads; the manifest names every case. Returns the lines."""
    records = [json.loads(line) for line in (src / "results.jsonl").read_text().splitlines() if line.strip()]
    manifest = json.loads((src / "manifest.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "states").exists():
        shutil.copytree(src / "states", out / "states")
    cases = []
    n = 0
    with open(out / "results.jsonl", "w", encoding="utf-8") as fh:
        copy = 0
        while n < n_lines:
            for rec in records:
                if n >= n_lines:
                    break
                r = dict(rec, case_id=f"{rec['case_id']}#{copy}", attempt=copy + 1)
                arts = {}
                for name, rel in (rec.get("artifacts") or {}).items():
                    new = f"copies/{copy}/{rel}"
                    if name in READ and (src / rel).is_file():
                        (out / new).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src / rel, out / new)
                    arts[name] = new
                r["artifacts"] = arts
                cases.append(r["case_id"])
                fh.write(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n")
                n += 1
            copy += 1
    manifest["cases"] = cases
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return n


# -- measuring ----------------------------------------------------------------------------------

FLOOR = """
import gc, json, os, sys
if sys.argv[1] == "off":
    gc.disable()
run = sys.argv[2]
with open(os.path.join(run, "results.jsonl"), "rb") as fh:
    rows = [json.loads(line) for line in fh if line.strip()]
with open(os.path.join(run, "manifest.json"), "rb") as fh:
    manifest = json.loads(fh.read())
trajectories = []
for r in rows:
    rel = (r.get("artifacts") or {}).get("trajectory")
    if rel:
        with open(os.path.join(run, rel), "rb") as fh:
            trajectories.append(json.loads(fh.read()))
"""


#: what `swe-residual report RUN --format json` does, without the CLI's argument parser (whose
#: imports of every subcommand's module are the CLI's own fixed cost)
REPORT = """
import json, sys
from swe_residual.report.tables import build_report, load_runs
records, manifest = load_runs([sys.argv[1]])
report = build_report(records, manifest)
report["unreadable_lines"] = list(records.bad_lines)
print(json.dumps(report, indent=1, sort_keys=True))
"""


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _tree_pss(pid: int) -> int:
    """Memory of a process and all its descendants: the sum of their proportional set sizes
    (a page shared after a fork counts once in total, not once per process; 0 once it is gone)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next((int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            pass
    return total


def _measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MiB) of one process, start to exit. CPU and the peak count the
    child it may fork: CPU from os.wait4, the peak as the largest sum of the proportional set
    sizes of the process and its children, sampled every 20 ms (never below the process's own
    ru_maxrss)."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], _tree_pss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 11), f"{cmd[:4]} exited {code}"
    return seconds, usage.ru_utime + usage.ru_stime, max(usage.ru_maxrss * 1024, peak[0]) / (1 << 20)


def contenders(run: Path, floors: bool = True) -> dict[str, list[str]]:
    out = {}
    if floors:
        out["floor, gc on"] = [sys.executable, "-c", FLOOR, "on", str(run)]
        out["floor, gc off"] = [sys.executable, "-c", FLOOR, "off", str(run)]
    out["ours"] = [sys.executable, "-m", "swe_residual.cli", "report", str(run), "--format", "json"]
    out["ours, no CLI"] = [sys.executable, "-c", REPORT, str(run)]
    if shutil.which("taskset"):  # pinned to one CPU: no second process
        out["ours, one CPU"] = ["taskset", "-c", "0", *out["ours"]]
    return out


def measure_case(
    name: str, run: Path, rounds: int, floors: bool = True
) -> dict[str, tuple[float, float, float]]:
    """{contender: (median wall, median CPU, max peak MiB)} over interleaved rounds (after one
    warm-up round for the file cache); prints the table and the ratios."""
    cmds = contenders(run, floors)
    for cmd in cmds.values():
        _measure(cmd)
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cmds}
    loads = []
    for _ in range(rounds):
        for k, cmd in cmds.items():
            got[k].append(_measure(cmd))
        loads.append(os.getloadavg()[0])
    out = {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), max(r[2] for r in v))
        for k, v in got.items()
    }
    print(f"\n{name}: {run} ({rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f})")
    print(f"  {'contender':<16}{'wall s':>9}{'CPU s':>9}{'peak MiB':>10}")
    for k, (wall, cpu, mib) in out.items():
        print(f"  {k:<16}{wall:>9.2f}{cpu:>9.2f}{mib:>10.0f}")
    if floors:
        on, off = out["floor, gc on"], out["floor, gc off"]
        for k in ("ours", "ours, no CLI"):
            ours = out[k]
            print(
                f"  {k} / floor gc off: wall x{ours[0] / off[0]:.2f}, CPU x{ours[1] / off[1]:.2f}   "
                f"/ floor gc on: wall x{ours[0] / on[0]:.2f}, CPU x{ours[1] / on[1]:.2f}",
                flush=True,
            )
    return out


def prepare(case: str, where: Path, demo_src: Path | None = None) -> Path:
    """The run dir of a case ("100k", "demo5k", "1M", or a number of generated lines)."""
    if case.startswith("demo"):
        n = int(case[4:].rstrip("k") or 5) * 1000
        run = where / f"demo-{n}"
        if not (run / "results.jsonl").exists():
            replicate(demo_src or demo_run(where), run, n)
        return run
    n = (
        int(case[:-1]) * 1000
        if case.endswith("k")
        else int(case[:-1]) * 1_000_000
        if case.endswith("M")
        else int(case)
    )
    run = where / f"gen-{n}"
    if not (run / "results.jsonl").exists():
        t0 = time.perf_counter()
        generate(run, n, trajectories=False)
        print(f"generated {n} records in {time.perf_counter() - t0:.0f} s", flush=True)
    return run


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")


def test_report_100k_against_the_floor(base):
    result = measure_case("100k", prepare("100k", base), rounds=3)
    if os.environ.get("SWE_RESIDUAL_BENCH_STRICT") == "1":
        assert result["ours"][0] <= TARGET_RATIO * result["floor, gc off"][0]
        assert result["ours, no CLI"][0] <= TARGET_RATIO * result["floor, gc off"][0]


def main(argv: list[str]) -> None:
    def option(name: str, default=None):
        if name in argv:
            i = argv.index(name)
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        return default

    rounds = int(option("--rounds", 5))
    keep = option("--keep")
    demo = option("--demo-run")
    cases = argv or ["100k", "demo5k", "1M"]
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        for case in cases:
            run = prepare(case, where, Path(demo) if demo else None)
            big = case.endswith("M")
            measure_case(case, run, rounds=min(rounds, 2) if big else rounds, floors=not big)


if __name__ == "__main__":
    main(sys.argv[1:])
