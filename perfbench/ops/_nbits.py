"""com.microsoft MatMulNBits (issue 19): its weight layout and its two float64 references.

Layout (ORT's contrib-op schema and its CPU dequantizer, read in microsoft/onnxruntime: docs/
ContribOperators.md, contrib_ops/cpu/quantization/matmul_nbits_helper.h, mlas/lib/q4_dq.cpp):
B is (N, k_blocks, blob) uint8 with k_blocks = ceil(K / block_size) and blob = block_size * bits
/ 8: column n of the (K, N) weight is contiguous along K, its blocks back to back, each byte
holding 8 / bits values with the lowest bits first (4 bits: even k in the low nibble). scales
are (N, k_blocks). Zero points are either packed the same way per column, ceil(k_blocks * bits
/ 8) bytes a column (a fresh byte per column; the lowest bits the even block), or unpacked in
the activation's float type (N, k_blocks); absent, every block's is 2^(bits - 1). Weight value:
(q - zp) * scale.

References:
- `reference`: the op's stated semantics in float64: A (as given) times the dequantized weight,
  plus bias. It judges accuracy levels 0-3, which x86 runs as f32.
- `reference_int8_a`: the same over A quantized per row and per block of block_size along K as
  accuracy_level 4 does on x86 (mlas/lib/sqnbitgemm_kernel_avx2.cpp and _avx512.cpp,
  QuantizeARow): in float32, mx = max |a| over the block's real elements, scale = mx / 127,
  inverse = 127 / mx (0 where mx is 0), q = a * inverse rounded half to even, saturated to int8;
  the block's values become q * scale (float64 from there on). An int8-activation kernel is
  judged against this one; its error against `reference` is reported beside it. Checked against
  ORT 1.31.1 sessions by tests/ops/test_nbits_reference.py."""

from __future__ import annotations

import numpy as np


def k_blocks(k: int, block_size: int) -> int:
    return (k + block_size - 1) // block_size


