"""ai.onnx Gelu (opset 20) over (rows, cols) activations, approximate "none" (erf) or "tanh". The
Gelu family's shared definition (GeluFamily) also serves com.microsoft FastGelu (fast_gelu.py)
and BiasGelu (bias_gelu.py): one kernel, y = gelu(x + bias) with the bias broadcast over rows.

The oracle is float64 numpy with scipy's erf: onnx.reference's Gelu goes through its Erf, which
rounds erf to float32 (np.vectorize(math.erf, otypes="f")), and would not be a float64 truth."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, Op, Param, register

ROWS = Param("rows", int, None, minimum=1, help="rows (tokens)")
COLS = Param("cols", int, None, minimum=1, help="activations per row (the bias axis)")


def _m_tail(op, case, x):
    y = op.reference(case, x)
    n = case.p["cols"]
    y[:, n - el.tail_len(n):] = 0.0
    return {op.out: y}


def _m_quick(op, case, x):
    # x * sigmoid(1.702 x) ("QuickGelu") in place of the op's own formula
    return {op.out: el.quick_gelu64(op.activation_input(case, x))}


def _m_other_form(op, case, x):
    # the other Gelu form: tanh where erf is asked for, erf where tanh is (visible in f32 only:
    # the two differ by < 5e-4, below 16-bit rounding)
    v = op.activation_input(case, x)
    return {op.out: el.gelu_erf64(v) if op.uses_tanh(case) else el.gelu_tanh64(v)}


def _m_zero_row(op, case, x):
    y = op.reference(case, x)
    y[-1] = 0.0
    return {op.out: y}


def _m_bias_ignored(op, case, x):
    f = el.gelu_tanh64 if op.uses_tanh(case) else el.gelu_erf64
    return {op.out: f(x[op.inp])}


def _m_bias_after(op, case, x):
    f = el.gelu_tanh64 if op.uses_tanh(case) else el.gelu_erf64
    return {op.out: f(x[op.inp]) + x[op.bias_name][None, :]}


class GeluFamily(Op):
    """y = gelu(x [+ bias]) over (rows, cols); subclasses say which form and whether a bias is
    read, and name their ONNX node's inputs and output."""
    kernel_optional_args = ("bias",)  # pb_gelu_args.bias: NULL = no bias

    inp, bias_name, out = "X", "", "Y"
    # bf16 only: ORT runs f16 as a function body (or Casts) around f32, what f16 cells meet
    ort_substitute = {"bf16": "f32"}
    # mutants visible only in some dtypes (the tests read this): the two Gelu forms differ by
    # < 5e-4, below 16-bit rounding; QuickGelu's error (up to ~2% of a row's scale) sits at
    # bfloat16's own floor (1.6e-2)
    mutant_dtypes = {"the other Gelu form": ("f32",), "x * sigmoid(1.702 x) instead": ("f32", "f16")}

    def uses_tanh(self, case: Case) -> bool:
        raise NotImplementedError

    def has_bias(self, case: Case) -> bool:
        return False

    def _shape(self, case: Case) -> tuple:
        return (case.p["rows"], case.p["cols"])

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        rows, cols = self._shape(case)
        x = 1.5 * rng.standard_normal((rows, cols))  # pre-activations, std 1.5
        # planted probes: the upper tail, the lower tail near where Phi(x) is flushed to 0, the
        # split between the two erf forms, and a last element that is very negative (a dropped
        # tail or row shows)
        x[0, 0] = 6.0
        x[-1, 0] = -1.3037
        x[rows // 2, -1] = -5.5
        x[-1, -1] = 3.25
        out = {self.inp: np.ascontiguousarray(x.astype(dtype.numpy))}
        if self.has_bias(case):
            b = 0.5 * rng.standard_normal(cols)
            b[-1] = 2.0  # a bias whose last element matters
            out[self.bias_name] = np.ascontiguousarray(b.astype(dtype.numpy))
        return out

    def activation_input(self, case: Case, x: dict) -> np.ndarray:
        v = x[self.inp]
        return v + x[self.bias_name][None, :] if self.has_bias(case) else v

    def reference(self, case: Case, x: dict) -> np.ndarray:
        v = self.activation_input(case, x)
        return el.gelu_tanh64(v) if self.uses_tanh(case) else el.gelu_erf64(v)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {self.out: self.reference(case, inputs)}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return eltwise.gelu(lib, inputs[self.inp], outputs[self.out],
                            approximate="tanh" if self.uses_tanh(case) else "none",
                            bias=inputs[self.bias_name] if self.has_bias(case) else None,
                            threads=threads, device=device)

    def row_sizes(self, case: Case) -> dict:
        return {self.out: case.p["cols"]}

    def flops(self, case: Case) -> float:
        # erf / tanh counted as ~20 operations, plus the products (and the bias add)
        return 25.0 * case.p["rows"] * case.p["cols"]

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        rows, cols = self._shape(case)
        return float(2 * rows * cols + (cols if self.has_bias(case) else 0)) * dtype.itemsize

    # ---- perfbench node helpers ----
    def _node_rows_cols(self, node: NodeInfo, what: str) -> tuple[int, int, tuple]:
        return el.node_rows_cols(node, what)

    def _node_bias(self, node: NodeInfo, what: str, index: int, cols: int) -> None:
        nh.same_float_inputs(node, what, (0, index))
        bshape = tuple(node.inputs[index][1])
        if bshape != (cols,):
            raise UsageError(f"{what}: bias must be 1-D of the input's last axis ({cols},), got {bshape}")


COMMON_MUTANTS = (
    Mutant("tail elements ignored", _m_tail),
    Mutant("x * sigmoid(1.702 x) instead", _m_quick),
    Mutant("the other Gelu form", _m_other_form),
    Mutant("last row zeroed", _m_zero_row),
)
BIAS_MUTANTS = (
    Mutant("bias ignored", _m_bias_ignored, lambda case: case.p.get("bias", 1) == 1),
    Mutant("bias added after the activation", _m_bias_after, lambda case: case.p.get("bias", 1) == 1),
)


@register
class Gelu(GeluFamily):
    name = "Gelu"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "cols": 1031},
        {"rows": 5, "cols": 1031, "approximate": "tanh"},
        {"rows": 1, "cols": 7},
        {"rows": 257, "cols": 1031},  # 2 threads really split it (>= 2 x the 131072-element grain)
    )
    kernel = "gelu"
    params = (ROWS, COLS, Param("approximate", str, "none", choices=("none", "tanh"),
                                help="none: the exact erf form; tanh: the tanh approximation"))
    mutants = COMMON_MUTANTS
    node_types = (("", "Gelu"), ("com.microsoft", "Gelu"))

    def uses_tanh(self, case: Case) -> bool:
        return case.p["approximate"] == "tanh"

    def graph(self, case: Case) -> GraphSpec:
        shape = self._shape(case)
        return GraphSpec("Gelu", "", 20, [("X", "float", shape)], [("Y", shape)],
                         {"approximate": case.p["approximate"]})

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = f"{node.domain + '::' if node.domain else ''}Gelu"
        nh.node_inputs(node, what, 1, 1)
        if node.domain == "":
            if node.opset < 20:
                raise UsageError(f"{what}: ai.onnx Gelu exists from opset 20, the model imports opset {node.opset}")
            approximate = node.attr("approximate", "none")
            if isinstance(approximate, bytes):
                approximate = approximate.decode()
            if approximate not in ("none", "tanh"):
                raise UsageError(f"{what}: approximate={approximate!r}, expected 'none' or 'tanh'")
        else:  # com.microsoft Gelu: the erf form, no attributes
            approximate = "none"
        rows, cols, shape = self._node_rows_cols(node, what)
        case = self.make_case({"rows": rows, "cols": cols, "approximate": approximate}, what)
        return NodeBinding(case, {"X": 0}, {"Y": (0, shape)})
