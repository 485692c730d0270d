"""ONNX Transpose (opset 21): any permutation of a tensor of rank 1..8. The attention
permutations: 0213 turns (B, S, N, H) into (B, N, S, H) (heads split off a projection), 0231
turns keys (B, S, N, H) into (B, N, H, S) (K transposed for Q.K^T); "10" is a 2-D transpose."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import movement as mvk
from perfbench.ops import _movement as mv
from perfbench.ops import _node_helpers as nh
from perfbench.ops import _reference as ref
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register


def _shape(case: Case) -> tuple:
    return mv.parse_shape(case.p["shape"], case.op)


def _perm(case: Case) -> list:
    return [int(c) for c in case.p["perm"]]


def _out_shape(case: Case) -> tuple:
    s = _shape(case)
    return tuple(s[i] for i in _perm(case))


def _ref(case, x):
    return {"y": np.ascontiguousarray(np.transpose(x["x"], _perm(case)))}


def _m_reshaped(op, case, x):
    # the permutation ignored: the input's bytes reinterpreted in the output shape
    return {"y": np.ascontiguousarray(x["x"]).reshape(_out_shape(case))}


def _moves_data(case) -> bool:
    """False when the permutation only moves size-1 axes (the bytes stay where they are)."""
    shape = _shape(case)
    kept = [a for a in _perm(case) if shape[a] > 1]
    return kept != sorted(kept)


def _tail_len(n: int) -> int:
    """Columns a blocked loop without its edge handling leaves unwritten: n % 8, else n % 4."""
    return n % 8 or n % 4


def _m_tail(op, case, x):
    # the last partial block of the output's last axis never written (zero)
    y = _ref(case, x)["y"]
    t = _tail_len(y.shape[-1])
    y[..., y.shape[-1] - t:] = 0.0
    return {"y": y}


def _m_zero_row(op, case, x):
    y = _ref(case, x)["y"]
    y.reshape(-1, y.shape[-1])[-1] = 0.0
    return {"y": y}


@register
class Transpose(Op):
    name = "Transpose"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"shape": "3x33x5x80", "perm": "0231"},
        {"shape": "2x7x3x9", "perm": "0213"},
        {"shape": "33x65", "perm": "10"},
        {"shape": "2x3x1x5x7x3", "perm": "504132"},
        {"shape": "4x1x6x5", "perm": "3120"},
        {"shape": "2x96x16x128", "perm": "0213"},  # 2 threads really split it (1.5 MB f32: contiguous runs split)
    )
    kernel = "transpose"
    params = (
        Param("shape", str, None, help="input shape, dimensions joined by 'x' (e.g. 1x128x32x128 = B x S x N x H)"),
        Param("perm", str, None, help="output axis i is input axis perm[i], one digit per axis (e.g. 0213)"),
    )
    ort_substitute = {}  # ORT has Transpose kernels in f32, f16 and bf16: head to head
    mutants = (
        Mutant("permutation ignored (input reshaped)", _m_reshaped, _moves_data),
        Mutant("tail of the last axis not written", _m_tail, lambda case: _tail_len(_out_shape(case)[-1]) > 0),
        Mutant("a row zeroed", _m_zero_row),
    )
    node_types = (("", "Transpose"),)

    def validate(self, case: Case, where: str) -> None:
        shape = mv.parse_shape(case.p["shape"], where)
        perm = case.p["perm"]
        if not (perm.isascii() and perm.isdigit()) or sorted(int(c) for c in perm) != list(range(len(shape))):
            raise UsageError(f"{where}: perm={perm!r} must be a permutation of 0..{len(shape) - 1} (one digit per axis "
                             f"of shape {case.p['shape']})")

    def graph(self, case: Case) -> GraphSpec:
        return GraphSpec("Transpose", "", 21, [("x", "float", _shape(case))], [("y", _out_shape(case))],
                         {"perm": _perm(case)})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        x = rng.standard_normal(_shape(case))
        # probes: the first and last elements, and the last element of the first row (a
        # transposed corner lands far from where a wrong stride would put it)
        flat = x.reshape(-1)
        flat[0] += 8.0
        flat[-1] -= 8.0
        flat[x.shape[-1] - 1] += 4.0
        return {"x": np.ascontiguousarray(x.astype(dtype.numpy))}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return mvk.transpose(lib, inputs["x"], outputs["y"], _perm(case), threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"y": ref.evaluate("Transpose", [inputs["x"]], opset=21, perm=_perm(case))[0]}

    def row_sizes(self, case: Case) -> dict:
        return {"y": _out_shape(case)[-1]}

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        return 2.0 * mv.prod(_shape(case)) * dtype.itemsize

    def from_node(self, node: NodeInfo) -> NodeBinding:
        nh.node_inputs(node, "Transpose node", 1, 1)
        nh.node_float_dtype(node, "Transpose node")
        shape = nh.node_shape(node, 0, "Transpose node")
        r = len(shape)
        if r == 0:
            raise NodeUnsupported("Transpose of a scalar (rank 0): not implemented")
        if r > min(mv.MAX_RANK, 10):
            raise NodeUnsupported(f"Transpose of rank {r}: our kernel takes rank 1..{mv.MAX_RANK}")
        perm = node.attr("perm")
        perm = list(range(r - 1, -1, -1)) if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(r)):
            raise UsageError(f"Transpose node: perm={perm} is not a permutation of 0..{r - 1}")
        case = self.make_case({"shape": mv.shape_str(shape), "perm": "".join(map(str, perm))}, "Transpose node")
        return NodeBinding(case, {"x": 0}, {"y": (0, tuple(shape[p] for p in perm))})
