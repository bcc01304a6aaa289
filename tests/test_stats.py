"""Bootstrap intervals over tasks and paired comparisons (numpy, seeded).

The implementation before numpy (pure Python, random.Random) is kept in tests/stats_reference.py:
where nothing is random (the exact sign-flip test) the numbers must be the same bits; where they
are Monte Carlo they must agree within a few standard errors of the Monte-Carlo estimates.
"""

from __future__ import annotations

import math
import random
import time
from statistics import NormalDist, fmean, pstdev, pvariance

import numpy as np
import pytest

from swe_residual.report import stats
from swe_residual.report.aggregates import success_of
from swe_residual.report.compare import compare_runs
from swe_residual.report.stats import (
    bootstrap_ci,
    paired_comparison,
    percentile,
    resampled_sums,
    sign_flip_p,
)
from swe_residual.results import Record
from tests import stats_reference as ref


def rec(agent, task, start, outcome, state=None, track="repo") -> Record:
    return Record(
        case_id=f"{agent}/{task}/{start}/{state}",
        agent=agent,
        track=track,
        task=task,
        start=start,
        state=state,
        outcome=outcome,
        verdict="pass" if outcome else "fail",
        declared_complete=True,
    )


def test_percentile_linear_interpolation():
    # values 0..4: 2.5% -> position 0.1 -> 0.1; 97.5% -> position 3.9 -> 3.9; median 2
    vals = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert percentile(vals, 0.025) == pytest.approx(0.1)
    assert percentile(vals, 0.975) == pytest.approx(3.9)
    assert percentile(vals, 0.5) == 2.0
    assert type(percentile(np.array(vals), 0.5)) is float  # JSON-ready, not numpy.float64


def test_resampled_counts_are_multinomial():
    # categories of 5, 0, 7 and 5 tasks (n = 17); an indicator column per category gives its counts:
    # every replicate keeps the total, the empty category is never drawn, and count j has the
    # Multinomial moments n p_j, n p_j (1 - p_j): category 0 -> mean 17 * 5/17 = 5, variance 5 * 12/17 = 3.53
    sizes = [5, 0, 7, 5]
    cols = [[1.0 if i == j else 0.0 for i in range(4)] for j in range(4)]
    counts = resampled_sums(np.random.default_rng(1), sizes, cols, 20000)
    assert np.array_equal(sum(counts), np.full(20000, 17.0))
    assert not counts[1].any() and min(c.min() for c in counts) >= 0
    for c, s in zip(counts, sizes):
        p = s / 17
        sd = (17 * p * (1 - p)) ** 0.5
        assert c.mean() == pytest.approx(17 * p, abs=4 * sd / 20000**0.5 + 1e-9)
        assert c.var() == pytest.approx(17 * p * (1 - p), rel=0.06, abs=1e-12)


def test_bootstrap_is_reproducible_and_keeps_pairs():
    # 40 tasks: clean 1 on 30, residual 1 on 12 of those; point Res 0.3, Clean 0.75, Gap 45
    pairs = {f"t{i}": (1.0 if i < 30 else 0.0, 1.0 if i < 12 else 0.0) for i in range(40)}
    a = bootstrap_ci(pairs, n_boot=1000, seed=5)
    assert a == bootstrap_ci(pairs, n_boot=1000, seed=5)  # same seed, same interval
    assert a != bootstrap_ci(pairs, n_boot=1000, seed=6)
    lo, hi = a["residual"]
    assert lo < 0.3 < hi and 0.0 <= lo and hi <= 1.0
    assert a["clean"][0] < 0.75 < a["clean"][1]
    assert a["gap"][0] < 45.0 < a["gap"][1]
    # Gap is resampled with its pairs: its interval is narrower than treating Clean and Res as independent
    # (the paired gap per task is clean - res in {0, 1}; width ~ 2*1.96*sqrt(.45*.55/40)*100 = 31 points)
    assert a["gap"][1] - a["gap"][0] < 35
    assert all(type(x) is float for k in ("residual", "clean", "gap") for x in a[k])


def test_bootstrap_does_not_depend_on_the_task_order():
    rng = random.Random(7)
    pairs = {f"t{i}": (float(rng.random() < 0.7), rng.choice([0.0, 1 / 3, 0.5, 1.0])) for i in range(300)}
    shuffled = list(pairs.items())
    rng.shuffle(shuffled)
    assert bootstrap_ci(dict(shuffled), n_boot=500, seed=3) == bootstrap_ci(pairs, n_boot=500, seed=3)


