"""Benchmark: importing DeepSWE's leaderboard release at its real size, against a local server.

A synthetic release in the published layout (tests/deepswe_release_fixture.py's server, run in its
own process, so it does not share our interpreter): an index of 30,000 rows with every published
field (~1.2 KB a row, ~36 MB; the real index is ~50 MB) over 100 DeepSWE-shaped tasks, and for the first 2,000 rows their files on the
"CDN": model.patch (~1.5 KB, a real diff of the fixture task), an ATIF trajectory of 30 steps
(~40 KB, mini-swe-agent's export shape) and five verifier files (ctrf.json, junit.xml,
reward.json, run.log, test-stdout.txt). The figures:

* index: the manifest and trials.json fetched, parsed (depth-limited reader) and the rows
  selected, in this process (`open_release` + `select_rows` + task matching); the floor is a plain
  `json.loads` of the same bytes. Target < 5 s.
* download: `swe-residual residualize import --format deepswe-release --release URL -j 16
  --limit 2000` (one fresh process; 7 files per trial, 14,000 requests), trials/s over its trial
  phase (its own summary line: download, convert, write) - the target, >= 100 trials/s - and over
  the whole command (with interpreter start, the index and the tasks).
* Stage II: `residualize filter --per-task 3` over 20,000 imported runs (written as the import
  writes them: stage1.jsonl lines and runs/<id>/final.patch, 1/3 of them duplicates). Target < 60 s.
* status and Table 5: `residualize status` and `report RUN --construction WORK --format md` (an
  empty run dir) on those 20,000 runs, each one fresh process. Target < 2 s each.

    python3 benchmarks/bench_deepswe_release.py [--keep DIR] [--rows 30000] [--trials 2000] [--runs 20000]

Prints one table (docs/performance.md, "DeepSWE release import"). Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.deepswe_release_fixture import (  # noqa: E402
    ATTEMPTS,
    FIXTURES,
    PATTERNS,
    PREFIX,
    RELEASE_ID,
    VERIFIER_FILES,
    WORDSTATS,
)

MODELS = [
    "claude-sonnet-4-5",
    "gpt-5",
    "gemini-2.5-pro",
    "kimi-k2-instruct",
    "qwen3-coder-480b",
    "deepseek-v3.1",
    "glm-4.6",
    "grok-4",
    "minimax-m2",
    "devstral-medium",
]
CATEGORIES = [None] * 17 + ["provider_timeout", "rate_limit", "verifier_timeout"]
N_TASKS = 100


def make_tasks(dest: Path) -> list[str]:
    """100 DeepSWE-shaped tasks: copies of the fixture task under other ids."""
    names = []
    src = FIXTURES / WORDSTATS
    for i in range(N_TASKS):
        name = f"bench-task-{i:03d}-" + "x" * 20
        d = dest / name
        shutil.copytree(src, d)
        toml = d / "task.toml"
        toml.write_text(
            toml.read_text()
            .replace(f'task_id = "{WORDSTATS}"', f'task_id = "{name}"')
            .replace(f'name = "swe-residual/{WORDSTATS}"', f'name = "swe-residual/{name}"')
        )
        names.append(name)
    return names


def trial_name(task: str, i: int) -> str:
    return f"{task[:32]}__{i:07d}"


def make_row(rng: random.Random, i: int, task: str, with_files: bool = False) -> dict:
    """A row with every published field, with realistic values (long config names, microsecond
    timestamps, full-precision floats, six verifier file names)."""
    cat = rng.choice(CATEGORIES)
    reward = None if cat else rng.choice([0, 0, 0, 1])
    model = MODELS[i % len(MODELS)]
    f2p_passed = 6 if reward else rng.randrange(6)

    def stamp(minute: int) -> str:
        return f"2025-10-{1 + i % 28:02d}T{i % 24:02d}:{minute:02d}:{rng.randrange(60):02d}.{rng.randrange(10**6):06d}+00:00"

    return {
        "trial_name": trial_name(task, i),
        "task_name": task,
        "source": "deep-swe" if i % 40 else "terminal-bench",
        "eval_scope": "full",
        "model": model,
        "provider": f"openrouter/{model.split('-')[0]}-provider-route",
        "harness": "mini-swe-agent",
        "config": rng.choice(
            ["mini-swe-agent-2.4-default-250-steps-bash-only", "mini-swe-agent-2.4-high-reasoning-250-steps"]
        ),
        "reasoning_effort": rng.choice(["medium", "high"]),
        "outcome": "pass" if reward else "fail",
        "error_category": cat,
        "started_at": stamp(1),
        "finished_at": stamp(40),
        "reward": reward,
        "f2p_total": 6,
        "f2p_passed": f2p_passed,
        "p2p_total": 3,
        "p2p_passed": 3,
        "f2p": f2p_passed / 6,
        "p2p": 1.0,
        "partial": (f2p_passed + 3) / 9,
        "n_agent_steps": rng.randrange(5, 250),
        "cost_usd": rng.random() * 3,
        "n_input_tokens": rng.randrange(10**7),
        "n_cache_tokens": rng.randrange(10**7),
        "n_output_tokens": rng.randrange(10**5),
        "n_reasoning_tokens": rng.randrange(10**5),
        "peak_context_tokens": rng.randrange(10**5, 10**6),
        "agent_duration_seconds": rng.uniform(60, 3600),
        "trial_duration_seconds": rng.uniform(60, 4000),
        "passed": bool(reward),
        "errored": cat is not None,
        "included_in_score": i % 50 != 0,
        "has_model_patch": True,
        "has_trajectory": True,
        "has_agent_log": True,
        "has_verifier_output": True,
        "verifier_files": list(VERIFIER_FILES)
        if with_files
        else [
            "ctrf.json",
            "reports/base.xml",
            "reports/new.xml",
            "reward.json",
            "run.log",
            "test-stdout.txt",
        ],
    }


def make_trajectory(rng: random.Random, trial: str, model: str, patch: str, steps: int = 30) -> bytes:
    out = [
        {"step_id": 1, "source": "system", "message": "You are a helpful assistant."},
        {"step_id": 2, "source": "user", "message": "Add top_words to wordstats. " * 20},
    ]
    for k in range(3, steps + 3):
        cmd = rng.choice(
            [
                "cat wordstats/counting.py",
                "python3 -m pytest -q tests",
                "grep -rn top_words .",
                "git status --short",
                "sed -n 1,40p wordstats/__init__.py",
            ]
        )
        if k == steps // 2:
            cmd = "git apply <<'EOF'\n" + patch + "EOF"
        out.append(
            {
                "step_id": k,
                "source": "agent",
                "model_name": model,
                "message": "",
                "reasoning_content": "Thinking about the next step. " * 8,
                "tool_calls": [
                    {"tool_call_id": f"call_{k}_1", "function_name": "bash", "arguments": {"command": cmd}}
                ],
                "observation": {
                    "results": [
                        {
                            "source_call_id": f"call_{k}_1",
                            "content": "<returncode>0</returncode>\n<output>\n"
                            + "line of output text\n" * 45
                            + "</output>",
                        }
                    ]
                },
                "metrics": {"prompt_tokens": 1500 * k, "completion_tokens": 120},
            }
        )
    out.append(
        {
            "step_id": steps + 3,
            "source": "agent",
            "model_name": model,
            "message": "",
            "tool_calls": [
                {
                    "tool_call_id": "call_end",
                    "function_name": "bash",
                    "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
                }
            ],
        }
    )
    return json.dumps(
        {
            "schema_version": "ATIF-v1.7",
            "session_id": trial,
            "agent": {"name": "mini-swe-agent"},
            "steps": out,
        }
    ).encode()


def make_release(root: Path, tasks: list[str], n_rows: int, n_trials: int) -> None:
    rng = random.Random(0)
    rows = [make_row(rng, i, tasks[i % len(tasks)], with_files=i < n_trials * 1.1) for i in range(n_rows)]
    # the first n_trials selected rows get their files
    attempts = [
        ATTEMPTS / WORDSTATS / a for a in ("first-seen-ties", "no-validation", "case-sensitive", "off-by-one")
    ]
    verifier = [{p.name: p.read_bytes() for p in (a / "verifier").iterdir()} for a in attempts]
    patches = [(a / "model.patch").read_bytes() for a in attempts]
    done = 0
    for row in rows:
        if done >= n_trials:
            break
        if row["source"] != "deep-swe" or not row["included_in_score"]:
            continue
        k = done % len(attempts)
        # distinct changes (a comment naming the trial), so Stage II sees candidates, not only duplicates
        patch = patches[k].replace(
            b"+    counts = count_words(text)\n",
            f"+    counts = count_words(text)  # {row['trial_name']}\n".encode(),
            1,
        )
        base = root / PREFIX / row["trial_name"]
        (base / "artifacts").mkdir(parents=True)
        (base / "agent").mkdir()
        (base / "verifier").mkdir()
        (base / "artifacts" / "model.patch").write_bytes(patch)
        (base / "agent" / "trajectory.json").write_bytes(
            make_trajectory(rng, row["trial_name"], row["model"], patch.decode())
        )
        for name, data in verifier[k].items():
            (base / "verifier" / name).write_bytes(data)
        done += 1
    (root / "release.json").write_text(
        json.dumps(
            {
                "release_id": RELEASE_ID,
                "artifact_base_url": "https://cdn.invalid",
                "artifact_key_prefix": PREFIX,
                "artifact_patterns": PATTERNS,
            }
        )
    )
    (root / "trials.json").write_text(json.dumps({"rows": rows}))


class Server:
    """The fixture's server in its own process."""

    def __init__(self, root: Path):
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "deepswe_release_fixture.py"), "serve", str(root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.manifest_url = self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def cli(*args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "swe_residual.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=3600,
    )
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(
            f"{' '.join(args[:3])} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
    return dt, p


def bench_index(url: str, tasks_dir: Path) -> dict:
    from swe_residual.residualize.importers import Context
    from swe_residual.sources.deepswe_release import Http, open_release, select_rows
    from swe_residual.tasks import load_tasks

    ctx = Context("deepswe", load_tasks(tasks_dir, "deepswe"), None)
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        rel = open_release(url, Http())
        t1 = time.perf_counter()
        sel = select_rows(rel.rows)
        names = {}
        for r in sel.rows:
            n = r.get("task_name")
            if n not in names:
                names[n] = ctx.task([n], "task_name")
        t2 = time.perf_counter()
        run = {
            "total": t2 - t0,
            "fetch": rel.seconds["manifest"] + rel.seconds["index_fetch"],
            "parse": rel.seconds["index_parse"],
            "select": t2 - t1,
            "rows": len(rel.rows),
            "selected": len(sel.rows),
            "bytes": rel.index_bytes,
        }
        if best is None or run["total"] < best["total"]:
            best = run
    raw = Path(tasks_dir).parent.joinpath("release", "trials.json").read_bytes()
    floor = min(_timed(lambda: json.loads(raw)) for _ in range(3))
    best["floor"] = floor
    return best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def synth_runs(work: Path, tasks: list[str], n: int) -> None:
    """n imported runs as the import writes them (line + runs/<id>/final.patch)."""
    from swe_residual.residualize.importers import run_id
    from swe_residual.residualize.records import PredecessorRun
    from swe_residual.states import Predecessor

    rng = random.Random(1)
    patch = (ATTEMPTS / WORDSTATS / "first-seen-ties" / "model.patch").read_bytes()
    tests = {f"tests.test_top_words.t{i}": "passed" for i in range(8)} | {"tests.test_top_words.t8": "failed"}
    lines = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        trial = trial_name(task, i)
        rid = run_id(trial, f"deepswe-release\0{trial}")
        d = work / "runs" / rid
        d.mkdir(parents=True)
        variant = i if i % 3 else i - 3  # every third run repeats an earlier change of its task
        (d / "final.patch").write_bytes(
            patch.replace(
                b"+    counts = count_words(text)\n",
                f"+    counts = count_words(text)  # {variant}\n".encode(),
                1,
            )
        )
        kind = rng.random()  # 20% passed, 10% infra, 10% not submitted, the rest failed with a change
        fields = (
            {"verdict": "pass", "outcome": 1, "termination": "submitted", "declared_complete": True}
            if kind < 0.2
            else {
                "verdict": "infra_error",
                "outcome": None,
                "rule": "infra_model_service",
                "termination": "infra",
                "declared_complete": False,
                "error": "error_category provider_timeout",
            }
            if kind < 0.3
            else {
                "verdict": "fail",
                "outcome": 0,
                "rule": "budget",
                "termination": "budget",
                "declared_complete": False,
            }
            if kind < 0.4
            else {
                "verdict": "fail",
                "outcome": 0,
                "rule": "verdict",
                "termination": "submitted",
                "declared_complete": True,
            }
        )
        run = PredecessorRun(
            id=rid,
            track="deepswe",
            task=task,
            predecessor=Predecessor(
                agent=f"mini-swe-agent/{MODELS[i % 10]}", model_family=MODELS[i % 10].split("-")[0]
            ),
            source={"format": "deepswe-release", "trial": trial, "release": RELEASE_ID},
            tests=tests,
            patch=f"runs/{rid}/final.patch",
            steps=30,
            duration_s=600.0,
            **fields,
        )
        lines.append(run.model_dump_json() + "\n")
    (work / "stage1.jsonl").write_text("".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=30000)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--keep", default=None, metavar="DIR", help="work here and keep the files")
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-deepswe-"))
    tmp.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        t0 = time.perf_counter()
        tasks_dir = tmp / "tasks"
        shutil.rmtree(tasks_dir, ignore_errors=True)
        tasks = make_tasks(tasks_dir)
        shutil.rmtree(tmp / "release", ignore_errors=True)
        make_release(tmp / "release", tasks, args.rows, args.trials)
        size = (tmp / "release" / "trials.json").stat().st_size
        print(
            f"generated {args.rows} rows ({size / 1e6:.1f} MB), {args.trials} trials' files in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        srv = Server(tmp / "release")
        try:
            ix = bench_index(srv.manifest_url, tasks_dir)
            results.append(
                (
                    f"index: manifest + {ix['rows']} rows ({ix['bytes'] / 1e6:.1f} MB) fetched, parsed, "
                    f"{ix['selected']} selected",
                    f"{ix['total']:.2f} s (fetch {ix['fetch']:.2f}, parse "
                    f"{ix['parse']:.2f}, select {ix['select']:.2f}); json.loads floor {ix['floor']:.2f} s, "
                    f"parse/floor {ix['parse'] / ix['floor']:.2f}",
                    "< 5 s",
                    ix["total"] < 5,
                )
            )
            work = tmp / "work-download"
            shutil.rmtree(work, ignore_errors=True)
            wall, p = cli(
                "residualize",
                "import",
                "--format",
                "deepswe-release",
                "--release",
                srv.manifest_url,
                "--track",
                "deepswe",
                "--tasks-dir",
                str(tasks_dir),
                "-j",
                "16",
                "--limit",
                str(args.trials),
                str(work),
            )
            summary = next(ln for ln in p.stdout.splitlines() if ln.startswith("imported "))
            phase = float(summary.split("(")[-1].split(" trials/s")[0])
            n = int(summary.split()[1])
            results.append(
                (
                    f"download: {n} trials' files, -j 16 (whole command, {wall:.1f} s)",
                    f"{n / wall:.0f} trials/s overall, {phase:.0f} trials/s in the trial phase",
                    ">= 100 trials/s",
                    n == args.trials and phase >= 100,
                )
            )
        finally:
            srv.close()
        work = tmp / "work-stage2"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "tasks.json").write_text(json.dumps({"deepswe": str(tasks_dir)}))
        synth_runs(work, tasks, args.runs)
        wall, p = cli("residualize", "filter", "--per-task", "3", str(work))
        results.append(
            (f"Stage II: filter --per-task 3 over {args.runs} runs", f"{wall:.1f} s", "< 60 s", wall < 60)
        )
        wall, p = cli("residualize", "status", str(work))
        results.append((f"status over {args.runs} runs", f"{wall:.2f} s", "< 2 s", wall < 2))
        run_dir = tmp / "empty-run"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "results.jsonl").write_text("")
        wall, p = cli("report", str(run_dir), "--construction", str(work), "--format", "md")
        assert "Not selected" in p.stdout, p.stdout[-500:]
        results.append(
            (f"Table 5 (report --construction) over {args.runs} runs", f"{wall:.2f} s", "< 2 s", wall < 2)
        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(r[0]) for r in results)
    print(f"\n| {'step':<{width}} | measured | target | met |\n|{'-' * (width + 2)}|---|---|---|")
    for what, got, target, ok in results:
        print(f"| {what:<{width}} | {got} | {target} | {'yes' if ok else '**no**'} |")
    print(f"\nload average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    return 0 if all(r[3] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
