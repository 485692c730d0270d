"""ai.onnx Sub (opset 14) with numpy broadcasting: C = A - B (the same op as Add, add.py, with
another operator; not commutative, so a broadcast A runs its own microkernel, sv): a residual
difference, a mean subtracted per row, or a scalar minus a tensor (1 - gate)."""

from __future__ import annotations

import numpy as np

from perfbench.ops.add import BinaryOp
from perfbench.ops.base import Mutant, register


def _m_swapped(op, case, x):
    # the operands taken in the wrong order (B - A): Sub's own failure, the one Add and Mul cannot have
    return {"C": np.subtract(x["B"], x["A"])}


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
    mutants = BinaryOp.mutants + (Mutant("operands swapped (B - A)", _m_swapped, lambda case: True),)
    kernel = "sub"
    onnx_op = "Sub"
    node_types = (("", "Sub"),)
