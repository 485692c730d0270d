"""perfbench.compare.verdicts: the per-cell decision table (CONTRACTS §2), fast_1, and where a
working set lives / which measured peak applies."""

from __future__ import annotations

import itertools

import pytest

from perfbench import stats
from perfbench.compare import verdicts
from perfbench.compare.verdicts import CellVerdict, decide

ORT = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1000.0, 1002.0, 998.0]
FASTER = [800.0, 812.0, 790.0, 805.0, 797.0, 801.0, 799.0, 803.0]  # ~0.8, tight
SLOWER = [1250.0, 1262.0, 1240.0, 1255.0, 1247.0, 1251.0, 1249.0, 1253.0]  # ~1.25, tight
NOISY = [700.0, 1300.0, 950.0, 1100.0, 800.0, 1200.0, 900.0, 1050.0]  # straddles 1


def test_win_when_whole_ci_below_one():
    v = decide("ok", "ok", FASTER, ORT)
    assert v.verdict == "win"
    assert v.hi < 1.0 and v.lo < v.ratio < v.hi
    ci = stats.ratio_ci(FASTER, ORT)
    assert (v.ratio, v.lo, v.hi, v.n, v.method) == (ci.ratio, ci.lo, ci.hi, 8, "t")
    assert v.note == ""


def test_loss_when_whole_ci_above_one():
    v = decide("ok", "ok", SLOWER, ORT)
    assert v.verdict == "loss"
    assert v.lo > 1.0
    assert v.ratio == pytest.approx(1.25, rel=0.01)


def test_undecided_when_ci_straddles_one():
    for scale in (0.97, 1.0, 1.05):  # point ratio below, near and above 1
        v = decide("ok", "ok", [x * scale for x in NOISY], ORT)
        assert v.verdict == "undecided", (scale, v)
        assert v.lo < 1.0 < v.hi
    assert decide("ok", "ok", [x * 1.05 for x in NOISY], ORT).ratio > 1.0


def test_point_ratio_below_one_is_not_a_win_without_the_ci():
    # ratio < 1 but the interval reaches above 1: undecided, not win
    ours = [x * 0.98 for x in NOISY]
    v = decide("ok", "ok", ours, ORT)
    assert v.ratio < 1.0 and v.hi > 1.0
    assert v.verdict == "undecided"


@pytest.mark.parametrize("status", ["mismatch", "error", "crashed", "timeout"])
@pytest.mark.parametrize("ort_status", ["ok", "no-kernel", "below-resolution", "error"])
def test_ours_failures_fail_whatever_ort_did(status, ort_status):
    v = decide(status, ort_status, FASTER, ORT)
    assert v.verdict == "fail"
    assert status in v.note
    assert v.ratio is None  # no ratio for a failed cell: it can never count as fast


@pytest.mark.parametrize("status", ["mismatch", "error", "crashed", "timeout"])
def test_ours_failures_fail_even_on_numerics_only_cells(status):
    assert decide(status, "ok", [], [], numerics_only=True).verdict == "fail"


def test_ours_no_kernel_is_a_fail():
    v = decide("no-kernel", "ok", [], [])
    assert v.verdict == "fail" and "no-kernel" in v.note
    assert decide("no-kernel", "no-kernel", [], []).verdict == "fail"


def test_ort_no_kernel_is_na():
    v = decide("ok", "no-kernel", FASTER, [])
    assert v.verdict == "n/a" and v.ratio is None
    assert "ORT" in v.note


@pytest.mark.parametrize("ours_status, ort_status", [("below-resolution", "ok"), ("ok", "below-resolution"),
                                                     ("below-resolution", "below-resolution")])
def test_below_resolution_on_either_side_is_na(ours_status, ort_status):
    v = decide(ours_status, ort_status, FASTER, ORT)
    assert v.verdict == "n/a" and v.ratio is None
    assert "resolution" in v.note


def test_numerics_only_is_na():
    v = decide("ok", "ok", FASTER, ORT, numerics_only=True)
    assert v.verdict == "n/a" and v.ratio is None
    assert "numerics" in v.note


