"""Shared pieces of the elementwise ops (Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu,
ReduceMean): shape and number strings for case parameters, float64 references, tail lengths.
(from_node's node checks: _node_helpers.)"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from perfbench.errors import UsageError
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import (
    NodeUnsupported,
    tail_len,  # noqa: F401 (the mutants' tail length: one definition, in base)
)

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
    return math.prod(int(n) for n in shape)  # exact: never a wrapped int64


def gelu_erf64(v: np.ndarray) -> np.ndarray:
    """0.5 v (1 + erf(v / sqrt 2)) in float64 (scipy's erf: onnx.reference's Erf rounds to float32)."""
    return 0.5 * v * (1.0 + special.erf(v / math.sqrt(2.0)))


def gelu_tanh64(v: np.ndarray) -> np.ndarray:
    """0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) in float64."""
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def sigmoid64(v: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-v)) in float64, computed stably: e = exp(-|v|) <= 1 never overflows, and the
    small side e / (1 + e) (v < 0) is computed directly, without cancellation. NaN stays NaN."""
    v = np.asarray(v, np.float64)
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def quick_gelu64(v: np.ndarray, alpha: float = 1.702) -> np.ndarray:
    """v * sigmoid(alpha v) in float64 (com.microsoft QuickGelu; SiLU at alpha 1; -inf gives NaN,
    -inf * 0, as the definition does). The Gelu family's mutants use it as a wrong substitute."""
    v = np.asarray(v, np.float64)
    with np.errstate(invalid="ignore"):
        return v * sigmoid64(alpha * v)


def float32_str(value: float) -> str:
    """A float attribute (ONNX stores float32) as its shortest round-tripping decimal: 1.702 ->
    "1.702", 1 -> "1.0". Case ids use it; it has only [0-9.-] characters (no exponent)."""
    return np.format_float_positional(np.float32(value), unique=True, trim="0")


def parse_float32(text: str, where: str, name: str) -> float:
    """A number string of a case parameter (canonical float32_str form, finite) as its float32 value."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {name}={text!r} must be a number written as a string, e.g. '1.702'") from None
    if not math.isfinite(v) or abs(v) > float(np.finfo(np.float32).max):
        raise UsageError(f"{where}: {name}={text!r} must be finite in float32")
    if float32_str(v) != text:
        raise UsageError(f"{where}: {name}={text!r} is not in canonical form (write {float32_str(v)!r})")
    return float(np.float32(v))


def rows_cols(shape) -> tuple[int, int]:
    """A tensor as (rows, last axis); a scalar is (1, 1)."""
    if not len(shape):
        return 1, 1
    return size(shape[:-1]), int(shape[-1])


def node_rows_cols(node, what: str) -> tuple[int, int, tuple]:
    """A unary activation node (Gelu family, Sigmoid family) as (rows, last axis, its shape):
    output 0 there, a float element type, no zero-size input (NodeUnsupported)."""
    nh.check_outputs(node, what)
    nh.node_float_dtype(node, what)
    shape = tuple(node.inputs[0][1])
    if 0 in shape:
        raise NodeUnsupported(f"{what}: zero-size input {shape} is not implemented")
    rows, cols = rows_cols(shape)
    return rows, cols, shape
