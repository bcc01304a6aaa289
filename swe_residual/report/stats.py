"""Uncertainty for the headline numbers (docs/metrics.md; the paper reports none).

The unit of resampling is the task, the unit the metrics weight equally: a bootstrap resamples
tasks with replacement and keeps each task's (clean, residual) pair together, so Gap's interval
reflects the pairing. Two agents or two runs are compared on their shared tasks through the
task-level differences: a paired bootstrap interval and a sign-flip permutation test.

numpy, seeded (numpy.random.default_rng(seed)): the same inputs give the same intervals, whatever
the order of the tasks. Tasks with equal values are resampled together as one category: the
counts of a replicate are a multinomial draw, taken category by category as binomial draws for
all replicates at once, so the cost grows with the number of distinct task values times the
replicates, and the memory with the replicates only (at most CHUNK of them at a time). numpy is
imported on first use: the plugin imports this module (through gates) when it collects.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from operator import index
from statistics import fmean
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

DEFAULT_BOOT = 2000
DEFAULT_PERM = 10000
EXACT_LIMIT = 20_000  # sign-flip combinations enumerated exactly up to this many
CHUNK = 1 << 16  # replicates drawn per block: bounds the arrays whatever n_boot / n_perm is
EXACT_FLOAT = 1 << 53  # below this an integer is an exact float64


def _rng(seed: int) -> np.random.Generator:
    """The generator of a seed; like random.seed, a negative seed is its absolute value."""
    import numpy as np

    return np.random.default_rng(abs(int(seed)))


def _check_replicates(name: str, value: int) -> int:
    try:
        whole = None if isinstance(value, bool) else index(value)
    except TypeError:
        whole = None
    if whole is None or whole < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return whole


def _categories(values: Iterable[Any]) -> tuple[list[Any], list[int]]:
    """Distinct values in sorted order and how many tasks have each (so the task order never matters)."""
    counts = sorted(Counter(values).items())
    return [k for k, _ in counts], [c for _, c in counts]


def resampled_sums(
    rng: np.random.Generator, sizes: Sequence[int], columns: Sequence[Sequence[float]], times: int
) -> list[np.ndarray]:
    """Per column, `times` bootstrap sums sum_j m_j * column[j], m ~ Multinomial(sum(sizes), sizes / sum).

    The counts m_j are drawn category by category for every replicate at once: m_j ~
    Binomial(tasks left, size_j / weight left), the last category takes what is left. Each sum
    adds its terms in category order, as a plain loop over the categories would.
    """
    import numpy as np

    n = sum(sizes)
    out = [np.empty(times) for _ in columns]
    for lo in range(0, times, CHUNK):
        b = min(CHUNK, times - lo)
        left = np.full(b, n, dtype=np.int64)
        left_w = n
        accs = [np.zeros(b) for _ in columns]
        last = len(sizes) - 1
        for j, c in enumerate(sizes):
            if j == last:
                m = left
            else:
                m = rng.binomial(left, c / left_w)
                left = left - m
                left_w -= c
            for acc, col in zip(accs, columns):
                acc += m * col[j]
        for o, acc in zip(out, accs):
            o[lo : lo + b] = acc
    return out


def percentile(sorted_values: Sequence[float] | np.ndarray, q: float) -> float:
    """Linear-interpolation percentile (q in [0, 1]) of already sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def _interval(values: np.ndarray, level: float) -> list[float]:
    values = values.copy()
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
    n_boot = _check_replicates("n_boot", n_boot)
    values = list(pairs.values()) if isinstance(pairs, Mapping) else list(pairs)
    if not values:
        return {"residual": None, "clean": None, "gap": None, "n_boot": n_boot, "seed": seed, "level": level}
    keys, sizes = _categories(values)
    n = len(values)
    clean_sum, res_sum = resampled_sums(
        _rng(seed), sizes, ([k[0] for k in keys], [k[1] for k in keys]), n_boot
    )
    return _intervals(clean_sum / n, res_sum / n, n_boot, seed, level)


