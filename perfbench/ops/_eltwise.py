"""Shared pieces of the elementwise ops (Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean): shape
strings for case parameters, float64 references, tail lengths, and node checks for from_node."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.ops.base import NodeInfo, NodeUnsupported

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


# ---- from_node helpers ----

def node_float_dtype(node: NodeInfo, what: str) -> str:
    """The node's float element type, or NodeUnsupported."""
    if node.dtype not in ("f32", "f16", "bf16"):
        raise NodeUnsupported(f"{what}: element type {node.dtype or 'unknown'} is not implemented (float32, float16, "
                              "bfloat16 are)")
    return node.dtype


def node_inputs(node: NodeInfo, what: str, least: int, most: int) -> list:
    """The node's inputs [(dtype, shape) or None] after checking their count (UsageError)."""
    n = len(node.inputs)
    while n and node.inputs[n - 1] is None:
        n -= 1
    if not least <= n <= most:
        want = str(least) if least == most else f"{least}..{most}"
        raise UsageError(f"{what}: {want} inputs expected, the node has {n}")
    for i in range(least):
        if node.inputs[i] is None:
            raise UsageError(f"{what}: input {i} is required")
    return list(node.inputs) + [None] * (most - len(node.inputs))


def same_float_inputs(node: NodeInfo, what: str, indices) -> None:
    """The given node inputs have the node's float type (UsageError otherwise)."""
    want = dtypes.get(node.dtype).numpy
    for i in indices:
        if node.inputs[i] is not None and np.dtype(node.inputs[i][0]) != want:
            raise UsageError(f"{what}: input {i} is {np.dtype(node.inputs[i][0])}, input 0 is {want}")


def check_outputs(node: NodeInfo, what: str, count: int = 1) -> None:
    if len([o for o in node.outputs]) < 1 or not node.outputs[0]:
        raise UsageError(f"{what}: the node has no output")
    if len(node.outputs) > count:
        raise UsageError(f"{what}: {count} output(s) expected, the node has {len(node.outputs)}")
