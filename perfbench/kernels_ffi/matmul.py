"""MatMul / Gemm wrappers (pb_matmul, pb_matmul_pack_b): numpy arrays in, a validated KernelCall out.

Shapes as ai.onnx MatMul and Gemm see them after the op has made both operands at least 2-D:
A (*batch_a, M, K) -- (*batch_a, K, M) with trans_a --, B (*batch_b, K, N) -- (*batch_b, N, K)
with trans_b --, Y (*batch, M, N) where batch is numpy's broadcast of batch_a and batch_b (at
most 8 dims). C (Gemm) is None or an array broadcastable to (M, N)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import (
    check_array,
    check_no_overlap,
    check_threads,
    float32_arg,
    float_dtype,
    same_dtype,
    set_exec,
)
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall

MAX_BATCH_RANK = 8


@dataclass
class PackedB:
    """B packed once by pb_matmul_pack_b (outside any timed call): the buffer and what it holds."""

    buf: np.ndarray
    source: np.ndarray
    trans_b: bool


def _problem(lib: Library, k: str, a: np.ndarray, b: np.ndarray, y: np.ndarray | None, trans_a: bool, trans_b: bool,
             alpha: float, beta: float, c: np.ndarray | None, threads: int, device: str):
    check_array(a, "a", k)
    check_array(b, "b", k)
    if y is not None:
        check_array(y, "y", k, writeable=True)
    dt = float_dtype(a, "a", k)
    same_dtype(k, "a", a, b=b, y=y, c=c)
    if a.ndim < 2 or b.ndim < 2:
        raise UsageError(f"{k}: a and b must be at least 2-D (got {a.shape} and {b.shape}): reshape a 1-D operand "
                         "as MatMul does")
    m, ka = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if ka != kb:
        raise UsageError(f"{k}: inner dimensions differ: a {a.shape}{' (transposed)' if trans_a else ''} has K={ka}, "
                         f"b {b.shape}{' (transposed)' if trans_b else ''} has K={kb}")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise UsageError(f"{k}: batch dims {a.shape[:-2]} and {b.shape[:-2]} do not broadcast") from None
    if len(batch) > MAX_BATCH_RANK:
        raise UsageError(f"{k}: {len(batch)} batch dims, at most {MAX_BATCH_RANK}")
    if y is not None and tuple(y.shape) != (*batch, m, n):
        raise UsageError(f"{k}: y must have shape {(*batch, m, n)}, got {tuple(y.shape)}")
    args = lib.ffi.new("pb_matmul_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.trans_a, args.trans_b = int(bool(trans_a)), int(bool(trans_b))
    args.batch_rank = len(batch)
    for x, strides in ((a, args.a_strides), (b, args.b_strides)):
        dims = (1,) * (len(batch) - (x.ndim - 2)) + tuple(x.shape[:-2])
        step = x.shape[-1] * x.shape[-2]
        for d in range(len(batch) - 1, -1, -1):
            strides[d] = step if dims[d] > 1 else 0
            step *= dims[d]
    for d, s in enumerate(batch):
        args.batch_dims[d] = s
    args.m, args.n, args.k = m, n, ka
    args.alpha, args.beta = float32_arg(k, "alpha", alpha), float32_arg(k, "beta", beta)
    if c is not None:
        check_array(c, "c", k)
        if c.ndim > 2:
            raise UsageError(f"{k}: c must have at most 2 dims (broadcast to ({m}, {n})), got {c.shape}")
        try:
            np.broadcast_shapes(c.shape, (m, n))
        except ValueError:
            raise UsageError(f"{k}: c of shape {c.shape} does not broadcast to ({m}, {n})") from None
        if np.broadcast_shapes(c.shape, (m, n)) != (m, n):
            raise UsageError(f"{k}: c of shape {c.shape} does not broadcast to ({m}, {n})")
        cs = (1,) * (2 - c.ndim) + tuple(c.shape)
        args.c_rs = cs[1] if cs[0] > 1 else 0
        args.c_cs = 1 if cs[1] > 1 else 0
        args.c = lib.ptr(c)
    args.a, args.b = lib.ptr(a), lib.ptr(b)
    if y is not None:
        args.y = lib.ptr(y)
        check_no_overlap(k, {"y": y}, {"a": a, "b": b, "c": c})
    return args, dt, (m, n, ka)


def matmul(lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, *, trans_a: bool = False,
           trans_b: bool = False, alpha: float = 1.0, beta: float = 0.0, c: np.ndarray | None = None,
           packed: PackedB | None = None, threads: int = 1, device: str = "cpu") -> KernelCall:
    """y = alpha * op(a) @ op(b) + beta * c. packed: pack_b's result for this b (the call then
    reads the packed panels, not b: B as a model's constant weight; except at M = 1 in f16, and
    bf16 on a path without bf16 pairs, where the f32 panels hold twice b's bytes and b is read)."""
    k = "matmul"
    args, _, _ = _problem(lib, k, a, b, y, trans_a, trans_b, alpha, beta, c, threads, device)
    keep = [a, b, y, c]
    if packed is not None:
        if not isinstance(packed, PackedB) or packed.source is not b or bool(packed.trans_b) != bool(trans_b):
            raise UsageError(f"{k}: packed must be pack_b's result for this b and trans_b")
        if b.ndim != 2:
            raise UsageError(f"{k}: a packed b is one (K, N) matrix, got b of shape {b.shape}")
        check_no_overlap(k, {"y": y}, {"packed": packed.buf})
        args.b_packed = lib.ptr(packed.buf)
        keep.append(packed.buf)
    return KernelCall(lib, k, args, keep)


def pack_b(lib: Library, b: np.ndarray, *, trans_b: bool = False, threads: int = 1) -> PackedB:
    """b (K, N) -- (N, K) with trans_b -- packed for matmul's `packed`, now (not timed)."""
    k = "matmul_pack_b"
    check_array(b, "b", k)
    if b.ndim != 2:
        raise UsageError(f"{k}: b must be 2-D (one weight matrix), got shape {b.shape}")
    kk, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    a = np.zeros((1, kk), b.dtype)
    args, _, _ = _problem(lib, k, a, b, None, False, trans_b, 1.0, 0.0, None, threads, "cpu")
    from perfbench.timing.protocol import page_aligned_empty  # (protocol imports the ops, which import this)

    nbytes = lib.ffi.new("int64_t*")
    lib.check(lib.lib.pb_matmul_packed_bytes(kk, n, nbytes), k)
    buf = page_aligned_empty(int(nbytes[0]), np.uint8)
    pa = lib.ffi.new("pb_matmul_pack_args*")
    set_exec(pa, check_threads(threads, k), "cpu", k)
    pa.problem = args
    pa.out = lib.ptr(buf)
    pa.out_bytes = buf.size
    lib.check(lib.lib.pb_matmul_pack_b(pa), k)
    return PackedB(buf, b, bool(trans_b))
