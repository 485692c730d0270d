"""com.microsoft SkipLayerNormalization: v = input + skip (+ bias), y = LayerNorm(v) * gamma (+ beta)
over the hidden axis; input (rows, hidden), or (batch, S, hidden) with a skip (S, hidden) repeated
over the batch (skip_rows = S); optional float32 mean and inv_std_var (rows, 1) and
input_skip_bias_sum. ORT 1.31 runs f32, f16 and bf16 kernels. See perfbench/ops/_norms.py."""

from __future__ import annotations

from perfbench.ops import _norms
from perfbench.ops.base import Mutant, register


@register
class SkipLayerNormalization(_norms.NormOp):
    name = "SkipLayerNormalization"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"rows": 3, "hidden": 903, "stats": 1, "sum": 1},
        {"rows": 6, "hidden": 37, "skip_rows": 3, "bias": 0, "beta": 0, "sum": 1},
        {"rows": 4, "hidden": 4136, "skip_rows": 2, "stats": 1, "sum": 1},
        {"rows": 1, "hidden": 896, "sum": 1},
        {"rows": 17, "hidden": 4136},  # 2 threads really split it
    )
    op_type = "SkipLayerNormalization"
    domain = "com.microsoft"
    opset = 1
    skip_op = True
    in_slots = ("x", "skip", "scale", "beta", "bias")
    out_slots = ("y", "mean", "inv_std", "sum")
    in_names = {"x": "input", "skip": "skip", "scale": "gamma", "beta": "beta", "bias": "bias"}
    out_names = {"y": "output", "mean": "mean", "inv_std": "inv_std_var", "sum": "input_skip_bias_sum"}
    params = _norms.NormOp.make_params(beta=True, stats=True, skip=True)
    mutants = (
        Mutant("mean not subtracted", _norms.m_mean_ignored),
        *_norms.NormOp.standard_mutants(),
        Mutant("bias ignored", _norms.m_bias_ignored, lambda case: case.p["bias"] == 1),
        Mutant("sum output without the bias", _norms.m_sum_without_bias,
               lambda case: case.p["bias"] == 1 and case.p["sum"] == 1),
        Mutant("skip repeated row by row", _norms.m_skip_blocks,
               lambda case: 1 < case.p["skip_rows"] < case.p["rows"]),
        Mutant("inv_std_var holds the std", _norms.m_inv_std_is_std, lambda case: case.p["stats"] == 1),
    )
    node_types = (("com.microsoft", "SkipLayerNormalization"),)
