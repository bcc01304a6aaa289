"""Repeated attempts (--repeat K, issue 33): real suite runs of an agent whose success depends on
the repeat give the hand-computed Table 3, pass@3, pass^3 and intervals; three merged single runs
give the same numbers; an interrupted repeated run resumes only the (case, repeat) it lacks.

The agent is a shell script that counts its own runs per (task, start) in a directory of the host:
the run is made unsandboxed (the local backend's mode without bubblewrap, PATH without bwrap) so
that one file survives from one independent instance to the next. The script never sees the
hidden tests: it succeeds by writing the solved calc.py the test put beside it, and fails by
changing nothing. Cases run in plan order (no -n): repeat 1 of every case, then repeat 2, then 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from math import comb
from pathlib import Path

import pytest

from swe_residual.report.metrics import pass_at_k, pass_hat_k
from swe_residual.report.stats import bootstrap_ci, nested_bootstrap_ci

from .drivers import cli, records, run_suite, start_suite, world
from .taskfactory import CALC_SOLVED

# -- the estimators and the nested bootstrap, by hand ----------------------------------------------


def test_pass_at_k_and_pass_hat_k_by_hand():
    # n = 3 repeats, c = 1 success: pass@2 = 1 - C(2,2)/C(3,2) = 1 - 1/3 = 2/3 (of the three pairs
    # of repeats, two hold the success); pass^2 = C(1,2)/C(3,2) = 0 (no pair of successes)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_hat_k(3, 1, 2) == 0.0
    # c = 2 of n = 3: pass@3 = 1 - C(1,3)/C(3,3) = 1; pass^2 = C(2,2)/C(3,2) = 1/3; pass^3 = 0
    assert pass_at_k(3, 2, 3) == 1.0
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)
    assert pass_hat_k(3, 2, 3) == 0.0
    # n = 5, c = 2, k = 3: pass@3 = 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9; pass^3 = C(2,3)/10 = 0
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # k = 1 is the plain success rate
    assert pass_at_k(4, 1, 1) == pass_hat_k(4, 1, 1) == 0.25


def test_nested_bootstrap_one_task_draws_its_repeats():
    # one task: clean 3 of 3, its one state 1 of 2. The task bootstrap has one task to draw: every
    # replicate is (1, 0.5), the interval [0.5, 0.5]. The nested one also draws the state's two
    # repeats: Binomial(2, 1/2) successes, so residual 0, 0.5, 1 with chances 1/4, 1/2, 1/4: the
    # 2.5% and 97.5% ends are 0 and 1, and the Gap 100 (1 - residual) runs [0, 100]
    flat = bootstrap_ci([(1.0, 0.5)], n_boot=1000)
    assert flat["residual"] == [0.5, 0.5]
    nested = nested_bootstrap_ci([((3, 3), [(1, 2)])], n_boot=1000)
    assert nested["residual"] == [0.0, 1.0]
    assert nested["clean"] == [1.0, 1.0]
    assert nested["gap"] == [0.0, 100.0]


def test_nested_bootstrap_of_agreeing_repeats_is_the_task_bootstrap_bit_for_bit():
    # repeats that agree (0 or n successes) have nothing to resample: the same draws as the task
    # bootstrap, so a run without repeats (or with agreeing ones) keeps its intervals
    cells = [((1, 1), [(0, 1)]), ((3, 3), [(0, 3), (3, 3)]), ((0, 2), [(2, 2)]), ((1, 1), [(1, 1)])]
    pairs = [(1.0, 0.0), (1.0, 0.5), (0.0, 1.0), (1.0, 1.0)]
    for seed in (0, 7):
        assert nested_bootstrap_ci(cells, n_boot=500, seed=seed) == bootstrap_ci(pairs, n_boot=500, seed=seed)


# -- real suite runs --------------------------------------------------------------------------------

#: success per (task, start) and its n-th run: repeats 1, 2, 3
PLAN = {
    ("calc", "clean"): (1, 1, 1),
    ("calc", "residual"): (1, 0, 0),
    ("other", "clean"): (1, 1, 0),
    ("other", "residual"): (0, 0, 0),
}
# By hand (docs/metrics.md): per case the mean of its repeats, per task the mean of its states,
# then the mean of the tasks.
#   calc:  clean 3/3 = 1,    residual (one state) 1/3
#   other: clean 2/3,        residual 0/3 = 0
#   Residual = (1/3 + 0) / 2 = 1/6 = 16.7 %; Ref. Clean = (1 + 2/3) / 2 = 5/6 = 83.3 %
#   Gap = 100 (5/6 - 1/6) = 66.7 points; CondFail over C_A = {calc} (every clean repeat solved it):
#   1 - 1/3 = 2/3 = 66.7 %
#   pass@3 per case = 1 - C(3-c, 3)/C(3, 3): 1 when c >= 1 -> calc clean 1, calc residual 1,
#   other clean 1, other residual 0: Residual pass@3 = (1 + 0)/2 = 0.5, Clean pass@3 = 1
#   pass^3 per case = C(c, 3)/C(3, 3): 1 only when c = 3 -> calc clean 1, the rest 0:
#   Residual pass^3 = 0, Clean pass^3 = (1 + 0)/2 = 0.5
EXPECTED = {
    "residual": 1 / 6,
    "clean": 5 / 6,
    "gap": 100 * (5 / 6 - 1 / 6),
    "cond_fail": 2 / 3,
    "n_tasks": 2,
    "n_clean_runs": 6,
    "n_residual_runs": 6,
}
PASS_K = {
    "k": 3,
    "pass_at_k_residual": 0.5,
    "pass_at_k_clean": 1.0,
    "pass_hat_k_residual": 0.0,
    "pass_hat_k_clean": 0.5,
}

AGENT_SH = r"""#!/bin/bash
# the test's agent: counts its runs per (task, start) in $D and succeeds where $D/plan says so
set -u
D="__DIR__"
kind=clean
[ -n "$(git status --porcelain)" ] && kind=residual   # a Residual State is uncommitted work
task=calc
case "$TASK_INSTRUCTION" in *"(other)"*) task=other ;; esac
g=$(( $(cat "$D/invocations" 2>/dev/null || echo 0) + 1 ))
if [ -f "$D/interrupt-at" ] && [ "$g" = "$(cat "$D/interrupt-at")" ] && [ ! -e "$D/interrupted" ]; then
    touch "$D/interrupted"                      # Ctrl-C, as a terminal sends it, before counting
    kill -INT -- "-$(cat "$D/pgid")"
    sleep 20
    exit 1
