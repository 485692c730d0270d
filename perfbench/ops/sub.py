"""ai.onnx Sub (opset 14) with numpy broadcasting: C = A - B (the same op as Add, add.py, with
another operator; not commutative, so a broadcast A runs its own microkernel, sv): a residual
difference, a mean subtracted per row, or a scalar minus a tensor (1 - gate)."""

from __future__ import annotations

from perfbench.ops.add import BinaryOp
from perfbench.ops.base import register


@register
class Sub(BinaryOp):
    name = "Sub"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form (a scalar or a
    # column first: the sv microkernel), a 2-thread split
    test_cases = (
        {"a": "1031", "b": "1031"},
        {"a": "7x1031", "b": "7x1"},
        {"a": "scalar", "b": "1031"},
        {"a": "7x1", "b": "7x1031"},
        {"a": "33x1", "b": "1x37"},
        {"a": "130x1031", "b": "1031"},  # 2 threads really split it
    )
    kernel = "sub"
    onnx_op = "Sub"
    node_types = (("", "Sub"),)
