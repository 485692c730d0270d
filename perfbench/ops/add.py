"""ai.onnx Add (opset 14) with numpy broadcasting: C = A + B. The case names both shapes
("a=64x4096 b=4096": a bias row; "a=1x32x128x128 b=1x1x128x128": an attention mask over heads).
Mul (mul.py) is the same op with another operator."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops import _reference as ref
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register


def _shapes(case: Case) -> tuple:
    a, b = el.parse_shape(case.p["a"]), el.parse_shape(case.p["b"])
    return a, b, tuple(np.broadcast_shapes(a, b))




_UFUNCS = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}


def _ufunc(op) -> np.ufunc:
    return _UFUNCS[op.onnx_op]


def _m_tail(op, case, x):
    # the last partial vector of each run along the last axis is never written (left 0)
    y = _ufunc(op)(x["A"], x["B"])
    n = y.shape[-1]
    y[..., n - el.tail_len(n):] = 0.0
    return {"C": y}


def _m_shifted(op, case, x):
    # the broadcast operand read one element off along its last axis
    return {"C": _ufunc(op)(x["A"], np.roll(x["B"], 1, axis=-1))}


def _m_last_row(op, case, x):
    # the last row of the output never written (a dropped last block)
    y = _ufunc(op)(x["A"], x["B"])
    y.reshape(-1, y.shape[-1])[-1] = 0.0
    return {"C": y}


class BinaryOp(Op):
    """Add, Mul or Sub with numpy broadcasting; subclasses set name, kernel and onnx_op."""

    onnx_op = ""
    kernel_args = "binary"  # pb_add, pb_mul and pb_sub share pb_binary_args
    # bf16 only: ORT runs f16 through Casts around its f32 kernel, which is what f16 cells meet
    ort_substitute = {"bf16": "f32"}
    params = (
        Param("a", str, None, help="shape of A, sizes joined by 'x' (e.g. 64x4096; 'scalar' for rank 0)"),
        Param("b", str, None, help="shape of B, broadcast against A the numpy way (e.g. 4096)"),
    )
    mutants = (
        Mutant("tail elements ignored", _m_tail, lambda case: len(_shapes(case)[2]) > 0),
        Mutant("broadcast operand shifted by one", _m_shifted,
               lambda case: len(_shapes(case)[1]) > 0 and _shapes(case)[1][-1] > 1),
        Mutant("last row never written", _m_last_row, lambda case: len(_shapes(case)[2]) > 0),
    )

    def validate(self, case: Case, where: str) -> None:
        a, b = el.parse_shape(case.p["a"], where), el.parse_shape(case.p["b"], where)
        try:
            np.broadcast_shapes(a, b)
        except ValueError:
            raise UsageError(f"{where}: shapes a={case.p['a']} and b={case.p['b']} do not broadcast") from None

    def graph(self, case: Case) -> GraphSpec:
        a, b, y = _shapes(case)
        return GraphSpec(self.onnx_op, "", 14, [("A", "float", a), ("B", "float", b)], [("C", y)])

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        a_shape, b_shape, _ = _shapes(case)
        a = rng.standard_normal(a_shape)
        b = rng.standard_normal(b_shape)
        # planted probes: distinctive last elements of both operands (a dropped tail or a
        # misread broadcast row shows) and a distinctive first element of B
        a.reshape(-1)[-1] += 6.0
        b.reshape(-1)[-1] -= 5.0
        b.reshape(-1)[0] += 3.0
        return {"A": np.asarray(a.astype(dtype.numpy), order="C"), "B": np.asarray(b.astype(dtype.numpy), order="C")}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return eltwise.binary(self.kernel, lib, inputs["A"], inputs["B"], outputs["C"], threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {"C": np.asarray(ref.evaluate(self.onnx_op, [inputs["A"], inputs["B"]], opset=14)[0])}

    def row_sizes(self, case: Case) -> dict:
        y = _shapes(case)[2]
        return {"C": y[-1] if y else 1}

    def flops(self, case: Case) -> float:
        return float(el.size(_shapes(case)[2]))

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        return float(sum(el.size(s) for s in _shapes(case))) * dtype.itemsize

    # ---- perfbench node ----
    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = f"{self.onnx_op} (opset {node.opset})"
        if node.opset < 7:
            raise NodeUnsupported(f"{what}: opsets before 7 (legacy broadcast/axis attributes) are not implemented")
        ins = nh.node_inputs(node, what, 2, 2)
        nh.check_outputs(node, what)
        nh.node_float_dtype(node, what)
        nh.same_float_inputs(node, what, (0, 1))
        sa, sb = tuple(ins[0][1]), tuple(ins[1][1])
        try:
            y = tuple(np.broadcast_shapes(sa, sb))
        except ValueError:
            raise UsageError(f"{what}: input shapes {sa} and {sb} do not broadcast") from None
        if len(y) > el.MAX_RANK:
            raise NodeUnsupported(f"{what}: rank {len(y)} > {el.MAX_RANK} is not implemented")
        if 0 in sa or 0 in sb:
            raise NodeUnsupported(f"{what}: zero-size inputs {sa} and {sb} are not implemented")
        case = self.make_case({"a": el.shape_str(sa), "b": el.shape_str(sb)}, what)
        return NodeBinding(case, {"A": 0, "B": 1}, {"C": (0, y)})


@register
class Add(BinaryOp):
    name = "Add"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"a": "1031", "b": "1031"},
        {"a": "7x1031", "b": "1031"},
        {"a": "2x3x33x33", "b": "2x1x33x33"},
        {"a": "33x1", "b": "1x37"},
        {"a": "scalar", "b": "5x7"},
        {"a": "3x5x7", "b": "5x1"},
        {"a": "4x41x1031", "b": "41x1"},  # 2 threads really split it, a column broadcast inside
    )
    kernel = "add"
    onnx_op = "Add"
    node_types = (("", "Add"),)
