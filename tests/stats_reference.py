"""The statistics of swe_residual/report/stats.py before numpy, kept as the reference.

Pure Python, seeded with random.Random(seed): a multinomial draw per replicate through exact
binomial draws (inversion, or Hormann's BTRS rejection sampler), the sign-flip test by the same
binomial draws. tests/test_stats.py checks that the numpy implementation agrees with these
within Monte-Carlo error (and exactly where nothing is random), and benchmarks/bench_stats.py
times both. Not part of the package: nothing outside tests/ and benchmarks/ imports it.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import mul
from statistics import fmean
from typing import Any

DEFAULT_BOOT = 2000
DEFAULT_PERM = 10000
EXACT_LIMIT = 20_000


def binomial(rng: random.Random, n: int, p: float, memo: dict | None = None) -> int:
    """One exact Binomial(n, p) draw in O(1) expected time.

    Inversion for n*p < 10, else Hormann's transformed rejection with squeeze (BTRS, 1993).
    Written here because random.binomialvariate needs Python 3.12. `memo` keeps the rejection
    sampler's constants per (n, p) across calls (the bootstrap repeats its pairs thousands of
    times); they are the same floats either way, so the draws are too.
    """
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - binomial(rng, n, 1.0 - p, memo)
    if n * p < 10.0:
        q = 1.0 - p
        prob = q**n
        u = rng.random()
        k = 0
        while u > prob and k < n:
            u -= prob
            prob *= (n - k) / (k + 1) * p / q
            k += 1
        return k
    consts = memo.get((n, p)) if memo is not None else None
    if consts is None:
        spq = math.sqrt(n * p * (1.0 - p))
        b = 1.15 + 2.53 * spq
        consts = [spq, b, -0.0873 + 0.0248 * b + 0.01 * p, n * p + 0.5, 0.92 - 4.2 / b, None]
        if memo is not None:
            memo[(n, p)] = consts
    spq, b, a, c, v_r, setup = consts
    random_ = rng.random
    while True:
        u = random_() - 0.5
        us = 0.5 - abs(u)
        if us <= 0.0:
            continue
        k = math.floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > n:
            continue
        v = random_()
        if us >= 0.07 and v <= v_r:
            return k
        if setup is None:  # constants of the exact acceptance test, needed only when the squeeze fails
            mode = math.floor((n + 1) * p)
            setup = consts[5] = (
                (2.83 + 5.1 / b) * spq,
                math.log(p / (1.0 - p)),
                mode,
                math.lgamma(mode + 1) + math.lgamma(n - mode + 1),
            )
        alpha, lpq, mode, h = setup
        v *= alpha / (a / (us * us) + b)
        if v > 0.0 and math.log(v) <= h - math.lgamma(k + 1) - math.lgamma(n - k + 1) + (k - mode) * lpq:
            return k


def multinomial(rng: random.Random, n: int, counts: Sequence[int], memo: dict | None = None) -> list[int]:
    """Resampled counts of n draws with replacement from categories of the given sizes."""
    total = sum(counts)
    out: list[int] = []
    left, left_w = n, total
    for c in counts[:-1]:
        k = binomial(rng, left, c / left_w, memo) if left and left_w else 0
        out.append(k)
        left -= k
        left_w -= c
    out.append(left)
    return out


def _multinomials(rng: random.Random, n: int, counts: Sequence[int], times: int) -> Iterator[list[int]]:
    """`times` multinomial(rng, n, counts) draws in turn, sharing binomial()'s memo."""
    memo: dict = {}
    for _ in range(times):
        yield multinomial(rng, n, counts, memo)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in [0, 1]) of already sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _interval(values: list[float], level: float) -> list[float]:
    values.sort()
    tail = (1.0 - level) / 2.0
    return [percentile(values, tail), percentile(values, 1.0 - tail)]