def test_bootstrap_degenerate_and_empty():
    # every task (1, 1): no variability, interval collapses to the point; gap 0
    ci = bootstrap_ci([(1.0, 1.0)] * 10, n_boot=200)
    assert ci["residual"] == [1.0, 1.0] and ci["clean"] == [1.0, 1.0] and ci["gap"] == [0.0, 0.0]
    # every task (1, 1/3): each replicate sums 10 * 1/3 = 3.333.. -> /10 = 0.333.. exactly as 1/3 computed once
    ci = bootstrap_ci([(1.0, 1 / 3)] * 10, n_boot=50)
    assert ci["residual"] == [10 * (1 / 3) / 10] * 2 and ci["gap"] == [100.0 * (1.0 - 10 * (1 / 3) / 10)] * 2
    assert bootstrap_ci({}, n_boot=10)["residual"] is None
    # one replicate: both ends are that replicate
    one = bootstrap_ci([(1.0, 0.0), (0.0, 0.0)], n_boot=1)
    assert one["clean"][0] == one["clean"][1] in (0.0, 0.5, 1.0)


def test_bad_replicate_counts_are_refused_and_negative_seeds_work():
    with pytest.raises(ValueError, match="n_boot must be a whole number of at least 1, not 0"):
        bootstrap_ci([(1.0, 0.0)], n_boot=0)
    with pytest.raises(ValueError, match="n_perm"):
        sign_flip_p([float(i) for i in range(1, 40)], n_perm=-5)
    # like random.seed: a negative seed is its absolute value
    neg, pos = (bootstrap_ci([(1.0, 0.0), (0.0, 1.0)], n_boot=20, seed=s) for s in (-4, 4))
    assert neg["seed"] == -4 and {**neg, "seed": 4} == pos


def test_bootstrap_is_fast_for_many_tasks():
    rng = random.Random(2)
    pairs = [(float(rng.random() < 0.6), rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0])) for _ in range(20000)]
    t = time.perf_counter()
    bootstrap_ci(pairs, n_boot=2000)
    assert time.perf_counter() - t < 1.0


# --- agreement with the pure-Python implementation -------------------------------------------------


def quantile_tolerance(sd: float, spread: float, n: int, n_boot: int, level: float = 0.95) -> float:
    """How far two independent n_boot-replicate estimates of a percentile end may lie apart.

    The bootstrap distribution of a mean of n task values is about normal with sd = sd / sqrt(n);
    the q-quantile of n_boot draws has standard error sqrt(q (1 - q) / n_boot) / density there
    (z = 1.96: sqrt(.025 * .975) / phi(1.96) = 2.69 per unit sd and sqrt(n_boot)). Two such
    estimates differ with sqrt(2) times that; allow 5 of those, plus one step of the lattice of
    resampled means ((max - min) / n), which the discrete distribution can jump by.
    """
    q = (1 - level) / 2
    z = NormalDist().inv_cdf(1 - q)
    se = math.sqrt(q * (1 - q) / n_boot) / NormalDist().pdf(z) * sd / math.sqrt(n)
    return 5 * math.sqrt(2) * se + spread / n


def _rates(rng: random.Random, n: int, values: list[float]) -> list[float]:
    return [rng.choice(values) for _ in range(n)]


def bootstrap_cases():
    rng = random.Random(11)
    third = [0.0, 1 / 3, 0.5, 2 / 3, 1.0]
    yield (
        "40 tasks, 30 clean / 12 residual",
        [(1.0 if i < 30 else 0.0, 1.0 if i < 12 else 0.0) for i in range(40)],
    )
    yield "5 tasks, all distinct", [(1.0, 0.5), (0.0, 0.0), (1.0, 1 / 3), (1.0, 1.0), (0.0, 2 / 3)]
    yield (
        "60 tasks, residual in thirds and halves",
        list(zip(_rates(rng, 60, [0.0, 1.0, 1.0]), _rates(rng, 60, third))),
    )
    yield "2000 tasks, binary", [(float(rng.random() < 0.8), float(rng.random() < 0.45)) for _ in range(2000)]
    yield "150 tasks, every value distinct", [(rng.random(), rng.random()) for _ in range(150)]


