"""ai.onnx RMSNormalization (opset 23) over the last axis of X (rows, hidden): y = x / sqrt(mean(x^2) +
epsilon) * scale. ORT 1.31 runs f32 and f16 kernels; its bf16 graph fails to load (the op's function
body needs a bf16 Mul), so bf16 cells compare with ORT in f32. See perfbench/ops/_norms.py."""

from __future__ import annotations

from perfbench.ops import _norms
from perfbench.ops._reference import evaluate_spec
from perfbench.ops.base import Mutant, register


@register
class RMSNormalization(_norms.NormOp):
    name = "RMSNormalization"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "hidden": 903},
        {"rows": 5, "hidden": 37, "eps": "1e-06"},
        {"rows": 2, "hidden": 4136},
        {"rows": 17, "hidden": 4136},  # 2 threads really split it
    )
    op_type = "RMSNormalization"
    domain = ""
    opset = 23
    min_opset = 23
    simplified = True
    ort_substitute = {"bf16": "f32"}
    in_slots = ("x", "scale")
    out_slots = ("y",)
    in_names = {"x": "X", "scale": "scale"}
    out_names = {"y": "Y"}
    params = _norms.NormOp.make_params(beta=False, stats=False, skip=False)
    mutants = (
        Mutant("mean subtracted", _norms.m_mean_subtracted),
        *_norms.NormOp.standard_mutants(),
    )
    node_types = (("", "RMSNormalization"),)

    def oracle(self, case, inputs):
        # an ONNX-standard op: the truth is onnx.reference's RMSNormalization on float64 inputs
        return evaluate_spec(self.graph(case), inputs)
