"""Wrappers of the elementwise group (Add, Mul, Sub, the Gelu family, the Sigmoid family, ReduceMean): numpy arrays in, a
validated KernelCall out. Every check a kernel needs happens here before C is called (C checks
again and returns a status rather than crash)."""

from __future__ import annotations

import numpy as np

from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import (
    check_array,
    check_threads,
    float32_arg,
    float_dtype,
    in_place_or_disjoint,
    same_dtype,
    set_exec,
)
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall

MAX_RANK = 8  # pb_binary_args' shape arrays
GELU_MODES = {"none": 0, "tanh": 1}  # PB_GELU_ERF, PB_GELU_TANH
SIGMOID_PLAIN, SIGMOID_MUL = 0, 1  # PB_SIGMOID_PLAIN, PB_SIGMOID_MUL






def _binary(kernel: str, lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int,
            device: str) -> KernelCall:
    check_array(a, "a", kernel)
    check_array(b, "b", kernel)
    check_array(y, "y", kernel, writeable=True)
    dt = float_dtype(a, "a", kernel)
    same_dtype(kernel, "a", a, b=b, y=y)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise UsageError(f"{kernel}: shapes {a.shape} and {b.shape} do not broadcast") from None
    if tuple(y.shape) != tuple(shape):
        raise UsageError(f"{kernel}: y must have the broadcast shape {tuple(shape)}, got {tuple(y.shape)}")
    rank = len(shape)
    if rank > MAX_RANK:
        raise UsageError(f"{kernel}: rank {rank} > {MAX_RANK} is not supported")
    if y.size and (np.shares_memory(y, a) and not (y.shape == a.shape and y.ctypes.data == a.ctypes.data)
                   or np.shares_memory(y, b) and not (y.shape == b.shape and y.ctypes.data == b.ctypes.data)):
        raise UsageError(f"{kernel}: y overlaps an input (in place needs y to be that input, of y's shape)")
    args = lib.ffi.new("pb_binary_args*")
    set_exec(args, check_threads(threads, kernel), device, kernel)
    args.dtype = dt.onnx
    args.rank = rank
    for i, n in enumerate(shape):
        args.y_shape[i] = n
    for arr, field in ((a, args.a_shape), (b, args.b_shape)):
        padded = (1,) * (rank - arr.ndim) + tuple(arr.shape)
        for i, n in enumerate(padded):
            field[i] = n
    args.a, args.b, args.y = lib.ptr(a), lib.ptr(b), lib.ptr(y)
    return KernelCall(lib, kernel, args, [a, b, y])


BINARY_KERNELS = ("add", "mul", "sub")  # the PB_BINARY lines of native/cpu/kernels.def


def binary(kernel: str, lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1,
           device: str = "cpu") -> KernelCall:
    """y = a (op) b with numpy broadcasting for one of BINARY_KERNELS (y of the broadcast shape; y
    may be a or b in place)."""
    if kernel not in BINARY_KERNELS:
        raise UsageError(f"binary: kernel {kernel!r} is not one of {', '.join(BINARY_KERNELS)}")
    return _binary(kernel, lib, a, b, y, threads, device)


def add(lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1, device: str = "cpu") -> KernelCall:
    """y = a + b with numpy broadcasting (y of the broadcast shape; y may be a or b in place)."""
    return _binary("add", lib, a, b, y, threads, device)


def mul(lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1, device: str = "cpu") -> KernelCall:
    """y = a * b with numpy broadcasting (y of the broadcast shape; y may be a or b in place)."""
    return _binary("mul", lib, a, b, y, threads, device)


def sub(lib: Library, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1, device: str = "cpu") -> KernelCall:
    """y = a - b with numpy broadcasting (y of the broadcast shape; y may be a or b in place)."""
    return _binary("sub", lib, a, b, y, threads, device)