fi
n=$(( $(cat "$D/count-$task-$kind" 2>/dev/null || echo 0) + 1 ))
echo "$g" > "$D/invocations"
echo "$n" > "$D/count-$task-$kind"
if grep -qx "$task $kind $n" "$D/plan"; then cp "$D/solved.py" calc.py; fi
exit 0
"""


def _no_bwrap_path(tmp: Path) -> str:
    """A PATH with every program of this machine but bwrap: the local backend then runs unsandboxed."""
    bin_dir = tmp / "bin-without-bwrap"
    bin_dir.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name != "bwrap" and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(Path(d) / name)
    return f"{Path(sys.executable).parent}:{bin_dir}"


@pytest.fixture
def flaky(tmp_path):
    """A world of two tasks (calc, other; one state each) and the counting agent `flaky`."""
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    (agent_dir / "agent.sh").write_text(AGENT_SH.replace("__DIR__", str(agent_dir)))
    (agent_dir / "solved.py").write_text(CALC_SOLVED)
    (agent_dir / "plan").write_text(
        "".join(f"{t} {s} {i}\n" for (t, s), ys in PLAN.items() for i, y in enumerate(ys, 1) if y)
    )
    w = world(
        tmp_path,
        "calc",
        "other",
        agents={"flaky": {"harness": "command", "command": f"bash {agent_dir / 'agent.sh'}"}},
    )
    other = tmp_path / "tasks" / "other" / "instruction.md"
    other.write_text(other.read_text().rstrip("\n") + " (other)\n")
    env = {"PATH": _no_bwrap_path(tmp_path), "PYTEST_ADDOPTS": None, "CI": "1"}
    return w, agent_dir, env


def _row(summary: dict) -> dict:
    (row,) = summary["tracks"]["demo"].values()  # the one agent, flaky
    return row


def _check_hand_numbers(row: dict) -> None:
    for key, value in EXPECTED.items():
        assert row[key] == pytest.approx(value), key
    assert row["pass_k"] == pytest.approx(PASS_K)


def _exact_distribution() -> tuple[dict[float, float], dict[float, float]]:
    """The nested bootstrap's replicate distribution of Residual and Clean for PLAN, by enumeration.

    Two tasks drawn with replacement: m copies of calc (Binomial(2, 1/2): 0, 1, 2 with 1/4, 1/2,
    1/4) and 2 - m of other. Each copy of a case redraws its 3 repeats: calc residual 1 of 3 ->
    Binomial(3m, 1/3) successes; other clean 2 of 3 -> Binomial(3(2-m), 2/3); calc clean and
    other residual agree over their repeats (3 of 3, 0 of 3). Residual = (X/3 + 0)/2,
    Clean = (m + Z/3)/2. E.g. Residual 0 has chance 1/4 + 1/2 (2/3)^3 + 1/4 (2/3)^6 = 0.420.
    """

    def binom(n: int, p: float) -> dict[int, float]:
        return {k: comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)}

    res: dict[float, float] = {}
    clean: dict[float, float] = {}
    for m, pm in ((0, 0.25), (1, 0.5), (2, 0.25)):
        for x, px in binom(3 * m, 1 / 3).items():
            res[x / 6] = res.get(x / 6, 0.0) + pm * px
        for z, pz in binom(3 * (2 - m), 2 / 3).items():
            v = (m + z / 3) / 2
            clean[v] = clean.get(v, 0.0) + pm * pz
    return res, clean


def _within(end: float, dist: dict[float, float], q: float, tol: float = 0.02) -> bool:
    """Is `end` a q-quantile of `dist` up to tol in probability: P(Y < end) <= q + tol and
    P(Y <= end) >= q - tol (a percentile of 1000 replicates is within ~0.005 of it)?"""
    below = sum(p for v, p in dist.items() if v < end - 1e-9)
    upto = sum(p for v, p in dist.items() if v <= end + 1e-9)
    return below <= q + tol and upto >= q - tol


@pytest.mark.slow
def test_repeat_3_merged_single_runs_and_compare(flaky):
    w, agent_dir, env = flaky
    run = w.root / "repeat3"
    proc = run_suite("--repeat", "3", world=w.root, run_dir=run, agents=["flaky"], env=env, timeout=900)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-3000:]  # some cases fail
    recs = records(run)
    # every (case, repeat) once, with its repeat in the id and the record
    ids = sorted((r["case_id"], r["repeat"]) for r in recs)
    base = ["flaky-calc-clean", "flaky-calc-residual-calc--partial"]
    base += ["flaky-other-clean", "flaky-other-residual-other--partial"]
    assert ids == sorted((b + ("" if k == 1 else f"#r{k}"), k) for b in base for k in (1, 2, 3))
    assert all(r["rule"] == "verdict" for r in recs)
    for r in recs:  # the agent's n-th run of a (task, start) is that case's repeat n
        assert r["outcome"] == PLAN[(r["task"], r["start"])][r["repeat"] - 1], r["case_id"]
    # artifacts of a repeat under its own dir
    assert any("/repeat-2/attempt-1/" in p for r in recs for p in r["artifacts"].values())
    summary = json.loads((run / "summary.json").read_text())
    row = _row(summary)
    _check_hand_numbers(row)
    # intervals: the nested bootstrap's distribution (_exact_distribution). The residual interval
    # starts at 0 (chance 0.42 of 0) and ends in [0.5, 2/3]: P(Residual >= 1/2) = P(X >= 3) =
    # 1/2 (1/27) + 1/4 (160 + 60 + 12 + 1)/729 = 0.098 > 0.025, P(X >= 4) = 73/2916 = 0.025. A
    # task bootstrap alone would end at 1/3 (both copies calc: (1/3 + 1/3)/2).
    res_d, clean_d = _exact_distribution()
    ci = row["ci"]
    assert ci["residual"][0] == 0.0 and 0.5 <= ci["residual"][1] <= 2 / 3
    assert ci["clean"][1] == 1.0  # P(Clean = 1) = 1/4 + 1/2 (8/27) + 1/4 (64/729) = 0.42
    for (lo, hi), dist in ((ci["residual"], res_d), (ci["clean"], clean_d)):
        assert _within(lo, dist, 0.025) and _within(hi, dist, 0.975), (lo, hi)
    text = proc.stdout
    assert "pass@3" in text and "pass^3" in text

    # three single runs, merged: the same numbers, intervals included (the agent counts afresh:
    # the n-th single run is repeat n)
    for count in agent_dir.glob("count-*"):
        count.unlink()
    singles = [w.root / f"single{i}" for i in (1, 2, 3)]
    for single in singles:
        run_suite(world=w.root, run_dir=single, agents=["flaky"], env=env, timeout=900, check=1)
    assert all(r["repeat"] == 1 for s in singles for r in records(s))
    merged = json.loads(cli("report", *map(str, singles), "--format", "json", check=0).stdout)
    assert _row(merged) == row
    assert cli("report", *map(str, singles), check=0).stdout.count("pass@3") >= 1

    # compare pairs per-task means: run single1 (each case's first repeat: calc 1/1, other 1/0)
    # against the repeated run: Residual per task calc 1 -> 1/3, other 0 -> 0: diff = 100 mean(
    # -2/3, 0) = -33.3; Clean calc 1 -> 1, other 1 -> 2/3: diff = -16.7; a case's repeats are one
    # case: calc residual pass -> mixed and other clean pass -> mixed flipped
    out = json.loads(cli("compare", str(singles[0]), str(run), "--format", "json", check=0).stdout)
    (entry,) = out  # one (track, agent)
    m = entry["metrics"]
    assert m["residual"]["comparison"]["diff"] == pytest.approx(-100 / 3)
    assert m["clean"]["comparison"]["diff"] == pytest.approx(-100 / 6)
    flipped = {(f["case_id"], f["baseline"], f["run"]) for f in entry["flipped"]}
    assert flipped == {
        ("flaky-calc-residual-calc--partial", "pass", "mixed"),
        ("flaky-other-clean", "pass", "mixed"),
    }
    # the gate's baseline check reads the same per-task means
    gate = cli("gate", str(run), "--baseline", str(singles[0]), "--max-drop", "5", check=0)
    assert "residual success 16.7% vs baseline 50.0% on 2 shared tasks" in gate.stdout, gate.stdout


@pytest.mark.slow
def test_resume_of_an_interrupted_repeated_run_runs_only_the_missing_repeats(flaky):
    w, agent_dir, env = flaky
    run = w.root / "run"
    # the agent's 6th run sends Ctrl-C: repeat 1 of all four cases and repeat 2 of the first
    # (calc clean) are recorded, the 6th case (calc residual, repeat 2) is not
    (agent_dir / "interrupt-at").write_text("6\n")
    proc = start_suite(
        "--repeat",
        "3",
        world=w.root,
        run_dir=run,
        agents=["flaky"],
        env=env,
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    (agent_dir / "pgid").write_text(f"{proc.pid}\n")
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 2, out[-4000:] + err[-3000:]
    assert (agent_dir / "interrupted").exists()
    before = records(run)
    done = {(r["case_id"], r["repeat"]) for r in before if r["outcome"] is not None}
    assert done == {
        ("flaky-calc-clean", 1),
        ("flaky-calc-residual-calc--partial", 1),
        ("flaky-other-clean", 1),
        ("flaky-other-residual-other--partial", 1),
        ("flaky-calc-clean#r2", 2),
    }, before
    resume = next(line for line in out.splitlines() if "--resume" in line and "pytest" in line)
    assert "--repeat 3" in resume, resume
    t0 = time.monotonic()
    again = run_suite("--repeat", "3", world=w.root, run_dir=run, resume=True, agents=["flaky"], env=env)
    assert again.returncode == 1, again.stdout[-4000:] + again.stderr[-3000:]
    assert time.monotonic() - t0 < 900
    assert "kept 5 cases with a valid verdict; running 7" in again.stdout, again.stdout[-3000:]
    after = records(run)
    valid = [(r["case_id"], r["repeat"]) for r in after if r["outcome"] is not None]
    assert len(valid) == len(set(valid)) == 12  # every (case, repeat) once: none ran twice
    # the agent ran 5 + 7 times (the interrupted run of calc residual repeat 2 was not counted)
    assert (agent_dir / "invocations").read_text().strip() == "12"
    for r in after:
        if r["outcome"] is not None:
            assert r["outcome"] == PLAN[(r["task"], r["start"])][r["repeat"] - 1], r["case_id"]
    _check_hand_numbers(_row(json.loads((run / "summary.json").read_text())))


def test_table_4_averages_a_states_repeats_before_the_tasks_states():
    # one task, graded tests {a, b, c}, two states whose failing set is {a}; failed continuations:
    # state A three repeats, each failing {a} at the end (same failing 1, broke 0 of {b, c});
    # state B one run failing {a, b} (same 0, broke 1/2). A state's repeats first:
    # same_failing = (mean(1, 1, 1) + 0) / 2 = 0.5 (per run it would be 3/4), break_rate =
    # (0 + 1/2) / 2 = 0.25 (per run 1/8); n_runs still counts the 4 runs
    from swe_residual.report.tables import build_report
    from swe_residual.results import Manifest, Record, StateFacts, TaskFacts

    pred = {"agent": "p", "model_family": "X"}
    manifest = Manifest(
        tasks={"demo/t": TaskFacts(track="demo", tests=["a", "b", "c"])},
        states={
            s: StateFacts(track="demo", task="t", predecessor=pred, failing_tests=["a"], patch="")
            for s in ("A", "B")
        },
    )

    def rec(start, state, repeat, outcome, failing):
        tests = {t: ("failed" if t in failing else "passed") for t in "abc"}
        cid = f"x-t-{start}" + (f"-{state}" if state else "") + ("" if repeat == 1 else f"#r{repeat}")
        return Record(
            case_id=cid, agent="x", track="demo", task="t", start=start, state=state, repeat=repeat,
            outcome=outcome, verdict="pass" if outcome else "fail", tests=tests,
            declared_complete=True, termination="submitted", predecessor=pred if state else None,
        )  # fmt: skip

    recs = [rec("clean", None, 1, 1, "")]
    recs += [rec("residual", "A", k, 0, "a") for k in (1, 2, 3)] + [rec("residual", "B", 1, 0, "ab")]
    bias = build_report(recs, manifest)["acceptance_bias"]["demo"]["x"]
    assert bias["same_failing"]["value"] == 0.5
    assert bias["same_failing"]["n_runs"] == 4
    assert bias["break_rate"]["value"] == 0.25
