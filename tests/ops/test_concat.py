"""Concat beyond the op contract (tests/ops/test_contract.py): from_node maps any axis onto a case
that computes the node."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.ops.base import NodeUnsupported
from tests.helpers import array_node_info as _node
from tests.helpers import run_binding as _run_binding
from tests.helpers import same_bits

pytestmark = pytest.mark.usefixtures("auto_isa")



def test_from_node_concat_any_axis():
    op = ops_pkg.get("Concat")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for axis in (-1, 0, 2, -3):
        shape_b = list(a.shape)
        shape_b[axis] = 3
        bb = rng.standard_normal(shape_b).astype(np.float32)
        b = op.from_node(_node("Concat", [(np.float32, a.shape), (np.float32, bb.shape)], {"axis": axis}))
        want = np.concatenate([a, bb], axis=axis)
        assert b.outputs["present"][1] == want.shape
        assert same_bits(_run_binding(op, b, [a, bb]), want)
    with pytest.raises(NodeUnsupported, match="3 inputs"):
        op.from_node(_node("Concat", [(np.float32, a.shape)] * 3, {"axis": 1}))
    with pytest.raises(UsageError, match="differ off axis"):
        op.from_node(_node("Concat", [(np.float32, (2, 3)), (np.float32, (3, 3))], {"axis": 1}))
    with pytest.raises(UsageError, match="no axis"):
        op.from_node(_node("Concat", [(np.float32, (2, 3)), (np.float32, (2, 3))]))
