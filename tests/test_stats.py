"""Bootstrap intervals over tasks and paired comparisons (stdlib, seeded)."""

from __future__ import annotations

import random
import time
from statistics import fmean, pvariance

import pytest

from swe_residual.report.stats import (
    binomial,
    bootstrap_ci,
    compare,
    multinomial,
    paired_comparison,
    percentile,
    sign_flip_p,
    task_values,
)
from swe_residual.results import Record


def rec(agent, task, start, outcome, state=None, track="repo") -> Record:
    return Record(case_id=f"{agent}/{task}/{start}/{state}", agent=agent, track=track, task=task, start=start,
                  state=state, outcome=outcome, verdict="pass" if outcome else "fail", declared_complete=True)


def test_percentile_linear_interpolation():
    # values 0..4: 2.5% -> position 0.1 -> 0.1; 97.5% -> position 3.9 -> 3.9; median 2
    vals = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert percentile(vals, 0.025) == pytest.approx(0.1)
    assert percentile(vals, 0.975) == pytest.approx(3.9)
    assert percentile(vals, 0.5) == 2.0


@pytest.mark.parametrize("n,p", [(1, 0.3), (7, 0.2), (60, 0.5), (3000, 0.04), (3000, 0.7)])
def test_binomial_draws_have_binomial_moments(n, p):
    rng = random.Random(3)
    xs = [binomial(rng, n, p) for _ in range(20000)]
    assert all(0 <= x <= n for x in xs)
    sd = (n * p * (1 - p)) ** 0.5
    assert fmean(xs) == pytest.approx(n * p, abs=4 * sd / 20000 ** 0.5 + 1e-9)
    assert pvariance(xs) == pytest.approx(n * p * (1 - p), rel=0.06)


def test_binomial_edge_cases():
    rng = random.Random(0)
    assert binomial(rng, 0, 0.5) == 0 and binomial(rng, 5, 0.0) == 0 and binomial(rng, 5, 1.0) == 5


def test_multinomial_keeps_the_total():
    rng = random.Random(1)
    for _ in range(200):
        draw = multinomial(rng, 17, [5, 0, 7, 5])
        assert sum(draw) == 17 and draw[1] == 0 and min(draw) >= 0


def test_bootstrap_is_reproducible_and_keeps_pairs():
    # 40 tasks: clean 1 on 30, residual 1 on 12 of those; point Res 0.3, Clean 0.75, Gap 45
    pairs = {f"t{i}": (1.0 if i < 30 else 0.0, 1.0 if i < 12 else 0.0) for i in range(40)}
    a = bootstrap_ci(pairs, n_boot=1000, seed=5)
    assert a == bootstrap_ci(pairs, n_boot=1000, seed=5)           # same seed, same interval
    assert a != bootstrap_ci(pairs, n_boot=1000, seed=6)
    lo, hi = a["residual"]
    assert lo < 0.3 < hi and 0.0 <= lo and hi <= 1.0
    assert a["clean"][0] < 0.75 < a["clean"][1]
    assert a["gap"][0] < 45.0 < a["gap"][1]
    # Gap is resampled with its pairs: its interval is narrower than treating Clean and Res as independent
    # (the paired gap per task is clean - res in {0, 1}; width ~ 2*1.96*sqrt(.45*.55/40)*100 = 31 points)
    assert a["gap"][1] - a["gap"][0] < 35


def test_bootstrap_degenerate_and_empty():
    # every task (1, 1): no variability, interval collapses to the point; gap 0
    ci = bootstrap_ci([(1.0, 1.0)] * 10, n_boot=200)
    assert ci["residual"] == [1.0, 1.0] and ci["gap"] == [0.0, 0.0]
    assert bootstrap_ci({}, n_boot=10)["residual"] is None


