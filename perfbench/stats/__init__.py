"""Statistics: pure functions on numbers (numpy/scipy only; imports nothing of ours).

Every function states its method in its docstring; the docs (docs/statistics.md) repeat them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_MIN_N = 20
BOOTSTRAP_RESAMPLES = 4000


@dataclass(frozen=True)
class RatioCI:
    ratio: float  # geometric mean of per-replicate ratios
    lo: float
    hi: float
    n: int
    mean_log: float
    sd_log: float  # sample standard deviation of the log ratios
    method: str  # "t" or "bootstrap"


def ratio_ci(ours: list[float], theirs: list[float], level: float = 0.95, seed: int = 0) -> RatioCI:
    """ours/theirs per replicate (pairs), reported as the geometric mean of the per-replicate
    ratios with a two-sided `level` interval on the log ratios: a Student t-interval
    mean +/- t_{(1+level)/2, n-1} * s / sqrt(n) for n < 20, a percentile bootstrap of the mean
    log ratio (4000 resamples, fixed seed) for n >= 20. Requires n >= 2 and positive values."""
    a = np.asarray(ours, dtype=float)
    b = np.asarray(theirs, dtype=float)
    if a.shape != b.shape or a.size < 2:
        raise ValueError("ratio_ci needs at least two paired replicates")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("ratio_ci needs positive times")
    logs = np.log(a) - np.log(b)
    n = logs.size
    m = float(logs.mean())
    s = float(logs.std(ddof=1))
    if n >= BOOTSTRAP_MIN_N:
        rng = np.random.default_rng(seed)
        means = rng.choice(logs, size=(BOOTSTRAP_RESAMPLES, n), replace=True).mean(axis=1)
        lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
        method = "bootstrap"
    else:
        from scipy import stats as _st  # imported lazily: scipy.stats costs ~1.5 s at startup

        half = float(_st.t.ppf((1 + level) / 2, n - 1)) * s / math.sqrt(n)
        lo, hi = m - half, m + half
        method = "t"
    return RatioCI(math.exp(m), math.exp(lo), math.exp(hi), n, m, s, method)


def one_sided_p(mean_log: float, sd_log: float, n: int, sigma_b: float, delta: float) -> float:
    """p-value of H0: true mean log change <= delta against H1: > delta, with standard error
    SE = sqrt(s^2/n + sigma_b^2) (sigma_b: between-run spread of the log ratio from A/A
    calibration) and a t distribution with n-1 degrees of freedom."""
    se = math.sqrt(sd_log**2 / n + sigma_b**2)
    if se == 0:
        return 0.0 if mean_log > delta else 1.0
    from scipy import stats as _st

    t = (mean_log - delta) / se
    return float(_st.t.sf(t, max(n - 1, 1)))


def benjamini_hochberg(pvalues: list[float], q: float = 0.05) -> list[bool]:
    """Benjamini-Hochberg step-up procedure: reject the k smallest p-values where k is the
    largest rank with p_(k) <= k/m * q. NaN p-values are never rejected."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(np.where(np.isnan(p), np.inf, p))
    ranked = p[order]
    thresh = q * (np.arange(1, m + 1) / m)
    ok = np.where(ranked <= thresh)[0]
    reject = np.zeros(m, dtype=bool)
    if ok.size:
        reject[order[: ok.max() + 1]] = True
    return reject.tolist()


def median(values) -> float:
    return float(np.median(np.asarray(values, dtype=float)))
