"""com.microsoft FastGelu over (rows, cols): the tanh form of Gelu, with an optional bias of
(cols) added first: Y = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), v = X [+ bias]."""

from __future__ import annotations

from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, NodeBinding, NodeInfo, Param, register
from perfbench.ops.gelu import BIAS_MUTANTS, COLS, COMMON_MUTANTS, ROWS, GeluFamily


@register
class FastGelu(GeluFamily):
    name = "FastGelu"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "cols": 1031, "bias": 1},
        {"rows": 3, "cols": 1031, "bias": 0},
        {"rows": 2, "cols": 13, "bias": 1},
        {"rows": 257, "cols": 1031, "bias": 1},  # 2 threads (>= 2 x the grain), the bias restarting inside a block
    )
    kernel = "gelu"
    inp, bias_name, out = "X", "bias", "Y"
    params = (ROWS, COLS, Param("bias", int, 1, choices=(0, 1), help="1: the optional bias input (cols) is given"))
    mutants = COMMON_MUTANTS + BIAS_MUTANTS
    node_types = (("com.microsoft", "FastGelu"),)

    def uses_tanh(self, case: Case) -> bool:
        return True

    def has_bias(self, case: Case) -> bool:
        return case.p["bias"] == 1

    def graph(self, case: Case) -> GraphSpec:
        shape = self._shape(case)
        inputs = [("X", "float", shape)] + ([("bias", "float", (case.p["cols"],))] if self.has_bias(case) else [])
        return GraphSpec("FastGelu", "com.microsoft", 1, inputs, [("Y", shape)])

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = "com.microsoft::FastGelu"
        ins = nh.node_inputs(node, what, 1, 2)
        rows, cols, shape = self._node_rows_cols(node, what)
        bias = ins[1] is not None
        if bias:
            self._node_bias(node, what, 1, cols)
        case = self.make_case({"rows": rows, "cols": cols, "bias": int(bias)}, what)
        return NodeBinding(case, {"X": 0, **({"bias": 1} if bias else {})}, {"Y": (0, shape)})