#: one task of the nested bootstrap: its Clean Start cell and its Residual States' cells, each cell
#: (successes, valid repeats) of one case
TaskCells = tuple[tuple[int, int], Sequence[tuple[int, int]]]


def nested_bootstrap_ci(
    tasks: Iterable[TaskCells], *, n_boot: int = DEFAULT_BOOT, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """bootstrap_ci with the repeats resampled too (a nested bootstrap): a replicate draws N tasks
    with replacement, then for every drawn task and every case of it (its clean start, each state)
    that case's n repeats with replacement, and recomputes Res, Clean and Gap from the same draw.

    Outcomes are 0/1, so a case with s successes in n repeats resamples to Binomial(n, s/n)
    successes, and m drawn copies of a task to Binomial(m n, s/n): the draws stay one per kind of
    case and replicate (_nested_sums), never one per repeat. A case whose repeats agree (s = 0 or n, every
    case of a run without repeats) draws nothing: such tasks give bootstrap_ci's draws, bit for
    bit, so one repeat per case gives bootstrap_ci's intervals.
    """
    n_boot = _check_replicates("n_boot", n_boot)
    keys: list[tuple] = []
    known: dict[tuple, tuple] = {}  # tasks with equal cells share their key: computed once
    for clean_cell, states in tasks:
        cells = (clean_cell, tuple(states))
        key = known.get(cells)
        if key is None:
            key = known[cells] = _task_key(clean_cell, states)
        keys.append(key)
    if not keys:
        return {"residual": None, "clean": None, "gap": None, "n_boot": n_boot, "seed": seed, "level": level}
    cats, sizes = _categories(keys)
    n = len(keys)
    if not any(k[2] for k in cats):  # nothing to resample within a task: the task bootstrap
        clean_sum, res_sum = resampled_sums(
            _rng(seed), sizes, ([k[0] for k in cats], [k[1] for k in cats]), n_boot
        )
    else:
        clean_sum, res_sum = _nested_sums(_rng(seed), sizes, cats, n_boot)
    return _intervals(clean_sum / n, res_sum / n, n_boot, seed, level)


def _task_key(clean_cell: tuple[int, int], states: Sequence[tuple[int, int]]) -> tuple:
    """One task's category: (clean, residual, ()) when every case's repeats agree, else with what
    _nested_sums draws: (K, the agreeing states' sum, the clean cell if it is drawn, the drawn
    states' (n, s) sorted)."""
    cs, cn = clean_cell
    means = [s / n for s, n in states]
    y0, y = cs / cn, _task_mean(means)
    mixed = tuple(sorted((n, s) for s, n in states if 0 < s < n))
    if not (0 < cs < cn or mixed):
        return (y0, y, ())
    fixed = sum([m for m, (s, n) in zip(means, states) if not 0 < s < n])
    return (y0, y, (len(states), fixed, (cn, cs) if 0 < cs < cn else (), mixed))


def _task_mean(values: list[float]) -> float:
    """(1/K) sum of a task's state values, as the report computes it (aggregates._contiguous_means)."""
    if len(values) == 1:
        return (0.0 + values[0]) / 1.0
    if len(values) == 2:
        return ((0.0 + values[0]) + values[1]) / 2.0
    return sum(values) / len(values)


def _nested_sums(
    rng: np.random.Generator, sizes: Sequence[int], cats: Sequence[tuple], times: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per replicate the sums of (clean, residual) over the drawn tasks.

    First the number of tasks drawn from each category: N task indices drawn with replacement and
    counted (cheaper than resampled_sums' one binomial per category when categories are many,
    as distinct repeat outcomes make them), else resampled_sums' draws. The part of a category
    whose repeats agree adds m times its value. A case whose repeats differ, s successes of n,
    adds Binomial(m n, s/n) / n (a residual one weighted 1/K of its task); independent binomials
    of one p add up to one binomial, so the cases of one kind (start, n, s, K) are drawn together:
    one draw per kind and replicate, Binomial(n sum_j m_j c_j, s/n) where c_j counts the kind's
    cases in category j."""
    import numpy as np

    n_tasks, n_cats = sum(sizes), len(cats)
    fixed = np.zeros((2, n_cats))  # clean, residual: the agreeing part of one task of the category
    kinds: dict[tuple[int, int, int, int], np.ndarray] = {}  # (start, n, s, K) -> cases per category
    for j, (clean, res, inner) in enumerate(cats):
        if not inner:
            fixed[:, j] = clean, res
            continue
        k, agreeing, clean_cell, mixed = inner
        fixed[1, j] = agreeing / k
        if clean_cell:
            kinds.setdefault((0, *clean_cell, 1), np.zeros(n_cats))[j] += 1
        else:
            fixed[0, j] = clean
        for cell in mixed:
            kinds.setdefault((1, *cell, k), np.zeros(n_cats))[j] += 1
    spec = sorted(kinds)
    per_cat = np.array([kinds[t] for t in spec]).reshape(len(spec), n_cats)
    trials = np.array([t[1] for t in spec], np.int64)
    p = np.array([t[2] / t[1] for t in spec])
    # what one success adds to each start's sum: 1/n (clean), 1/(n K) (residual)
    weight = np.zeros((2, len(spec)))
    for i, (start, n, _, k) in enumerate(spec):
        weight[start, i] = 1.0 / (n * k)
    by_index = n_tasks <= 16 * n_cats  # measured: a binomial costs ~15 drawn and counted indices
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)  # categories' tasks
    chunk = max(1, min(CHUNK, (1 << 22) // max(1, n_tasks if by_index else n_cats)))
    out = np.empty((2, times))
    for lo in range(0, times, chunk):
        b = min(chunk, times - lo)
        if by_index:  # each replicate's draws counted per task, then summed per category
            drawn = rng.integers(0, n_tasks, size=(b, n_tasks))
            drawn += (n_tasks * np.arange(b, dtype=np.int64))[:, None]
            per_task = np.bincount(drawn.ravel(), minlength=b * n_tasks).reshape(b, n_tasks)
            counts = np.add.reduceat(per_task, starts, axis=1).T
        else:
            counts = np.empty((n_cats, b), np.int64)
            left = np.full(b, n_tasks, dtype=np.int64)
            left_w = n_tasks
            for j, c in enumerate(sizes):
                counts[j] = left if j == n_cats - 1 else rng.binomial(left, c / left_w)
                left = left - counts[j]
                left_w -= c
        as_float = counts.astype(np.float64)  # float products take BLAS; int ones a slow loop
        acc = fixed @ as_float
        if spec:  # cases of a kind drawn m_j c_j times over the categories: exact integers
            n_drawn = np.rint(per_cat @ as_float).astype(np.int64)
            acc += weight @ rng.binomial(n_drawn * trials[:, None], p[:, None]).astype(np.float64)
        out[:, lo : lo + b] = acc
    return out[0], out[1]


def sign_flip_p(diffs: Sequence[float], *, n_perm: int = DEFAULT_PERM, seed: int = 0) -> tuple[float, bool]:
    """Two-sided paired permutation p-value of mean(diffs) = 0, flipping each task's sign.

    Exact when the flip combinations of the distinct nonzero |d| values are few (at most
    EXACT_LIMIT), else Monte Carlo with the (1 + hits) / (1 + n_perm) correction: the number
    of + signs among the s tasks of one |d| is Binomial(s, 1/2), drawn for all resamples at once.
    Returns (p, exact).
    """
    nz: Counter = Counter()
    for d, c in Counter(
        map(abs, filter(None, diffs))
    ).items():  # rounded per distinct |d|, in first-seen order
        nz[round(d, 12)] += c
    if not nz:
        return 1.0, True
    observed = abs(sum(diffs))
    eps = 1e-9 * max(1.0, observed)
    keys = list(nz)
    sizes = [nz[k] for k in keys]
    if math.prod(s + 1 for s in sizes) <= EXACT_LIMIT:
        return _exact_p(keys, sizes, observed - eps), True
    import numpy as np

    n_perm = _check_replicates("n_perm", n_perm)
    rng = _rng(seed)
    hits = 0
    for lo in range(0, n_perm, CHUNK):
        b = min(CHUNK, n_perm - lo)
        stat = np.zeros(b)
        for v, s in sorted(zip(keys, sizes)):
            stat += v * (2 * rng.binomial(s, 0.5, size=b) - s)
        hits += int(np.count_nonzero(np.abs(stat) >= observed - eps))
    return (1 + hits) / (1 + n_perm), False


def _exact_p(keys: list[float], sizes: list[int], threshold: float) -> float:
    """Share of all sign patterns with |sum| >= threshold, enumerated by + counts per |d| value.

    The combinations are taken in itertools.product order and the probabilities added one by one
    in that order; while every term is an exact float (numerators below 2**53) numpy does the
    sum, otherwise the big-integer terms of the patterns that count are added in Python.
    """
    import numpy as np

    grid = np.indices([s + 1 for s in sizes]).reshape(len(sizes), -1)  # row j: + count of key j
    stat = np.zeros(grid.shape[1])
    for j, (v, s) in enumerate(zip(keys, sizes)):
        stat = stat + v * (2 * grid[j] - s)
    counts = np.abs(stat) >= threshold
    total = sum(sizes)
    if math.prod(math.comb(s, s // 2) for s in sizes) < EXACT_FLOAT and total <= 1022:
        num = np.ones(grid.shape[1])
        for j, s in enumerate(sizes):
            num = num * np.array([math.comb(s, k) for k in range(s + 1)], dtype=np.float64)[grid[j]]
        p = float(np.cumsum(np.where(counts, num / 2.0**total, 0.0))[-1])
    else:
        combs = [[math.comb(s, k) for k in range(s + 1)] for s in sizes]
        denom = 2**total
        p = 0.0
        for ks in grid[:, counts].T.tolist():
            p += math.prod(c[k] for c, k in zip(combs, ks)) / denom
    return min(1.0, p)


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
    set_a, set_b = set(a), set(b)
    shared = sorted(set_a & set_b)
    base = {
        "n_shared": len(shared),
        "n_only_a": len(set_a - set_b),
        "n_only_b": len(set_b - set_a),
        "level": level,
        "seed": seed,
    }
    if not shared:
        return {**base, "diff": None, "ci": None, "p_value": None, "exact": None}
    n_boot = _check_replicates("n_boot", n_boot)
    diffs = [scale * (a[t] - b[t]) for t in shared]
    keys, sizes = _categories(diffs)
    (sums,) = resampled_sums(_rng(seed), sizes, (keys,), n_boot)
    p, exact = sign_flip_p(diffs, n_perm=n_perm, seed=seed)
    return {
        **base,
        "diff": fmean(diffs),
        "mean_a": scale * fmean([a[t] for t in shared]),  # lists: no counting pass
        "mean_b": scale * fmean([b[t] for t in shared]),
        "ci": _interval(sums / len(diffs), level),
        "p_value": p,
        "exact": exact,
    }


def _intervals(clean: np.ndarray, res: np.ndarray, n_boot: int, seed: int, level: float) -> dict:
    """The replicates' success rates as the intervals of Residual, Clean and the Gap (points)."""
    return {
        "residual": _interval(res, level),
        "clean": _interval(clean, level),
        "gap": _interval(100.0 * (clean - res), level),
        "n_boot": n_boot,
        "seed": seed,
        "level": level,
    }
