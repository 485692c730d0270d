"""ai.onnx Mul (opset 14) with numpy broadcasting: C = A * B (the same op as Add, add.py, with
another operator): scaling by a row of weights, a gate, or a (rows, 1) column of factors."""

from __future__ import annotations

from perfbench.ops.add import BinaryOp
from perfbench.ops.base import register


@register
class Mul(BinaryOp):
    name = "Mul"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"a": "7x1031", "b": "7x1"},
        {"a": "1031", "b": "scalar"},
        {"a": "2x1x9", "b": "2x5x1"},
        {"a": "130x1031", "b": "1031"},  # 2 threads really split it
    )
    kernel = "mul"
    onnx_op = "Mul"
    node_types = (("", "Mul"),)