@pytest.mark.parametrize("ours, ort", [
    ([800.0, 0.0, 790.0], [1000.0, 1000.0, 1000.0]),
    ([800.0, 810.0, 790.0], [1000.0, -5.0, 1000.0]),
    ([-1.0, 810.0], [1000.0, 1000.0]),
])
def test_non_positive_replicate_is_na(ours, ort):
    v = decide("ok", "ok", ours, ort)
    assert v.verdict == "n/a" and v.ratio is None


@pytest.mark.parametrize("ours, ort", [([800.0], [1000.0]), ([], []), ([800.0, 810.0], [1000.0])])
def test_fewer_than_two_replicates_is_na(ours, ort):
    v = decide("ok", "ok", ours, ort)
    assert v.verdict == "n/a" and v.ratio is None
    assert "replicate" in v.note


def test_two_replicates_are_enough():
    v = decide("ok", "ok", [800.0, 810.0], [1000.0, 1001.0])
    assert v.verdict in ("win", "undecided") and v.n == 2 and v.ratio is not None


def test_ort_discrepancy_still_gets_a_timing_verdict_with_a_note():
    v = decide("ok", "ort-discrepancy", FASTER, ORT)
    assert v.verdict == "win"
    assert "discrepancy" in v.note
    assert v.ratio == decide("ok", "ok", FASTER, ORT).ratio
    assert decide("ok", "ort-discrepancy", SLOWER, ORT).verdict == "loss"


def test_verdicts_are_among_the_declared_ones():
    ours_statuses = ["ok", "mismatch", "no-kernel", "below-resolution", "error", "crashed", "timeout"]
    ort_statuses = ours_statuses + ["ort-discrepancy"]
    for a, b, num in itertools.product(ours_statuses, ort_statuses, (False, True)):
        v = decide(a, b, FASTER, ORT, numerics_only=num)
        assert v.verdict in verdicts.VERDICTS
        if v.verdict in ("win", "loss", "undecided"):
            assert a == "ok" and not num and v.ratio is not None
        if a in verdicts.FAIL_STATUSES:
            assert v.verdict == "fail"


# ---- fast_1 ----

def V(verdict, ratio=None):
    return CellVerdict(verdict, ratio=ratio)


def test_fast_1_counts_ok_and_faster_over_all_due_cells():
    cells = [V("win", 0.8), V("undecided", 0.97), V("undecided", 1.02), V("loss", 1.3), V("fail")]
    # win and the undecided at 0.97 are fast (point ratio < 1); 5 cells due
    assert verdicts.fast_1(cells) == pytest.approx(2 / 5)


def test_fast_1_excludes_na_but_keeps_failures():
    assert verdicts.fast_1([V("win", 0.8), V("n/a"), V("n/a")]) == 1.0
    assert verdicts.fast_1([V("win", 0.8), V("fail")]) == 0.5
    assert verdicts.fast_1([V("n/a")]) is None
    assert verdicts.fast_1([]) is None
    assert verdicts.fast_1([V("fail")]) == 0.0


def test_fast_1_breaking_a_cell_never_raises_the_score():
    base = [V("win", 0.8), V("loss", 1.2), V("undecided", 0.99), V("undecided", 1.01), V("n/a"), V("fail"),
            V("win", 0.5)]
    before = verdicts.fast_1(base)
    for i in range(len(base)):
        broken = list(base)
        broken[i] = V("fail")
        after = verdicts.fast_1(broken)
        assert after <= before, (i, base[i].verdict, before, after)
        if base[i].verdict == "win":
            assert after < before
    # dropping a failing cell from the list (i.e. hiding it) would raise the score: it must be counted
    assert verdicts.fast_1([c for c in base if c.verdict != "fail"]) > before


def test_fast_1_fail_with_a_ratio_is_not_fast():
    # a failing cell never counts as fast even if a ratio was somehow attached
    assert verdicts.fast_1([V("fail", 0.5), V("win", 0.8)]) == 0.5


