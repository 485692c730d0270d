"""ai.onnx Sigmoid (opset 13) over (rows, cols) activations: y = 1 / (1 + exp(-x)). With Mul it is
the SiLU of LLaMA-family MLPs. The Sigmoid family's shared definition (SigmoidFamily) also serves
com.microsoft QuickGelu (quick_gelu.py), y = x * sigmoid(alpha x): one kernel, `sigmoid`, in two
modes (PB_SIGMOID_PLAIN, PB_SIGMOID_MUL).

The oracle is float64 numpy computed stably (_eltwise.sigmoid64: exp(-|x|) never overflows, the
small side is computed directly)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Op, Param, register

ROWS = Param("rows", int, None, minimum=1, help="rows (tokens)")
COLS = Param("cols", int, None, minimum=1, help="activations per row (e.g. the MLP's intermediate size)")


def m_tail(op, case, x):
    # the kernel runs the tensor as one flat run: its tail is the last elements of the last row
    y = op.reference(case, x)
    flat = y.reshape(-1)
    flat[flat.size - el.tail_len(flat.size):] = 0.0
    return {op.out: y}


def m_zero_row(op, case, x):
    y = op.reference(case, x)
    y[-1] = 0.0
    return {op.out: y}


def m_sign(op, case, x):
    # sigmoid(-z) for sigmoid(z) (the exp's sign, or the e / (1 + e) branch, the wrong way round)
    v = x[op.inp]
    s = el.sigmoid64(-op.alpha(case) * v)
    return {op.out: v * s if op.multiplies else s}


class SigmoidFamily(Op):
    """y = sigmoid(x) (multiplies False) or x * sigmoid(alpha x) over (rows, cols); subclasses say
    which, and name their ONNX node's input and output."""

    inp, out = "X", "Y"
    kernel = "sigmoid"
    multiplies = False
    # bf16 only: ORT's f16 runs are what f16 cells meet (checked by tests/ops/test_elementwise.py)
    ort_substitute = {"bf16": "f32"}

    def alpha(self, case: Case):
        """The factor inside the sigmoid: 1 for Sigmoid, the case's alpha for QuickGelu."""
        return 1.0

    def _shape(self, case: Case) -> tuple:
        return (case.p["rows"], case.p["cols"])

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        rows, cols = self._shape(case)
        x = 2.0 * rng.standard_normal((rows, cols))  # pre-activations (gate projections), std 2
        # planted probes, each on its own element (a 1-row decode case too): both saturated tails
        # (sigmoid ~ 1 - 1e-4 and ~ 1e-4), a deep lower tail (sigmoid ~ 2e-9: it must not flip to 1
        # or NaN; a small side cancelled to 0 is below the gate's row-RMS floor and is the dense-grid
        # test's to catch, tests/ops/test_sigmoid.py), and a distinctive last element (a dropped
        # tail or row shows)
        flat = x.reshape(-1)
        n = flat.size
        for pos, v in ((0, 9.0), (n // 3, -9.0), ((2 * n) // 3, -20.0), (n - 1, 3.25)):
            flat[pos] = v
        return {self.inp: np.ascontiguousarray(x.astype(dtype.numpy))}

    def reference(self, case: Case, x: dict) -> np.ndarray:
        v = x[self.inp]
        if not self.multiplies:
            return el.sigmoid64(v)
        return el.quick_gelu64(v, self.alpha(case))

    def oracle(self, case: Case, inputs: dict) -> dict:
        return {self.out: self.reference(case, inputs)}

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return eltwise.sigmoid(lib, inputs[self.inp], outputs[self.out],
                               alpha=self.alpha(case) if self.multiplies else None, threads=threads, device=device)

    def row_sizes(self, case: Case) -> dict:
        return {self.out: case.p["cols"]}

    def flops(self, case: Case) -> float:
        # the exp counted as ~15 operations, plus the select, the add and the division (and the
        # two products of x * sigmoid(alpha x))
        return (22.0 if self.multiplies else 20.0) * case.p["rows"] * case.p["cols"]

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        rows, cols = self._shape(case)
        return float(2 * rows * cols) * dtype.itemsize

    # ---- perfbench node helpers ----
    def _node_rows_cols(self, node: NodeInfo, what: str) -> tuple[int, int, tuple]:
        nh.node_inputs(node, what, 1, 1)
        return el.node_rows_cols(node, what)


@register
class Sigmoid(SigmoidFamily):
    name = "Sigmoid"
    params = (ROWS, COLS)
    mutants = (
        Mutant("tail elements ignored", m_tail),
        Mutant("sign flipped: sigmoid(-x)", m_sign),
        Mutant("last row zeroed", m_zero_row),
        Mutant("0.5 (1 + tanh x) instead (the argument not halved)",
               lambda op, case, x: {op.out: 0.5 * (1.0 + np.tanh(x[op.inp]))}),
    )
    node_types = (("", "Sigmoid"),)
    test_cases = (
        {"rows": 3, "cols": 1031},
        {"rows": 1, "cols": 1020},
        {"rows": 1, "cols": 13},
        {"rows": 257, "cols": 1031},  # 2 threads (>= 2 x the 131072-element grain)
    )

    def graph(self, case: Case) -> GraphSpec:
        shape = self._shape(case)
        return GraphSpec("Sigmoid", "", 13, [("X", "float", shape)], [("Y", shape)])

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = "Sigmoid"
        if node.opset < 6:
            raise NodeUnsupported(f"{what}: opsets before 6 (the legacy consumed_inputs attribute) are not implemented, "
                                  f"the model imports opset {node.opset}")
        rows, cols, shape = self._node_rows_cols(node, what)
        case = self.make_case({"rows": rows, "cols": cols}, what)
        return NodeBinding(case, {"X": 0}, {"Y": (0, shape)})
