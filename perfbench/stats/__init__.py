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


@dataclass(frozen=True)
class ChangeTest:
    """A test of change on the log scale (d = mean log(head/base)); see change_test."""

    d: float  # estimated mean log change
    se: float  # standard error used: sqrt(se_within^2 + sigma_b^2)
    dof: int
    lo: float  # unadjusted two-sided 95% interval of d (includes sigma_b)
    hi: float
    p_worse: float  # H0: d <= 0
    p_worse_m: float  # H0: d <= log(1+m)
    p_better: float  # H0: d >= 0
    p_better_m: float  # H0: d >= -log(1+m)


def change_test(d: float, se_within: float, dof: int, sigma_b: float, m: float, level: float = 0.95) -> ChangeTest:
    """One-sided t-tests of a log change d (CONTRACTS §4) with standard error
    SE = sqrt(se_within^2 + sigma_b^2), se_within the within-run standard error of d and sigma_b the
    between-run spread of d from A/A calibration, on a t distribution with `dof` degrees of freedom:
    p_worse for H0 d <= 0, p_worse_m for H0 d <= log(1+m), and their mirrors for improvements
    (H0 d >= 0, H0 d >= -log(1+m)). The interval d +/- t_{(1+level)/2,dof} SE is unadjusted."""
    from scipy import stats as _st

    se = math.sqrt(se_within**2 + sigma_b**2)
    dof = max(int(dof), 1)
    lm = math.log1p(m)
    if se == 0:
        def sf(x):
            return 0.0 if x > 0 else 1.0
        half = 0.0
    else:
        def sf(x):
            return float(_st.t.sf(x / se, dof))
        half = float(_st.t.ppf((1 + level) / 2, dof)) * se
    return ChangeTest(d, se, dof, d - half, d + half, p_worse=sf(d), p_worse_m=sf(d - lm),
                      p_better=sf(-d), p_better_m=sf(-(d + lm)))


def paired_log_change(base: list[float], head: list[float]) -> tuple[float, float, int]:
    """Paired replicates (measured in the same rotation): d_i = log(head_i) - log(base_i).
    Returns (mean d, its standard error s/sqrt(n), n-1)."""
    b = np.asarray(base, dtype=float)
    h = np.asarray(head, dtype=float)
    if b.shape != h.shape or b.size < 2 or (b <= 0).any() or (h <= 0).any():
        raise ValueError("paired_log_change needs two equal-length lists of >= 2 positive values")
    d = np.log(h) - np.log(b)
    return float(d.mean()), float(d.std(ddof=1)) / math.sqrt(d.size), int(d.size - 1)


def unpaired_log_change(base: list[float], head: list[float]) -> tuple[float, float, int]:
    """Two independent runs: d = mean log(head) - mean log(base), standard error
    sqrt(s_b^2/n_b + s_h^2/n_h) with Welch-Satterthwaite degrees of freedom."""
    b = np.log(np.asarray(base, dtype=float))
    h = np.log(np.asarray(head, dtype=float))
    if b.size < 2 or h.size < 2:
        raise ValueError("unpaired_log_change needs >= 2 values on each side")
    vb, vh = b.var(ddof=1) / b.size, h.var(ddof=1) / h.size
    se2 = vb + vh
    if se2 == 0:
        dof = b.size + h.size - 2
    else:
        dof = se2**2 / ((vb**2 / (b.size - 1) if vb else 0) + (vh**2 / (h.size - 1) if vh else 0))
    return float(h.mean() - b.mean()), math.sqrt(se2), max(1, int(dof))


def between_run_sigma(means: list[float], within_var: list[float]) -> float:
    """Between-run spread from repeated runs of the same build (A/A): the method-of-moments
    estimate of a one-way random-effects model, sigma_b^2 = max(0, var(run means) - mean(within
    variance of a run mean)), where each run contributes its mean statistic (e.g. mean log
    ratio) and that mean's within-run variance s^2/n. Needs >= 2 runs."""
    x = np.asarray(means, dtype=float)
    if x.size < 2:
        raise ValueError("between_run_sigma needs at least two runs")
    return math.sqrt(max(0.0, float(x.var(ddof=1)) - float(np.mean(within_var))))


def shrink_sigma(sigma: float, dof: int, pooled: float, prior_dof: float = 4.0) -> float:
    """A per-cell spread estimated from few runs, shrunk toward the pooled spread of all cells:
    sqrt((dof*sigma^2 + prior_dof*pooled^2) / (dof + prior_dof)) (a variance average weighted by
    degrees of freedom, the pooled value counting as prior_dof)."""
    return math.sqrt((dof * sigma**2 + prior_dof * pooled**2) / (dof + prior_dof))
