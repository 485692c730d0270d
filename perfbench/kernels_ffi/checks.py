"""The argument checks every wrapper module runs before C is called: arrays, threads, device,
dtypes, shapes, integers. One wording per check; each raises UsageError naming the kernel."""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError

MAX_THREADS = 256
DEVICES = {"cpu": 0, "cuda": 1}  # PB_DEVICE_*


def check_array(a, name: str, kernel: str, *, writeable: bool = False) -> None:
    """A C-contiguous numpy array whose data address is a multiple of its element size (writeable
    when asked).

    Alignment: the C kernels take typed pointers (a misaligned float* is undefined behaviour in
    C, and what a compiler's vectorised loop assumes), and their streaming stores reach vector
    alignment by storing whole elements first: binary.c, gelu.c (nt_peel) stream only when the
    output is element-aligned, layer_norm.c only when its rows start 32-byte aligned, copies
    (vcopy.inc.c) peel byte by byte -- each falls back to plain stores otherwise. So element
    alignment is what every kernel needs, inputs and outputs alike; nothing needs more."""
    if not isinstance(a, np.ndarray):
        raise UsageError(f"{kernel}: {name} must be a numpy array, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise UsageError(f"{kernel}: {name} must be C-contiguous (use np.ascontiguousarray)")
    if writeable and not a.flags.writeable:
        raise UsageError(f"{kernel}: {name} must be writeable")
    es, addr = a.dtype.itemsize, a.ctypes.data
    if a.size and addr % es:
        raise UsageError(f"{kernel}: {name} is misaligned: its data address {addr:#x} is {addr % es} byte(s) past "
                         f"a multiple of {es}, and {a.dtype} data must start on a multiple of its {es}-byte element "
                         f"size (pass an aligned copy: {name}.copy() or np.require({name}, requirements='CA'); "
                         f"np.ascontiguousarray keeps a misaligned buffer as it is)")


def check_threads(threads: int, kernel: str) -> int:
    if not isinstance(threads, (int, np.integer)) or not 1 <= int(threads) <= MAX_THREADS:
        raise UsageError(f"{kernel}: threads={threads!r}, expected an integer in 1..{MAX_THREADS}")
    return int(threads)


def check_device(device: str, kernel: str) -> int:
    if device not in DEVICES:
        raise UsageError(f"{kernel}: device={device!r}, expected one of {', '.join(DEVICES)}")
    return DEVICES[device]


def set_exec(args, threads: int, device: str = "cpu", kernel: str = "") -> None:
    """Fill the args struct's exec part (device checked; threads already checked)."""
    args.exec.device = check_device(device, kernel)
    args.exec.num_threads = threads


def same_dtype(kernel: str, ref_name: str, ref: np.ndarray, **arrays) -> None:
    """Every array given (None: an absent optional one) has ref's dtype."""
    for name, a in arrays.items():
        if a is not None and a.dtype != ref.dtype:
            raise UsageError(f"{kernel}: {name} dtype {a.dtype} differs from {ref_name} dtype {ref.dtype}")


def shape_is(kernel: str, name: str, a: np.ndarray, shape: tuple) -> None:
    if tuple(a.shape) != tuple(shape):
        raise UsageError(f"{kernel}: {name} must have shape {tuple(shape)}, got {tuple(a.shape)}")


def check_int(kernel: str, name: str, v, minimum: int | None = None) -> int:
    """An integer (not a bool), at least `minimum` when one is given."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or (minimum is not None and v < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise UsageError(f"{kernel}: {name} must be an integer{bound}, got {v!r}")
    return int(v)


def same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """a and b are one buffer as C sees it (in place): the same data address, dtype, shape and
    strides. Identity (`a is b`) is not asked for: two views of one buffer qualify."""
    return a.ctypes.data == b.ctypes.data and a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    # exact (np.shares_memory, not may_share_memory): a handful of arrays per call, all
    # C-contiguous by then (check_array), for which the exact answer is the cheap extent test
    return a.size > 0 and b.size > 0 and np.shares_memory(a, b)


def check_no_overlap(kernel: str, outputs: dict, inputs: dict, in_place=()) -> None:
    """No output shares a byte with an input or with another output (None: an absent optional
    array). `in_place` lists the (output, input) name pairs a kernel may run in place: that pair
    may be the same buffer (same_buffer), never a partial overlap."""
    outs = [(n, a) for n, a in outputs.items() if a is not None]
    ins = [(n, a) for n, a in inputs.items() if a is not None]
    allowed = set(in_place)
    for i, (o, y) in enumerate(outs):
        for n, x in ins:
            if not _shares(y, x):
                continue
            if (o, n) in allowed:
                if same_buffer(y, x):
                    continue
                raise UsageError(f"{kernel}: output {o} overlaps input {n} partially (in place needs {o} to be {n}: "
                                 f"the same buffer, dtype and shape; else pass separate arrays)")
            raise UsageError(f"{kernel}: output {o} overlaps input {n} (pass separate arrays)")
        for p, z in outs[i + 1:]:
            if _shares(y, z):
                raise UsageError(f"{kernel}: outputs {o} and {p} overlap (pass separate arrays)")


def in_place_or_disjoint(kernel: str, x: np.ndarray, y: np.ndarray) -> None:
    """y is x (the same buffer: in place) or shares no memory with it."""
    if _shares(x, y) and not same_buffer(x, y):
        raise UsageError(f"{kernel}: x and y overlap partially (in place needs y to be x)")


def float_dtype(a: np.ndarray, name: str, kernel: str) -> dtypes.DType:
    """The float dtype (f32, f16, bf16) of an array, or a UsageError naming the kernel and array."""
    try:
        return dtypes.of_array(a)
    except UsageError as e:
        raise UsageError(f"{kernel}: {name}: {e}") from None


def float32_arg(kernel: str, name: str, value) -> float:
    """A number argument (not a bool) that is finite in float32, as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise UsageError(f"{kernel}: {name}={value!r} must be a number")
    try:
        v = float(value)
    except OverflowError:  # an int beyond double
        v = math.inf
    if not math.isfinite(v) or abs(v) > float(np.finfo(np.float32).max):
        raise UsageError(f"{kernel}: {name}={value!r} must be finite (in float32)")
    return v