@pytest.mark.parametrize("name,pairs", list(bootstrap_cases()), ids=[c[0] for c in bootstrap_cases()])
def test_bootstrap_agrees_with_the_pure_python_reference(name, pairs):
    n_boot = (
        4000 if len(set(pairs)) > 20 else 20000
    )  # the reference draws a binomial per category and replicate
    new = bootstrap_ci(pairs, n_boot=n_boot, seed=1)
    old = ref.bootstrap_ci(pairs, n_boot=n_boot, seed=1)
    n = len(pairs)
    per_task = {
        "clean": [c for c, _ in pairs],
        "residual": [r for _, r in pairs],
        "gap": [100.0 * (c - r) for c, r in pairs],
    }
    for metric, xs in per_task.items():
        tol = quantile_tolerance(pstdev(xs), max(xs) - min(xs), n, n_boot)
        for end in (0, 1):
            assert new[metric][end] == pytest.approx(old[metric][end], abs=tol), (metric, end, tol)
    assert {k: new[k] for k in ("n_boot", "seed", "level")} == {
        k: old[k] for k in ("n_boot", "seed", "level")
    }


def paired_cases():
    rng = random.Random(12)
    third = [0.0, 1 / 3, 0.5, 2 / 3, 1.0]
    yield "8 tasks, exact p", {f"t{i}": 1.0 for i in range(8)}, {f"t{i}": float(i < 3) for i in range(8)}
    yield (
        "300 tasks, binary, a 6-point drop",
        {f"t{i}": float(rng.random() < 0.6) for i in range(300)},
        {f"t{i}": float(rng.random() < 0.54) for i in range(300)},
    )
    yield (
        "400 tasks in thirds, no difference",
        {f"t{i}": rng.choice(third) for i in range(400)},
        {f"t{i}": rng.choice(third) for i in range(400)},
    )
    yield (
        "120 tasks, continuous",
        {f"t{i}": rng.random() for i in range(120)},
        {f"t{i}": rng.random() * 0.9 for i in range(120)},
    )


@pytest.mark.parametrize(
    "name,a,b",
    # 120 tasks of continuous values: seconds of pure-Python reference, the slow tier
    [
        pytest.param(*c, marks=pytest.mark.slow) if c[0] == "120 tasks, continuous" else c
        for c in paired_cases()
    ],
    ids=[c[0] for c in paired_cases()],
)
def test_paired_comparison_agrees_with_the_pure_python_reference(name, a, b):
    n_boot, n_perm = 4000, 20000
    new = paired_comparison(a, b, n_boot=n_boot, n_perm=n_perm, seed=2)
    old = ref.paired_comparison(a, b, n_boot=n_boot, n_perm=n_perm, seed=2)
    # nothing random: the same bits
    for key in ("n_shared", "n_only_a", "n_only_b", "diff", "mean_a", "mean_b", "exact", "level", "seed"):
        assert new[key] == old[key], key
    diffs = [100.0 * (a[t] - b[t]) for t in sorted(a)]
    tol = quantile_tolerance(pstdev(diffs), max(diffs) - min(diffs), len(diffs), n_boot)
    assert new["ci"] == pytest.approx(old["ci"], abs=tol)
    if new["exact"]:
        assert new["p_value"] == old["p_value"]
    else:  # two Monte-Carlo estimates of one p: 5 * sqrt(2) standard errors apart at most
        p = old["p_value"]
        assert new["p_value"] == pytest.approx(p, abs=5 * math.sqrt(2 * p * (1 - p) / n_perm) + 2 / n_perm)


def exact_sign_flip_p(diffs: list[int]) -> float:
    """The exact two-sided p of integer differences, by counting sign patterns per sum (dynamic programming)."""
    counts = {0: 1}
    nonzero = [abs(d) for d in diffs if d]
    for d in nonzero:
        nxt: dict[int, int] = {}
        for s, c in counts.items():
            nxt[s + d] = nxt.get(s + d, 0) + c
            nxt[s - d] = nxt.get(s - d, 0) + c
        counts = nxt
    observed = abs(sum(diffs))
    return sum(c for s, c in counts.items() if abs(s) >= observed) / 2 ** len(nonzero)


