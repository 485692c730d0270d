"""com.microsoft QuickGelu over (rows, cols): Y = X * sigmoid(alpha X), `alpha` a float attribute
(default 1.702; at 1.0 it is SiLU: ORT fuses a Sigmoid feeding a Mul with the same input into
QuickGelu(alpha=1.0) at its default optimization level). The Sigmoid family's kernel `sigmoid`
in its PB_SIGMOID_MUL mode (sigmoid.py)."""

from __future__ import annotations

import math

import numpy as np

from perfbench.errors import UsageError
from perfbench.ops import _eltwise as el
from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, Mutant, NodeBinding, NodeInfo, NodeUnsupported, Param, register
from perfbench.ops.sigmoid import COLS, ROWS, SigmoidFamily, m_sign, m_tail, m_zero_row

DEFAULT_ALPHA = "1.702"


def _m_alpha_ignored(op, case, x):
    # x * sigmoid(x): the attribute never read (SiLU whatever alpha says)
    return {op.out: el.quick_gelu64(x[op.inp], 1.0)}


def _m_alpha_default(op, case, x):
    # x * sigmoid(1.702 x): the default hard-coded, the attribute never read
    return {op.out: el.quick_gelu64(x[op.inp], 1.702)}


def _m_no_product(op, case, x):
    # sigmoid(alpha x) alone: the multiply by x dropped (a Sigmoid where the fused pair was)
    return {op.out: el.sigmoid64(op.alpha(case) * x[op.inp])}


@register
class QuickGelu(SigmoidFamily):
    name = "QuickGelu"
    multiplies = True
    params = (ROWS, COLS, Param("alpha", str, DEFAULT_ALPHA,
                                help="the factor inside the sigmoid, a float32 written as a string ('1.0': SiLU)"))
    mutants = (
        Mutant("alpha ignored: x * sigmoid(x)", _m_alpha_ignored,
               lambda case: float(case.p["alpha"]) != 1.0),
        Mutant("alpha fixed at the default 1.702", _m_alpha_default,
               lambda case: case.p["alpha"] != DEFAULT_ALPHA),
        Mutant("sign flipped: x * sigmoid(-alpha x)", m_sign, lambda case: float(case.p["alpha"]) != 0.0),
        Mutant("tail elements ignored", m_tail),
        Mutant("last row zeroed", m_zero_row),
        Mutant("x * sigmoid(alpha x) without the x", _m_no_product),
    )
    node_types = (("com.microsoft", "QuickGelu"),)
    test_cases = (
        {"rows": 3, "cols": 1031},
        {"rows": 1, "cols": 1020, "alpha": "1.0"},
        {"rows": 1, "cols": 7},
        {"rows": 2, "cols": 17, "alpha": "-0.5"},
        {"rows": 257, "cols": 1031, "alpha": "1.0"},  # 2 threads
    )

    def validate(self, case: Case, where: str) -> None:
        el.parse_float32(case.p["alpha"], where, "alpha")

    def alpha(self, case: Case) -> float:
        return el.parse_float32(case.p["alpha"], self.name, "alpha")

    def graph(self, case: Case) -> GraphSpec:
        shape = self._shape(case)
        return GraphSpec("QuickGelu", "com.microsoft", 1, [("X", "float", shape)], [("Y", shape)],
                         {"alpha": self.alpha(case)})

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = "com.microsoft::QuickGelu"
        nh.check_attrs(node, what, ("alpha",))
        alpha = node.attr("alpha", 1.702)
        if not isinstance(alpha, float):  # ORT refuses the model too ("Mismatched attribute type")
            raise UsageError(f"{what}: alpha={alpha!r} must be a FLOAT attribute (e.g. alpha=1.702), "
                             f"not {type(alpha).__name__}")
        if not math.isfinite(alpha) or abs(alpha) > float(np.finfo(np.float32).max):  # ORT runs it; ours: finite
            raise NodeUnsupported(f"{what}: alpha={alpha!r} (non-finite in float32) is not implemented: our "
                                  "sigmoid kernel takes a finite alpha")
        rows, cols, shape = self._node_rows_cols(node, what)
        case = self.make_case({"rows": rows, "cols": cols, "alpha": el.float32_str(alpha)}, what)
        return NodeBinding(case, {"X": 0}, {"Y": (0, shape)})
