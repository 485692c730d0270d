"""Wrappers of the onnx_attn group's kernels (ai.onnx Attention and RotaryEmbedding, opset 23):
numpy arrays in, a validated KernelCall out. Every shape, dtype, contiguity and range check
happens here, before C is called (C checks again and returns a status rather than crash)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import (
    check_array,
    check_int,
    check_no_overlap,
    check_threads,
    same_dtype,
    set_exec,
    shape_is,
)
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall

LAYOUT_BSNH, LAYOUT_BNSH = 0, 1  # PB_LAYOUT_*: 3-D (B, S, N*H) and 4-D (B, N, S, H)
MASK_NONE, MASK_BOOL, MASK_FLOAT = 0, 1, 2  # PB_ONNX_MASK_*








def mask_strides(kernel: str, mask_shape: tuple, b: int, n: int, s: int, total: int) -> tuple:
    """(sb, sh, ss, length) of a C-contiguous attn_mask broadcast to (B, q_num_heads, q_seq,
    total) as ONNX broadcasts it: dimensions right-aligned, a size-1 dimension broadcast
    (stride 0) except the last, whose length may be shorter than total (ONNX pads it with
    False / -inf)."""
    if not 1 <= len(mask_shape) <= 4:
        raise UsageError(f"{kernel}: attn_mask must have 1 to 4 dimensions, got shape {tuple(mask_shape)}")
    shape = (1,) * (4 - len(mask_shape)) + tuple(int(d) for d in mask_shape)
    length = shape[3]
    if not 1 <= length <= total:
        raise UsageError(f"{kernel}: attn_mask's last dimension {length} must be in [1, total_sequence_length={total}]")
    strides, step = [0, 0, 0], length
    for axis in (2, 1, 0):
        want = (b, n, s)[axis]
        if shape[axis] not in (1, want):
            raise UsageError(f"{kernel}: attn_mask shape {tuple(mask_shape)} does not broadcast to "
                             f"({b}, {n}, {s}, {total})")
        strides[axis] = step if shape[axis] > 1 else 0
        step *= shape[axis]
    return strides[0], strides[1], strides[2], length


def onnx_attention(lib: Library, query: np.ndarray, key: np.ndarray, value: np.ndarray, output: np.ndarray, *,
                   q_num_heads: int | None = None, kv_num_heads: int | None = None,
                   attn_mask: np.ndarray | None = None, past_key: np.ndarray | None = None,
                   past_value: np.ndarray | None = None, present_key: np.ndarray | None = None,
                   present_value: np.ndarray | None = None, qk_output: np.ndarray | None = None,
                   is_causal: int = 0, scale: float = 0.0, softcap: float = 0.0, qk_matmul_output_mode: int = 0,
                   threads: int = 1, device: str = "cpu") -> KernelCall:
    """ai.onnx Attention (opset 23). 4-D: query (B, Nq, S, H), key/value (B, Nkv, T, H), output
    (B, Nq, S, H); 3-D: query (B, S, Nq*H), key/value (B, T, Nkv*H) with q_num_heads and
    kv_num_heads, output (B, S, Nq*H). past (B, Nkv, P, H) needs present (B, Nkv, P+T, H);
    attn_mask bool or of the query's dtype, broadcastable to (B, Nq, S, P+T) (the last dimension
    may be shorter); qk_output (B, Nq, S, P+T). scale 0 = 1/sqrt(H)."""
    k = "onnx_attention"
    for name, a in (("query", query), ("key", key), ("value", value)):
        check_array(a, name, k)
    for name, a in (("output", output), ("present_key", present_key), ("present_value", present_value),
                    ("qk_output", qk_output)):
        if a is not None or name == "output":
            check_array(a, name, k, writeable=True)
    for name, a in (("past_key", past_key), ("past_value", past_value), ("attn_mask", attn_mask)):
        if a is not None:
            check_array(a, name, k)
    dt = dtypes.of_array(query)
    same_dtype(k, "query", query, key=key, value=value, output=output, past_key=past_key, past_value=past_value,
                present_key=present_key, present_value=present_value, qk_output=qk_output)
    if query.ndim != key.ndim or query.ndim != value.ndim or query.ndim not in (3, 4):
        raise UsageError(f"{k}: query, key and value must all be 3-D or all 4-D, got {query.shape}, {key.shape}, "
                         f"{value.shape}")
    if query.ndim == 4:
        b, nq, s, h = query.shape
        nkv, t = key.shape[1], key.shape[2]
        shape_is(k, "key", key, (b, nkv, t, h))
        shape_is(k, "value", value, key.shape)
        for name, v, want in (("q_num_heads", q_num_heads, nq), ("kv_num_heads", kv_num_heads, nkv)):
            if v is not None and check_int(k, name, v, 1) != want:
                raise UsageError(f"{k}: {name}={v} contradicts the 4-D shapes ({want})")
        layout = LAYOUT_BNSH
    else:
        nq, nkv = check_int(k, "q_num_heads", q_num_heads, 1), check_int(k, "kv_num_heads", kv_num_heads, 1)
        b, s, d = query.shape
        if d % nq:
            raise UsageError(f"{k}: query hidden size {d} is not a multiple of q_num_heads={nq}")
        h = d // nq
        if key.ndim != 3 or key.shape[0] != b or key.shape[2] != nkv * h:
            raise UsageError(f"{k}: key must be (B={b}, kv_seq, kv_num_heads*H={nkv * h}), got {key.shape}")
        t = key.shape[1]
        shape_is(k, "value", value, key.shape)
        layout = LAYOUT_BSNH
    if min(b, nq, s, h, nkv, t) < 1:
        raise UsageError(f"{k}: every dimension must be >= 1 (query {query.shape}, key {key.shape})")
    if nq % nkv:
        raise UsageError(f"{k}: q_num_heads={nq} is not a multiple of kv_num_heads={nkv}")
    shape_is(k, "output", output, query.shape)
    if (past_key is None) != (past_value is None) or (present_key is None) != (present_value is None):
        raise UsageError(f"{k}: give past_key with past_value and present_key with present_value")
    p = 0
    if past_key is not None:
        if present_key is None:
            raise UsageError(f"{k}: past_key/past_value need present_key/present_value")
        if past_key.ndim != 4:
            raise UsageError(f"{k}: past_key must be (B, Nkv, P, H), got {past_key.shape}")
        p = past_key.shape[2]
        shape_is(k, "past_key", past_key, (b, nkv, p, h))
        shape_is(k, "past_value", past_value, (b, nkv, p, h))
        if p < 1:
            raise UsageError(f"{k}: past_key has no rows (pass None for no past)")
    total = p + t
    if present_key is not None:
        shape_is(k, "present_key", present_key, (b, nkv, total, h))
        shape_is(k, "present_value", present_value, (b, nkv, total, h))
    mask_type, mstr = MASK_NONE, (0, 0, 0, 0)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            mask_type = MASK_BOOL
        elif attn_mask.dtype == query.dtype:
            mask_type = MASK_FLOAT
        else:
            raise UsageError(f"{k}: attn_mask must be bool or {query.dtype}, got {attn_mask.dtype}")
        mstr = mask_strides(k, attn_mask.shape, b, nq, s, total)
    if qk_output is not None:
        shape_is(k, "qk_output", qk_output, (b, nq, s, total))
        if qk_matmul_output_mode not in (0, 1, 2, 3):
            raise UsageError(f"{k}: qk_matmul_output_mode must be 0..3, got {qk_matmul_output_mode!r}")
    if is_causal not in (0, 1):
        raise UsageError(f"{k}: is_causal must be 0 or 1, got {is_causal!r}")
    for name, v in (("scale", scale), ("softcap", softcap)):
        if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool) or not np.isfinite(v):
            raise UsageError(f"{k}: {name}={v!r} must be a finite number")
    if softcap < 0:
        raise UsageError(f"{k}: softcap={softcap} must be >= 0 (0 = off)")
    # no output may overlap an input or another output (present is past ++ new: never in place)
    check_no_overlap(k, {"output": output, "present_key": present_key, "present_value": present_value,
                         "qk_output": qk_output},
                     {"query": query, "key": key, "value": value, "attn_mask": attn_mask, "past_key": past_key,
                      "past_value": past_value})
    args = lib.ffi.new("pb_onnx_attention_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype, args.layout, args.is_causal, args.mask_type = dt.onnx, layout, int(is_causal), mask_type
    args.qk_matmul_output_mode = int(qk_matmul_output_mode) if qk_output is not None else 0
    args.scale, args.softcap = float(scale), float(softcap)
    args.batch, args.q_seq, args.kv_seq, args.past_seq = b, s, t, p
    args.q_num_heads, args.kv_num_heads, args.head_size = nq, nkv, h
    args.mask_sb, args.mask_sh, args.mask_ss, args.mask_len = mstr
    args.query, args.key, args.value, args.output = lib.ptr(query), lib.ptr(key), lib.ptr(value), lib.ptr(output)
    if attn_mask is not None:
        args.attn_mask = lib.ffi.cast("const void *", attn_mask.ctypes.data)
    if past_key is not None:
        args.past_key, args.past_value = lib.ptr(past_key), lib.ptr(past_value)
    if present_key is not None:
        args.present_key, args.present_value = lib.ptr(present_key), lib.ptr(present_value)
    if qk_output is not None:
        args.qk_output = lib.ptr(qk_output)
    keep = [a for a in (query, key, value, output, attn_mask, past_key, past_value, present_key, present_value,
                        qk_output) if a is not None]
    return KernelCall(lib, k, args, keep)


def onnx_rotary_embedding(lib: Library, x: np.ndarray, cos_cache: np.ndarray, sin_cache: np.ndarray,
                          out: np.ndarray, *, position_ids: np.ndarray | None = None, interleaved: int = 0,
                          rotary_embedding_dim: int = 0, num_heads: int | None = None, threads: int = 1,
                          device: str = "cpu") -> KernelCall:
    """ai.onnx RotaryEmbedding (opset 23). x: (B, N, S, H), or (B, S, N*H) with num_heads; the
    first rotary_embedding_dim (0 = H) elements of each head rotate. With position_ids (int64
    (B, S)) the caches are (max_pos, rot/2); without, (B, S, rot/2). out may be x (in place)."""
    k = "onnx_rotary_embedding"
    for name, a in (("input", x), ("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        check_array(a, name, k)
    check_array(out, "output", k, writeable=True)
    dt = dtypes.of_array(x)
    same_dtype(k, "x", x, cos_cache=cos_cache, sin_cache=sin_cache, output=out)
    shape_is(k, "output", out, x.shape)
    if x.ndim == 4:
        b, n, s, h = x.shape
        if num_heads not in (None, 0) and check_int(k, "num_heads", num_heads, 1) != n:
            raise UsageError(f"{k}: num_heads={num_heads} contradicts the 4-D input's {n} heads")
        layout = LAYOUT_BNSH
    elif x.ndim == 3:
        n = check_int(k, "num_heads", num_heads, 1)
        b, s, d = x.shape
        if d % n:
            raise UsageError(f"{k}: hidden size {d} is not a multiple of num_heads={n}")
        h = d // n
        layout = LAYOUT_BSNH
    else:
        raise UsageError(f"{k}: input must be (B, N, S, H) or (B, S, N*H), got shape {x.shape}")
    if min(b, n, s, h) < 1:
        raise UsageError(f"{k}: every dimension must be >= 1, got input {x.shape}")
    rot = check_int(k, "rotary_embedding_dim", rotary_embedding_dim, 0) or h
    if rot % 2 or rot > h:
        raise UsageError(f"{k}: rotary_embedding_dim={rot} must be even and <= head size {h}")
    if interleaved not in (0, 1, True, False):
        raise UsageError(f"{k}: interleaved must be 0 or 1, got {interleaved!r}")
    max_pos = 0
    if position_ids is not None:
        check_array(position_ids, "position_ids", k)
        if position_ids.dtype != np.int64 or position_ids.shape != (b, s):
            raise UsageError(f"{k}: position_ids must be int64 of shape ({b}, {s}), got "
                             f"{position_ids.dtype}{position_ids.shape}")
        if cos_cache.ndim != 2 or cos_cache.shape[1] != rot // 2:
            raise UsageError(f"{k}: with position_ids, cos_cache must be (max_pos, {rot // 2}), got {cos_cache.shape}")
        max_pos = cos_cache.shape[0]
        if max_pos < 1 or position_ids.min() < 0 or position_ids.max() >= max_pos:
            raise UsageError(f"{k}: position_ids must lie in [0, {max_pos}), got "
                             f"[{position_ids.min()}, {position_ids.max()}]")
    else:
        shape_is(k, "cos_cache", cos_cache, (b, s, rot // 2))
    shape_is(k, "sin_cache", sin_cache, cos_cache.shape)
    check_no_overlap(k, {"output": out}, {"input": x, "position_ids": position_ids, "cos_cache": cos_cache,
                                          "sin_cache": sin_cache}, in_place=[("output", "input")])
    args = lib.ffi.new("pb_onnx_rotary_embedding_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype, args.layout, args.interleaved = dt.onnx, layout, int(bool(interleaved))
    args.batch, args.seq, args.num_heads, args.head_size = b, s, n, h
    args.rotary_dim, args.max_pos = rot, max_pos
    args.input, args.output = lib.ptr(x), lib.ptr(out)
    args.cos_cache, args.sin_cache = lib.ptr(cos_cache), lib.ptr(sin_cache)
    if position_ids is not None:
        args.position_ids = lib.ffi.cast("const int64_t *", position_ids.ctypes.data)
    keep = [a for a in (x, position_ids, cos_cache, sin_cache, out) if a is not None]
    return KernelCall(lib, k, args, keep)