@pytest.mark.parametrize("shift", [0, 2, 4])
def test_monte_carlo_p_agrees_with_the_exact_distribution(shift):
    # 40 integer differences with 11 distinct |d| (2 to 6 tasks each): 15,000,000 flip combinations,
    # too many to enumerate (EXACT_LIMIT) but few sums, so the exact p comes from counting patterns per sum
    diffs = [((i * 7) % 23) - 11 + shift for i in range(40)]
    exact = exact_sign_flip_p(diffs)
    n_perm = 20000
    p, is_exact = sign_flip_p([float(d) for d in diffs], n_perm=n_perm, seed=3)
    old, _ = ref.sign_flip_p([float(d) for d in diffs], n_perm=n_perm, seed=3)
    assert not is_exact
    tol = 5 * math.sqrt(exact * (1 - exact) / n_perm) + 2 / n_perm
    assert p == pytest.approx(exact, abs=tol) and old == pytest.approx(exact, abs=tol)


@pytest.mark.parametrize(
    "diffs",
    [
        [100.0, 100.0, 50.0, 0.0],
        [1.0, 1.0, 1.0, -1.0],
        # 4 distinct |d| with 3, 5, 2, 7 tasks: 4 * 6 * 3 * 8 = 576 combinations, every term an exact float
        [100 / 3] * 2 + [-100 / 3] + [50.0] * 5 + [-200 / 3, 200 / 3] + [100.0] * 4 + [-100.0] * 3,
        # 50 + 5 tasks: terms exact (comb(50, 25) * comb(5, 2) < 2**53) but 55 > 53 bits, so the sums round:
        # the same order of additions must give the same bits
        [100.0] * 31 + [-100.0] * 19 + [50.0, 50.0, -50.0, 50.0, 50.0],
        # |d| 33.33333333333333 and 33.333333333333336 (1/3 and 1 - 2/3 in points) are one value rounded to 12 places
        [100 * (1 / 3 - 0), 100 * (2 / 3 - 1 / 3), -100 * (1 - 2 / 3), 50.0, -0.0, 100 * (1 / 3), 100.0],
        # one |d| on 300 tasks: big-integer terms (comb(300, 150) ~ 10**89)
        [100.0] * 180 + [-100.0] * 120,
        # two |d| on 90 and 150 tasks: 91 * 151 = 13,741 combinations of big-integer terms
        [100.0] * 50 + [-100.0] * 40 + [50.0] * 90 + [-50.0] * 60,
    ],
)
def test_exact_sign_flip_is_bit_identical_to_the_reference(diffs):
    new = sign_flip_p(diffs)
    assert new[1] is True
    assert new == ref.sign_flip_p(diffs)


def test_chunked_draws_agree(monkeypatch):
    # replicates drawn 64 at a time (CHUNK) instead of all at once: other draws, the same distribution
    pairs = [(1.0 if i < 30 else 0.0, 1.0 if i < 12 else 0.0) for i in range(40)]
    whole = bootstrap_ci(pairs, n_boot=5000, seed=4)
    diffs = [float(((i * 7) % 23) - 9) for i in range(40)]
    p_whole, _ = sign_flip_p(diffs, n_perm=5000, seed=4)
    monkeypatch.setattr(stats, "CHUNK", 64)
    chunked = bootstrap_ci(pairs, n_boot=5000, seed=4)
    p_chunked, _ = sign_flip_p(diffs, n_perm=5000, seed=4)
    assert chunked != whole
    gaps = [100.0 * (c - r) for c, r in pairs]
    tol = quantile_tolerance(pstdev(gaps), 100.0, 40, 5000)
    assert chunked["gap"] == pytest.approx(whole["gap"], abs=tol)
    assert p_chunked == pytest.approx(p_whole, abs=5 * math.sqrt(2 * 0.25 / 5000))


# --- exact cases by hand ----------------------------------------------------------------------------


def test_sign_flip_exact_by_hand():
    # d = [1, 1, 1]: 8 equally likely flips, |sum| >= 3 only for +++ and --- -> p = 2/8
    assert sign_flip_p([1, 1, 1]) == (0.25, True)
    # d = [1, 1, 1, -1]: observed |sum| = 2; sum = 2k - 4 over k ~ Bin(4, 1/2); |2k-4| >= 2 for k in {0,1,3,4}
    # -> (1 + 4 + 4 + 1)/16 = 0.625
    assert sign_flip_p([1, 1, 1, -1]) == (0.625, True)
    # zeros carry no sign: [2, 0, 0] -> flips of one value, |sum| >= 2 always -> p = 1
    assert sign_flip_p([2, 0, 0]) == (1.0, True)
    assert sign_flip_p([0, 0]) == (1.0, True)
    # [3, 1, -1, 2]: |d| values 3, 1 (twice), 2; observed |3 + 1 - 1 + 2| = 5; of the 16 patterns
    # |sum| >= 5 for 3+2 with the ones cancelling (2 patterns), 3+2+1+1 (1) and their negatives: 6/16
    assert sign_flip_p([3, 1, -1, 2]) == (0.375, True)


