"""Softmax over the last axis of attention scores (batch, heads, queries, keys), opset 13."""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import wrappers
from perfbench.ops import _reference as ref
from perfbench.ops.base import (
    MAX_HEADS,
    Case,
    GraphSpec,
    Mutant,
    NodeBinding,
    NodeInfo,
    NodeUnsupported,
    Op,
    Param,
    register,
    tail_len,
)


def _softmax64(x: np.ndarray, subtract_max: bool = True) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        z = x - x.max(axis=-1, keepdims=True) if subtract_max else x
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)




def _shape(case: Case) -> tuple:
    p = case.p
    return (p["batch"], p["heads"], p["queries"], p["keys"])


def _m_no_max(op, case, x):
    # computed in f32 like a kernel would: exp of the +100 probe row overflows to inf, inf/inf = nan
    return {"y": _softmax64(x["x"].astype(np.float32), subtract_max=False).astype(np.float64)}


def _m_tail(op, case, x):
    # the last partial vector of each row never reaches the kernel
    keys = case.p["keys"]
    cut = tail_len(keys)
    y = _softmax64(x["x"][..., : keys - cut])
    return {"y": np.concatenate([y, np.zeros(x["x"].shape[:-1] + (cut,))], axis=-1)}


def _m_zero_row(op, case, x):
    y = _softmax64(x["x"])
    y.reshape(-1, y.shape[-1])[-1] = 0.0
    return {"y": y}


@register
class Softmax(Op):
    name = "Softmax"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"heads": 3, "queries": 1, "keys": 4097},
        {"heads": 3, "queries": 1, "keys": 4105},
        {"batch": 2, "heads": 2, "queries": 3, "keys": 33},
        {"heads": 2, "queries": 3, "keys": 21},
        {"heads": 32, "queries": 1, "keys": 1024},
        {"heads": 8, "queries": 2, "keys": 4105},  # 2 threads really split it
    )
    kernel = "softmax"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="attention heads"),
        Param("queries", int, None, minimum=1, help="query positions (1 = decode)"),
        Param("keys", int, None, minimum=1, help="keys per row: the softmax axis"),
    )
    mutants = (
        Mutant("max-subtraction skipped", _m_no_max),
        Mutant("tail elements ignored", _m_tail, lambda case: case.p["keys"] > 1),
        Mutant("a row zeroed", _m_zero_row),
    )

    def graph(self, case: Case) -> GraphSpec:
        shape = _shape(case)
        return GraphSpec("Softmax", "", 13, [("x", "float", shape)], [("y", shape)], {"axis": -1})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        shape = _shape(case)
        x = rng.standard_normal(shape)  # logits with std ~1 (large logits hide bugs)
        rows = x.reshape(-1, shape[-1])
        n, keys = rows.shape
        # planted probes: a dominant first key, a dominant last key (a dropped tail shows), and
        # a row shifted by +100 (exp overflows in f32 unless the max is subtracted first)
        rows[0, 0] += 6.0
        if n > 1:
            rows[1, -1] += 6.0
        rows[n // 2] += 100.0
        if n > 2:
            rows[-1, -1] += 6.0
        return {"x": np.ascontiguousarray(x.astype(dtype.numpy))}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return wrappers.softmax(lib, inputs["x"], outputs["y"], threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        # an ONNX-standard op: the truth is ONNX's own reference implementation, in float64
        return {"y": ref.evaluate("Softmax", [inputs["x"]], opset=13, axis=-1)[0]}

    def row_sizes(self, case: Case) -> dict:
        return {"y": case.p["keys"]}

    def flops(self, case: Case) -> float:
        # max, subtract, exp (counted as 1), sum, scale: ~5 per element
        return 5.0 * float(math.prod(_shape(case)))

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        return 2.0 * float(math.prod(_shape(case))) * dtype.itemsize

    node_types = (("", "Softmax"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        """ai.onnx Softmax. Opset 13+: softmax along `axis` (default -1); our kernel normalizes the
        last axis, so any other axis is declined. Before 13: the input is flattened to 2-D at
        `axis` (default 1), rows = prod(shape[:axis]), cols = prod(shape[axis:]) -- any axis works."""
        if len(node.inputs) != 1 or node.inputs[0] is None or len([o for o in node.outputs if o]) != 1:
            raise UsageError(f"Softmax takes one input and one output (got {len(node.inputs)} inputs)")
        shape = tuple(node.inputs[0][1])
        rank = len(shape)
        if rank == 0:
            raise UsageError("Softmax of a 0-d input is not defined (ONNX needs rank >= 1)")
        default = -1 if node.opset >= 13 else 1
        axis = int(node.attr("axis", default))
        if not -rank <= axis < rank:
            raise UsageError(f"Softmax axis={axis} is out of range for a rank-{rank} input {shape}")
        axis %= rank
        if node.opset >= 13:
            if axis != rank - 1:
                raise NodeUnsupported(f"Softmax (opset {node.opset}) over axis {axis} of a rank-{rank} input: our "
                                      "kernel normalizes the last axis only")
            rows, cols = math.prod(shape[:-1]), shape[-1]
        else:
            rows, cols = math.prod(shape[:axis]), math.prod(shape[axis:])
        if rows < 1 or cols < 1:
            raise NodeUnsupported(f"Softmax of an empty input {shape}: nothing to compute")
        case = self.make_case({"batch": 1, "heads": 1, "queries": rows, "keys": cols}, "perfbench node")
        return NodeBinding(case, {"x": 0}, {"y": (0, shape)})