def gelu(lib: Library, x: np.ndarray, y: np.ndarray, *, approximate: str = "none", bias: np.ndarray | None = None,
         threads: int = 1, device: str = "cpu") -> KernelCall:
    """Gelu of x (+ bias over the last axis) into y: approximate "none" (erf: Gelu, BiasGelu) or
    "tanh" (Gelu tanh, FastGelu). y has x's shape and dtype (y may be x)."""
    k = "gelu"
    check_array(x, "x", k)
    check_array(y, "y", k, writeable=True)
    dt = float_dtype(x, "x", k)
    same_dtype(k, "x", x, y=y, bias=bias)
    if approximate not in GELU_MODES:
        raise UsageError(f"{k}: approximate={approximate!r}, expected 'none' or 'tanh'")
    if y.shape != x.shape:
        raise UsageError(f"{k}: y shape {y.shape} differs from x shape {x.shape}")
    cols = x.shape[-1] if x.ndim else 1
    rows = x.size // cols if cols else 0
    if bias is not None:
        check_array(bias, "bias", k)
        if bias.ndim != 1 or bias.shape[0] != cols:
            raise UsageError(f"{k}: bias must be 1-D of x's last axis ({cols},), got {bias.shape}")
        if np.shares_memory(bias, y):
            raise UsageError(f"{k}: bias overlaps y")
    in_place_or_disjoint(k, x, y)
    args = lib.ffi.new("pb_gelu_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.approximate = GELU_MODES[approximate]
    args.rows, args.cols = rows, cols
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    if bias is not None:
        args.bias = lib.ptr(bias)
    return KernelCall(lib, k, args, [a for a in (x, bias, y) if a is not None])


def sigmoid(lib: Library, x: np.ndarray, y: np.ndarray, *, alpha: float | None = None, threads: int = 1,
            device: str = "cpu") -> KernelCall:
    """alpha None: y = sigmoid(x) (Sigmoid); else y = x * sigmoid(alpha * x) (QuickGelu; SiLU at
    alpha 1). y has x's shape and dtype (y may be x); alpha must be a finite number."""
    k = "sigmoid"
    check_array(x, "x", k)
    check_array(y, "y", k, writeable=True)
    dt = float_dtype(x, "x", k)
    same_dtype(k, "x", x, y=y)
    if alpha is not None:
        float32_arg(k, "alpha", alpha)
    if y.shape != x.shape:
        raise UsageError(f"{k}: y shape {y.shape} differs from x shape {x.shape}")
    in_place_or_disjoint(k, x, y)
    args = lib.ffi.new("pb_sigmoid_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.mode = SIGMOID_PLAIN if alpha is None else SIGMOID_MUL
    args.alpha = 0.0 if alpha is None else float(alpha)
    args.n = x.size
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    return KernelCall(lib, k, args, [x, y])


def normalize_axes(rank: int, axes) -> list[int]:
    """`axes` (ints, negative allowed; None or empty = every axis) as sorted axes in [0, rank)."""
    if axes is None or len(axes) == 0:
        return list(range(rank))
    norm = []
    for ax in axes:
        if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)) or not -rank <= ax < rank:
            raise UsageError(f"reduce_mean: axis {ax!r} is out of range for rank {rank}")
        norm.append(int(ax) % rank)
    if len(set(norm)) != len(norm):
        raise UsageError(f"reduce_mean: repeated axes {list(axes)}")
    return sorted(norm)


def reduce_span(shape: tuple, axes) -> tuple[int, int, int]:
    """(outer, reduce, inner) of reducing `shape` over `axes` (ints, negative allowed; empty or
    None = every axis), which must be adjacent once sorted."""
    norm = normalize_axes(len(shape), axes)
    if not norm:  # rank 0: the mean of one element
        return 1, 1, 1
    if norm != list(range(norm[0], norm[-1] + 1)):
        raise UsageError(f"reduce_mean: axes {norm} are not adjacent (only one run of adjacent axes is implemented)")
    lo, hi = norm[0], norm[-1] + 1
    return (int(np.prod(shape[:lo], dtype=np.int64)), int(np.prod(shape[lo:hi], dtype=np.int64)),
            int(np.prod(shape[hi:], dtype=np.int64)))


def reduce_mean(lib: Library, x: np.ndarray, y: np.ndarray, *, axes=None, threads: int = 1,
                device: str = "cpu") -> KernelCall:
    """Mean of x over `axes` (one run of adjacent axes; None or empty = all) into y, whose shape is
    x's with those axes removed (keepdims=0) or set to 1 (keepdims=1)."""
    k = "reduce_mean"
    check_array(x, "x", k)
    check_array(y, "y", k, writeable=True)
    dt = float_dtype(x, "x", k)
    same_dtype(k, "x", x, y=y)
    outer, reduce, inner = reduce_span(tuple(x.shape), axes)
    red = set(normalize_axes(x.ndim, axes))
    kept = tuple(1 if i in red else n for i, n in enumerate(x.shape))
    dropped = tuple(n for i, n in enumerate(x.shape) if i not in red)
    if tuple(y.shape) not in (kept, dropped):
        raise UsageError(f"{k}: y must have shape {kept} (keepdims) or {dropped}, got {tuple(y.shape)}")
    if np.shares_memory(x, y):
        raise UsageError(f"{k}: x and y overlap")
    args = lib.ffi.new("pb_reduce_mean_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype = dt.onnx
    args.outer, args.reduce, args.inner = outer, reduce, inner
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    return KernelCall(lib, k, args, [x, y])
