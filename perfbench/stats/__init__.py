"""Statistics: pure functions on numbers (numpy/scipy only; imports nothing of ours).

Every function states its method in its docstring; the docs (docs/statistics.md) repeat them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_MIN_N = 20
BOOTSTRAP_RESAMPLES = 4000
PRIOR_DOF = 4.0  # degrees of freedom a stated default spread counts as (and shrink_sigma's prior)


@dataclass(frozen=True)
class RatioCI:
    ratio: float  # geometric mean of per-replicate ratios
    lo: float
    hi: float
    n: int
    mean_log: float
    sd_log: float  # sample standard deviation of the log ratios
    method: str  # "t" or "bootstrap"


def ratio_ci(ours: list[float], theirs: list[float], level: float = 0.95, seed: int = 0, groups=None,
             sigma_b: float = 0.0, sigma_dof: float = PRIOR_DOF) -> RatioCI:
    """ours/theirs per replicate (pairs), reported as the geometric mean of the per-replicate
    ratios with a two-sided `level` interval on the log ratios: a Student t-interval
    mean +/- t_{(1+level)/2, n-1} * s / sqrt(n) for n < 20, a percentile bootstrap of the mean
    log ratio (4000 resamples, fixed seed) for n >= 20. Requires n >= 2 and positive values.

    With between-run variation (replicates spread over worker processes, `groups`, or a
    between-run spread sigma_b > 0): the t-interval of grouped_mean_se, whatever n (method
    "t-between"; the bootstrap resamples replicates and cannot see what differs between runs)."""
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
    if sigma_b > 0 or (groups is not None and len(groups) == n and len(set(groups)) > 1):
        from scipy import stats as _st

        g = grouped_mean_se(logs, groups, sigma_b, sigma_dof)
        half = float(_st.t.ppf((1 + level) / 2, g.dof)) * g.se
        return RatioCI(math.exp(m), math.exp(m - half), math.exp(m + half), n, m, s, "t-between")
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


def one_sided_p(mean_log: float, sd_log: float, n: int, sigma_b: float, delta: float,
                sigma_dof: float = PRIOR_DOF) -> float:
    """p-value of H0: true mean log change <= delta against H1: > delta, with standard error
    SE = sqrt(s^2/n + sigma_b^2) (sigma_b: between-run spread of the log ratio from A/A
    calibration, or a stated default, with sigma_dof degrees of freedom) and a t distribution
    with Welch-Satterthwaite degrees of freedom (ws_dof)."""
    w = sd_log**2 / n
    se = math.sqrt(w + sigma_b**2)
    if se == 0:
        return 0.0 if mean_log > delta else 1.0
    from scipy import stats as _st

    dof = ws_dof(w, max(n - 1, 1), sigma_b**2, sigma_dof)
    t = (mean_log - delta) / se
    return float(_st.t.sf(t, max(dof, 1.0)))


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
    dof: float
    lo: float  # unadjusted two-sided 95% interval of d (includes sigma_b)
    hi: float
    p_worse: float  # H0: d <= 0
    p_worse_m: float  # H0: d <= log(1+m)
    p_better: float  # H0: d >= 0
    p_better_m: float  # H0: d >= -log(1+m)


def change_test(d: float, se_within: float, dof: float, sigma_b: float, m: float, level: float = 0.95) -> ChangeTest:
    """One-sided t-tests of a log change d (CONTRACTS §4) with standard error
    SE = sqrt(se_within^2 + sigma_b^2), se_within the within-run standard error of d and sigma_b the
    between-run spread of d from A/A calibration, on a t distribution with `dof` degrees of freedom:
    p_worse for H0 d <= 0, p_worse_m for H0 d <= log(1+m), and their mirrors for improvements
    (H0 d >= 0, H0 d >= -log(1+m)). The interval d +/- t_{(1+level)/2,dof} SE is unadjusted."""
    from scipy import stats as _st

    se = math.sqrt(se_within**2 + sigma_b**2)
    dof = max(float(dof), 1.0)
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


def ws_dof(w: float, dof_w: float, v: float, dof_v: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a variance w + v (w with dof_w, v with dof_v):
    (w + v)^2 / (w^2/dof_w + v^2/dof_v), which lies between min(dof_w, dof_v) and dof_w + dof_v.
    Where v dominates it falls toward dof_v (t(n-1) would be anti-conservative there); where a
    small v joins a large w it can exceed dof_w (the sum is relatively better known than w)."""
    if w + v == 0:
        return max(float(dof_w), 1.0)
    denom = (w**2 / dof_w if w else 0.0) + (v**2 / dof_v if v else 0.0)
    return max(1.0, (w + v) ** 2 / denom)


