"""CI gates: 0 ok, 10 regression, 11 invalid run; one line per violated gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from swe_residual.report.gates import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_REGRESSION,
    GateConfig,
    check_gates,
    gate_run,
    infra_fraction,
    missing_cases,
)
from swe_residual.results import Manifest, Record, append_record


def rec(task, start, outcome, state=None, agent="A", verdict=None, attempt=1) -> Record:
    return Record(
        case_id=f"{agent}/{task}/{start}/{state}",
        agent=agent,
        track="repo",
        task=task,
        start=start,
        state=state,
        outcome=outcome,
        attempt=attempt,
        verdict=verdict or ("pass" if outcome == 1 else "fail"),
        declared_complete=True,
    )


def run(n_tasks: int, clean: int, residual: int, agent="A") -> list[Record]:
    """n tasks, each with one clean run and one state; the first `residual` tasks solved from it."""
    out = []
    for i in range(n_tasks):
        out.append(rec(f"t{i}", "clean", 1 if i < clean else 0, agent=agent))
        out.append(rec(f"t{i}", "residual", 1 if i < residual else 0, state=f"s{i}", agent=agent))
    return out


def manifest_of(records: list[Record], extra: list[str] = ()) -> Manifest:
    return Manifest(cases=[r.case_id for r in records] + list(extra))


def test_all_gates_hold():
    # 10 tasks: clean 8/10, residual 6/10 -> Res 60%, Gap 20 points
    records = run(10, 8, 6)
    res = check_gates(
        records, manifest_of(records), GateConfig(min_residual=50, max_gap=25, max_infra_fraction=0.1)
    )
    assert res.status == EXIT_OK and res.violations == []
    assert {c["gate"] for c in res.checks} == {
        "missing_cases",
        "max_infra_fraction",
        "min_residual",
        "max_gap",
    }


def test_min_residual_and_max_gap_are_regressions():
    records = run(10, 8, 6)  # Res 60.0 %, Gap 20.0 pts
    res = check_gates(records, manifest_of(records), GateConfig(min_residual=65, max_gap=15))
    assert res.status == EXIT_REGRESSION
    assert res.violations == [
        "repo/A: residual success 60.0% < min 65.0%",
        "repo/A: gap 20.0 pts > max 15.0 pts",
    ]


def test_missing_cases_make_the_run_invalid_and_win_over_regressions():
    records = run(4, 4, 0)
    manifest = manifest_of(records, extra=["A/t9/clean/None"])
    assert missing_cases(records, manifest) == ["A/t9/clean/None"]
    res = check_gates(records, manifest, GateConfig(min_residual=50))
    assert res.status == EXIT_INVALID  # 11 wins over the residual regression (10)
    assert len(res.violations) == 2
    assert res.violations[0].startswith("missing cases: 1 of 9 have no record: A/t9/clean/None")


def test_infra_fraction_counts_cases_without_any_valid_verdict():
    # 4 cases: c1 ok; c2 infra then retried ok (valid); c3 and c4 only infra -> 2/4 = 0.5
    records = [
        rec("t1", "clean", 1),
        rec("t2", "clean", None, verdict="infra_error"),
        rec("t2", "clean", 1, attempt=2),
        rec("t3", "clean", None, verdict="infra_error"),
        rec("t4", "clean", None, verdict="infra_error"),
    ]
    assert infra_fraction(records) == (0.5, 2, 4)
    res = check_gates(records, Manifest(), GateConfig(max_infra_fraction=0.25))
    assert res.status == EXIT_INVALID
    assert res.violations == ["infra errors: 2/4 cases (50.0%) without a valid verdict > max 25.0%"]


def test_baseline_drop_beyond_noise_is_a_regression():
    # baseline: residual 8/8 solved; now 0/8 -> drop 100 points on 8 shared tasks
    # sign-flip p = 2 / 2^8 = 0.0078 < 0.05 -> regression; the gap rose by 100 points as well
    base, cur = run(8, 8, 8), run(8, 8, 0)
    res = check_gates(cur, manifest_of(cur), GateConfig(max_drop=5), baseline=base)
    assert res.status == EXIT_REGRESSION
    assert len(res.violations) == 2
    assert res.violations[0].startswith(
        "repo/A: residual success dropped by 100.0 pts vs baseline on 8 shared tasks"
    )
    assert "p=0.00781" in res.violations[0]
    assert res.violations[1].startswith("repo/A: gap rose by 100.0 pts")


def test_baseline_drop_within_noise_is_not_a_regression():
    # 3 of 20 tasks flip from solved to failed: drop 15 points > max_drop 5, but the exact sign-flip
    # p = 2/2^3 = 0.25 >= 0.05 -> noise, gate holds
    base, cur = run(20, 20, 10), run(20, 20, 7)
    res = check_gates(cur, manifest_of(cur), GateConfig(max_drop=5), baseline=base)
    assert res.status == EXIT_OK
    drop = next(c for c in res.checks if c.get("metric") == "residual")
    assert drop["drop"] == pytest.approx(15.0) and drop["p_value"] == pytest.approx(0.25)


def test_significant_drop_within_max_drop_is_not_a_regression():
    # 8 of 100 tasks drop (8 points, p = 0.0078) but max_drop allows 10 points
    base, cur = run(100, 100, 50), run(100, 100, 42)
    assert check_gates(cur, manifest_of(cur), GateConfig(max_drop=10), baseline=base).status == EXIT_OK
    assert check_gates(cur, manifest_of(cur), GateConfig(max_drop=5), baseline=base).status == EXIT_REGRESSION


def test_gate_run_from_run_dirs(tmp_path: Path):
    def write(path: Path, records: list[Record]) -> Path:
        path.mkdir()
        for r in records:
            append_record(path, r)
        manifest_of(records).write(path)
        return path

    base = write(tmp_path / "base", run(8, 8, 8))
    cur = write(tmp_path / "cur", run(8, 8, 0))
    res = gate_run([cur], GateConfig(max_drop=0), baseline_dirs=[base])
    assert res.status == EXIT_REGRESSION
    assert gate_run([base], GateConfig(min_residual=90)).status == EXIT_OK
