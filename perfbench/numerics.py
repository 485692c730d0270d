"""The numerics gate (CONTRACTS §8). Pure numpy; imports nothing of ours.

Error of an output x against the float64 oracle o, per element:

    e = |x - o| / (|o| + r)

where r is the RMS of the oracle over the element's row (the op declares the row: one softmax
row, one head's H values), floored at 1e-3 x the RMS of the whole tensor so that an all-zero row
cannot make the denominator vanish. err(x) = max e. Non-finite oracle values must be matched
exactly (same position, same sign for infinities, NaN where NaN); anything else non-finite in x
is an infinite error. Comparisons are written `err <= tol` so that a NaN error fails.

Pass: err(ours) <= tol with tol = clamp(2 x err(ORT), floor, 10 x floor). Where ORT could not
run the case (or its error is NaN), tol = floor. If err(ORT) > 10 x floor, ORT's own status is `ort-discrepancy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Per-dtype floors: about two units in the last place for f16/bf16.
FLOORS = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
RMS_FLOOR_FRACTION = 1e-3


def _as_f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def error(x, oracle, row_size: int) -> float:
    """max_i |x_i - o_i| / (|o_i| + r_row(i)); inf on a non-finite mismatch; nan never hidden."""
    x = _as_f64(x)
    o = _as_f64(oracle)
    if x.shape != o.shape:
        return math.inf
    if o.size == 0:
        return 0.0
    finite_o = np.isfinite(o)
    if not finite_o.all():
        nf = ~finite_o
        same = np.where(np.isnan(o[nf]), np.isnan(x[nf]), x[nf] == o[nf])
        if not same.all():
            return math.inf
    if (~np.isfinite(x[finite_o])).any():
        return math.inf
    if row_size <= 0 or o.size % row_size:
        row_size = o.size
    o_rows = np.where(finite_o, o, 0.0).reshape(-1, row_size)
    x_rows = np.where(finite_o, x, 0.0).reshape(-1, row_size)
    tensor_rms = math.sqrt(float(np.mean(o_rows**2)))
    row_rms = np.sqrt(np.mean(o_rows**2, axis=1, keepdims=True))
    r = np.maximum(row_rms, RMS_FLOOR_FRACTION * tensor_rms)
    denom = np.abs(o_rows) + r
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.abs(x_rows - o_rows) / denom
    # an all-zero oracle: exact zeros give 0, anything else is infinitely wrong
    e = np.where(denom > 0, e, np.where(x_rows == o_rows, 0.0, np.inf))
    return float(np.max(e))


def max_error(outputs: dict, oracle: dict, row_sizes: dict) -> float:
    """The largest error over all outputs an op produces."""
    errs = [error(outputs[k], oracle[k], row_sizes[k]) for k in oracle]
    if any(math.isnan(e) for e in errs):
        return math.nan
    return max(errs) if errs else 0.0


def tolerance(err_ort: float | None, floor: float) -> float:
    """clamp(2 x err(ORT), floor, 10 x floor); floor when ORT could not run the case."""
    if err_ort is None or math.isnan(err_ort):
        return floor
    return min(max(2.0 * err_ort, floor), 10.0 * floor)


@dataclass
class GateResult:
    err_ours: float
    err_ort: float | None
    err_ours_vs_ort: float | None
    tol: float
    floor: float
    ours_ok: bool
    ort_discrepancy: bool

    def describe(self) -> str:
        ort = "n/a" if self.err_ort is None else f"{self.err_ort:.3g}"
        return f"err(ours)={self.err_ours:.3g} tol={self.tol:.3g} err(ORT)={ort}"


def gate(ours: dict, ort: dict | None, oracle: dict, row_sizes: dict, floor: float) -> GateResult:
    """Judge our outputs (and ORT's) against the float64 oracle."""
    err_ours = max_error(ours, oracle, row_sizes)
    err_ort = max_error(ort, oracle, row_sizes) if ort is not None else None
    vs = max_error(ours, ort, row_sizes) if ort is not None else None
    tol = tolerance(err_ort, floor)
    ours_ok = bool(err_ours <= tol)  # NaN fails
    discrepancy = err_ort is not None and not (err_ort <= 10.0 * floor)
    return GateResult(err_ours, err_ort, vs, tol, floor, ours_ok, discrepancy)
