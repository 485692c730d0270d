"""com.microsoft BiasGelu over (rows, cols): C = gelu_erf(A + B), B a bias of (cols) broadcast
over the rows (the exact erf form of Gelu)."""

from __future__ import annotations

from perfbench.ops import _node_helpers as nh
from perfbench.ops.base import Case, GraphSpec, NodeBinding, NodeInfo, register
from perfbench.ops.gelu import BIAS_MUTANTS, COLS, COMMON_MUTANTS, ROWS, GeluFamily


@register
class BiasGelu(GeluFamily):
    name = "BiasGelu"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "cols": 1031},
        {"rows": 4, "cols": 9},
        {"rows": 257, "cols": 1031},  # 2 threads really split it (>= 2 x the 131072-element grain)
    )
    kernel = "gelu"
    inp, bias_name, out = "A", "B", "C"
    params = (ROWS, COLS)
    mutants = COMMON_MUTANTS + BIAS_MUTANTS
    node_types = (("com.microsoft", "BiasGelu"),)

    def uses_tanh(self, case: Case) -> bool:
        return False

    def has_bias(self, case: Case) -> bool:
        return True

    def graph(self, case: Case) -> GraphSpec:
        shape = self._shape(case)
        return GraphSpec("BiasGelu", "com.microsoft", 1, [("A", "float", shape), ("B", "float", (case.p["cols"],))],
                         [("C", shape)])

    def from_node(self, node: NodeInfo) -> NodeBinding:
        what = "com.microsoft::BiasGelu"
        nh.node_inputs(node, what, 2, 2)
        rows, cols, shape = self._node_rows_cols(node, what)
        self._node_bias(node, what, 1, cols)
        case = self.make_case({"rows": rows, "cols": cols}, what)
        return NodeBinding(case, {"A": 0, "B": 1}, {"C": (0, shape)})
