"""Benchmark: the report's statistics, numpy (swe_residual/report/stats.py) against the pure-Python baseline.

The baseline is the implementation before numpy, kept as the tests' reference
(tests/stats_reference.py: random.Random, a binomial draw per category and replicate). Both are
timed in this process on the same inputs, for 1, 10 and 325 agents x 100 .. 10,000 tasks:

* ``bootstrap`` - what `build_report` does per (track, agent): `bootstrap_ci` of the agent's
  (clean, residual) task pairs with the report's 1000 replicates.
* ``paired``    - what a gate with a baseline (or `swe-residual compare`) does per (track, agent):
  two `paired_comparison`s (residual and gap task values against the baseline run's) with the
  defaults, 2000 bootstrap replicates and the sign-flip test (10,000 patterns when it is not
  exact).

Task values are shaped like a run's: clean success is 0/1, residual success the mean of 1-3
Residual States' 0/1 outcomes (0, 1/3, 1/2, 2/3, 1); each agent has its own rates. With
``--values distinct`` every task value differs (the worst case: one category per task).
Times are the best of ``--repeat`` rounds (the baseline: one round unless ``--repeat-old``);
``--max-old-agents`` times the baseline on that many agents and scales to all of them (each
agent's statistics are independent), marked ``*`` in the table.

    python3 benchmarks/bench_stats.py                                   # 1/10/325 agents x 100..10,000 tasks
    python3 benchmarks/bench_stats.py --agents 1,10 --tasks 100,1000 --repeat 1
    python3 benchmarks/bench_stats.py --agents 1 --tasks 1000,10000 --values distinct
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from swe_residual.report import stats  # noqa: E402
from tests import stats_reference as baseline  # noqa: E402

REPORT_BOOT = 1000  # swe_residual/report/tables.py REPORT_BOOT: the report's replicates per (track, agent)
SCENARIOS = ("bootstrap", "paired")


def agent_values(rng: random.Random, n_tasks: int, distinct: bool) -> tuple[dict, dict, dict]:
    """One agent's task values: (clean, residual) pairs, and residual / gap values of a baseline run."""
    if distinct:
        pairs = {f"t{i}": (rng.random(), rng.random()) for i in range(n_tasks)}
        base_res = {t: rng.random() for t in pairs}
        base_gap = {t: rng.random() - 0.5 for t in pairs}
        return pairs, base_res, base_gap
    p_clean, p_res = rng.uniform(0.4, 0.9), rng.uniform(0.2, 0.7)

    def residual() -> float:
        k = rng.randint(1, 3)
        return sum(rng.random() < p_res for _ in range(k)) / k

    pairs = {f"t{i}": (float(rng.random() < p_clean), residual()) for i in range(n_tasks)}
    base_res = {t: residual() for t in pairs}
    base_gap = {t: float(rng.random() < p_clean) - residual() for t in pairs}
    return pairs, base_res, base_gap


def workload(n_agents: int, n_tasks: int, distinct: bool, seed: int = 0) -> list[tuple[dict, dict, dict]]:
    rng = random.Random(seed)
    return [agent_values(rng, n_tasks, distinct) for _ in range(n_agents)]


def run(impl, scenario: str, agents: list[tuple[dict, dict, dict]]) -> None:
    for pairs, base_res, base_gap in agents:
        if scenario == "bootstrap":
            impl.bootstrap_ci(pairs, n_boot=REPORT_BOOT, seed=0)
        else:
            res = {t: r for t, (_, r) in pairs.items()}
            gap = {t: c - r for t, (c, r) in pairs.items()}
            impl.paired_comparison(base_res, res, seed=0)
            impl.paired_comparison(gap, base_gap, seed=0)


def best_time(impl, scenario: str, agents: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run(impl, scenario, agents)
        best = min(best, time.perf_counter() - t0)
    return best


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def parse_list(text: str, kind=str) -> list:
    return [kind(x.strip()) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="1,10,325", help="numbers of agents (default: %(default)s)")
    ap.add_argument("--tasks", default="100,1000,10000", help="tasks per agent (default: %(default)s)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="subset of %(default)s")
    ap.add_argument(
        "--values",
        choices=("rates", "distinct"),
        default="rates",
        help="task values shaped like a run's (default) or all distinct",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds of the numpy version, best kept (default 3)"
    )
    ap.add_argument("--repeat-old", type=int, default=1, help="rounds of the baseline, best kept (default 1)")
    ap.add_argument(
        "--max-old-agents",
        type=int,
        default=0,
        help="time the baseline on at most this many agents and scale (default 0: all)",
    )
    args = ap.parse_args(argv)
    agent_counts, task_counts = parse_list(args.agents, int), parse_list(args.tasks, int)
    scenarios = parse_list(args.scenarios)
    if (
        not agent_counts
        or not task_counts
        or min(agent_counts + task_counts) < 1
        or not set(scenarios) <= set(SCENARIOS)
        or args.repeat < 1
        or args.repeat_old < 1
    ):
        ap.error(
            f"--agents and --tasks take positive integers, --scenarios a subset of {', '.join(SCENARIOS)}"
        )

    distinct = args.values == "distinct"
    stats.bootstrap_ci(
        [(1.0, 0.0), (0.0, 1.0)], n_boot=10
    )  # numpy imported and warm, as after a report's first agent
    print(
        f"values: {args.values}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True
    )
    print(
        f"{'scenario':<10} {'agents':>6} {'tasks':>6}  {'pure Python':>12}  {'numpy':>10}  {'ratio':>7}  "
        f"{'numpy per agent':>15}",
        flush=True,
    )
    for scenario in scenarios:
        for n_agents in agent_counts:
            for n_tasks in task_counts:
                agents = workload(n_agents, n_tasks, distinct)
                new = best_time(stats, scenario, agents, args.repeat)
                sample = agents[: args.max_old_agents] if args.max_old_agents else agents
                old = best_time(baseline, scenario, sample, args.repeat_old) * len(agents) / len(sample)
                mark = "*" if len(sample) < len(agents) else " "
                print(
                    f"{scenario:<10} {n_agents:>6} {n_tasks:>6}  {fmt(old):>11}{mark}  {fmt(new):>10}  "
                    f"{old / new:>6.1f}x  {fmt(new / n_agents):>15}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
