"""Confidence intervals and summary statistics for evaluation (DESIGN.md §6).

* ``wilson_ci``       — Wilson score interval of a binomial proportion (Wilson 1927; Brown, Cai &
  DasGupta 2001 recommend it over the normal/Wald interval at small n). Greedy success per panel.
* ``bootstrap_ci``    — percentile bootstrap interval of a mean (Efron & Tibshirani 1993; ``scipy.stats.bootstrap``), seeded.
  Used for avg@k, where the unit is a task (mean over its k sampled attempts), not an episode.
* ``avg_at_k``        — mean over tasks of each task's mean success over its sampled attempts.
* ``intervals_overlap`` — whether two intervals share a point (a conservative "not clearly different").
* ``mcnemar_exact``   — exact McNemar test of two systems run on the *same* tasks (paired): a two-sided
  binomial test on the discordant tasks (McNemar 1947). Sharper than comparing two unpaired intervals.

The Wilson interval and the binomial test are scipy's (``scipy.stats.binomtest``); the doctests keep hand-computed
values as cross-checks.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def wilson_ci(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` trials.

        p̂ = s/n,  centre = (p̂ + z²/2n) / (1 + z²/n),
        half = z / (1 + z²/n) · sqrt(p̂(1−p̂)/n + z²/4n²)

    ``n == 0`` gives the uninformative ``(0.0, 1.0)``.

    >>> [round(v, 3) for v in wilson_ci(8, 10)]
    [0.49, 0.943]
    >>> [round(v, 4) for v in wilson_ci(0, 10)]
    [0.0, 0.2775]
    >>> wilson_ci(0, 0)
    (0.0, 1.0)
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"wilson_ci needs 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    from scipy.stats import binomtest, norm

    ci = binomtest(successes, n).proportion_ci(confidence_level=float(2 * norm.cdf(z) - 1), method="wilson")
    return (max(0.0, float(ci.low)), min(1.0, float(ci.high)))


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float]:
    """Percentile bootstrap ``(1 − alpha)`` interval of the mean of ``values`` (resampled with replacement).

    Deterministic for a given ``seed``. One value gives a zero-width interval at that value.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    >>> lo, hi = bootstrap_ci([0, 1] * 50, seed=0)
    >>> 0.39 < lo < 0.5 < hi < 0.61
    True
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if n_boot < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"bootstrap_ci needs n_boot >= 1 and 0 < alpha < 1, got n_boot={n_boot}, alpha={alpha}")
    if np.all(x == x[0]):  # no spread: scipy reports a degenerate distribution
        return (float(x[0]), float(x[0]))
    from scipy.stats import bootstrap

    res = bootstrap((x,), np.mean, n_resamples=n_boot, confidence_level=1 - alpha, method="percentile",
                    rng=np.random.default_rng(seed))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def avg_at_k(successes_by_task: Sequence[Sequence[float]]) -> float:
    """avg@k: mean over tasks of the mean success of each task's ``k`` sampled attempts.

    Tasks with no attempts are an error (they would silently shrink the panel).

    >>> avg_at_k([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]])   # (.75 + 0 + 1) / 3
    0.5833333333333334
    """
    if len(successes_by_task) == 0:
        raise ValueError("avg_at_k needs at least one task")
    per_task = []
    for i, s in enumerate(successes_by_task):
        s = np.asarray(s, dtype=np.float64).reshape(-1)
        if s.size == 0:
            raise ValueError(f"task {i} has no sampled attempts")
        per_task.append(s.mean())
    return float(np.mean(per_task))


def intervals_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether closed intervals ``a = (lo, hi)`` and ``b`` share at least one point.

    >>> intervals_overlap((0.1, 0.4), (0.4, 0.9)), intervals_overlap((0.1, 0.3), (0.35, 0.9))
    (True, False)
    """
    return a[0] <= b[1] and b[0] <= a[1]


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs of a paired comparison.

    ``a_only``: tasks system A solved and B did not; ``b_only``: the reverse (tasks both or neither solved
    carry no information). Under H0 each discordant task is A's with probability 1/2.

    >>> mcnemar_exact(0, 0), mcnemar_exact(3, 3)
    (1.0, 1.0)
    >>> round(mcnemar_exact(5, 0), 4)  # 2 * 0.5**5
    0.0625
    >>> round(mcnemar_exact(16, 2), 4)  # 2 * P(X <= 2), X ~ Bin(18, 1/2) = 2 * 172 / 2**18
    0.0013
    """
    if a_only < 0 or b_only < 0:
        raise ValueError("discordant counts must be >= 0")
    if a_only + b_only == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(min(1.0, binomtest(a_only, a_only + b_only, 0.5).pvalue))


def paired_counts(a: Mapping[str, bool], b: Mapping[str, bool]) -> dict:
    """Two systems' outcomes (task → right or not) on the tasks both have: how many only ``a`` got right, only ``b``,
    both, neither, and the exact McNemar p.

    >>> paired_counts({"t1": True, "t2": True, "t3": False}, {"t1": False, "t2": True, "t4": True})
    {'a_only': 1, 'b_only': 0, 'both': 1, 'neither': 0, 'n': 2, 'p_mcnemar': 1.0}
    """
    common = sorted(set(a) & set(b))
    a_only = sum(a[t] and not b[t] for t in common)
    b_only = sum(b[t] and not a[t] for t in common)
    both = sum(a[t] and b[t] for t in common)
    return {"a_only": a_only, "b_only": b_only, "both": both, "neither": len(common) - a_only - b_only - both,
            "n": len(common), "p_mcnemar": mcnemar_exact(a_only, b_only)}


def reward_sign_test(a: Mapping[str, float], b: Mapping[str, float]) -> dict:
    """Two systems' per-task rewards on the tasks both have: how many tasks ``a`` scored higher, lower, the same, and
    the two-sided exact sign test on the untied tasks (the binomial test McNemar's is; Dixon & Mood, 1946). Where
    the reward is partial (WebShop's attribute match), this sees what success alone does not.

    >>> reward_sign_test({"t1": 0.5, "t2": 1.0, "t3": 0.2, "t4": 0.3}, {"t1": 0.25, "t2": 1.0, "t3": 0.1, "t5": 1.0})
    {'higher': 2, 'lower': 0, 'tied': 1, 'p_sign': 0.5}
    """
    common = sorted(set(a) & set(b))
    higher = sum(a[t] > b[t] for t in common)
    lower = sum(a[t] < b[t] for t in common)
    return {"higher": higher, "lower": lower, "tied": len(common) - higher - lower, "p_sign": mcnemar_exact(higher, lower)}
