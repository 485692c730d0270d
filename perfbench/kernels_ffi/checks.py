"""The argument checks every wrapper module runs before C is called: arrays, threads, device,
dtypes, shapes, integers. One wording per check; each raises UsageError naming the kernel."""

from __future__ import annotations

import numpy as np

from perfbench.errors import UsageError

MAX_THREADS = 256
DEVICES = {"cpu": 0, "cuda": 1}  # PB_DEVICE_*


def check_array(a, name: str, kernel: str, *, writeable: bool = False) -> None:
    if not isinstance(a, np.ndarray):
        raise UsageError(f"{kernel}: {name} must be a numpy array, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise UsageError(f"{kernel}: {name} must be C-contiguous (use np.ascontiguousarray)")
    if writeable and not a.flags.writeable:
        raise UsageError(f"{kernel}: {name} must be writeable")


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


def in_place_or_disjoint(kernel: str, x: np.ndarray, y: np.ndarray) -> None:
    """y is x (the same start: in place) or shares no memory with it."""
    if np.shares_memory(x, y) and x.ctypes.data != y.ctypes.data:
        raise UsageError(f"{kernel}: x and y overlap partially (in place needs y to be x)")
