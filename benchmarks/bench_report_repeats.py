"""Benchmark: the report of a run with repeats (--repeat 3) against the report of a run without.

Two run dirs of about 100,000 result lines each, made by bench_report.generate (paper-shaped
records, no trajectories):

* `plain`: generate(100k): every case once.
* `repeats`: generate(100k / 3), each line written three times as repeats 1, 2 and 3 (case ids
  `#r2`, `#r3`, the record's `repeat`), each repeat's outcome drawn anew with the same chance, so
  most cases have repeats that disagree: pass@k, pass^k and the nested bootstrap have work to do.

Both reports (`python -m swe_residual.cli report RUN --format json`, a fresh process each) are
measured side by side in one run, interleaved round by round after a warm-up round; medians of
wall and CPU time (user + system, of the process and the child it may fork). The target: the
report of the repeats costs at most 1.2x the plain one (CPU; the wall ratio is printed too).

    python3 benchmarks/bench_report_repeats.py [--rounds 5] [--lines 100000] [--keep DIR]
    python3 -m pytest benchmarks/bench_report_repeats.py -s      # 3 rounds
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import _measure, generate  # noqa: E402  (the sibling benchmark's generator)

TARGET = 1.2  # repeats / plain, CPU time


def with_repeats(run: Path, n_lines: int, k: int = 3, seed: int = 1) -> int:
    """A run dir of about n_lines lines: generate(n_lines / k), every line k times as repeats 1..k
    with a fresh outcome each (the same chance of success as its case). Returns the lines."""
    n_cases = generate(run, round(n_lines / k), trajectories=False)
    rng = random.Random(seed)
    lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    cases = []
    with open(run / "results.jsonl", "w", encoding="utf-8") as fh:
        for repeat in range(1, k + 1):
            for line in lines:
                rec = json.loads(line)
                skill = 0.3 + 0.1 * int(rec["agent"].rsplit("-", 1)[1])
                ok = rng.random() < (skill + 0.3 if rec["start"] == "clean" else skill)
                rec.update(outcome=int(ok), verdict="pass" if ok else "fail", repeat=repeat)
                if repeat > 1:
                    rec["case_id"] += f"#r{repeat}"
                cases.append(rec["case_id"])
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    manifest["cases"] = cases
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return n_cases * k


def report_cmd(run: Path) -> list[str]:
    return [sys.executable, "-m", "swe_residual.cli", "report", str(run), "--format", "json"]


def measure(where: Path, n_lines: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """{plain|repeats: (median wall s, median CPU s, max peak MiB)}; prints them and the ratios."""
    runs = {"plain": where / "plain", "repeats": where / "repeats"}
    sizes = {}
    if not (runs["plain"] / "results.jsonl").exists():
        sizes["plain"] = generate(runs["plain"], n_lines, trajectories=False)
    if not (runs["repeats"] / "results.jsonl").exists():
        sizes["repeats"] = with_repeats(runs["repeats"], n_lines)
    for name, run in runs.items():
        sizes[name] = sum(1 for _ in open(run / "results.jsonl", "rb"))
    for run in runs.values():  # warm-up: the file cache, the imports
        _measure(report_cmd(run))
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in runs}
    loads = []
    for _ in range(rounds):
        for name, run in runs.items():
            got[name].append(_measure(report_cmd(run)))
        loads.append(os.getloadavg()[0])
    out = {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), max(r[2] for r in v))
        for k, v in got.items()
    }
    print(f"\nreport of repeats vs plain ({rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f})")
    print(f"  {'run':<10}{'lines':>9}{'wall s':>9}{'CPU s':>9}{'peak MiB':>10}")
    for k, (wall, cpu, mib) in out.items():
        print(f"  {k:<10}{sizes[k]:>9}{wall:>9.2f}{cpu:>9.2f}{mib:>10.0f}")
    (pw, pc, _), (rw, rc, _) = out["plain"], out["repeats"]
    print(
        f"  repeats / plain: wall x{rw / pw:.2f}, CPU x{rc / pc:.2f} (target: CPU <= x{TARGET})", flush=True
    )
    return out


def test_report_of_repeats_costs_at_most_1_2x_plain(tmp_path):
    out = measure(tmp_path, 100_000, rounds=3)
    assert out["repeats"][1] <= TARGET * out["plain"][1], out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, default=None, help="make (or reuse) the run dirs here")
    args = ap.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="bench-repeats-"))
    try:
        out = measure(where, args.lines, args.rounds)
    finally:
        if args.keep is None:
            shutil.rmtree(where, ignore_errors=True)
    sys.exit(0 if out["repeats"][1] <= TARGET * out["plain"][1] else 1)


if __name__ == "__main__":
    main()