def test_counts_and_geomean():
    cells = [V("win", 0.5), V("loss", 2.0), V("fail"), V("n/a"), V("undecided", 1.0)]
    assert verdicts.counts(cells) == {"win": 1, "loss": 1, "undecided": 1, "fail": 1, "n/a": 1}
    assert verdicts.geomean([0.5, 2.0, None]) == pytest.approx(1.0)
    assert verdicts.geomean([0.25, 1.0]) == pytest.approx(0.5)
    assert verdicts.geomean([None]) is None


# ---- cache levels and peaks ----

MiB = 1 << 20


@pytest.mark.parametrize("ws, threads, want", [
    (0.75 * 1 * MiB, 1, "L2"),          # exactly 3/4 of one core's L2
    (0.75 * 1 * MiB + 1, 1, "L3"),
    (0.75 * 2 * MiB, 2, "L2"),          # the participating cores' L2 add up
    (0.75 * 2 * MiB + 1, 2, "L3"),
    (0.75 * 32 * MiB, 1, "L3"),         # exactly 3/4 of the L3
    (0.75 * 32 * MiB + 1, 1, "DRAM"),
    (1e12, 4, "DRAM"),
])
def test_cache_level_boundaries(ws, threads, want):
    assert verdicts.cache_level(ws, threads, 1 * MiB, 32 * MiB) == want


def test_cache_level_unknown_caches():
    assert verdicts.cache_level(1000, 1, None, 32 * MiB) == "L3"
    assert verdicts.cache_level(1000, 1, None, None) == "DRAM"
    assert verdicts.cache_level(1000, 1, 1 * MiB, None) == "L2"
    assert verdicts.cache_level(10 * MiB, 1, 1 * MiB, None) == "DRAM"


def _peak(kind, threads, level, ws, value):
    return {"kind": kind, "threads": threads, "level": level, "working_set_bytes": ws, "value": value,
            "unit": "GB/s"}


PEAKS = [
    _peak("read", 1, "L2", 256 * 1024, 100.0),
    _peak("read", 1, "L3", 4 * MiB, 50.0),
    _peak("read", 1, "L3", 16 * MiB, 40.0),
    _peak("read", 1, "DRAM", 1024 * MiB, 10.0),
    _peak("read", 2, "L3", 4 * MiB, 90.0),
    _peak("read", 2, "L3", 16 * MiB, 80.0),
    _peak("read", 2, "DRAM", 1024 * MiB, 18.0),
    _peak("fma_f32", 1, None, None, 60.0),
    _peak("fma_f32", 2, None, None, 120.0),
]


def test_pick_peak_by_kind_threads_and_level():
    assert verdicts.pick_peak(PEAKS, "fma_f32", 2)["value"] == 120.0
    assert verdicts.pick_peak(PEAKS, "fma_f32", 1)["value"] == 60.0
    assert verdicts.pick_peak(PEAKS, "read", 1, "DRAM")["value"] == 10.0
    assert verdicts.pick_peak(PEAKS, "read", 2, "DRAM")["value"] == 18.0
    assert verdicts.pick_peak(PEAKS, "read", 1, "L2")["value"] == 100.0
    assert verdicts.pick_peak(PEAKS, "bf16_dot", 1) is None
    # no 2-thread L2 peak measured: the largest thread count measured at that level
    assert verdicts.pick_peak(PEAKS, "read", 2, "L2")["value"] == 100.0


@pytest.mark.parametrize("ws, want", [(3 * MiB, 50.0), (5 * MiB, 50.0), (7 * MiB, 50.0), (9 * MiB, 40.0),
                                      (15 * MiB, 40.0), (64 * MiB, 40.0)])
def test_pick_peak_nearest_working_set_on_log_scale(ws, want):
    # log-scale midpoint between 4 and 16 MiB is 8 MiB
    assert verdicts.pick_peak(PEAKS, "read", 1, "L3", ws)["value"] == want


def test_pick_peak_falls_back_to_largest_thread_count():
    p = verdicts.pick_peak(PEAKS, "read", 8, "L3", 15 * MiB)
    assert p["threads"] == 2 and p["value"] == 80.0
    assert verdicts.pick_peak(PEAKS, "fma_f32", 16)["value"] == 120.0