def calibration_dof(rounds: int | None) -> float:
    """Degrees of freedom of a calibrated sigma_b: its rounds - 1 plus the PRIOR_DOF it was shrunk
    with (shrink_sigma); a 3-round calibration gives 6 (t_0.975 = 2.45 instead of 1.96)."""
    return max(int(rounds or 2) - 1, 1) + PRIOR_DOF


@dataclass(frozen=True)
class GroupedSE:
    """A mean over replicates spread over worker processes, with its between-run variance; see
    grouped_mean_se."""

    mean: float
    se: float  # sqrt(se_within^2 + v)
    dof: float  # Welch-Satterthwaite
    se_within: float  # s_w / sqrt(n)
    between: float  # sqrt(v): the between-run standard deviation of the mean used
    processes: int
    within_dof: float = 0.0  # of se_within^2 (n - P; n - 1 where no process holds two replicates)
    between_dof: float = 0.0  # of v (the prior's, or P - 1 + the prior's when pooled)


def grouped_mean_se(x, groups=None, sigma_b: float = 0.0, sigma_dof: float = PRIOR_DOF) -> GroupedSE:
    """Mean of per-replicate values x (log scale) measured in P worker processes (groups[i] is
    replicate i's process; None: one process), with a standard error that includes between-run
    variation (CONTRACTS §4):

    * s_w^2: the pooled within-process variance (n - P degrees of freedom);
    * the between-run variance of the mean, v, is at least the prior sigma_b^2 (A/A calibration
      of the whole between-run spread of a run's mean, or a stated default; sigma_dof degrees of
      freedom). This cell's own processes estimate only the process-level part of it,
      sigma_p^2 / P with sigma_p^2 = max(0, var(process means) - s_w^2 * mean(1/n_p)) (P - 1
      dof; none with one process or one replicate a process); where that exceeds the prior, the
      two are pooled by their degrees of freedom, so a cell whose processes disagree more than
      the host's calibration says widens its own interval, and one that agrees never narrows
      it below the prior;
    * SE^2 = s_w^2/n + v, on a t distribution with Welch-Satterthwaite degrees of freedom
      (ws_dof; v counting sigma_dof, or P - 1 + sigma_dof when pooled).
    With one process and sigma_b = 0 this is the plain t-interval (dof n - 1)."""
    a = np.asarray(x, dtype=float)
    n = a.size
    if n < 2:
        raise ValueError("grouped_mean_se needs at least two replicates")
    g = np.zeros(n, dtype=int) if groups is None or len(groups) != n else np.asarray(groups)
    labels = sorted(set(g.tolist()))
    P = len(labels)
    means = np.array([a[g == k].mean() for k in labels])
    sizes = np.array([(g == k).sum() for k in labels])
    resid = sum(float(((a[g == k] - mu) ** 2).sum()) for k, mu in zip(labels, means))
    dof_w = n - P
    own_dof = P - 1
    if dof_w < 1:  # one replicate per process: no within spread to separate from the between
        s_w2, dof_w, own_dof = float(a.var(ddof=1)), n - 1, 0
    else:
        s_w2 = resid / dof_w
    se_w2 = s_w2 / n
    v, v_dof = sigma_b**2, sigma_dof
    if own_dof > 0:
        own = max(0.0, float(means.var(ddof=1)) - s_w2 * float(np.mean(1.0 / sizes))) / P
        if own > v:
            v, v_dof = (own_dof * own + sigma_dof * v) / (own_dof + sigma_dof), own_dof + sigma_dof
    se2 = se_w2 + v
    dof = ws_dof(se_w2, dof_w, v, v_dof)
    return GroupedSE(float(a.mean()), math.sqrt(se2), max(1.0, dof), math.sqrt(se_w2), math.sqrt(v), P,
                     float(dof_w), float(v_dof))


def shrink_sigma(sigma: float, dof: int, pooled: float, prior_dof: float = PRIOR_DOF) -> float:
    """A per-cell spread estimated from few runs, shrunk toward the pooled spread of all cells:
    sqrt((dof*sigma^2 + prior_dof*pooled^2) / (dof + prior_dof)) (a variance average weighted by
    degrees of freedom, the pooled value counting as prior_dof)."""
    return math.sqrt((dof * sigma**2 + prior_dof * pooled**2) / (dof + prior_dof))
