"""ScatterND beyond the op contract (tests/ops/test_contract.py): from_node maps reductions and index
depths onto cases that compute the node."""

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



def test_from_node_scatter_nd_reductions_and_depths():
    op = ops_pkg.get("ScatterND")
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 5, 6)).astype(np.float32)
    for reduction, idx in (("none", np.array([[1, -1], [3, 0], [0, 2]])), ("mul", np.array([[2], [2], [-4]])),
                           ("min", np.array([[0, 1, 2], [3, 4, 5]]))):
        idx = idx.astype(np.int64)
        upd = rng.standard_normal(idx.shape[:-1] + data.shape[idx.shape[-1]:]).astype(np.float32)
        b = op.from_node(_node("ScatterND", [(np.float32, data.shape), (np.int64, idx.shape), (np.float32, upd.shape)],
                               {"reduction": reduction}))
        assert b.case.p["reduction"] == reduction and b.case.p["k"] == idx.shape[-1]
        from perfbench.ops._reference import evaluate

        attrs = {} if reduction == "none" else {"reduction": reduction}
        want = evaluate("ScatterND", [data, idx, upd], opset=18, **attrs)[0].astype(np.float32)
        got = _run_binding(op, b, [data, idx, upd])
        if reduction == "none":
            assert same_bits(got, want)
        else:  # duplicates combine in f32, one rounding per update; the reference in float64
            np.testing.assert_allclose(got, want, rtol=1e-6)
            assert not np.array_equal(got, data)
    with pytest.raises(NodeUnsupported, match="duplicates"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (3, 1)), (np.float32, (3, 3))]))
    with pytest.raises(UsageError, match="updates must have shape"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (1, 1)), (np.float32, (1, 2))]))
    with pytest.raises(UsageError, match="reduction"):
        op.from_node(_node("ScatterND", [(np.float32, (2, 3)), (np.int64, (1, 1)), (np.float32, (1, 3))],
                           {"reduction": "avg"}))