def ort_runs_int8(bits: int, block_size: int, zp_form: str, weights_constant: bool) -> bool:
    """Whether ORT 1.31.1 on x86 takes its int8 path at accuracy_level 4 (else it dequantizes and
    runs f32): only with B, scales and packed zero points as initializers (prepacked at session
    creation), never with float zero points, and for 2 bits only at blocks 32-128 (probed on a
    Zen 4 with bits 2/4/8 x blocks 16-256; tests/ops/test_nbits_reference.py pins it)."""
    if not weights_constant or zp_form == "float":
        return False
    return not (bits == 2 and block_size in (16, 256))


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """Integers 0 .. 2^bits - 1 along the last axis (a multiple of 8 / bits long) packed into bytes,
    the lowest bits the first value."""
    per = 8 // bits
    q = np.asarray(q, dtype=np.uint8).reshape(*q.shape[:-1], q.shape[-1] // per, per)
    out = np.zeros(q.shape[:-1], np.uint8)
    for i in range(per):
        out |= (q[..., i] << (bits * i)).astype(np.uint8)
    return out


def unpack_bits(b: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` values along the last axis of bytes packed by pack_bits (as int64)."""
    per = 8 // bits
    b = np.asarray(b, dtype=np.uint8)
    vals = np.stack([(b >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], axis=-1)
    return vals.reshape(*b.shape[:-1], b.shape[-1] * per)[..., :count].astype(np.int64)


def zero_points(zp, n: int, kb: int, bits: int) -> np.ndarray:
    """Every (column, block)'s zero point as float64 (N, k_blocks): packed uint8, unpacked float, or
    None (2^(bits - 1))."""
    if zp is None:
        return np.full((n, kb), float(1 << (bits - 1)))
    zp = np.asarray(zp)
    if zp.dtype == np.uint8:
        return unpack_bits(zp.reshape(n, -1), bits, kb).astype(np.float64)
    return zp.astype(np.float64).reshape(n, kb)


def dequantize(b: np.ndarray, scales, zp, *, k: int, bits: int, block_size: int) -> np.ndarray:
    """The (K, N) float64 weight. (g_idx, which reassigns k values to blocks, is not modelled: a
    first attempt did not match ORT's output.)"""
    n, kb = b.shape[0], k_blocks(k, block_size)
    q = unpack_bits(b.reshape(n, -1), bits, kb * block_size)[:, :k].astype(np.float64)  # (N, K)
    s = np.asarray(scales).astype(np.float64).reshape(n, kb)
    z = zero_points(zp, n, kb, bits)
    blk = np.arange(k) // block_size
    return ((q - z[:, blk]) * s[:, blk]).T


def quantize_a_int8(a: np.ndarray, block_size: int, *, half_even: bool = True) -> np.ndarray:
    """A (..., K) as accuracy_level 4 sees it: per row and block of block_size along K, float32
    scale = max|a| / 127 and q = round-half-even(a * (127 / max|a|)) saturated to int8; returns
    q * scale in float64 (the values the int8 dot products stand for). half_even=False rounds
    halves away from zero instead (a mutant: C's roundf)."""
    a32 = np.asarray(a).astype(np.float32)
    k = a32.shape[-1]
    out = np.empty(a32.shape, np.float64)
    for p0 in range(0, k, block_size):
        blk = a32[..., p0:p0 + block_size]
        mx = np.max(np.abs(blk), axis=-1, keepdims=True).astype(np.float32)
        # non-finite on purpose where A is (NaN, inf) or max|a| is tiny (127 / max overflows)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = (mx / np.float32(127.0)).astype(np.float32)
            inv = np.where(mx != 0, np.float32(127.0) / mx, np.float32(0.0)).astype(np.float32)
        with np.errstate(invalid="ignore"):
            v = (blk * inv).astype(np.float32)
        # a NaN product quantizes to 0 (ORT's AVX-512 conversion truncates it to 0, and our kernels
        # do): 0 x inf where max|a| is so small (< 127 / FLT_MAX) that 127 / max overflows. A NaN or
        # infinite a makes the block's scale NaN or inf, so its row is NaN either way.
        v = np.where(np.isnan(v), np.float32(0.0), v)
        q = np.clip(np.rint(v) if half_even else np.sign(v) * np.floor(np.abs(v) + 0.5), -128, 127)
        with np.errstate(invalid="ignore"):  # 0 x an infinite scale: NaN, as the row should be
            out[..., p0:p0 + block_size] = q.astype(np.float64) * scale.astype(np.float64)
    return out


def reference(a, b, scales, zp=None, bias=None, *, k: int, bits: int, block_size: int) -> np.ndarray:
    """Y = A @ dequantize(B) + bias in float64 (A's leading dims kept)."""
    w = dequantize(b, scales, zp, k=k, bits=bits, block_size=block_size)
    y = np.asarray(a).astype(np.float64) @ w
    return y + np.asarray(bias).astype(np.float64) if bias is not None else y


def reference_int8_a(a, b, scales, zp=None, bias=None, *, k: int, bits: int, block_size: int,
                     half_even: bool = True) -> np.ndarray:
    """`reference` over A quantized as accuracy_level 4 quantizes it (quantize_a_int8)."""
    return reference(quantize_a_int8(a, block_size, half_even=half_even), b, scales, zp, bias, k=k, bits=bits,
                     block_size=block_size)


def random_weights(rng: np.random.Generator, n: int, k: int, *, bits: int, block_size: int,
                   packed_zp: bool = True, scale_dtype=np.float32):
    """(B, scales, zero_points) of a random (K, N) weight: uniform q and zero points, scales in
    [0.5, 1.5) / 2^bits (so the dequantized values are O(1)); a K tail past the last block's real
    values is zero in B, as ORT's quantizer writes it. zero_points: packed uint8, or unpacked in
    scale_dtype."""
    kb = k_blocks(k, block_size)
    q = rng.integers(0, 1 << bits, size=(n, kb * block_size), dtype=np.int64)
    q[:, k:] = 0
    b = pack_bits(q, bits).reshape(n, kb, block_size * bits // 8)
    scales = (rng.uniform(0.5, 1.5, size=(n, kb)) / (1 << bits)).astype(scale_dtype)
    zq = rng.integers(0, 1 << bits, size=(n, kb), dtype=np.int64)
    if packed_zp:
        per = 8 // bits
        zpad = np.zeros((n, -(-kb // per) * per), np.int64)
        zpad[:, :kb] = zq
        return b, scales, pack_bits(zpad, bits)
    return b, scales, zq.astype(scale_dtype)
