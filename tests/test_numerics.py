"""The numerics gate (CONTRACTS §8): the comparator's handling of NaN and infinities, per-row
RMS normalization, one element just beyond / just within tolerance, the tolerance clamp and the
ORT-discrepancy flag. Pure numpy, no native library."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench import numerics
from perfbench.numerics import FLOORS, error, gate, tolerance

# CONTRACTS §8, written out here so that a changed constant fails a test
CONTRACT_FLOORS = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
RMS_FLOOR_FRACTION = 1e-3


def test_constants_are_the_contract():
    assert FLOORS == CONTRACT_FLOORS
    assert numerics.RMS_FLOOR_FRACTION == RMS_FLOOR_FRACTION


def _oracle(rows=4, cols=8, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols))


# ---- error() --------------------------------------------------------------------------------


def test_identical_arrays_have_zero_error():
    o = _oracle()
    assert error(o.copy(), o, o.shape[-1]) == 0.0
    # also through a lower precision that represents the values exactly
    o32 = o.astype(np.float32)
    assert error(o32, o32.astype(np.float64), o.shape[-1]) == 0.0


def test_nan_where_the_oracle_is_finite_is_an_infinite_error():
    o = _oracle()
    x = o.copy()
    x[2, 5] = np.nan
    e = error(x, o, o.shape[-1])
    assert e == math.inf
    tol = 10 * FLOORS["bf16"]
    assert not (e <= tol)  # the gate's comparison direction: a bad value never passes


def test_inf_where_the_oracle_is_finite_is_an_infinite_error():
    o = _oracle()
    x = o.copy()
    x[0, 0] = np.inf
    assert error(x, o, o.shape[-1]) == math.inf


def test_nan_where_the_oracle_has_nan_matches():
    o = _oracle()
    o[1, :] = np.nan  # e.g. a softmax row with a NaN input
    x = o.copy()
    assert error(x, o, o.shape[-1]) == 0.0
    # but a finite value where the oracle has NaN is a mismatch
    x[1, 3] = 0.125
    assert error(x, o, o.shape[-1]) == math.inf


def test_infinities_must_match_in_sign():
    o = _oracle()
    o[0, 1] = np.inf
    x = o.copy()
    assert error(x, o, o.shape[-1]) == 0.0
    x[0, 1] = -np.inf
    assert error(x, o, o.shape[-1]) == math.inf
    x[0, 1] = np.nan
    assert error(x, o, o.shape[-1]) == math.inf
    x[0, 1] = 1e30  # large but finite is not inf either
    assert error(x, o, o.shape[-1]) == math.inf


def test_shape_mismatch_is_an_infinite_error():
    o = _oracle()
    assert error(o[:, :-1], o, o.shape[-1]) == math.inf


def test_per_row_rms_normalization():
    # row 0 has values ~1000, row 1 values ~1: an absolute error of 0.01 in row 1 is judged
    # against row 1's RMS, not the tensor's
    o = np.array([[1000.0, -1000.0, 1000.0, -1000.0], [1.0, -1.0, 1.0, -1.0]])
    x = o.copy()
    x[1, 2] += 0.01
    # e = 0.01 / (|1| + rms(row 1) = 1)
    assert error(x, o, 4) == pytest.approx(0.005, rel=1e-12)
    # with the whole tensor as one row the same error would look ~350x smaller
    assert error(x, o, 8) == pytest.approx(0.01 / (1.0 + math.sqrt(np.mean(o**2))), rel=1e-12)


def test_all_zero_oracle_row_is_floored_at_a_fraction_of_the_tensor_rms():
    o = np.array([[0.0, 0.0, 0.0, 0.0], [3.0, -3.0, 3.0, -3.0]])
    tensor_rms = math.sqrt(np.mean(o**2))  # = sqrt(4.5)
    r0 = RMS_FLOOR_FRACTION * tensor_rms
    x = o.copy()
    x[0, 1] = 0.5 * r0  # e = 0.5 r0 / (0 + r0)
    assert error(x, o, 4) == pytest.approx(0.5, rel=1e-9)
    # the floor does not apply to a row whose own RMS is larger
    x = o.copy()
    x[1, 0] = 3.0 + 0.06  # e = 0.06 / (3 + 3)
    assert error(x, o, 4) == pytest.approx(0.01, rel=1e-9)
    # exact zeros in the zero row are no error at all
    assert error(o.copy(), o, 4) == 0.0


def test_all_zero_oracle_tensor():
    o = np.zeros((2, 4))
    assert error(np.zeros((2, 4)), o, 4) == 0.0
    x = np.zeros((2, 4))
    x[1, 1] = 1e-30
    assert error(x, o, 4) == math.inf


# ---- tolerance() ------------------------------------------------------------------------------


@pytest.mark.parametrize("floor", sorted(FLOORS.values()))
def test_tolerance_clamps_twice_the_ort_error(floor):
    assert tolerance(None, floor) == floor
    assert tolerance(0.0, floor) == floor
    assert tolerance(0.3 * floor, floor) == floor  # 2 x 0.3 floor < floor
    assert tolerance(2.0 * floor, floor) == pytest.approx(4.0 * floor)  # inside the clamp
    assert tolerance(5.0 * floor, floor) == pytest.approx(10.0 * floor)  # upper edge
    assert tolerance(7.0 * floor, floor) == pytest.approx(10.0 * floor)  # clamped
    assert tolerance(1e6 * floor, floor) == pytest.approx(10.0 * floor)
    for err_ort in (0.0, 0.1, 0.7, 3.0, 100.0):
        t = tolerance(err_ort * floor, floor)
        assert floor <= t <= 10.0 * floor


def test_tolerance_without_a_usable_ort_error_is_the_floor():
    assert tolerance(None, 2e-3) == 2e-3
    assert tolerance(math.nan, 2e-3) == 2e-3


# ---- gate() -----------------------------------------------------------------------------------


def _with_error_at(o: np.ndarray, row_size: int, index: tuple, e: float) -> np.ndarray:
    """A copy of o whose element `index` has relative error exactly e (as error() defines it)."""
    rows = o.reshape(-1, row_size)
    tensor_rms = math.sqrt(float(np.mean(rows**2)))
    row_rms = np.sqrt(np.mean(rows**2, axis=1))
    flat = np.ravel_multi_index(index, o.shape)
    r = max(row_rms[flat // row_size], RMS_FLOOR_FRACTION * tensor_rms)
    x = o.copy()
    x[index] = o[index] + e * (abs(o[index]) + r)
    return x


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_one_element_just_beyond_tolerance_fails_and_just_within_passes(dtype):
    floor = FLOORS[dtype]
    o = {"y": _oracle(6, 33, seed=3)}
    rs = {"y": 33}
    err_ort = 3.0 * floor  # tol = 6 x floor: inside the clamp, so the ORT yardstick is used
    ort = {"y": _with_error_at(o["y"], 33, (0, 0), err_ort)}
    tol = 2.0 * err_ort
    above = {"y": _with_error_at(o["y"], 33, (4, 17), tol * (1 + 1e-6))}
    below = {"y": _with_error_at(o["y"], 33, (4, 17), tol * (1 - 1e-6))}

    g_above = gate(above, ort, o, rs, floor)
    assert g_above.tol == pytest.approx(tol, rel=1e-9)
    assert g_above.err_ort == pytest.approx(err_ort, rel=1e-9)
    assert g_above.err_ours == pytest.approx(tol * (1 + 1e-6), rel=1e-9)
    assert g_above.ours_ok is False, g_above.describe()

    g_below = gate(below, ort, o, rs, floor)
    assert g_below.ours_ok is True, g_below.describe()
    assert g_below.ort_discrepancy is False

    # without ORT the tolerance is the floor: the same 'below' output now fails
    g_no_ort = gate(below, None, o, rs, floor)
    assert g_no_ort.tol == floor and g_no_ort.err_ort is None
    assert g_no_ort.ours_ok is False
    just_under_floor = {"y": _with_error_at(o["y"], 33, (5, 32), floor * (1 - 1e-6))}
    assert gate(just_under_floor, None, o, rs, floor).ours_ok is True


def test_gate_takes_the_worst_output():
    floor = FLOORS["f32"]
    o = {"a": _oracle(2, 8, seed=1), "b": _oracle(3, 4, seed=2)}
    rs = {"a": 8, "b": 4}
    ours = {"a": o["a"].copy(), "b": _with_error_at(o["b"], 4, (2, 3), 2 * floor)}
    g = gate(ours, None, o, rs, floor)
    assert g.err_ours == pytest.approx(2 * floor, rel=1e-9)
    assert not g.ours_ok


def test_gate_fails_nan_output():
    floor = FLOORS["f16"]
    o = {"y": _oracle()}
    ours = {"y": o["y"].copy()}
    ours["y"][3, 7] = np.nan
    g = gate(ours, {"y": o["y"].copy()}, o, {"y": 8}, floor)
    assert g.ours_ok is False
    assert g.err_ours == math.inf


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_gate_flags_ort_discrepancy_above_ten_floors(dtype):
    floor = FLOORS[dtype]
    o = {"y": _oracle(3, 16, seed=5)}
    rs = {"y": 16}
    ours = {"y": o["y"].copy()}
    far = {"y": _with_error_at(o["y"], 16, (1, 2), 10.0 * floor * 1.01)}
    near = {"y": _with_error_at(o["y"], 16, (1, 2), 10.0 * floor * 0.99)}
    g_far = gate(ours, far, o, rs, floor)
    assert g_far.ort_discrepancy is True
    assert g_far.tol == pytest.approx(10.0 * floor)  # clamped
    assert g_far.ours_ok is True  # our exact output still passes
    g_near = gate(ours, near, o, rs, floor)
    assert g_near.ort_discrepancy is False
    # ORT with a NaN where the oracle is finite: an infinite error, a discrepancy, and the
    # tolerance is the clamp's ceiling (CONTRACTS §8: clamp(2 x err(ORT), floor, 10 x floor))
    bad = {"y": o["y"].copy()}
    bad["y"][0, 0] = np.nan
    g_bad = gate(ours, bad, o, rs, floor)
    assert g_bad.ort_discrepancy is True
    assert g_bad.tol == pytest.approx(10.0 * floor)
    # no ORT at all is not a discrepancy
    assert gate(ours, None, o, rs, floor).ort_discrepancy is False


def test_gate_reports_ours_versus_ort():
    floor = FLOORS["f32"]
    o = {"y": _oracle(2, 8, seed=7)}
    ort = {"y": _with_error_at(o["y"], 8, (1, 1), 2e-6)}
    g = gate({"y": o["y"].copy()}, ort, o, {"y": 8}, floor)
    assert g.err_ours_vs_ort is not None and g.err_ours_vs_ort > 0
    assert numerics.max_error({"y": o["y"]}, ort, {"y": 8}) == g.err_ours_vs_ort
