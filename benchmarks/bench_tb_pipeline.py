"""Benchmark: the Terminal-Bench track end to end at the fixture's full scale, on Docker.

Every step of tests/tb_pipeline.py over the eight machine tasks of tests/tb_leaderboard_fixture.py
(the five bundled ones and tests/fixtures/tb-tasks) and its 61 trials plus a hostile submission:
tasks fetched over http, trials imported, filtered, reviewed by two reviewers, built (`-j`),
validated, packed, fetched into a fresh cache, then `pytest suites/terminal_bench --start residual`
with oracle and nop on that cache alone and a fresh snapshot cache (every state rebuilt a second
time). Prints the time of each step, the build throughput per state and the share of replay,
snapshot and validation in it (docs/performance.md, "Terminal-Bench states at scale").

    python3 benchmarks/bench_tb_pipeline.py [--jobs 2] [--keep DIR]
    python3 benchmarks/bench_tb_pipeline.py --real      # the three real Terminal-Bench 2.1 tasks

Exit status 1 unless 20+ states were built, validated, run from the fetched pack (oracle 1, nop 0
on each) and rebuilt into the same machine. `--real`: the three real tasks of
tests/fixtures/real/terminal-bench, a state built for each from a Terminus-2 trial in the
leaderboard's layout, up to validation (exit status 1 unless all three are built and valid).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.drivers import records  # noqa: E402
from tests.tb_leaderboard_fixture import REAL_TASKS  # noqa: E402
from tests.tb_pipeline import Pipeline, built_states, run_pipeline, snapshot_digests, stage4  # noqa: E402

# the shares of a state's build: its two replays, the snapshot, its validation (probe + nop graded),
# and the rest of preparing it (the task's images found, the snapshot's locks)
PARTS = {
    "replay": ("replay",),
    "snapshot": ("snapshot",),
    "validation": ("probe", "verify"),
    "other": ("state",),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="build -j, validate -j and the suite's -n")
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep it (default: a temp dir)")
    ap.add_argument("--real", action="store_true", help="the three real tasks, up to validation")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-tb-pipeline-"))
    root.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    started = time.monotonic()
    p = Pipeline(root, jobs=args.jobs)
    if args.real:
        p = Pipeline(root, jobs=args.jobs, tasks=REAL_TASKS, per_task=1, until="validate")
    try:
        proc = run_pipeline(p)
        wall = time.monotonic() - started
        if proc is None:
            return real_summary(p, wall, load)
        states = built_states(p)
        included = [o for o in stage4(p) if o["result"] == "included"]
        others = [o for o in stage4(p) if o["result"] != "included"]
        recs = records(root / "run")
        expected = {(a, sid, int(a == "oracle")) for a in p.agents for sid in states}
        got = {(r["agent"], r["state"], r["outcome"]) for r in recs}
        built, rebuilt = snapshot_digests(p.docker_cache("build")), snapshot_digests(p.docker_cache("suite"))
        same = [sid for sid in states if sid in built and built[sid] == rebuilt.get(sid)]
        parts = {
            name: sum(o["timings"].get(k, 0.0) for o in included for k in keys)
            for name, keys in PARTS.items()
        }
        per_state = sum(parts.values()) / max(1, len(included))
        print(f"\nload average at start {load:.1f}; {os.cpu_count()} CPUs; -j {args.jobs}; wall {wall:.0f} s")
        print("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in p.steps.items()))
        print(
            f"states: {len(states)} built of {len(included) + len(others)} kept candidates "
            f"({', '.join(sorted({o['result'] for o in others})) or 'none'} for the rest); "
            f"validated ({'no FAIL' if 'FAIL' not in p.outputs['validate --track'] else 'FAIL'}); "
            f"run from the fetched pack: {len(got & expected)} of {len(expected)} cases as expected; "
            f"rebuilt into the same machine: {len(same)} of {len(states)}"
        )
        print(
            f"build per state: {per_state:.1f} s of candidate time "
            + "("
            + ", ".join(f"{k} {100 * v / max(1e-9, sum(parts.values())):.0f}%" for k, v in parts.items())
            + f"); {p.steps['build'] / max(1, len(included)):.1f} s of build wall per state at -j {args.jobs}"
        )
        for line in p.outputs["residualize build"].splitlines():
            if line.startswith(("stage IV timings", "slowest")):
                print(line)
        ok = len(states) >= 20 and got == expected and len(same) == len(states) and proc.returncode == 1
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


def real_summary(p: Pipeline, wall: float, load: float) -> int:
    states = built_states(p)
    valid = "FAIL" not in p.outputs["validate --track"]
    print(f"\nload average at start {load:.1f}; wall {wall:.0f} s")
    print("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in p.steps.items()))
    for sid, s in sorted(states.items()):
        print(f"{sid}: fails {', '.join(s['initial_verdict']['failing_tests'])}")
    for line in p.outputs["residualize build"].splitlines():
        if line.startswith(("stage IV timings", "slowest")):
            print(line)
    print(f"validate: {'no FAIL' if valid else 'FAIL'}")
    return 0 if valid and sorted(s["task"] for s in states.values()) == sorted(REAL_TASKS) else 1


if __name__ == "__main__":
    sys.exit(main())
