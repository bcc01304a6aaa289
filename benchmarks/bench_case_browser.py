"""Benchmark: the run page and the case browser of a run dir of 10,000 cases.

5 agents x 500 tasks x (1 clean run + 3 Residual States) = 10,000 records, each with the
artifacts a real run leaves (trajectory.json of 12 steps with commands and outputs, final.patch,
verifier.log), a 3-file patch per state, per-test outcomes, case ids as long as real ones and
one integrity flag in fifty runs. Written in the published formats (docs/formats.md).

Measured: the run page's size (it must not grow with per-case content: target under 3 MB at 10k
cases), the size of all case pages, and the time of `swe-residual report RUN --html` (process
start to exit: loading, every table, the run page, 10k case pages) and of write_browser alone.

Measured on the 2-core dev machine (shared; load average 4-6 from other work): run page
2.61 MB (with the case list's rows); 10,000 case pages of 304 MB in all (~30 KB each, about the size of the artifacts they
show); write_browser 4.1-17.9 s and the whole command 9.1-18.0 s, depending on how busy the
cores were. What it took: pages rewritten in place (deleting 10k old pages cost more than
writing them), each task's grid row built once for its pages, diffs escaped per file, directories
resolved once, and a forked child writing every other task's pages (report/html/run_page.py).

    python3 -m pytest benchmarks/bench_case_browser.py -s
    SWE_RESIDUAL_BENCH_STRICT=1 ... additionally fails when the command takes TARGET_S or more
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swe_residual.results import MANIFEST, RESULTS

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ["mini-swe-agent-kimi-k2", "mini-swe-agent-glm-4.6", "mini-swe-agent-qwen3-coder", "oracle", "nop"]
TASKS = 500
STATES = 3
TESTS = [f"tests/test_module_{i}.py::test_behaviour_{i}" for i in range(12)]
MAX_RUN_PAGE = 3 << 20
TARGET_S = 60.0


def _patch(rng: random.Random, files: list[str], lines: int) -> str:
    out = []
    for f in files:
        body = [
            f"+    value_{rng.randint(0, 999)} = compute({rng.randint(0, 99)})  # {f}" for _ in range(lines)
        ]
        out += [
            f"diff --git a/{f} b/{f}",
            "index 1234567..89abcde 100644",
            f"--- a/{f}",
            f"+++ b/{f}",
            f"@@ -10,3 +10,{3 + lines} @@ def handler(request):",
            "     context = load()",
            *body,
            "     return context",
            "     # end",
        ]
    return "\n".join(out) + "\n"


def _trajectory(rng: random.Random, agent: str) -> dict:
    steps = []
    for i in range(12):
        cmd = rng.choice(
            [
                "grep -rn 'def handler' src/",
                "sed -n 1,80p src/app/handler.py",
                "python -m pytest -x -q",
                "git diff --stat",
                "cat README.md",
                "python - <<'EOF'\nprint(compute(3))\nEOF",
            ]
        )
        output = "\n".join(
            f"src/app/module_{k}.py:{rng.randint(1, 400)}: def handler(request):  # line {k}"
            for k in range(rng.randint(3, 12))
        )
        steps.append(
            {
                "index": i,
                "message": f"Step {i}: look at the handler again and check what the tests expect.",
                "actions": [
                    {
                        "command": cmd,
                        "output": output,
                        "exit_code": rng.choice([0, 0, 0, 1]),
                        "duration_s": rng.uniform(0.01, 3),
                        "kind": "shell",
                        "path": None,
                    }
                ],
                "started_at": 1.7e9 + i,
                "duration_s": 1.0,
            }
        )
    return {
        "format": "swe-residual-trajectory-1",
        "agent": agent,
        "harness": "bench",
        "steps": steps,
        "exit_status": "submitted",
        "submission": None,
    }


def generate(run: Path, seed: int = 0) -> int:
    """Write results.jsonl, manifest.json, states/ and cases/; return the number of records."""
    rng = random.Random(seed)
    (run / "states").mkdir(parents=True, exist_ok=True)
    tasks, states, cases, n = {}, {}, [], 0
    for t in range(TASKS):
        task = f"repository-task-{t:04d}-fix-request-handler"
        tasks[f"repo/{task}"] = {"track": "repo", "tests": TESTS, "solution_files": ["src/app/handler.py"]}
        for k in range(STATES):
            sid = f"{task}--{['deepseek', 'qwen', 'glm'][k]}-run-{k}"
            rel = f"states/{sid}.patch"
            (run / rel).write_text(
                _patch(rng, [f"src/app/handler_{k}.py", "src/app/util.py", "tests/test_new.py"], 8)
            )
            states[sid] = {
                "track": "repo",
                "task": task,
                "failing_tests": TESTS[: 1 + k],
                "patch": rel,
                "predecessor": {"agent": f"pred-{k}", "model_family": ["DS", "QW", "GLM"][k]},
                "changed_files": [f"src/app/handler_{k}.py", "src/app/util.py", "tests/test_new.py"],
            }
    with open(run / RESULTS, "w", encoding="utf-8") as fh:
        for agent in AGENTS:
            for t in range(TASKS):
                task = f"repository-task-{t:04d}-fix-request-handler"
                starts = [("clean", None)] + [
                    ("residual", f"{task}--{['deepseek', 'qwen', 'glm'][k]}-run-{k}") for k in range(STATES)
                ]
                for start, sid in starts:
                    cid = f"{agent}-{task}-{start}" + (f"-{sid}" if sid else "")
                    art = run / "cases" / cid / "attempt-1"
                    art.mkdir(parents=True)
                    (art / "trajectory.json").write_text(json.dumps(_trajectory(rng, agent)))
                    (art / "final.patch").write_text(
                        _patch(rng, ["src/app/handler.py", "src/app/util.py"], 6)
                    )
                    (art / "verifier.log").write_text("\n".join(f"{t_} PASSED" for t_ in TESTS) + "\n")
                    ok = rng.random() < (0.6 if start == "clean" else 0.4)
                    line = {
                        "case_id": cid,
                        "agent": agent,
                        "harness": "bench",
                        "track": "repo",
                        "task": task,
                        "start": start,
                        "state": sid,
                        "attempt": 1,
                        "predecessor": states[sid]["predecessor"] if sid else None,
                        "outcome": int(ok),
                        "verdict": "pass" if ok else "fail",
                        "rule": "verdict",
                        "tests": {x: "passed" if ok or rng.random() < 0.7 else "failed" for x in TESTS},
                        "missing_tests": [],
                        "declared_complete": True,
                        "termination": "submitted",
                        "steps": 12,
                        "duration_s": rng.uniform(10, 3000),
                        "integrity": ["test-infrastructure: conftest.py"] if rng.random() < 0.02 else [],
                        "artifacts": {
                            name: str((art / f).relative_to(run))
                            for name, f in (
                                ("trajectory", "trajectory.json"),
                                ("patch", "final.patch"),
                                ("verifier_log", "verifier.log"),
                            )
                        },
                        "finished_at": 1.7e9,
                    }
                    fh.write(json.dumps(line, separators=(",", ":")) + "\n")
                    cases.append(cid)
                    n += 1
    (run / MANIFEST).write_text(
        json.dumps({"cases": cases, "tasks": tasks, "states": states}), encoding="utf-8"
    )
    return n


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("bench-browser") / "run"
    assert generate(run) == 10_000
    return run


def command_seconds(run: Path) -> float:
    """Wall time of one `swe-residual report RUN --html --format json` process, start to exit."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "swe_residual.cli", "report", str(run), "--html", "--format", "json"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def pages_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "pages").iterdir())


