"""ONNX Concat (opset 13) as a KV-cache append: past (B, N, P, H) ++ new (B, N, S, H) along the
sequence axis -> present (B, N, P + S, H); S = 1 is a decode step, S > 1 a prefill chunk. Any
other two-input Concat maps onto it (outer x extent x inner, see from_node)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import movement as mvk
from perfbench.ops import _movement as mv
from perfbench.ops import _node_helpers as nh
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
)


def _shape(case: Case, rows: int) -> tuple:
    p = case.p
    return (p["batch"], p["heads"], rows, p["head_size"])


def _ref(case, x):
    return {"present": np.concatenate([x["past"], x["new"]], axis=2).astype(np.float64)}


def _m_early(op, case, x):
    # the new rows written one row early (over the last past row); the last row never written
    y = _ref(case, x)["present"]
    p = case.p["past"]
    y[:, :, p - 1: -1] = x["new"]
    y[:, :, -1] = 0.0
    return {"present": y}


def _m_heads(op, case, x):
    # new rows of head n appended to head n+1 (a wrong head stride)
    y = _ref(case, x)["present"]
    y[:, :, case.p["past"]:] = np.roll(x["new"], 1, axis=1)
    return {"present": y}


def _m_zero_row(op, case, x):
    y = _ref(case, x)["present"]
    y.reshape(-1, case.p["head_size"])[-1] = 0.0
    return {"present": y}


@register
class Concat(Op):
    name = "Concat"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"batch": 2, "heads": 3, "past": 33, "new": 5, "head_size": 80},
        {"heads": 2, "past": 7, "new": 1, "head_size": 9},
        {"heads": 8, "head_size": 128, "past": 300, "new": 7},  # 2 threads really split it
    )
    kernel = "concat"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size B"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="KV heads N"),
        Param("past", int, None, minimum=1, help="rows already in the cache P"),
        Param("new", int, 1, minimum=1, help="rows appended S (1 = decode)"),
        Param("head_size", int, None, minimum=1, help="head size H"),
    )
    ort_substitute = {}  # ORT has Concat kernels in f32, f16 and bf16: head to head
    mutants = (
        Mutant("new rows one row early", _m_early),
        Mutant("new rows under the wrong head", _m_heads, lambda case: case.p["heads"] > 1),
        Mutant("a row zeroed", _m_zero_row),
    )
    node_types = (("", "Concat"),)

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        return GraphSpec("Concat", "", 13, [("past", "float", _shape(case, p["past"])), ("new", "float", _shape(case, p["new"]))],
                         [("present", _shape(case, p["past"] + p["new"]))], {"axis": 2})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        past = rng.standard_normal(_shape(case, p["past"]))
        new = rng.standard_normal(_shape(case, p["new"]))
        # probes: the first and last past rows, the first new row of every head
        past[:, :, 0, 0] += 6.0
        past[:, :, -1, -1] -= 6.0
        new[:, :, 0, 0] += 8.0
        return {"past": np.ascontiguousarray(past.astype(dtype.numpy)), "new": np.ascontiguousarray(new.astype(dtype.numpy))}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return mvk.concat(lib, [inputs["past"], inputs["new"]], outputs["present"], 2, threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"present": ref.evaluate("Concat", [inputs["past"], inputs["new"]], opset=13, axis=2)[0]}

    def row_sizes(self, case: Case) -> dict:
        return {"present": case.p["head_size"]}

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        return 2.0 * mv.prod(_shape(case, p["past"] + p["new"])) * dtype.itemsize

    def from_node(self, node: NodeInfo) -> NodeBinding:
        ins = nh.node_inputs(node, "Concat node", 1)
        nh.node_float_dtype(node, "Concat node")
        if len(ins) != 2:
            raise NodeUnsupported(f"Concat of {len(ins)} inputs: our case takes two (past ++ new)")
        a, b = nh.node_shape(node, 0, "Concat node"), nh.node_shape(node, 1, "Concat node")
        if len(a) == 0 or len(a) != len(b):
            raise UsageError(f"Concat node: inputs of shapes {a} and {b} (need the same rank >= 1)")
        ax = nh.node_axis(node, "Concat node", len(a), default=None)
        if a[:ax] != b[:ax] or a[ax + 1:] != b[ax + 1:]:
            raise UsageError(f"Concat node: shapes {a} and {b} differ off axis {ax}")
        # (outer, extent, inner) of any axis = (batch, heads=1, rows, head_size) along axis 2
        case = self.make_case({"batch": mv.prod(a[:ax]), "heads": 1, "past": a[ax], "new": b[ax],
                               "head_size": mv.prod(a[ax + 1:])}, "Concat node")
        out = a[:ax] + (a[ax] + b[ax],) + a[ax + 1:]
        return NodeBinding(case, {"past": 0, "new": 1}, {"present": (0, out)})
