"""Thin wrappers: numpy arrays in, a validated KernelCall out. Every shape, dtype, contiguity and
range check a kernel needs happens here, before C is called (C checks again and returns a
status rather than crash)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import (
    check_array,
    check_no_overlap,
    check_threads,
    same_buffer,
    same_dtype,
    set_exec,
    shape_is,
)
from perfbench.kernels_ffi.library import Library


@dataclass
class KernelCall:
    """One prepared kernel invocation: the args struct and everything it points to."""

    lib: Library
    kernel: str
    args: object
    keep: list = field(default_factory=list)  # arrays the struct points into

    def run(self) -> None:
        self.lib.call(self.kernel, self.args)

    def time_warm(self, iters: int) -> int:
        return self.lib.time_warm(self.kernel, self.args, iters)

    def time_cold(self, calls: int, evict) -> list[int]:
        return self.lib.time_cold(self.kernel, self.args, calls, evict)


def noop(lib: Library, threads: int = 1) -> KernelCall:
    args = lib.ffi.new("pb_noop_args*")
    set_exec(args, check_threads(threads, "noop"))
    return KernelCall(lib, "noop", args)


def softmax(lib: Library, x: np.ndarray, y: np.ndarray, threads: int, device: str = "cpu") -> KernelCall:
    """Softmax over the last axis of x into y (same shape and dtype; y may be x)."""
    k = "softmax"
    check_array(x, "x", k)
    check_array(y, "y", k, writeable=True)
    dt = dtypes.of_array(x)
    if y.dtype != x.dtype or y.shape != x.shape:
        raise UsageError(f"{k}: y must match x (x {x.dtype}{x.shape}, y {y.dtype}{y.shape})")
    if x.ndim < 1:
        raise UsageError(f"{k}: x must have at least one axis")
    check_no_overlap(k, {"y": y}, {"x": x}, in_place=[("y", "x")])
    cols = x.shape[-1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64)) if x.ndim > 1 else 1
    args = lib.ffi.new("pb_softmax_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.rows, args.cols = rows, cols
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    return KernelCall(lib, k, args, [x, y])


def rotary_embedding(lib: Library, x: np.ndarray, position_ids: np.ndarray, cos_cache: np.ndarray,
                     sin_cache: np.ndarray, out: np.ndarray, *, interleaved: bool, num_heads: int | None = None,
                     threads: int = 1, device: str = "cpu") -> KernelCall:
    """com.microsoft RotaryEmbedding. x: (B, S, N*H) with num_heads given, or (B, N, S, H)."""
    k = "rotary_embedding"
    for name, a in (("input", x), ("position_ids", position_ids), ("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        check_array(a, name, k)
    check_array(out, "output", k, writeable=True)
    dt = dtypes.of_array(x)
    for name, a in (("cos_cache", cos_cache), ("sin_cache", sin_cache), ("output", out)):
        if a.dtype != x.dtype:
            raise UsageError(f"{k}: {name} dtype {a.dtype} differs from input dtype {x.dtype}")
    if out.shape != x.shape:
        raise UsageError(f"{k}: output shape {out.shape} differs from input shape {x.shape}")
    if num_heads is not None and (isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer))):
        raise UsageError(f"{k}: num_heads must be an integer, got {num_heads!r}")
    if x.ndim == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise UsageError(f"{k}: 3-D input (B, S, N*H) needs num_heads dividing {x.shape[2]}, got {num_heads}")
        b, s, n, h, layout = x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads, 0
    elif x.ndim == 4:
        b, n, s, h = x.shape
        layout = 1
    else:
        raise UsageError(f"{k}: input must be (B, S, N*H) or (B, N, S, H), got shape {x.shape}")
    if h % 2:
        raise UsageError(f"{k}: head size {h} must be even")
    if position_ids.dtype != np.int64 or position_ids.shape != (b, s):
        raise UsageError(f"{k}: position_ids must be int64 of shape ({b}, {s}), got {position_ids.dtype}{position_ids.shape}")
    if cos_cache.ndim != 2 or cos_cache.shape[1] != h // 2 or sin_cache.shape != cos_cache.shape:
        raise UsageError(f"{k}: cos_cache/sin_cache must be (max_pos, {h // 2}), got {cos_cache.shape}/{sin_cache.shape}")
    max_pos = cos_cache.shape[0]
    if position_ids.size and (position_ids.min() < 0 or position_ids.max() >= max_pos):
        raise UsageError(f"{k}: position_ids must lie in [0, {max_pos}), got [{position_ids.min()}, {position_ids.max()}]")
    check_no_overlap(k, {"output": out}, {"input": x, "position_ids": position_ids, "cos_cache": cos_cache,
                                          "sin_cache": sin_cache}, in_place=[("output", "input")])
    args = lib.ffi.new("pb_rotary_embedding_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.layout = layout
    args.interleaved = 1 if interleaved else 0
    args.batch, args.seq, args.num_heads, args.head_size, args.max_pos = b, s, n, h, max_pos
    args.input, args.output = lib.ptr(x), lib.ptr(out)
    args.position_ids = lib.ffi.cast("const int64_t *", position_ids.ctypes.data)
    args.cos_cache, args.sin_cache = lib.ptr(cos_cache), lib.ptr(sin_cache)
    return KernelCall(lib, k, args, [x, position_ids, cos_cache, sin_cache, out])


def cast(lib: Library, src: np.ndarray, dst: np.ndarray, threads: int = 1) -> KernelCall:
    """Element type conversion to or from float32 (round to nearest even)."""
    k = "cast"
    check_array(src, "src", k)
    check_array(dst, "dst", k, writeable=True)
    s, d = dtypes.of_array(src), dtypes.of_array(dst)
    if src.size != dst.size:
        raise UsageError(f"{k}: src has {src.size} elements, dst {dst.size}")
    if dtypes.F32 not in (s, d):
        raise UsageError(f"{k}: one side must be float32, got {s.name} -> {d.name}")
    check_no_overlap(k, {"dst": dst}, {"src": src}, in_place=[("dst", "src")])
    args = lib.ffi.new("pb_cast_args*")
    set_exec(args, check_threads(threads, k))
    args.src_dtype, args.dst_dtype, args.n = s.onnx, d.onnx, src.size
    args.src, args.dst = lib.ptr(src), lib.ptr(dst)
    return KernelCall(lib, k, args, [src, dst])


def peak(lib: Library, kind: str, iters: int, threads: int) -> tuple[KernelCall, object, object]:
    """peak_fma_f32 or peak_bf16_dot; returns (call, flops_out, method_out)."""
    if kind not in ("peak_fma_f32", "peak_bf16_dot"):
        raise UsageError(f"peak: kind={kind!r}, expected peak_fma_f32 or peak_bf16_dot")
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 1:
        raise UsageError(f"{kind}: iters={iters!r}, expected a positive integer")
    args = lib.ffi.new("pb_peak_args*")
    set_exec(args, check_threads(threads, kind))
    flops = lib.ffi.new("int64_t*")
    method = lib.ffi.new("const char**")
    sink = lib.ffi.new("float[]", threads)
    args.iters, args.flops_out, args.method_out, args.sink = iters, flops, method, sink
    return KernelCall(lib, kind, args, [flops, method, sink]), flops, method


def read_bandwidth(lib: Library, buf: np.ndarray, threads: int, passes: int = 1, copy: bool = False) -> KernelCall:
    """Reads buf (a contiguous float32 array of at least one element) `passes` times over with
    `threads` threads; copy=True copies its first half onto its second half instead (buf is
    written; at least 2 elements per thread)."""
    k = "read_bandwidth"
    check_array(buf, "buf", k, writeable=bool(copy))
    if copy and buf.size < 2 * threads:
        raise UsageError(f"{k}: copy needs at least 2 elements per thread, got {buf.size} for {threads}")
    if buf.dtype != np.float32 or buf.size < 1:
        raise UsageError(f"{k}: buf must be a non-empty float32 array, got {buf.dtype}{buf.shape}")
    if isinstance(passes, bool) or not isinstance(passes, (int, np.integer)) or passes < 1:
        raise UsageError(f"{k}: passes={passes!r}, expected a positive integer")
    args = lib.ffi.new("pb_read_args*")
    set_exec(args, check_threads(threads, "read_bandwidth"))
    sink = lib.ffi.new("float[]", threads)
    args.buf, args.bytes, args.passes, args.copy, args.sink = lib.ptr(buf), buf.nbytes, int(passes), int(bool(copy)), sink
    return KernelCall(lib, "read_bandwidth", args, [buf, sink])


def group_query_attention(lib: Library, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                          past_key: np.ndarray | None, past_value: np.ndarray | None, seqlens_k: np.ndarray,
                          total_sequence_length: int, output: np.ndarray, present_key: np.ndarray,
                          present_value: np.ndarray, *, num_heads: int, kv_num_heads: int, scale: float = 0.0,
                          cos_cache: np.ndarray | None = None, sin_cache: np.ndarray | None = None,
                          do_rotary: int = 0, rotary_interleaved: int = 0, softcap: float = 0.0,
                          local_window_size: int = -1, smooth_softmax: int = -1, threads: int = 1,
                          device: str = "cpu") -> KernelCall:
    """com.microsoft GroupQueryAttention. query (B, S, N*H), key/value (B, S, Nkv*H), past and
    present caches (B, Nkv, capacity, H); present_key IS past_key (the same array) for the shared
    buffer mode. Attribute values C does not implement (softcap, local_window_size,
    smooth_softmax=1) are passed through: C declines them with an 'unsupported' status."""
    k = "group_query_attention"
    for name, a in (("query", query), ("key", key), ("value", value), ("seqlens_k", seqlens_k)):
        check_array(a, name, k)
    for name, a in (("output", output), ("present_key", present_key), ("present_value", present_value)):
        check_array(a, name, k, writeable=True)
    dt = dtypes.of_array(query)
    same_dtype(k, "query", query, key=key, value=value, past_key=past_key, past_value=past_value, output=output,
                present_key=present_key, present_value=present_value, cos_cache=cos_cache, sin_cache=sin_cache)
    for name, v in (("num_heads", num_heads), ("kv_num_heads", kv_num_heads)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"{k}: {name} must be a positive integer, got {v!r}")
    if num_heads % kv_num_heads:
        raise UsageError(f"{k}: num_heads={num_heads} is not a multiple of kv_num_heads={kv_num_heads}")
    if query.ndim != 3 or query.shape[2] % num_heads:
        raise UsageError(f"{k}: query must be (B, S, num_heads*H), got {query.shape} with num_heads={num_heads}")
    b, s, h = query.shape[0], query.shape[1], query.shape[2] // num_heads
    shape_is(k, "key", key, (b, s, kv_num_heads * h))
    shape_is(k, "value", value, (b, s, kv_num_heads * h))
    shape_is(k, "output", output, query.shape)
    if present_key.ndim != 4:
        raise UsageError(f"{k}: present_key must be (B, Nkv, capacity, H), got {present_key.shape}")
    cap = present_key.shape[2]
    shape_is(k, "present_key", present_key, (b, kv_num_heads, cap, h))
    shape_is(k, "present_value", present_value, (b, kv_num_heads, cap, h))
    if (past_key is None) != (past_value is None):
        raise UsageError(f"{k}: give both past_key and past_value or neither")
    past_cap = 0
    if past_key is not None:
        check_array(past_key, "past_key", k)
        check_array(past_value, "past_value", k)
        if past_key.ndim != 4:
            raise UsageError(f"{k}: past_key must be (B, Nkv, capacity, H), got {past_key.shape}")
        past_cap = past_key.shape[2]
        shape_is(k, "past_key", past_key, (b, kv_num_heads, past_cap, h))
        shape_is(k, "past_value", past_value, (b, kv_num_heads, past_cap, h))
    if seqlens_k.dtype != np.int32 or seqlens_k.shape != (b,):
        raise UsageError(f"{k}: seqlens_k must be int32 of shape ({b},), got {seqlens_k.dtype}{seqlens_k.shape}")
    if isinstance(total_sequence_length, bool) or not isinstance(total_sequence_length, (int, np.integer)) \
            or not 1 <= total_sequence_length < 2**31:
        raise UsageError(f"{k}: total_sequence_length must be a positive int32, got {total_sequence_length!r}")
    first = s == total_sequence_length
    for i, v in enumerate(seqlens_k.tolist()):
        tot = v + 1
        if not 1 <= tot <= min(cap, total_sequence_length):
            raise UsageError(f"{k}: seqlens_k[{i}]={v}: need 0 <= seqlens_k < min(total_sequence_length="
                             f"{total_sequence_length}, present capacity {cap})")
        if not first and not (s <= tot and tot - s <= past_cap):
            raise UsageError(f"{k}: seqlens_k[{i}]={v}: {tot} tokens need seq={s} <= tokens and "
                             f"tokens - seq <= past capacity {past_cap}")
    rot_pos = rot_half = 0
    if do_rotary not in (0, 1) or rotary_interleaved not in (0, 1):
        raise UsageError(f"{k}: do_rotary and rotary_interleaved must be 0 or 1")
    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise UsageError(f"{k}: do_rotary=1 needs cos_cache and sin_cache")
        check_array(cos_cache, "cos_cache", k)
        check_array(sin_cache, "sin_cache", k)
        if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape or not 1 <= 2 * cos_cache.shape[1] <= h:
            raise UsageError(f"{k}: cos/sin caches must be (max_pos, rotary_dim/2) with rotary_dim <= {h}, "
                             f"got {cos_cache.shape}/{sin_cache.shape}")
        rot_pos, rot_half = cos_cache.shape
        last = s - 1 if first else int(seqlens_k.max())
        if last >= rot_pos:
            raise UsageError(f"{k}: position {last} is outside the cos/sin cache rows [0, {rot_pos})")
    for name, v in (("scale", scale), ("softcap", softcap)):
        if not np.isfinite(v):
            raise UsageError(f"{k}: {name}={v!r} must be finite")
    # the shared-buffer mode: present_key IS past_key and present_value IS past_value (the same
    # buffer, any view of it); any other overlap, partial ones included, is refused
    check_no_overlap(k, {"output": output, "present_key": present_key, "present_value": present_value},
                     {"query": query, "key": key, "value": value, "seqlens_k": seqlens_k, "past_key": past_key,
                      "past_value": past_value, "cos_cache": cos_cache if do_rotary else None,
                      "sin_cache": sin_cache if do_rotary else None},
                     in_place=[("present_key", "past_key"), ("present_value", "past_value")])
    if past_key is not None and same_buffer(present_key, past_key) != same_buffer(present_value, past_value):
        raise UsageError(f"{k}: share both caches (present is past) or neither")
    args = lib.ffi.new("pb_group_query_attention_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.do_rotary, args.rotary_interleaved = int(do_rotary), int(rotary_interleaved)
    args.local_window_size, args.smooth_softmax = int(local_window_size), int(smooth_softmax)
    args.total_sequence_length = int(total_sequence_length)
    args.scale, args.softcap = float(scale), float(softcap)
    args.batch, args.seq, args.num_heads, args.kv_num_heads, args.head_size = b, s, num_heads, kv_num_heads, h
    args.past_capacity, args.present_capacity = past_cap, cap
    args.rotary_max_pos, args.rotary_half = rot_pos, rot_half
    args.query, args.key, args.value = lib.ptr(query), lib.ptr(key), lib.ptr(value)
    if past_key is not None:
        args.past_key, args.past_value = lib.ptr(past_key), lib.ptr(past_value)
    args.seqlens_k = lib.ffi.cast("const int32_t *", seqlens_k.ctypes.data)
    if do_rotary:
        args.cos_cache, args.sin_cache = lib.ptr(cos_cache), lib.ptr(sin_cache)
    args.output, args.present_key, args.present_value = lib.ptr(output), lib.ptr(present_key), lib.ptr(present_value)
    keep = [a for a in (query, key, value, past_key, past_value, seqlens_k, cos_cache, sin_cache, output,
                        present_key, present_value) if a is not None]
    return KernelCall(lib, k, args, keep)


def multi_head_attention(lib: Library, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                         output: np.ndarray, *, num_heads: int, key_padding_mask: np.ndarray | None = None,
                         past_key: np.ndarray | None = None, past_value: np.ndarray | None = None,
                         present_key: np.ndarray | None = None, present_value: np.ndarray | None = None,
                         scale: float = 0.0, mask_filter_value: float = -10000.0, unidirectional: int = 0,
                         threads: int = 1, device: str = "cpu") -> KernelCall:
    """com.microsoft MultiHeadAttention: query (B, Sq, N*H), key/value (B, Skv, N*H); past
    (B, N, P, H) with present = past ++ new (B, N, P + Skv, H); key_padding_mask int32
    (B, P + Skv), > 0 = keep."""
    k = "multi_head_attention"
    for name, a in (("query", query), ("key", key), ("value", value)):
        check_array(a, name, k)
    check_array(output, "output", k, writeable=True)
    dt = dtypes.of_array(query)
    same_dtype(k, "query", query, key=key, value=value, output=output, past_key=past_key, past_value=past_value,
                present_key=present_key, present_value=present_value)
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise UsageError(f"{k}: num_heads must be a positive integer, got {num_heads!r}")
    if query.ndim != 3 or query.shape[2] % num_heads:
        raise UsageError(f"{k}: query must be (B, S, num_heads*H), got {query.shape} with num_heads={num_heads}")
    b, sq, d = query.shape
    h = d // num_heads
    if key.ndim != 3 or key.shape[0] != b or key.shape[2] != d:
        raise UsageError(f"{k}: key must be (B={b}, kv_seq, {d}), got {key.shape}")
    skv = key.shape[1]
    shape_is(k, "value", value, key.shape)
    shape_is(k, "output", output, query.shape)
    if (past_key is None) != (past_value is None) or (present_key is None) != (present_value is None):
        raise UsageError(f"{k}: give past_key with past_value and present_key with present_value")
    past = 0
    if past_key is not None:
        if present_key is None:
            raise UsageError(f"{k}: past_key needs present_key/present_value (ORT's output is wrong without them)")
        check_array(past_key, "past_key", k)
        check_array(past_value, "past_value", k)
        if past_key.ndim != 4 or past_key.shape[:2] != (b, num_heads) or past_key.shape[3] != h:
            raise UsageError(f"{k}: past_key must be (B, N, P, H) = ({b}, {num_heads}, P, {h}), got {past_key.shape}")
        past = past_key.shape[2]
        shape_is(k, "past_value", past_value, past_key.shape)
    total = past + skv
    if present_key is not None:
        check_array(present_key, "present_key", k, writeable=True)
        check_array(present_value, "present_value", k, writeable=True)
        shape_is(k, "present_key", present_key, (b, num_heads, total, h))
        shape_is(k, "present_value", present_value, (b, num_heads, total, h))
    if key_padding_mask is not None:
        check_array(key_padding_mask, "key_padding_mask", k)
        if key_padding_mask.dtype != np.int32 or key_padding_mask.shape != (b, total):
            raise UsageError(f"{k}: key_padding_mask must be int32 ({b}, {total}), got "
                             f"{key_padding_mask.dtype}{key_padding_mask.shape}")
    if unidirectional not in (0, 1):
        raise UsageError(f"{k}: unidirectional must be 0 or 1, got {unidirectional!r}")
    if unidirectional and sq > 1 and sq != skv:
        pass  # C declines it with an 'unsupported' status (a no-kernel cell, not a usage error)
    elif unidirectional and past + sq > total:
        raise UsageError(f"{k}: unidirectional needs past + queries <= keys, got {past} + {sq} > {total}")
    for name, v in (("scale", scale), ("mask_filter_value", mask_filter_value)):
        if not np.isfinite(v):
            raise UsageError(f"{k}: {name}={v!r} must be finite")
    # present is past ++ new, written while past is read: never in place
    check_no_overlap(k, {"output": output, "present_key": present_key, "present_value": present_value},
                     {"query": query, "key": key, "value": value, "key_padding_mask": key_padding_mask,
                      "past_key": past_key, "past_value": past_value})
    args = lib.ffi.new("pb_multi_head_attention_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.unidirectional = int(unidirectional)
    args.scale, args.mask_filter_value = float(scale), float(mask_filter_value)
    args.batch, args.q_seq, args.kv_seq, args.num_heads, args.head_size, args.past_seq = b, sq, skv, num_heads, h, past
    args.query, args.key, args.value, args.output = lib.ptr(query), lib.ptr(key), lib.ptr(value), lib.ptr(output)
    if key_padding_mask is not None:
        args.key_padding_mask = lib.ffi.cast("const int32_t *", key_padding_mask.ctypes.data)
    if past_key is not None:
        args.past_key, args.past_value = lib.ptr(past_key), lib.ptr(past_value)
    if present_key is not None:
        args.present_key, args.present_value = lib.ptr(present_key), lib.ptr(present_value)
    keep = [a for a in (query, key, value, output, key_padding_mask, past_key, past_value, present_key,
                        present_value) if a is not None]
    return KernelCall(lib, k, args, keep)
