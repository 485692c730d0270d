"""SimplifiedLayerNormalization (ORT's RMS norm, registered in the default domain; the com.microsoft
spelling does not load in ORT 1.31): y = x / sqrt(mean(x^2) + epsilon) * scale over the last axis of
X (rows, hidden), optional float32 inv_std_var (rows, 1). ORT runs f32, f16 and bf16 kernels.
See perfbench/ops/_norms.py."""

from __future__ import annotations

from perfbench.ops import _norms
from perfbench.ops.base import Mutant, register


@register
class SimplifiedLayerNormalization(_norms.NormOp):
    name = "SimplifiedLayerNormalization"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "hidden": 903, "stats": 1},
        {"rows": 5, "hidden": 37},
        {"rows": 2, "hidden": 4136, "stats": 1},
        {"rows": 17, "hidden": 4136},  # 2 threads really split it
    )
    op_type = "SimplifiedLayerNormalization"
    domain = ""
    opset = 1
    # ORT's contrib schema (version 1) under a current default-domain import
    opset_imports = (("", 21),)
    simplified = True
    in_slots = ("x", "scale")
    out_slots = ("y", "inv_std")
    in_names = {"x": "X", "scale": "scale"}
    out_names = {"y": "Y", "inv_std": "inv_std_var"}
    params = _norms.NormOp.make_params(beta=False, stats=True, skip=False)
    mutants = (
        Mutant("mean subtracted", _norms.m_mean_subtracted),
        *_norms.NormOp.standard_mutants(),
        Mutant("inv_std_var holds the RMS", _norms.m_inv_std_is_std, lambda case: case.p["stats"] == 1),
    )
    node_types = (("", "SimplifiedLayerNormalization"),)
