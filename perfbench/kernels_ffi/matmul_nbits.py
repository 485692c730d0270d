"""MatMulNBits wrapper (pb_matmul_nbits, accuracy_level 0 or 4): numpy arrays in, a validated KernelCall
out. Shapes as com.microsoft MatMulNBits has them: A (M, K) in the activation dtype; B (N,
k_blocks, block_size * bits / 8) uint8; scales (N, k_blocks) or (N * k_blocks,); zero_points None,
packed uint8 (N, ceil(k_blocks * bits / 8)) or its 1-D form, or unpacked in A's dtype (N,
k_blocks); bias None or (N,); Y (M, N). perfbench/ops/_nbits.py has the layout and references."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import (
    check_array,
    check_int,
    check_no_overlap,
    check_threads,
    float_dtype,
    same_dtype,
    set_exec,
)
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall


@dataclass(frozen=True)
class PackedNBits:
    """B regrouped once by pb_matmul_nbits_pack_b (outside any timed call): the buffer and what it
    was made from (a call checks that it gets that same b and layout)."""

    buf: np.ndarray
    source: np.ndarray
    zero_points: np.ndarray | None  # the packed zero points packed with B (None: none)
    n: int
    k: int
    bits: int
    block_size: int


def matmul_nbits(lib: Library, a: np.ndarray, b: np.ndarray, scales: np.ndarray, y: np.ndarray, *, k: int, n: int,
                 bits: int, block_size: int, zero_points: np.ndarray | None = None, bias: np.ndarray | None = None,
                 accuracy_level: int = 0, packed_b: PackedNBits | None = None, threads: int = 1) -> KernelCall:
    """Y = A @ W + bias. packed_b (accuracy 4): pack_b's regrouping of this b, made once (as ORT
    prepacks a constant weight); without it the call regroups b itself, every time."""
    name = "matmul_nbits"
    if accuracy_level not in (0, 4):
        raise UsageError(f"{name}: accuracy_level={accuracy_level!r}, expected 0 (f32 products) or 4 (int8 activations)")
    if bits not in (2, 4, 8):
        raise UsageError(f"{name}: bits={bits!r}, expected 2, 4 or 8 (what ORT 1.31.1 runs)")
    if check_int(name, "block_size", block_size, 16) & (block_size - 1):
        raise UsageError(f"{name}: block_size={block_size!r}, expected a power of two >= 16")
    if accuracy_level == 4 and block_size > 256:
        raise UsageError(f"{name}: block_size={block_size} at accuracy_level 4, expected at most 256 (ORT's largest; "
                         "a block's int32 sum must stay exact)")
    check_int(name, "k", k, 0)
    check_int(name, "n", n, 0)
    for label, arr in (("a", a), ("b", b), ("scales", scales)):
        check_array(arr, label, name)
    check_array(y, "y", name, writeable=True)
    dt = float_dtype(a, "a", name)
    same_dtype(name, "a", a, scales=scales, y=y, bias=bias)
    kb = -(-k // block_size)
    blob = block_size * bits // 8
    if a.ndim != 2 or a.shape[1] != k:
        raise UsageError(f"{name}: a must be (M, K={k}), got {a.shape}")
    m = a.shape[0]
    if b.dtype != np.uint8 or b.shape != (n, kb, blob):
        raise UsageError(f"{name}: b must be uint8 of shape (N, k_blocks, blob) = {(n, kb, blob)}, got {b.dtype}{b.shape}")
    if scales.shape not in ((n, kb), (n * kb,)):
        raise UsageError(f"{name}: scales must be (N, k_blocks) = {(n, kb)} or ({n * kb},), got {scales.shape}")
    zp_packed = 0
    if zero_points is not None:
        check_array(zero_points, "zero_points", name)
        zpb = -(-kb * bits // 8)
        if zero_points.dtype == np.uint8:
            zp_packed = 1
            if zero_points.shape not in ((n, zpb), (n * zpb,)):
                raise UsageError(f"{name}: packed zero_points must be uint8 (N, ceil(k_blocks * bits / 8)) = {(n, zpb)} "
                                 f"or ({n * zpb},), got {zero_points.shape}")
        else:
            same_dtype(name, "a", a, zero_points=zero_points)
            if zero_points.shape not in ((n, kb), (n * kb,)):
                raise UsageError(f"{name}: unpacked zero_points must be (N, k_blocks) = {(n, kb)} or ({n * kb},), "
                                 f"got {zero_points.shape}")
    if bias is not None:
        check_array(bias, "bias", name)
        if bias.shape != (n,):
            raise UsageError(f"{name}: bias must be ({n},), got {bias.shape}")
    if y.shape != (m, n):
        raise UsageError(f"{name}: y must be (M, N) = {(m, n)}, got {y.shape}")
    if packed_b is not None:
        if accuracy_level != 4:
            raise UsageError(f"{name}: packed_b is for accuracy_level 4 (the int8 kernel), not {accuracy_level}")
        if not isinstance(packed_b, PackedNBits) or packed_b.source is not b or \
                (packed_b.n, packed_b.k, packed_b.bits, packed_b.block_size) != (n, k, bits, block_size):
            raise UsageError(f"{name}: packed_b must be pack_b's result for this b, n, k, bits and block_size")
        if zp_packed and packed_b.zero_points is not zero_points:
            raise UsageError(f"{name}: packed_b was packed without these packed zero_points; pass "
                             "pack_b(..., zero_points=zero_points) (the call reads the packed copy's)")
    check_no_overlap(name, {"y": y}, {"a": a, "b": b, "scales": scales, "zero_points": zero_points, "bias": bias,
                                      "packed_b": packed_b.buf if packed_b is not None else None})
    args = lib.ffi.new("pb_matmul_nbits_args*")
    set_exec(args, check_threads(threads, name), "cpu", name)
    args.dtype, args.bits, args.block_size, args.zp_packed = dt.onnx, bits, int(block_size), zp_packed
    args.accuracy_level = accuracy_level
    args.m, args.n, args.k = m, n, k
    args.a, args.b, args.scales, args.y = lib.ptr(a), lib.ptr(b), lib.ptr(scales), lib.ptr(y)
    if zero_points is not None:
        args.zero_points = lib.ptr(zero_points)
    if bias is not None:
        args.bias = lib.ptr(bias)
    if packed_b is not None:
        args.b_packed = lib.ptr(packed_b.buf)
    return KernelCall(lib, name, args, [a, b, scales, zero_points, bias, y, packed_b.buf if packed_b else None])


def packed_bytes(lib: Library, n: int, k: int, bits: int, block_size: int, what: str = "matmul_nbits") -> int:
    out = lib.ffi.new("int64_t*")
    lib.check(lib.lib.pb_matmul_nbits_packed_bytes(n, k, bits, block_size, out), what)
    return int(out[0])


def pack_b(lib: Library, b: np.ndarray, *, n: int, k: int, bits: int, block_size: int,
           zero_points: np.ndarray | None = None) -> PackedNBits:
    """b (N, k_blocks, blob) uint8 regrouped for accuracy_level 4 (per group of 16 blocks, per 4-byte
    word, the word of each block: native/cpu/kernels/nbits.inc.c), with the packed (uint8) zero
    points one byte a block, now (not timed). A call with packed zero points needs them packed here
    too. The result stands for b and zero_points as they are now: changed in place afterwards, they
    leave it stale."""
    name = "matmul_nbits_pack_b"
    check_array(b, "b", name)
    kb = -(-k // block_size) if block_size > 0 else 0
    if b.dtype != np.uint8 or b.shape != (n, kb, block_size * bits // 8):
        raise UsageError(f"{name}: b must be uint8 of shape (N, k_blocks, blob) = {(n, kb, block_size * bits // 8)}, "
                         f"got {b.dtype}{b.shape}")
    if zero_points is not None:
        check_array(zero_points, "zero_points", name)
        zpb = -(-kb * bits // 8) if bits > 0 else 0
        if zero_points.dtype != np.uint8 or zero_points.shape not in ((n, zpb), (n * zpb,)):
            raise UsageError(f"{name}: zero_points must be the packed ones, uint8 (N, ceil(k_blocks * bits / 8)) = "
                             f"{(n, zpb)} or ({n * zpb},), got {zero_points.dtype}{zero_points.shape}")
    out = np.empty(packed_bytes(lib, n, k, bits, block_size, name), np.uint8)
    zp = lib.ptr(zero_points) if zero_points is not None else lib.ffi.NULL
    lib.check(lib.lib.pb_matmul_nbits_pack_b(lib.ptr(b), zp, n, k, bits, block_size, lib.ptr(out), out.size), name)
    return PackedNBits(out, b, zero_points, n, k, bits, block_size)
