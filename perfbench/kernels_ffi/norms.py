"""Wrappers of the norms group (suites/norms.toml): the LayerNormalization family and
RMSNormalization, all through one native kernel, `layer_norm`. Every check happens here, before C
is called (C checks again and returns a status rather than crash)."""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import check_array, check_no_overlap, check_threads, set_exec
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall


def layer_norm(lib: Library, x: np.ndarray, scale: np.ndarray, y: np.ndarray, *, epsilon: float,
               simplified: bool = False, skip: np.ndarray | None = None, bias: np.ndarray | None = None,
               beta: np.ndarray | None = None, mean: np.ndarray | None = None, inv_std: np.ndarray | None = None,
               sum_out: np.ndarray | None = None, threads: int = 1, device: str = "cpu") -> KernelCall:
    """Normalize each row of x (rows, hidden) into y, computing in float32:

    v = x (+ skip[row % skip_rows]) (+ bias); y = (v - mean) / sqrt(var + epsilon) * scale (+ beta),
    or, simplified, y = v / sqrt(mean(v^2) + epsilon) * scale. x, skip (skip_rows, hidden), y and
    sum_out (v, rounded once) share x's dtype; scale, beta, bias are (hidden,) of that dtype; mean
    and inv_std (rows,) or (rows, 1) float32. Optional arrays left None are not read or written."""
    k = "layer_norm"
    check_array(x, "x", k)
    check_array(scale, "scale", k)
    check_array(y, "y", k, writeable=True)
    dt = dtypes.of_array(x)
    if x.ndim != 2:
        raise UsageError(f"{k}: x must be (rows, hidden), got shape {x.shape}")
    rows, hidden = x.shape
    if hidden < 1:
        raise UsageError(f"{k}: hidden must be >= 1, got {hidden}")
    if y.dtype != x.dtype or y.shape != x.shape:
        raise UsageError(f"{k}: y must match x (x {x.dtype}{x.shape}, y {y.dtype}{y.shape})")
    ins = {"x": x, "scale": scale}
    for name, a in (("scale", scale), ("bias", bias), ("beta", beta)):
        if a is None:
            continue
        check_array(a, name, k)
        if a.dtype != x.dtype or a.shape != (hidden,):
            raise UsageError(f"{k}: {name} must be {x.dtype} of shape ({hidden},), got {a.dtype}{a.shape}")
        ins[name] = a
    skip_rows = 0
    if skip is not None:
        check_array(skip, "skip", k)
        if skip.dtype != x.dtype or skip.ndim != 2 or skip.shape[1] != hidden:
            raise UsageError(f"{k}: skip must be {x.dtype} of shape (skip_rows, {hidden}), got {skip.dtype}{skip.shape}")
        skip_rows = skip.shape[0]
        if skip_rows < 1 or rows % skip_rows:
            raise UsageError(f"{k}: skip has {skip_rows} rows, which must divide x's {rows} rows")
        ins["skip"] = skip
    if simplified and beta is not None:
        raise UsageError(f"{k}: beta is not defined for the simplified (RMS) form")
    if simplified and mean is not None:
        raise UsageError(f"{k}: mean is not defined for the simplified (RMS) form")
    outs = {"y": y}
    for name, a in (("mean", mean), ("inv_std", inv_std)):
        if a is None:
            continue
        check_array(a, name, k, writeable=True)
        if a.dtype != np.float32 or a.size != rows or a.shape not in ((rows,), (rows, 1)):
            raise UsageError(f"{k}: {name} must be float32 of shape ({rows},) or ({rows}, 1), got {a.dtype}{a.shape}")
        outs[name] = a
    if sum_out is not None:
        check_array(sum_out, "sum", k, writeable=True)
        if sum_out.dtype != x.dtype or sum_out.shape != x.shape:
            raise UsageError(f"{k}: sum must match x (x {x.dtype}{x.shape}, sum {sum_out.dtype}{sum_out.shape})")
        outs["sum"] = sum_out
    check_no_overlap(k, outs, ins)  # never in place
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)) \
            or not math.isfinite(float(epsilon)) or float(epsilon) < 0:
        raise UsageError(f"{k}: epsilon must be a finite number >= 0, got {epsilon!r}")
    if float(epsilon) > float(np.finfo(np.float32).max):
        raise UsageError(f"{k}: epsilon={epsilon!r} overflows float32")
    args = lib.ffi.new("pb_layer_norm_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.simplified = 1 if simplified else 0
    args.epsilon = float(epsilon)
    args.rows, args.hidden, args.skip_rows = rows, hidden, skip_rows
    args.x, args.scale, args.y = lib.ptr(x), lib.ptr(scale), lib.ptr(y)
    if skip is not None:
        args.skip = lib.ptr(skip)
    if bias is not None:
        args.bias = lib.ptr(bias)
    if beta is not None:
        args.beta = lib.ptr(beta)
    if mean is not None:
        args.mean = lib.ffi.cast("float *", mean.ctypes.data)
    if inv_std is not None:
        args.inv_std = lib.ffi.cast("float *", inv_std.ctypes.data)
    if sum_out is not None:
        args.sum = lib.ptr(sum_out)
    keep = [a for a in (x, scale, y, skip, bias, beta, mean, inv_std, sum_out) if a is not None]
    return KernelCall(lib, k, args, keep)


def stream_mode(lib: Library, mode: int) -> int:
    """Set when layer_norm stores its outputs non-temporally: -1 (default) beyond half the
    last-level cache, 0 never, 1 whenever the rows are 32-byte aligned. Returns the previous mode."""
    if mode not in (-1, 0, 1):
        raise UsageError(f"layer_norm stream mode must be -1, 0 or 1, got {mode!r}")
    return int(lib.lib.pb_layer_norm_stream_mode(mode))
