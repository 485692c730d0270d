"""com.microsoft SkipSimplifiedLayerNormalization: v = input + skip (+ bias), y = v / sqrt(mean(v^2) +
epsilon) * gamma; input (rows, hidden), or (batch, S, hidden) with a skip (S, hidden) repeated over the
batch; optional float32 inv_std_var (rows, 1) and input_skip_bias_sum. Its `mean` output (ORT writes
zeros) is never asked for. ORT 1.31 runs f32, f16 and bf16 kernels. See perfbench/ops/_norms.py."""

from __future__ import annotations

from perfbench.ops import _norms
from perfbench.ops.base import Mutant, register


@register
class SkipSimplifiedLayerNormalization(_norms.NormOp):
    name = "SkipSimplifiedLayerNormalization"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "hidden": 903, "stats": 1, "sum": 1},
        {"rows": 6, "hidden": 37, "skip_rows": 3, "sum": 1},
        {"rows": 4, "hidden": 4136, "skip_rows": 2, "bias": 1, "stats": 1, "sum": 1},
        {"rows": 1, "hidden": 896, "sum": 1},
        {"rows": 17, "hidden": 4136},  # 2 threads really split it
    )
    op_type = "SkipSimplifiedLayerNormalization"
    domain = "com.microsoft"
    opset = 1
    skip_op = True
    simplified = True
    in_slots = ("x", "skip", "scale", "bias")
    out_slots = ("y", None, "inv_std", "sum")
    in_names = {"x": "input", "skip": "skip", "scale": "gamma", "bias": "bias"}
    out_names = {"y": "output", "inv_std": "inv_std_var", "sum": "input_skip_bias_sum"}
    params = _norms.NormOp.make_params(beta=False, stats=True, skip=True, bias_default=0)
    mutants = (
        Mutant("mean subtracted", _norms.m_mean_subtracted),
        *_norms.NormOp.standard_mutants(),
        Mutant("bias ignored", _norms.m_bias_ignored, lambda case: case.p["bias"] == 1),
        Mutant("skip repeated row by row", _norms.m_skip_blocks,
               lambda case: 1 < case.p["skip_rows"] < case.p["rows"]),
        Mutant("inv_std_var holds the RMS", _norms.m_inv_std_is_std, lambda case: case.p["stats"] == 1),
    )
    node_types = (("com.microsoft", "SkipSimplifiedLayerNormalization"),)
