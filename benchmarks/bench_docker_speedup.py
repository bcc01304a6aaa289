"""Benchmark: how much faster the docker demo run gets with two xdist workers.

Runs `pytest suites/demo --backend docker --agent oracle --agent nop --start both` with `-n 1` and
`-n 2` (images built beforehand by a warm-up run, so both measure cases only), alternating, and
prints the wall times and the speedup (target: -n 2 at least 1.8x faster than -n 1).

    python3 benchmarks/bench_docker_speedup.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.8


def suite_run(workers: int, work: Path, tag: str) -> float:
    run_dir = work / f"run-{tag}"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "suites/demo",
        "--backend",
        "docker",
        "--agent",
        "oracle",
        "--agent",
        "nop",
        "-n",
        str(workers),
        "-q",
        "-p",
        "no:randomly",
        "--run-dir",
        str(run_dir),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    elapsed = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["cases"]["infra_errors"] or summary["cases"]["missing"]:
        raise RuntimeError(f"-n {workers}: infra errors or missing cases\n{proc.stdout[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-speedup-"))
    suite_run(2, work, "warmup")
    times: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):
        for n in (1, 2):
            times[n].append(suite_run(n, work, f"{n}-{r}"))
            print(f"round {r + 1}: -n {n}: {times[n][-1]:.1f} s", flush=True)
    med = {n: statistics.median(v) for n, v in times.items()}
    speedup = med[1] / med[2]
    print(
        f"docker demo run (50 cases): -n 1 {med[1]:.1f} s, -n 2 {med[2]:.1f} s: speedup x{speedup:.2f} "
        f"(target x{TARGET}) on {os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"seconds": times, "median": med, "speedup": speedup}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