def test_case_browser_10k_cases(big_run):
    from swe_residual.report.html.run_page import write_browser
    from swe_residual.report.tables import build_report, load_runs

    seconds = command_seconds(big_run)
    size = (big_run / "report.html").stat().st_size
    n_pages = len(list((big_run / "pages").iterdir()))
    t0 = time.perf_counter()
    records, manifest = load_runs([big_run])
    report = build_report(records, manifest)
    t_report = time.perf_counter() - t0
    written = write_browser(big_run, report, records, manifest, [big_run])
    print(
        f"\n10,000 cases: run page {size / 1e6:.2f} MB (limit {MAX_RUN_PAGE >> 20} MiB), {n_pages} case pages "
        f"of {pages_bytes(big_run) / 1e6:.0f} MB in all; `swe-residual report --html` {seconds:.1f} s; in process: "
        f"load + tables {t_report:.1f} s, write_browser {written.seconds:.1f} s"
    )
    assert n_pages == 10_000 and written.n_pages == 10_000
    assert size < MAX_RUN_PAGE and written.run_page_bytes < MAX_RUN_PAGE
    if os.environ.get("SWE_RESIDUAL_BENCH_STRICT") == "1":
        assert seconds < TARGET_S


if __name__ == "__main__":  # quick manual timing without pytest
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        generate(Path(tmp) / "run")
        print(f"generated in {time.perf_counter() - t0:.1f} s")
        s = command_seconds(Path(tmp) / "run")
        print(
            f"report --html: {s:.1f} s, run page {(Path(tmp) / 'run' / 'report.html').stat().st_size / 1e6:.2f} MB, "
            f"pages {pages_bytes(Path(tmp) / 'run') / 1e6:.0f} MB"
        )
