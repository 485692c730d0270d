"""ONNX ScatterND (opset 18) as a KV-cache update: data (B, N, capacity, H), indices (m, 3)
int64 selecting (b, n, position) rows, updates (m, H); the output is a copy of data with those
rows replaced (reduction none) or combined (add, mul, max, min). Any data shape (rank 1..8) and
index depth k are cases too: shape, k and the number of index tuples m.

Indices follow the KV pattern when they can (m = prod(shape[:k-1]) x s: s consecutive
positions along axis k-1 per leading index, the first block ending at the last row, the others
staggered), else m distinct random slots; a few are written as their negative equivalents (ONNX
counts negative indices from the end). With a reduction the last tuple repeats the first
(duplicates combine in index order)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import movement as mvk
from perfbench.ops import _movement as mv
from perfbench.ops import _node_helpers as nh
from perfbench.ops import _reference as ref
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _shape(case: Case) -> tuple:
    return mv.parse_shape(case.p["shape"], case.op)


def _k(case: Case) -> int:
    return case.p["k"] or len(_shape(case)) - 1 or 1


def _upd_shape(case: Case) -> tuple:
    return (case.p["updates"],) + _shape(case)[_k(case):]


def _row(case: Case) -> int:
    s = _shape(case)
    return s[-1] if _k(case) < len(s) else 1


def _attrs(case: Case) -> dict:
    return {} if case.p["reduction"] == "none" else {"reduction": case.p["reduction"]}


def _ref(case, x, indices=None, updates=None, data=None):
    return {"output": ref.evaluate("ScatterND", [x["data"] if data is None else data,
                                                 x["indices"] if indices is None else indices,
                                                 x["updates"] if updates is None else updates], opset=18,
                                   **_attrs(case))[0]}


def _m_no_copy(op, case, x):
    # data never copied: the output holds the updates and whatever the buffer held (zeros)
    return _ref(case, x, data=np.zeros(_shape(case)))


def _m_late(op, case, x):
    # every update one row late along the last indexed axis
    idx = np.array(x["indices"], np.int64)
    dim = _shape(case)[_k(case) - 1]
    idx[:, -1] = (np.where(idx[:, -1] < 0, idx[:, -1] + dim, idx[:, -1]) + 1) % dim
    if case.p["reduction"] == "none" and len(np.unique(idx, axis=0)) != len(idx):
        return _m_no_copy(op, case, x)  # shifted onto each other: undefined; any other bug will do
    return _ref(case, x, indices=idx)


def _m_negative(op, case, x):
    # negative indices not wrapped: clamped to 0
    idx = np.maximum(np.array(x["indices"], np.int64), 0)
    if case.p["reduction"] == "none" and len(np.unique(idx, axis=0)) != len(idx):
        keep = np.unique(idx, axis=0, return_index=True)[1]
        keep = np.sort(keep)
        return _ref(case, x, indices=idx[keep], updates=np.asarray(x["updates"])[keep])
    return _ref(case, x, indices=idx)


def _m_drop_first(op, case, x):
    # the first update (the probed one) never applied
    return _ref(case, x, indices=np.asarray(x["indices"])[1:], updates=np.asarray(x["updates"])[1:])


@register
class ScatterND(Op):
    name = "ScatterND"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"shape": "2x3x37x80", "k": 3, "updates": 6},
        {"shape": "2x3x37x80", "k": 3, "updates": 30},
        {"shape": "40x7", "k": 1, "updates": 9},
        {"shape": "5x6x7", "k": 2, "updates": 7, "reduction": "add"},
        {"shape": "5x6x7", "k": 3, "updates": 11, "reduction": "max"},
        {"shape": "5x6x7", "k": 1, "updates": 3, "reduction": "mul"},
        {"shape": "5x6x7", "k": 2, "updates": 9, "reduction": "min"},
        {"shape": "1x8x512x128", "k": 3, "updates": 64},  # 2 threads really split it
    )
    kernel = "scatter_nd"
    params = (
        Param("shape", str, None, help="data shape, dimensions joined by 'x' (KV cache: B x N x capacity x H)"),
        Param("k", int, 0, minimum=0, maximum=mv.MAX_RANK,
              help="index depth: axes each index tuple addresses (0 = rank - 1)"),
        Param("updates", int, None, minimum=1, help="index tuples m (KV update: B x N x new tokens)"),
        Param("reduction", str, "none", choices=REDUCTIONS, help="how updates combine with data"),
    )
    # ORT has ScatterND kernels in f32, f16 and bf16 (reduction none; its f16/bf16 reductions fail
    # at run time): head to head, no substitute
    ort_substitute = {}
    mutants = (
        Mutant("data not copied", _m_no_copy),
        Mutant("updates one row late", _m_late, lambda case: _shape(case)[_k(case) - 1] > 1),
        Mutant("negative indices not wrapped", _m_negative),
        Mutant("first update dropped", _m_drop_first),
    )
    node_types = (("", "ScatterND"),)

    def validate(self, case: Case, where: str) -> None:
        shape = mv.parse_shape(case.p["shape"], where)
        k = case.p["k"]
        if k > len(shape):
            raise UsageError(f"{where}: k={k} exceeds the rank of shape {case.p['shape']} ({len(shape)})")
        slots = mv.prod(shape[:_k(case)])
        if case.p["reduction"] == "none" and case.p["updates"] > slots:
            raise UsageError(f"{where}: {case.p['updates']} distinct index tuples do not fit {slots} slots "
                             "(duplicates are undefined without a reduction)")

    def graph(self, case: Case) -> GraphSpec:
        shape = _shape(case)
        return GraphSpec("ScatterND", "", 18,
                         [("data", "float", shape), ("indices", "int64", (case.p["updates"], _k(case))),
                          ("updates", "float", _upd_shape(case))],
                         [("output", shape)], _attrs(case))

    def _indices(self, case: Case, rng: np.random.Generator) -> np.ndarray:
        shape, k, m = _shape(case), _k(case), case.p["updates"]
        lead_dims, dim = shape[: k - 1], shape[k - 1]
        lead = mv.prod(lead_dims)
        if m % lead == 0 and m // lead <= dim:
            s = m // lead
            j = np.arange(lead)
            start = dim - s - (j * 7) % (dim - s + 1)  # block 0 ends at the last row
            pos = start[:, None] + np.arange(s)[None, :]
            lead_idx = np.stack(np.unravel_index(j, lead_dims), -1) if k > 1 else np.zeros((lead, 0), np.int64)
            idx = np.concatenate([np.repeat(lead_idx, s, axis=0), pos.reshape(-1, 1)], axis=1)
        else:
            slots = mv.prod(shape[:k])
            flat = rng.choice(slots, size=m, replace=False)
            if slots - 1 not in flat:
                flat[0] = slots - 1  # the last slot
            idx = np.stack(np.unravel_index(flat, shape[:k]), -1)
        idx = idx.astype(np.int64)
        # negative equivalents: the first tuple's last component, the last tuple's first one
        idx[0, -1] -= dim
        if m > 1:
            idx[-1, 0] -= shape[0]
        if case.p["reduction"] != "none" and m > 1:
            idx[-1] = idx[0]  # a duplicate: combined in index order
        return np.ascontiguousarray(idx)

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        data = rng.standard_normal(_shape(case))
        updates = rng.standard_normal(_upd_shape(case))
        updates.reshape(case.p["updates"], -1)[0, 0] += 8.0  # probe: the first update stands out
        idx = self._indices(case, rng)
        return {"data": np.ascontiguousarray(data.astype(dtype.numpy)), "indices": idx,
                "updates": np.ascontiguousarray(updates.astype(dtype.numpy))}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return mvk.scatter_nd(lib, inputs["data"], inputs["indices"], inputs["updates"], outputs["output"],
                              case.p["reduction"], threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return _ref(case, inputs)

    def ort_cannot_run(self, case: Case, dtype: str) -> str:
        if case.p["reduction"] != "none" and dtype != "f32":
            return "ORT 1.31's CPU ScatterND has no float16/bfloat16 kernel for reductions (fails at run time)"
        return ""

    def row_sizes(self, case: Case) -> dict:
        return {"output": _row(case)}

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        data = mv.prod(_shape(case)) * dtype.itemsize
        upd = mv.prod(_upd_shape(case)) * dtype.itemsize
        return 2.0 * data + upd + 8.0 * case.p["updates"] * _k(case)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        nh.node_inputs(node, "ScatterND node", 3, 3)
        nh.node_float_dtype(node, "ScatterND node")
        shape = nh.node_shape(node, 0, "ScatterND node")
        idt, ishape = node.inputs[1]
        ishape = tuple(int(d) for d in ishape)
        if np.dtype(idt) != np.int64 or len(ishape) < 1:
            raise UsageError(f"ScatterND node: indices must be int64 of rank >= 1, got {idt}{ishape}")
        if not 1 <= len(shape) <= mv.MAX_RANK:
            raise NodeUnsupported(f"ScatterND on data of rank {len(shape)}: our kernel takes rank 1..{mv.MAX_RANK}")
        k = ishape[-1]
        if not 1 <= k <= len(shape):
            raise UsageError(f"ScatterND node: index depth {k} must be 1..rank of data ({len(shape)})")
        m = mv.prod(ishape[:-1])
        if m == 0:
            raise NodeUnsupported("ScatterND with no index tuples: not implemented")
        want = ishape[:-1] + shape[k:]
        if tuple(int(d) for d in node.inputs[2][1]) != want:
            raise UsageError(f"ScatterND node: updates must have shape {want}, got {tuple(node.inputs[2][1])}")
        reduction = node.attr("reduction", "none")
        if isinstance(reduction, bytes):
            reduction = reduction.decode()
        if reduction not in REDUCTIONS:
            raise UsageError(f"ScatterND node: reduction={reduction!r} is not one of {', '.join(REDUCTIONS)}")
        if reduction == "none" and m > mv.prod(shape[:k]):
            raise NodeUnsupported(f"ScatterND with {m} index tuples into {mv.prod(shape[:k])} slots and no reduction: "
                                  "duplicates are undefined in ONNX")
        case = self.make_case({"shape": mv.shape_str(shape), "k": k, "updates": m, "reduction": reduction},
                              "ScatterND node")
        return NodeBinding(case, {"data": 0, "indices": 1, "updates": 2}, {"output": (0, shape)})
