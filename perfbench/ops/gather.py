"""ONNX Gather (opset 13) as an embedding lookup: a (vocab, hidden) table, token ids (batch,
seq) int64 or int32 -> (batch, seq, hidden). With outer > 1 the table is (outer, vocab, hidden)
and the lookup runs along axis 1 (how any other axis maps: outer x axis x inner).

Tables are real-model sized (vocab 32k-152k) and capped at 1 GiB in the cell's dtype: each is generated
once per seed into a read-only memory-mapped cache file (perfbench.ops._movement.table) that
every worker shares; no cell regenerates or copies it, and the oracle upcasts only the rows it
gathers."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import movement as mvk
from perfbench.ops import _movement as mv
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register

INDEX_DTYPES = {"int64": np.int64, "int32": np.int32}


def _table_shape(case: Case) -> tuple:
    p = case.p
    return (p["vocab"], p["hidden"]) if p["outer"] == 1 else (p["outer"], p["vocab"], p["hidden"])


def _axis(case: Case) -> int:
    return 0 if case.p["outer"] == 1 else 1


def _out_shape(case: Case) -> tuple:
    p = case.p
    lead = () if p["outer"] == 1 else (p["outer"],)
    return lead + (p["batch"], p["seq"], p["hidden"])


def _take(case, data, idx) -> np.ndarray:
    # only the gathered rows are read and upcast (the table may be 1 GiB)
    return np.take(data, idx, axis=_axis(case)).astype(np.float64)


def _ref(case, x):
    return {"output": _take(case, x["data"], x["indices"])}


def _m_negative(op, case, x):
    # negative ids not wrapped: clamped to row 0
    return {"output": _take(case, x["data"], np.maximum(x["indices"], 0))}


def _m_off_by_one(op, case, x):
    v = case.p["vocab"]
    return {"output": _take(case, x["data"], (np.asarray(x["indices"], np.int64) + 1) % v)}


def _m_zero_last(op, case, x):
    y = _ref(case, x)["output"]
    y.reshape(-1, case.p["hidden"])[-1] = 0.0
    return {"output": y}


@register
class Gather(Op):
    name = "Gather"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"vocab": 1000, "hidden": 33, "seq": 7},
        {"vocab": 50, "hidden": 17, "batch": 2, "seq": 5, "index": "int32", "outer": 3},
        {"vocab": 10, "hidden": 8, "seq": 1},
        {"vocab": 1000, "hidden": 1031, "seq": 300},  # 2 threads really split it (1.2 MB of f32 rows)
    )
    kernel = "gather"
    params = (
        Param("vocab", int, None, minimum=1, help="rows of the table (the gathered axis)"),
        Param("hidden", int, None, minimum=1, help="elements per row"),
        Param("batch", int, 1, minimum=1, help="batch rows of token ids"),
        Param("seq", int, None, minimum=1, help="token ids per batch row (1 = decode)"),
        Param("index", str, "int64", choices=tuple(INDEX_DTYPES), help="element type of the ids"),
        Param("outer", int, 1, minimum=1, help="leading axis of the table: > 1 gathers along axis 1"),
    )
    ort_substitute = {}  # ORT has Gather kernels in f32, f16 and bf16: head to head
    mutants = (
        Mutant("negative ids not wrapped", _m_negative),
        Mutant("row off by one", _m_off_by_one, lambda case: case.p["vocab"] > 1),
        Mutant("last token's row zeroed", _m_zero_last),
    )
    node_types = (("", "Gather"),)

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        return GraphSpec("Gather", "", 13,
                         [("data", "float", _table_shape(case)), ("indices", p["index"], (p["batch"], p["seq"]))],
                         [("output", _out_shape(case))], {"axis": _axis(case)})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        nbytes = mv.prod(_table_shape(case)) * dtype.itemsize
        if nbytes > mv.TABLE_CAP_BYTES:
            raise UsageError(f"{case.case_id}: the {dtype.name} table {mv.shape_str(_table_shape(case))} would be "
                             f"{nbytes / 2**30:.2f} GiB, over the {mv.TABLE_CAP_BYTES / 2**30:.0f} GiB cap of generated tables")
        seed = int(rng.integers(0, 2**63))  # the table's seed: the same for every cell of a run's seed
        data = mv.table(_table_shape(case), dtype, seed)
        v = p["vocab"]
        idx = rng.integers(0, v, (p["batch"], p["seq"]))
        flat = idx.reshape(-1)
        # probes: -1 (wraps to the last row; a decode step's only id), the last row by its
        # positive id, -vocab (row 0), row 0 itself
        flat[0] = -1
        if flat.size > 1:
            flat[-1] = v - 1
        if flat.size > 2:
            flat[1] = -v
        if flat.size > 3:
            flat[flat.size // 2] = 0
        return {"data": data, "indices": np.ascontiguousarray(idx.astype(INDEX_DTYPES[p["index"]]))}

    def oracle_inputs(self, case: Case, inputs: dict) -> dict:
        # the table stays in its dtype (up to 1 GiB, read-only): the oracle upcasts the rows it
        # gathers, which is exact
        return dict(inputs)

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return mvk.gather(lib, inputs["data"], inputs["indices"], outputs["output"], _axis(case), threads,
                          device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        # ONNX Gather is numpy's take with negative indices counted from the end
        return _ref(case, inputs)

    def row_sizes(self, case: Case) -> dict:
        return {"output": case.p["hidden"]}

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        ids = p["batch"] * p["seq"]
        return 2.0 * p["outer"] * ids * p["hidden"] * dtype.itemsize + ids * np.dtype(INDEX_DTYPES[p["index"]]).itemsize

    def from_node(self, node: NodeInfo) -> NodeBinding:
        nh.node_inputs(node, "Gather node", 2, 2)
        nh.node_float_dtype(node, "Gather node")
        shape = nh.node_shape(node, 0, "Gather node")
        if len(shape) == 0:
            raise UsageError("Gather node: data must have rank >= 1")
        idt, ishape = node.inputs[1]
        index = {np.dtype(np.int64): "int64", np.dtype(np.int32): "int32"}.get(np.dtype(idt))
        if index is None:
            raise UsageError(f"Gather node: indices must be int64 or int32, got {idt}")
        n = mv.prod(ishape)
        if n == 0:
            raise NodeUnsupported(f"Gather with empty indices (shape {tuple(ishape)}): not implemented")
        ax = nh.node_axis(node, "Gather node", len(shape))
        nbytes = mv.prod(shape) * dtypes.get(node.dtype).itemsize
        if nbytes > mv.TABLE_CAP_BYTES:
            raise NodeUnsupported(f"Gather on a {nbytes / 2**30:.2f} GiB table: perfbench generates tables of at most "
                                  f"{mv.TABLE_CAP_BYTES / 2**30:.0f} GiB")
        outer, inner = mv.prod(shape[:ax]), mv.prod(shape[ax + 1:])
        case = self.make_case({"vocab": shape[ax], "hidden": inner, "batch": 1, "seq": n, "index": index,
                               "outer": outer}, "Gather node")
        out_shape = tuple(shape[:ax]) + tuple(int(d) for d in ishape) + tuple(shape[ax + 1:])
        return NodeBinding(case, {"data": 0, "indices": 1}, {"output": (0, out_shape)})