def test_bootstrap_is_fast_for_many_tasks():
    rng = random.Random(2)
    pairs = [(float(rng.random() < 0.6), rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0])) for _ in range(20000)]
    t = time.perf_counter()
    bootstrap_ci(pairs, n_boot=2000)
    assert time.perf_counter() - t < 1.0


def test_sign_flip_exact_by_hand():
    # d = [1, 1, 1]: 8 equally likely flips, |sum| >= 3 only for +++ and --- -> p = 2/8
    assert sign_flip_p([1, 1, 1]) == (0.25, True)
    # d = [1, 1, 1, -1]: observed |sum| = 2; sum = 2k - 4 over k ~ Bin(4, 1/2); |2k-4| >= 2 for k in {0,1,3,4}
    # -> (1 + 4 + 4 + 1)/16 = 0.625
    assert sign_flip_p([1, 1, 1, -1]) == (0.625, True)
    # zeros carry no sign: [2, 0, 0] -> flips of one value, |sum| >= 2 always -> p = 1
    assert sign_flip_p([2, 0, 0]) == (1.0, True)
    assert sign_flip_p([0, 0]) == (1.0, True)


def test_sign_flip_monte_carlo_agrees_with_exact():
    rng = random.Random(4)
    diffs = [rng.choice([-1.0, 0.5, 1.0, 2.0, -0.25]) + rng.random() for _ in range(30)]  # all distinct: Monte Carlo
    p_mc, exact = sign_flip_p(diffs, n_perm=20000, seed=1)
    assert not exact
    # reference by brute-force Monte Carlo with plain coin flips
    ref = random.Random(9)
    obs = abs(sum(diffs))
    hits = sum(abs(sum(d if ref.random() < 0.5 else -d for d in diffs)) >= obs - 1e-9 for _ in range(20000))
    assert p_mc == pytest.approx(hits / 20000, abs=0.02)


def test_paired_comparison_by_hand():
    # shared tasks t1..t4; a - b in points = [100, 100, 0, 100] -> mean 75
    a = {"t1": 1.0, "t2": 1.0, "t3": 0.5, "t4": 1.0, "only_a": 1.0}
    b = {"t1": 0.0, "t2": 0.0, "t3": 0.5, "t4": 0.0}
    out = paired_comparison(a, b, n_boot=500, seed=1)
    assert out["n_shared"] == 4 and out["n_only_a"] == 1 and out["n_only_b"] == 0
    assert out["diff"] == pytest.approx(75.0)
    # three nonzero diffs of 100, all the same sign: p = 2/2^3 = 0.25
    assert out["p_value"] == pytest.approx(0.25) and out["exact"]
    lo, hi = out["ci"]
    assert 0.0 <= lo <= 75.0 <= hi <= 100.0


def test_task_values_and_compare_two_runs_and_two_agents():
    # run 1: agent A solves every residual state of t1..t8; run 2: A solves none -> drop 100 points
    run1 = [rec("A", f"t{i}", "clean", 1) for i in range(8)] + [rec("A", f"t{i}", "residual", 1, "s") for i in range(8)]
    run2 = [rec("A", f"t{i}", "clean", 1) for i in range(8)] + [rec("A", f"t{i}", "residual", 0, "s") for i in range(8)]
    assert task_values(run1)[("repo", "A")] == {f"t{i}": 1.0 for i in range(8)}
    assert task_values(run2, "gap")[("repo", "A")]["t0"] == 1.0
    out = compare(run1, run2, n_boot=200)["repo"]["A"]
    # 8 same-sign diffs: exact p = 2/256 = 0.0078
    assert out["diff"] == 100.0 and out["p_value"] == pytest.approx(2 / 256)
    # two agents of one run: B equals run2's A
    both = run1 + [r.model_copy(update={"agent": "B"}) for r in run2]
    two = compare(both, both, agent_a="A", agent_b="B", n_boot=200)["repo"]["A vs B"]
    assert two["diff"] == 100.0
    with pytest.raises(ValueError):
        task_values(run1, "bogus")
