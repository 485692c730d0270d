"""ai.onnx LayerNormalization (opset 17) over the last axis of X (rows, hidden): optional B (beta),
optional float32 Mean and InvStdDev outputs (rows, 1). ORT 1.31 runs f32, f16 and bf16 kernels
(bf16 is compared head to head). See perfbench/ops/_norms.py for the family's semantics."""

from __future__ import annotations

from perfbench.ops import _norms
from perfbench.ops._reference import evaluate_spec
from perfbench.ops.base import Mutant, register


@register
class LayerNormalization(_norms.NormOp):
    name = "LayerNormalization"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "hidden": 903, "stats": 1},
        {"rows": 5, "hidden": 37, "beta": 0},
        {"rows": 2, "hidden": 4136, "stats": 1},
        {"rows": 1, "hidden": 896},
        {"rows": 17, "hidden": 4136},  # 2 threads really split it
    )
    op_type = "LayerNormalization"
    domain = ""
    opset = 17
    in_slots = ("x", "scale", "beta")
    out_slots = ("y", "mean", "inv_std")
    in_names = {"x": "X", "scale": "Scale", "beta": "B"}
    out_names = {"y": "Y", "mean": "Mean", "inv_std": "InvStdDev"}
    params = _norms.NormOp.make_params(beta=True, stats=True, skip=False)
    mutants = (
        Mutant("mean not subtracted", _norms.m_mean_ignored),
        *_norms.NormOp.standard_mutants(),
        Mutant("InvStdDev holds the std", _norms.m_inv_std_is_std, lambda case: case.p["stats"] == 1),
    )
    node_types = (("", "LayerNormalization"),)

    def oracle(self, case, inputs):
        # an ONNX-standard op: the truth is onnx.reference's LayerNormalization on float64 inputs
        return evaluate_spec(self.graph(case), inputs)
