"""Benchmark: the index of Terminal-Bench 2's leaderboard trials at 50,000 trials, read and selected.

A synthetic download in the published layout (submissions/terminal-bench/2.0/<agent>__<model>/
{metadata.yaml, <job>/<trial>/{config.json, result.json}}; the files of
tests/tb_leaderboard_fixture.py, ~2 KB and ~5 KB a trial as Harbor writes them) over 89 task
names, 112 submissions of 89 tasks x 5 trials: only the files the index reads. Timed, in this
process: `build_index` (every metadata.yaml, config.json and result.json read through the
hostile-input reader: no symlink followed, bounded, depth-limited) and the selection of one agent
and model (`check_names` + `select`: task matching included). Target < 5 s for both.

    python3 benchmarks/bench_tb_leaderboard_index.py [--trials 50000] [--keep DIR]

Prints the figures (docs/performance.md, "Terminal-Bench 2 leaderboard index"). Exit status 1 if
the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swe_residual.residualize.importers import Context  # noqa: E402
from swe_residual.residualize.leaderboard import Options, check_names, select  # noqa: E402
from swe_residual.sources.tb_leaderboard import LocalTree, build_index  # noqa: E402
from swe_residual.tasks import load_tasks  # noqa: E402
from tests.tb_leaderboard_fixture import (  # noqa: E402
    JOB,
    SUBMISSIONS,
    TASKS,
    TASKS_DIR,
    TrialSpec,
    _metadata,
    trial_config,
    trial_result,
)

TARGET_S = 5.0
TASK_NAMES = list(TASKS) + [f"tb2-task-{i:02d}" for i in range(89 - len(TASKS))]


def synthesize(root: Path, n: int) -> int:
    """n trials (only metadata.yaml, config.json, result.json), 445 per submission."""
    base = root / "submissions" / "terminal-bench" / "2.0"
    subs = list(SUBMISSIONS)
    made, s = 0, 0
    while made < n:
        sub = subs[s % len(subs)]
        name = f"{sub}-{s:03d}"
        job = base / name / JOB
        job.mkdir(parents=True)
        (base / name / "metadata.yaml").write_text(_metadata(sub))
        for task in TASK_NAMES:
            for k in range(5):
                if made >= n:
                    break
                spec = TrialSpec(sub, task if task in TASKS else "kv-service", "failed", made)
                cfg, res = trial_config(spec), trial_result(spec, 0.0)
                trial = f"{task[:32]}__{s:03d}{k}{made:06d}"
                cfg["trial_name"] = res["trial_name"] = trial
                res["task_name"] = cfg["task"]["path"] = res["task_id"]["path"] = f"tasks/{task}"
                res["task_name"] = task
                d = job / trial
                d.mkdir()
                (d / "config.json").write_text(json.dumps(cfg, indent=4))
                (d / "result.json").write_text(json.dumps(res, indent=4))
                made += 1
        s += 1
    return s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50_000)
    ap.add_argument("--keep", type=Path, default=None, help="reuse/keep the synthetic tree here")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-tb-lb-"))
    root = tmp / "dataset"
    try:
        if not root.is_dir():
            t = time.perf_counter()
            subs = synthesize(root, args.trials)
            print(
                f"synthesized {args.trials} trials in {subs} submissions in {time.perf_counter() - t:.1f} s"
            )
        tasks = load_tasks(TASKS_DIR, "terminal_bench")
        ctx = Context("terminal_bench", tasks, None)
        c0, t0 = time.process_time(), time.perf_counter()
        idx = build_index(LocalTree(root))
        t1 = time.perf_counter()
        opts = Options(source=str(root), agents=["terminus-2"], models=["glm-4.7"])
        check_names(idx, opts, set(tasks))
        todo, unknown = select(idx, opts, ctx)
        t2, cpu = time.perf_counter(), time.process_time() - c0
        total = t2 - t0
        print(
            f"index: {len(idx.trials)} trials of {len(idx.submissions)} submissions read in {t1 - t0:.2f} s "
            f"({len(idx.trials) / (t1 - t0):.0f} trials/s); selection (--agent terminus-2 --model glm-4.7): "
            f"{len(todo)} trials of bundled tasks, {sum(unknown.values())} of other tasks, in {t2 - t1:.2f} s; "
            f"total {total:.2f} s wall, {cpu:.2f} s CPU (target < {TARGET_S:g} s: "
            f"{'yes' if total < TARGET_S else 'NO'}; load average {os.getloadavg()[0]:.1f})"
        )
        assert len(idx.trials) == args.trials and not idx.problems, idx.problems[:3]
        return 0 if total < TARGET_S else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