def bootstrap_ci(
    pairs: Mapping[str, tuple[float, float]] | Iterable[tuple[float, float]],
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """Percentile bootstrap intervals for Res, Clean (fractions) and Gap (points).

    `pairs` holds one (clean, residual) pair per task; a replicate draws N tasks with
    replacement and recomputes all three from the same draw.
    """
    values = list(pairs.values()) if isinstance(pairs, Mapping) else list(pairs)
    if not values:
        return {"residual": None, "clean": None, "gap": None, "n_boot": n_boot, "seed": seed, "level": level}
    cats = Counter(values)
    keys = list(cats)
    sizes = [cats[k] for k in keys]
    n = len(values)
    clean_values, res_values = [k[0] for k in keys], [k[1] for k in keys]
    res, clean, gap = [], [], []
    for draw in _multinomials(random.Random(seed), n, sizes, n_boot):
        c = sum(map(mul, clean_values, draw)) / n  # sum(k[0] * m ...) term by term, in order
        r = sum(map(mul, res_values, draw)) / n
        res.append(r)
        clean.append(c)
        gap.append(100.0 * (c - r))
    return {
        "residual": _interval(res, level),
        "clean": _interval(clean, level),
        "gap": _interval(gap, level),
        "n_boot": n_boot,
        "seed": seed,
        "level": level,
    }


def sign_flip_p(diffs: Sequence[float], *, n_perm: int = DEFAULT_PERM, seed: int = 0) -> tuple[float, bool]:
    """Two-sided paired permutation p-value of mean(diffs) = 0, flipping each task's sign.

    Exact when the flip combinations of the distinct nonzero |d| values are few (at most
    EXACT_LIMIT), else Monte Carlo with the (1 + hits) / (1 + n_perm) correction.
    Returns (p, exact).
    """
    nz = Counter(round(abs(d), 12) for d in diffs if d != 0)
    if not nz:
        return 1.0, True
    observed = abs(sum(diffs))
    eps = 1e-9 * max(1.0, observed)
    keys = list(nz)
    sizes = [nz[k] for k in keys]
    if math.prod(s + 1 for s in sizes) <= EXACT_LIMIT:
        p = 0.0
        for ks in itertools.product(*(range(s + 1) for s in sizes)):
            stat = sum(v * (2 * k - s) for v, k, s in zip(keys, ks, sizes))
            if abs(stat) >= observed - eps:
                p += math.prod(math.comb(s, k) for k, s in zip(ks, sizes)) / 2 ** sum(sizes)
        return min(1.0, p), True
    rng = random.Random(seed)
    hits = 0
    for _ in range(n_perm):
        stat = sum(v * (2 * binomial(rng, s, 0.5) - s) for v, s in zip(keys, sizes))
        hits += abs(stat) >= observed - eps
    return (1 + hits) / (1 + n_perm), False


def paired_comparison(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    n_boot: int = DEFAULT_BOOT,
    n_perm: int = DEFAULT_PERM,
    seed: int = 0,
    level: float = 0.95,
    scale: float = 100.0,
) -> dict[str, Any]:
    """Compare two sets of task-level values on their shared tasks.

    diff = scale * mean_i (a_i - b_i) (points for rates), a paired bootstrap interval of it, and
    the sign-flip p-value. Tasks present in only one side are counted, not used.
    """
    shared = sorted(set(a) & set(b))
    base = {
        "n_shared": len(shared),
        "n_only_a": len(set(a) - set(b)),
        "n_only_b": len(set(b) - set(a)),
        "level": level,
        "seed": seed,
    }
    if not shared:
        return {**base, "diff": None, "ci": None, "p_value": None, "exact": None}
    diffs = [scale * (a[t] - b[t]) for t in shared]
    cats = Counter(diffs)
    keys = list(cats)
    sizes = [cats[k] for k in keys]
    n = len(diffs)
    boots = [sum(map(mul, keys, draw)) / n for draw in _multinomials(random.Random(seed), n, sizes, n_boot)]
    p, exact = sign_flip_p(diffs, n_perm=n_perm, seed=seed)
    return {
        **base,
        "diff": fmean(diffs),
        "mean_a": scale * fmean(a[t] for t in shared),
        "mean_b": scale * fmean(b[t] for t in shared),
        "ci": _interval(boots, level),
        "p_value": p,
        "exact": exact,
    }


# -- the per-record task values (swe_residual/report/stats.py before every number came from one
# computation over the columns, report/aggregates.py Success): the oracle of the task values the
# gates' baseline comparison and `compare` read. The paired comparisons are the package's own.

METRICS = ("residual", "clean", "gap")


def task_values(records: Iterable[Any], metric: str = "residual") -> dict[tuple[str, str], dict[str, float]]:
    """{(track, agent): {task: value}} on each agent's matched task set.

    residual = (1/K_i) sum_S y(S); clean = y(S_0); gap = clean - residual (a fraction).
    """
    from tests.report_reference.metrics import index_outcomes, matched_tasks

    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, o in index_outcomes(records).items():
        clean_t, res_t = o.task_outcomes()
        tasks = matched_tasks(clean_t, res_t)
        if metric == "residual":
            out[key] = {t: res_t[t] for t in tasks if t in res_t}
        elif metric == "clean":
            out[key] = {t: clean_t[t] for t in tasks if t in clean_t}
        else:
            out[key] = {t: clean_t[t] - res_t[t] for t in tasks if t in clean_t and t in res_t}
    return out


def compare(
    records_a: Iterable[Any],
    records_b: Iterable[Any],
    *,
    metric: str = "residual",
    agent_a: str | None = None,
    agent_b: str | None = None,
    **kw: Any,
) -> dict[str, dict[str, Any]]:
    """Paired comparisons A - B per track, in points.

    Without agent names: each agent of A against the same agent in B (two runs of one agent).
    With agent_a and agent_b: that agent of A against that agent of B (pass the same records
    twice to compare two agents of one run). Result: {track: {label: paired_comparison}}.
    """
    from swe_residual.report.stats import paired_comparison as numpy_paired_comparison

    va, vb = task_values(records_a, metric), task_values(records_b, metric)
    out: dict[str, dict[str, Any]] = {}
    for (track, agent), values in sorted(va.items()):
        if agent_a is not None and agent != agent_a:
            continue
        other = agent if agent_b is None else agent_b
        if (track, other) not in vb:
            continue
        label = agent if other == agent else f"{agent} vs {other}"
        out.setdefault(track, {})[label] = {
            "metric": metric,
            **numpy_paired_comparison(values, vb[(track, other)], **kw),
        }
    return out
