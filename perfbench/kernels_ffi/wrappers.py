"""Thin wrappers: numpy arrays in, a validated KernelCall out. Every shape, dtype, contiguity and
range check a kernel needs happens here, before C is called (C checks again and returns a
status rather than crash)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.library import Library

MAX_THREADS = 256
DEVICES = {"cpu": 0, "cuda": 1}  # PB_DEVICE_*


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


def _check_array(a, name: str, kernel: str, *, writeable: bool = False) -> None:
    if not isinstance(a, np.ndarray):
        raise UsageError(f"{kernel}: {name} must be a numpy array, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise UsageError(f"{kernel}: {name} must be C-contiguous (use np.ascontiguousarray)")
    if writeable and not a.flags.writeable:
        raise UsageError(f"{kernel}: {name} must be writeable")


def _check_threads(threads: int, kernel: str) -> int:
    if not isinstance(threads, (int, np.integer)) or not 1 <= int(threads) <= MAX_THREADS:
        raise UsageError(f"{kernel}: threads={threads!r}, expected an integer in 1..{MAX_THREADS}")
    return int(threads)


def _check_device(device: str, kernel: str) -> int:
    if device not in DEVICES:
        raise UsageError(f"{kernel}: device={device!r}, expected one of {', '.join(DEVICES)}")
    return DEVICES[device]


def _exec(args, threads: int, device: str = "cpu", kernel: str = "") -> None:
    args.exec.device = _check_device(device, kernel)
    args.exec.num_threads = threads


def noop(lib: Library, threads: int = 1) -> KernelCall:
    args = lib.ffi.new("pb_noop_args*")
    _exec(args, _check_threads(threads, "noop"))
    return KernelCall(lib, "noop", args)


def softmax(lib: Library, x: np.ndarray, y: np.ndarray, threads: int, device: str = "cpu") -> KernelCall:
    """Softmax over the last axis of x into y (same shape and dtype; y may be x)."""
    k = "softmax"
    _check_array(x, "x", k)
    _check_array(y, "y", k, writeable=True)
    dt = dtypes.of_array(x)
    if y.dtype != x.dtype or y.shape != x.shape:
        raise UsageError(f"{k}: y must match x (x {x.dtype}{x.shape}, y {y.dtype}{y.shape})")
    if x.ndim < 1:
        raise UsageError(f"{k}: x must have at least one axis")
    cols = x.shape[-1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64)) if x.ndim > 1 else 1
    args = lib.ffi.new("pb_softmax_args*")
    _exec(args, _check_threads(threads, k), device, k)
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
        _check_array(a, name, k)
    _check_array(out, "output", k, writeable=True)
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
    args = lib.ffi.new("pb_rotary_embedding_args*")
    _exec(args, _check_threads(threads, k), device, k)
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
    _check_array(src, "src", k)
    _check_array(dst, "dst", k, writeable=True)
    s, d = dtypes.of_array(src), dtypes.of_array(dst)
    if src.size != dst.size:
        raise UsageError(f"{k}: src has {src.size} elements, dst {dst.size}")
    if dtypes.F32 not in (s, d):
        raise UsageError(f"{k}: one side must be float32, got {s.name} -> {d.name}")
    args = lib.ffi.new("pb_cast_args*")
    _exec(args, _check_threads(threads, k))
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
    _exec(args, _check_threads(threads, kind))
    flops = lib.ffi.new("int64_t*")
    method = lib.ffi.new("const char**")
    sink = lib.ffi.new("float[]", threads)
    args.iters, args.flops_out, args.method_out, args.sink = iters, flops, method, sink
    return KernelCall(lib, kind, args, [flops, method, sink]), flops, method


def read_bandwidth(lib: Library, buf: np.ndarray, threads: int) -> KernelCall:
    """Reads buf (a contiguous float32 array of at least one element) with `threads` threads."""
    k = "read_bandwidth"
    _check_array(buf, "buf", k)
    if buf.dtype != np.float32 or buf.size < 1:
        raise UsageError(f"{k}: buf must be a non-empty float32 array, got {buf.dtype}{buf.shape}")
    args = lib.ffi.new("pb_read_args*")
    _exec(args, _check_threads(threads, "read_bandwidth"))
    sink = lib.ffi.new("float[]", threads)
    args.buf, args.bytes, args.sink = lib.ptr(buf), buf.nbytes, sink
    return KernelCall(lib, "read_bandwidth", args, [buf, sink])
