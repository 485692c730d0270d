"""ai.onnx Mul (opset 14) with numpy broadcasting: C = A * B (the same op as Add, add.py, with
another operator): scaling by a row of weights, a gate, or a (rows, 1) column of factors."""

from __future__ import annotations

from perfbench.ops.add import BinaryOp
from perfbench.ops.base import register


@register
class Mul(BinaryOp):
    name = "Mul"
    kernel = "mul"
    onnx_op = "Mul"
    node_types = (("", "Mul"),)
