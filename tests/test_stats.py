"""perfbench.stats: the ratio CI, the one-sided test of change and Benjamini-Hochberg (CONTRACTS §4),
checked against the same quantities computed by hand with numpy/scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from perfbench import stats

# eight paired replicates (ns): ours is ~10% faster, with some spread
OURS8 = [900.0, 910.0, 880.0, 905.0, 930.0, 890.0, 915.0, 899.0]
ORT8 = [1000.0, 990.0, 1010.0, 1005.0, 1020.0, 980.0, 1000.0, 995.0]


def _by_hand(ours, ort, level=0.95):
    logs = np.log(np.asarray(ours)) - np.log(np.asarray(ort))
    n = logs.size
    m = logs.mean()
    s = logs.std(ddof=1)
    half = st.t.ppf((1 + level) / 2, n - 1) * s / math.sqrt(n)
    return n, m, s, math.exp(m), math.exp(m - half), math.exp(m + half)


def test_ratio_ci_t_interval_matches_hand_computation_n8():
    n, m, s, gm, lo, hi = _by_hand(OURS8, ORT8)
    ci = stats.ratio_ci(OURS8, ORT8)
    assert ci.method == "t"
    assert ci.n == n == 8
    # the point ratio is the geometric mean of the per-replicate ratios, not a ratio of means
    assert ci.ratio == pytest.approx(gm, rel=1e-12)
    assert ci.ratio == pytest.approx(float(np.prod(np.array(OURS8) / np.array(ORT8)) ** (1 / 8)), rel=1e-12)
    assert ci.ratio != pytest.approx(np.mean(OURS8) / np.mean(ORT8), rel=1e-9)
    assert ci.mean_log == pytest.approx(m, rel=1e-12)
    assert ci.sd_log == pytest.approx(s, rel=1e-12)
    assert ci.lo == pytest.approx(lo, rel=1e-12)
    assert ci.hi == pytest.approx(hi, rel=1e-12)
    assert ci.lo < ci.ratio < ci.hi < 1.0


def test_ratio_ci_level_changes_width():
    ci95 = stats.ratio_ci(OURS8, ORT8, level=0.95)
    ci99 = stats.ratio_ci(OURS8, ORT8, level=0.99)
    _, _, _, _, lo99, hi99 = _by_hand(OURS8, ORT8, level=0.99)
    assert ci99.lo == pytest.approx(lo99, rel=1e-12) and ci99.hi == pytest.approx(hi99, rel=1e-12)
    assert ci99.lo < ci95.lo and ci99.hi > ci95.hi


def _sample(n, seed=1):
    rng = np.random.default_rng(seed)
    ort = rng.uniform(900, 1100, n)
    ours = ort * np.exp(rng.normal(-0.05, 0.03, n))
    return ours.tolist(), ort.tolist()


def test_ratio_ci_t_below_20_bootstrap_from_20():
    ours19, ort19 = _sample(19)
    assert stats.ratio_ci(ours19, ort19).method == "t"
    ours20, ort20 = _sample(20)
    ci = stats.ratio_ci(ours20, ort20)
    assert ci.method == "bootstrap"
    n, m, s, gm, lo_t, hi_t = _by_hand(ours20, ort20)
    assert ci.n == 20
    assert ci.ratio == pytest.approx(gm, rel=1e-12)
    assert ci.lo < ci.ratio < ci.hi
    # a percentile bootstrap of the mean is close to (not equal to) the t-interval
    assert ci.lo != pytest.approx(lo_t, rel=1e-9)
    assert math.log(ci.lo) == pytest.approx(math.log(lo_t), abs=0.01)
    assert math.log(ci.hi) == pytest.approx(math.log(hi_t), abs=0.01)


def test_ratio_ci_bootstrap_matches_percentile_bootstrap_by_hand():
    ours, ort = _sample(25, seed=7)
    logs = np.log(ours) - np.log(ort)
    rng = np.random.default_rng(3)
    means = rng.choice(logs, size=(stats.BOOTSTRAP_RESAMPLES, logs.size), replace=True).mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    ci = stats.ratio_ci(ours, ort, seed=3)
    assert ci.lo == pytest.approx(math.exp(lo), rel=1e-12)
    assert ci.hi == pytest.approx(math.exp(hi), rel=1e-12)


def test_ratio_ci_bootstrap_deterministic_for_fixed_seed():
    ours, ort = _sample(30, seed=5)
    a = stats.ratio_ci(ours, ort, seed=11)
    b = stats.ratio_ci(ours, ort, seed=11)
    assert (a.lo, a.hi, a.ratio) == (b.lo, b.hi, b.ratio)
    c = stats.ratio_ci(ours, ort, seed=12)
    assert (c.lo, c.hi) != (a.lo, a.hi)  # the seed is really used
    assert c.ratio == a.ratio  # the point estimate never depends on it


@pytest.mark.parametrize("ours, ort", [([1.0], [1.0]), ([], []), ([1.0, 2.0], [1.0])])
def test_ratio_ci_rejects_fewer_than_two_pairs(ours, ort):
    with pytest.raises(ValueError):
        stats.ratio_ci(ours, ort)


@pytest.mark.parametrize("ours, ort", [([1.0, 0.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, -2.0]),
                                        ([-1.0, 1.0], [1.0, 1.0])])
def test_ratio_ci_rejects_non_positive_times(ours, ort):
    with pytest.raises(ValueError, match="positive"):
        stats.ratio_ci(ours, ort)


def test_one_sided_p_without_sigma_b_is_a_one_sided_t_test():
    ci = stats.ratio_ci(ORT8, OURS8)  # ORT/ours: a positive mean log change
    logs = np.log(ORT8) - np.log(OURS8)
    for delta in (0.0, math.log(1.03), 0.2):
        p = stats.one_sided_p(ci.mean_log, ci.sd_log, ci.n, 0.0, delta)
        t = (logs.mean() - delta) / (logs.std(ddof=1) / math.sqrt(logs.size))
        assert p == pytest.approx(st.t.sf(t, logs.size - 1), rel=1e-9)
        # and scipy's own one-sample t-test agrees
        ref = st.ttest_1samp(logs, popmean=delta, alternative="greater").pvalue
        assert p == pytest.approx(ref, rel=1e-9)
    # a larger minimum effect is harder to reject
    assert stats.one_sided_p(ci.mean_log, ci.sd_log, ci.n, 0.0, 0.0) < stats.one_sided_p(
        ci.mean_log, ci.sd_log, ci.n, 0.0, math.log(1.03))


def test_one_sided_p_increases_with_sigma_b():
    ci = stats.ratio_ci(ORT8, OURS8)
    ps = [stats.one_sided_p(ci.mean_log, ci.sd_log, ci.n, sb, 0.0) for sb in (0.0, 0.01, 0.05, 0.2)]
    assert all(a < b for a, b in zip(ps, ps[1:])), ps
    # SE = sqrt(s^2/n + sigma_b^2) on Welch-Satterthwaite dof (sigma_b counting 4), by hand
    w, v = ci.sd_log**2 / ci.n, 0.05**2
    dof = (w + v) ** 2 / (w**2 / (ci.n - 1) + v**2 / 4)
    assert dof < ci.n - 1  # where sigma_b dominates, t(n-1) would be anti-conservative
    assert ps[2] == pytest.approx(st.t.sf(ci.mean_log / math.sqrt(w + v), dof), rel=1e-9)


def test_grouped_se_sees_a_process_effect_that_pooled_replicates_hide():
    # 3 processes, each steady inside, offset from the others: the replicates' own spread is
    # tiny, the spread between processes is not, and the interval must carry it
    x = [0.00, 0.001, -0.001, 0.10, 0.101, 0.099, -0.10, -0.101]
    groups = [0, 0, 0, 1, 1, 1, 2, 2]
    flat = stats.grouped_mean_se(x)  # as one process: the plain t standard error
    assert flat.se == pytest.approx(float(np.std(x, ddof=1)) / math.sqrt(8)) and flat.dof == 7
    g = stats.grouped_mean_se(x, groups)
    # the own part sigma_p^2/P, sigma_p ~ 0.1, pooled with the prior (0, 4 dof) as it exceeds it
    own = (float(np.var([0.0, 0.1, -0.1005], ddof=1)) - g.se_within**2 * 8 * np.mean([1 / 3, 1 / 3, 1 / 2])) / 3
    assert g.processes == 3 and g.se_within < 0.001
    assert g.between == pytest.approx(math.sqrt(2 * own / 6), rel=1e-3)
    assert g.se > flat.se and g.dof < 7
    # a prior above what the processes show is a floor: agreement never narrows the interval
    wide = stats.grouped_mean_se(x, groups, sigma_b=0.2)
    assert wide.between == pytest.approx(0.2)
    # one process: sigma_b alone is the between part (the former SE = sqrt(s^2/n + sigma_b^2))
    one = stats.grouped_mean_se(x, None, sigma_b=0.05)
    assert one.se == pytest.approx(math.sqrt(np.var(x, ddof=1) / 8 + 0.05**2))
    # one replicate a process: no within spread to separate, the replicates' spread stands in
    single = stats.grouped_mean_se([0.1, 0.2, 0.3], [0, 1, 2], sigma_b=0.01)
    assert single.processes == 3 and single.between == pytest.approx(0.01)
    # groups of the wrong length are not groups
    assert stats.ratio_ci(OURS8, ORT8, groups=[0, 1]).method == stats.ratio_ci(OURS8, ORT8).method


def test_ratio_ci_with_between_run_variation_is_wider_and_says_so():
    plain = stats.ratio_ci(OURS8, ORT8)
    between = stats.ratio_ci(OURS8, ORT8, groups=[0, 0, 0, 1, 1, 1, 2, 2], sigma_b=0.05)
    assert between.method == "t-between" and between.ratio == pytest.approx(plain.ratio)
    assert between.lo < plain.lo and between.hi > plain.hi


def test_one_sided_p_zero_standard_error():
    assert stats.one_sided_p(0.1, 0.0, 8, 0.0, 0.0) == 0.0
    assert stats.one_sided_p(-0.1, 0.0, 8, 0.0, 0.0) == 1.0


TEXTBOOK_P = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216]


def test_benjamini_hochberg_textbook_example():
    assert stats.benjamini_hochberg(TEXTBOOK_P, q=0.05) == [True, True] + [False] * 8


def test_benjamini_hochberg_keeps_input_order():
    perm = [7, 2, 0, 9, 5, 1, 3, 8, 6, 4]
    shuffled = [TEXTBOOK_P[i] for i in perm]
    out = stats.benjamini_hochberg(shuffled, q=0.05)
    assert out == [TEXTBOOK_P[i] in (0.001, 0.008) for i in perm]


def test_benjamini_hochberg_is_step_up():
    # p_(1) = 0.04 > 1/2 * 0.05 but p_(2) = 0.045 <= 2/2 * 0.05: step-up rejects both
    assert stats.benjamini_hochberg([0.045, 0.04], q=0.05) == [True, True]
    # a larger q rejects more of the textbook example: 0.042 <= 5/10 * 0.09 although
    # 0.039 > 3/10 * 0.09 (step-up again)
    assert stats.benjamini_hochberg(TEXTBOOK_P, q=0.09) == [True] * 5 + [False] * 5


def test_benjamini_hochberg_nan_is_never_rejected():
    out = stats.benjamini_hochberg([float("nan"), 0.001, float("nan"), 0.002], q=0.05)
    assert out == [False, True, False, True]
    assert stats.benjamini_hochberg([float("nan")] * 3) == [False, False, False]
    assert stats.benjamini_hochberg([]) == []


# ---- tests of change (base vs head) ----

def test_change_test_matches_t_distribution_by_hand():
    d, se_w, dof, sb, m = 0.05, 0.01, 7, 0.02, 0.03
    t = stats.change_test(d, se_w, dof, sb, m)
    se = math.sqrt(se_w**2 + sb**2)
    assert t.se == pytest.approx(se)
    assert t.p_worse == pytest.approx(st.t.sf(d / se, dof))
    assert t.p_worse_m == pytest.approx(st.t.sf((d - math.log(1.03)) / se, dof))
    assert t.p_better == pytest.approx(st.t.cdf(d / se, dof))
    assert t.p_better_m == pytest.approx(st.t.cdf((d + math.log(1.03)) / se, dof))
    half = st.t.ppf(0.975, dof) * se
    assert (t.lo, t.hi) == (pytest.approx(d - half), pytest.approx(d + half))


def test_sigma_b_widens_the_test_so_a_tight_within_run_change_is_not_significant():
    # 4% slower with almost no within-run spread: significant without sigma_b, not with 5%
    assert stats.change_test(0.04, 0.001, 7, 0.0, 0.03).p_worse < 1e-6
    assert stats.change_test(0.04, 0.001, 7, 0.05, 0.03).p_worse > 0.2


def test_paired_and_unpaired_log_change():
    base = [100.0, 110.0, 90.0, 105.0]
    head = [110.0, 121.0, 99.0, 115.5]  # exactly +10% each
    d, se, dof = stats.paired_log_change(base, head)
    assert d == pytest.approx(math.log(1.1)) and se == pytest.approx(0.0, abs=1e-12) and dof == 3
    d2, se2, dof2 = stats.unpaired_log_change(base, head)
    assert d2 == pytest.approx(math.log(1.1))
    lb, lh = np.log(base), np.log(head)
    assert se2 == pytest.approx(math.sqrt(lb.var(ddof=1) / 4 + lh.var(ddof=1) / 4))
    assert dof2 >= 1
    with pytest.raises(ValueError):
        stats.paired_log_change([1.0, 2.0], [1.0])


def test_between_run_sigma_and_shrinkage():
    # round means spread with variance 0.01^2 + within 0.005^2: the between part is what is left
    means = [0.0, 0.02, -0.02, 0.01, -0.01]
    within = [0.004**2] * 5
    var = np.var(means, ddof=1)
    assert stats.between_run_sigma(means, within) == pytest.approx(math.sqrt(var - 0.004**2))
    assert stats.between_run_sigma([0.0, 0.0001], [0.01, 0.01]) == 0.0  # floored at zero
    assert stats.shrink_sigma(0.10, 2, 0.02) == pytest.approx(math.sqrt((2 * 0.01 + 4 * 0.0004) / 6))
    with pytest.raises(ValueError):
        stats.between_run_sigma([0.1], [0.0])


def test_a_win_at_no_between_run_spread_is_undecided_at_the_default():
    from perfbench.compare import verdicts

    ours = [95.0, 95.5, 94.8, 95.2, 95.1, 94.9, 95.3, 95.0]
    ort = [100.0] * 8
    assert verdicts.decide("ok", "ok", ours, ort).verdict == "win"  # a 5% win, tight within one process
    v = verdicts.decide("ok", "ok", ours, ort, groups=[0, 0, 0, 1, 1, 1, 2, 2], sigma_b=0.05)
    assert v.verdict == "undecided" and v.method == "t-between" and v.lo < 1 < v.hi