def test_sign_flip_monte_carlo_agrees_with_brute_force_coin_flips():
    rng = random.Random(4)
    diffs = [
        rng.choice([-1.0, 0.5, 1.0, 2.0, -0.25]) + rng.random() for _ in range(30)
    ]  # all distinct: Monte Carlo
    p_mc, exact = sign_flip_p(diffs, n_perm=20000, seed=1)
    assert not exact
    # reference by brute-force Monte Carlo with plain coin flips
    ref_rng = random.Random(9)
    obs = abs(sum(diffs))
    hits = sum(
        abs(sum(d if ref_rng.random() < 0.5 else -d for d in diffs)) >= obs - 1e-9 for _ in range(20000)
    )
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
    # every shared task differs by the same 100 points: the interval is that point
    same = paired_comparison({"t1": 1.0, "t2": 1.0}, {"t1": 0.0, "t2": 0.0}, n_boot=100)
    assert same["ci"] == [100.0, 100.0] and same["p_value"] == 0.5  # 2 / 2^2
    assert paired_comparison({"t1": 1.0}, {"t2": 1.0})["ci"] is None


def test_task_values_and_compare_two_runs_and_two_agents():
    # run 1: agent A solves every residual state of t1..t8; run 2: A solves none -> drop 100 points
    run1 = [rec("A", f"t{i}", "clean", 1) for i in range(8)] + [
        rec("A", f"t{i}", "residual", 1, "s") for i in range(8)
    ]
    run2 = [rec("A", f"t{i}", "clean", 1) for i in range(8)] + [
        rec("A", f"t{i}", "residual", 0, "s") for i in range(8)
    ]
    # the task values of Table 3's computation (what the gates and compare read), and the same
    # values from the per-record code that computed them before (tests/stats_reference.py)
    for records in (run1, run2):
        for metric in ("residual", "clean", "gap"):
            assert success_of(records).task_values(metric) == ref.task_values(records, metric)
    assert success_of(run1).task_values()[("repo", "A")] == {f"t{i}": 1.0 for i in range(8)}
    assert success_of(run2).task_values("gap")[("repo", "A")]["t0"] == 1.0
    # compare RUN (run1) with BASELINE (run2): diff = run1 - run2
    (entry,) = compare_runs(run2, run1, n_boot=200)
    out = entry["metrics"]["residual"]["comparison"]
    # 8 same-sign diffs: exact p = 2/256 = 0.0078
    assert out["diff"] == 100.0 and out["p_value"] == pytest.approx(2 / 256)
    assert {"metric": "residual", **out} == ref.compare(run1, run2, n_boot=200)["repo"]["A"]
    # two agents of one run: B equals run2's A
    both = run1 + [r.model_copy(update={"agent": "B"}) for r in run2]
    values = success_of(both).task_values()
    two = paired_comparison(values[("repo", "A")], values[("repo", "B")], n_boot=200)
    assert two["diff"] == 100.0
    assert {"metric": "residual", **two} == ref.compare(both, both, agent_a="A", agent_b="B", n_boot=200)[
        "repo"
    ]["A vs B"]
    with pytest.raises(ValueError):
        success_of(run1).task_values("bogus")


def test_reference_moments_still_hold():
    # the reference's own binomial sampler, so the agreement tests above compare against a sound baseline
    rng = random.Random(3)
    for n, p in [(7, 0.2), (3000, 0.04), (3000, 0.7)]:
        xs = [ref.binomial(rng, n, p) for _ in range(5000)]
        sd = (n * p * (1 - p)) ** 0.5
        assert fmean(xs) == pytest.approx(n * p, abs=4 * sd / 5000**0.5)
        assert pvariance(xs) == pytest.approx(n * p * (1 - p), rel=0.1)
