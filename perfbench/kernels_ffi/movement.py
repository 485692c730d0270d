"""Wrappers of the data-movement kernels (suites/data_movement.toml): Transpose, Gather, Concat,
ScatterND, Trilu. numpy arrays in, a validated KernelCall out; every shape, dtype, contiguity,
overlap and index check happens here, before C is called (C checks again and returns a status)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi.checks import check_array, check_int, check_no_overlap, check_threads, same_dtype, set_exec
from perfbench.kernels_ffi.library import Library
from perfbench.kernels_ffi.wrappers import KernelCall

MAX_RANK = 8  # PB_MOVEMENT_MAX_RANK
MAX_INPUTS = 1024
INDEX_TYPES = {np.dtype(np.int64): 7, np.dtype(np.int32): 6}  # PB_INDEX_*: ONNX codes
REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}  # PB_REDUCTION_*


def _axis(kernel: str, axis, rank: int, what: str = "axis") -> int:
    axis = check_int(kernel, what, axis)
    if not -rank <= axis < rank:
        raise UsageError(f"{kernel}: {what}={axis} is outside [-{rank}, {rank}) for rank {rank}")
    return axis % rank


def _check_indices_in_range(kernel: str, indices: np.ndarray, dim: int, what: str) -> None:
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        bad = indices[(indices < -dim) | (indices >= dim)].flat[0]
        raise UsageError(f"{kernel}: {what} holds {int(bad)}, outside [-{dim}, {dim})")


def transpose(lib: Library, x: np.ndarray, y: np.ndarray, perm, threads: int = 1, device: str = "cpu") -> KernelCall:
    """y = x.transpose(perm) (ONNX Transpose), rank 1..8; y a separate array."""
    k = "transpose"
    check_array(x, "x", k)
    check_array(y, "y", k, writeable=True)
    dt = dtypes.of_array(x)
    same_dtype(k, "x", x, y=y)
    if not 1 <= x.ndim <= MAX_RANK:
        raise UsageError(f"{k}: x must have rank 1..{MAX_RANK}, got {x.ndim}")
    perm = [check_int(k, "perm", p) for p in perm]
    if sorted(perm) != list(range(x.ndim)):
        raise UsageError(f"{k}: perm {perm} is not a permutation of 0..{x.ndim - 1}")
    want = tuple(x.shape[p] for p in perm)
    if y.shape != want:
        raise UsageError(f"{k}: y must have shape {want}, got {y.shape}")
    check_no_overlap(k, {"y": y}, {"x": x})  # a transpose cannot run in place
    args = lib.ffi.new("pb_transpose_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype, args.rank = dt.onnx, x.ndim
    for i in range(x.ndim):
        args.shape[i], args.perm[i] = x.shape[i], perm[i]
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    return KernelCall(lib, k, args, [x, y])


def gather(lib: Library, data: np.ndarray, indices: np.ndarray, output: np.ndarray, axis: int = 0,
           threads: int = 1, device: str = "cpu") -> KernelCall:
    """ONNX Gather: output = np.take(data, indices, axis); indices int64 or int32, negative ones
    count from the end, any outside [-dim, dim) is rejected here (C rejects it again)."""
    k = "gather"
    check_array(data, "data", k)
    check_array(indices, "indices", k)
    check_array(output, "output", k, writeable=True)
    dt = dtypes.of_array(data)
    same_dtype(k, "data", data, output=output)
    if data.ndim < 1:
        raise UsageError(f"{k}: data must have rank >= 1")
    if indices.dtype not in INDEX_TYPES:
        raise UsageError(f"{k}: indices must be int64 or int32, got {indices.dtype}")
    ax = _axis(k, axis, data.ndim)
    want = data.shape[:ax] + indices.shape + data.shape[ax + 1:]
    if output.shape != want:
        raise UsageError(f"{k}: output must have shape {want}, got {output.shape}")
    dim = data.shape[ax]
    _check_indices_in_range(k, indices, dim, f"indices (axis {ax} of size {dim})")
    check_no_overlap(k, {"output": output}, {"data": data, "indices": indices})
    args = lib.ffi.new("pb_gather_args*")
    set_exec(args, check_threads(threads, k), device, k)
    args.dtype, args.index_type = dt.onnx, INDEX_TYPES[indices.dtype]
    args.outer = int(np.prod(data.shape[:ax], dtype=np.int64))
    args.axis_dim = dim
    args.inner = int(np.prod(data.shape[ax + 1:], dtype=np.int64))
    args.n_indices = indices.size
    args.data, args.indices, args.output = lib.ptr(data), lib.ptr(indices), lib.ptr(output)
    return KernelCall(lib, k, args, [data, indices, output])


def concat(lib: Library, inputs, output: np.ndarray, axis: int, threads: int = 1, device: str = "cpu") -> KernelCall:
    """ONNX Concat of 1..1024 arrays along `axis` (negative counts from the end)."""
    k = "concat"
    inputs = list(inputs)
    if not 1 <= len(inputs) <= MAX_INPUTS:
        raise UsageError(f"{k}: needs 1..{MAX_INPUTS} inputs, got {len(inputs)}")
    for j, a in enumerate(inputs):
        check_array(a, f"inputs[{j}]", k)
    check_array(output, "output", k, writeable=True)
    first = inputs[0]
    dt = dtypes.of_array(first)
    same_dtype(k, "inputs[0]", first, output=output, **{f"inputs[{j}]": a for j, a in enumerate(inputs)})
    if first.ndim < 1:
        raise UsageError(f"{k}: inputs must have rank >= 1")
    ax = _axis(k, axis, first.ndim)
    for j, a in enumerate(inputs):
        if a.ndim != first.ndim or a.shape[:ax] != first.shape[:ax] or a.shape[ax + 1:] != first.shape[ax + 1:]:
            raise UsageError(f"{k}: inputs[{j}] shape {a.shape} differs from inputs[0] {first.shape} off axis {ax}")
    want = first.shape[:ax] + (sum(a.shape[ax] for a in inputs),) + first.shape[ax + 1:]
    if output.shape != want:
        raise UsageError(f"{k}: output must have shape {want}, got {output.shape}")
    check_no_overlap(k, {"output": output}, {f"inputs[{j}]": a for j, a in enumerate(inputs)})
    args = lib.ffi.new("pb_concat_args*")
    set_exec(args, check_threads(threads, k), device, k)
    extents = lib.ffi.new("int64_t[]", [a.shape[ax] for a in inputs])
    ptrs = lib.ffi.new("const void *[]", [lib.ptr(a) for a in inputs])
    args.dtype, args.n_inputs = dt.onnx, len(inputs)
    args.outer = int(np.prod(first.shape[:ax], dtype=np.int64))
    args.inner = int(np.prod(first.shape[ax + 1:], dtype=np.int64))
    args.extents, args.inputs, args.output = extents, ptrs, lib.ptr(output)
    return KernelCall(lib, k, args, [*inputs, output, extents, ptrs])


def scatter_nd(lib: Library, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, output: np.ndarray,
               reduction: str = "none", threads: int = 1, device: str = "cpu") -> KernelCall:
    """ONNX ScatterND: output = data with data[indices[i]] replaced (or combined: add, mul, max,
    min) by updates[i]. indices int64 (..., k); output may BE data (in place). Without a
    reduction, indices must be distinct (ONNX leaves duplicates undefined)."""
    kn = "scatter_nd"
    for name, a in (("data", data), ("indices", indices), ("updates", updates)):
        check_array(a, name, kn)
    check_array(output, "output", kn, writeable=True)
    dt = dtypes.of_array(data)
    same_dtype(kn, "data", data, updates=updates, output=output)
    if reduction not in REDUCTIONS:
        raise UsageError(f"{kn}: reduction={reduction!r}, expected one of {', '.join(REDUCTIONS)}")
    if not 1 <= data.ndim <= MAX_RANK:
        raise UsageError(f"{kn}: data must have rank 1..{MAX_RANK}, got {data.ndim}")
    if indices.dtype != np.int64 or indices.ndim < 1:
        raise UsageError(f"{kn}: indices must be int64 of rank >= 1, got {indices.dtype}{indices.shape}")
    depth = indices.shape[-1]
    if not 1 <= depth <= data.ndim:
        raise UsageError(f"{kn}: indices' last axis ({depth}) must be 1..rank of data ({data.ndim})")
    want = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != want:
        raise UsageError(f"{kn}: updates must have shape {want}, got {updates.shape}")
    if output.shape != data.shape:
        raise UsageError(f"{kn}: output must have data's shape {data.shape}, got {output.shape}")
    flat = indices.reshape(-1, depth)
    for d in range(depth):
        _check_indices_in_range(kn, flat[:, d], data.shape[d], f"indices[..., {d}] (axis {d} of size {data.shape[d]})")
    if reduction == "none" and flat.shape[0] > 1:
        norm = np.where(flat < 0, flat + np.array(data.shape[:depth]), flat)
        if len(np.unique(norm, axis=0)) != len(norm):
            raise UsageError(f"{kn}: duplicate indices without a reduction (ONNX leaves the result undefined)")
    check_no_overlap(kn, {"output": output}, {"data": data, "updates": updates, "indices": indices},
                     in_place=[("output", "data")])
    args = lib.ffi.new("pb_scatter_nd_args*")
    set_exec(args, check_threads(threads, kn), device, kn)
    args.dtype, args.reduction, args.rank, args.k = dt.onnx, REDUCTIONS[reduction], data.ndim, depth
    for i, s in enumerate(data.shape):
        args.shape[i] = s
    args.n_updates = flat.shape[0]
    args.indices = lib.ffi.cast("const int64_t *", indices.ctypes.data)
    args.data, args.updates, args.output = lib.ptr(data), lib.ptr(updates), lib.ptr(output)
    return KernelCall(lib, kn, args, [data, indices, updates, output])


def trilu(lib: Library, x: np.ndarray, y: np.ndarray, upper: int = 1, k: int = 0, threads: int = 1,
          device: str = "cpu") -> KernelCall:
    """ONNX Trilu on the last two axes of x (rank >= 2): upper keeps col - row >= k, lower keeps
    col - row <= k; y may BE x (in place)."""
    kn = "trilu"
    check_array(x, "x", kn)
    check_array(y, "y", kn, writeable=True)
    dt = dtypes.of_array(x)
    same_dtype(kn, "x", x, y=y)
    if x.ndim < 2:
        raise UsageError(f"{kn}: x must have rank >= 2, got {x.ndim}")
    if y.shape != x.shape:
        raise UsageError(f"{kn}: y must have x's shape {x.shape}, got {y.shape}")
    upper = check_int(kn, "upper", upper)
    if upper not in (0, 1):
        raise UsageError(f"{kn}: upper={upper}, expected 0 or 1")
    k = check_int(kn, "k", k)
    if not -2**63 <= k < 2**63:
        raise UsageError(f"{kn}: k={k} does not fit int64")
    check_no_overlap(kn, {"y": y}, {"x": x}, in_place=[("y", "x")])
    args = lib.ffi.new("pb_trilu_args*")
    set_exec(args, check_threads(threads, kn), device, kn)
    args.dtype, args.upper, args.k = dt.onnx, upper, k
    args.batch = int(np.prod(x.shape[:-2], dtype=np.int64))
    args.rows, args.cols = x.shape[-2], x.shape[-1]
    args.x, args.y = lib.ptr(x), lib.ptr(y)
    return KernelCall(lib, kn, args, [x, y])
