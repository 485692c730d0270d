"""Trilu beyond the op contract (tests/ops/test_contract.py): from_node maps k (a known input) and
upper onto cases that compute the node."""

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



def test_from_node_trilu_k_and_upper():
    op = ops_pkg.get("Trilu")
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 7)).astype(np.float32)
    for attrs, k in (({}, None), ({"upper": 0}, np.array(-2)), ({"upper": 1}, np.array(3)),
                     ({"upper": 0}, np.array(2**62))):
        inputs = [(np.float32, x.shape)] + ([] if k is None else [(np.int64, ())])
        b = op.from_node(_node("Trilu", inputs, attrs, values=[None, k]))
        kk = 0 if k is None else int(k)
        want = np.triu(x, kk) if attrs.get("upper", 1) else np.tril(x, kk)
        arrays = [x] + ([] if k is None else [np.asarray(k, np.int64)])
        assert same_bits(_run_binding(op, b, arrays), want)
    with pytest.raises(NodeUnsupported, match="not known"):
        op.from_node(_node("Trilu", [(np.float32, x.shape), (np.int64, ())]))
    with pytest.raises(UsageError, match="rank >= 2"):
        op.from_node(_node("Trilu", [(np.float32, (5,))]))
    # an absent optional k (empty name) is no k
    b = op.from_node(_node("Trilu", [(np.float32, x.shape), None]))
    assert b.case.p["k"] == 0 and b.inputs == {"x": 0}
