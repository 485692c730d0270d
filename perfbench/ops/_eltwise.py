"""Shared pieces of the elementwise ops (Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean): shape
strings for case parameters, float64 references, tail lengths. (from_node's node checks: _node_helpers.)"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from perfbench.errors import UsageError

# from_node's node checks (one wording for every op file), re-exported for op files that call el.node_inputs etc.
from perfbench.ops._node_helpers import check_outputs, node_float_dtype, node_inputs, same_float_inputs  # noqa: F401

MAX_RANK = 8  # the native kernels' limit (pb_binary_args)
SCALAR = "scalar"  # the shape string of a rank-0 tensor


def parse_shape(text: str, where: str = "") -> tuple:
    """"64x4096" -> (64, 4096); "scalar" -> (). Every size >= 1, rank <= 8."""
    if text == SCALAR:
        return ()
    try:
        shape = tuple(int(p) for p in text.split("x"))
    except ValueError:
        raise UsageError(f"{where}: shape {text!r} must look like 64x4096 (sizes joined by 'x') or 'scalar'") from None
    if not shape or any(n < 1 for n in shape) or len(shape) > MAX_RANK:
        raise UsageError(f"{where}: shape {text!r}: sizes must be >= 1, rank 1..{MAX_RANK} (or 'scalar')")
    if shape_str(shape) != text:
        raise UsageError(f"{where}: shape {text!r} is not in canonical form (write {shape_str(shape)!r})")
    return shape


def shape_str(shape) -> str:
    return "x".join(str(int(n)) for n in shape) if len(shape) else SCALAR


def size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def tail_len(n: int) -> int:
    """Elements a vector loop without its tail would drop from a run of n: n % 8 (8 lanes) if
    any, else n % 16 (16 lanes), else a whole last vector."""
    return n % 8 or n % 16 or min(16, n)


def gelu_erf64(v: np.ndarray) -> np.ndarray:
    """0.5 v (1 + erf(v / sqrt 2)) in float64 (scipy's erf: onnx.reference's Erf rounds to float32)."""
    return 0.5 * v * (1.0 + special.erf(v / math.sqrt(2.0)))


def gelu_tanh64(v: np.ndarray) -> np.ndarray:
    """0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) in float64."""
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def quick_gelu64(v: np.ndarray) -> np.ndarray:
    """v * sigmoid(1.702 v): a different activation that a kernel may wrongly substitute."""
    return v / (1.0 + np.exp(-1.702 * v))


def rows_cols(shape) -> tuple[int, int]:
    """A tensor as (rows, last axis); a scalar is (1, 1)."""
    if not len(shape):
        return 1, 1
    return size(shape[:-1]), int(shape[-1])
