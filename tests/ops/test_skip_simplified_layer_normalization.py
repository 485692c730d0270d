"""SkipSimplifiedLayerNormalization beyond the op contract (tests/ops/test_contract.py): why the op
never asks for `mean` (ORT writes zeros there), and from_node declines a node that does. The rest
of the LayerNormalization family's tests: tests/ops/test_norms.py (one kernel, one NormOp base)."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes
from perfbench import ops as ops_pkg
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec, NodeUnsupported
from tests.helpers import array_node_info

pytestmark = pytest.mark.usefixtures("auto_isa")


def _node(op_type, shapes, outputs=("y",), domain="com.microsoft", attrs=None):
    return array_node_info(op_type, [(np.float32, s) for s in shapes], attrs=attrs, outputs=outputs, opset=17,
                           domain=domain)


DTYPES = ("f32", "f16", "bf16")


@pytest.mark.parametrize("dtype", DTYPES)
def test_ort_skip_simplified_mean_is_zeros(dtype):
    """Why SkipSimplifiedLayerNormalization never asks for `mean`: ORT writes zeros there."""
    dt = dtypes.get(dtype)
    rows, h = 3, 37
    spec = GraphSpec("SkipSimplifiedLayerNormalization", "com.microsoft", 1,
                     [("input", "float", (rows, h)), ("skip", "float", (rows, h)), ("gamma", "float", (h,))],
                     [("output", (rows, h)), ("mean", (rows, 1), "f32")], {"epsilon": 1e-5})
    rng = np.random.default_rng(0)
    ins = {n: (rng.standard_normal(s) + 2).astype(dt.numpy) for n, _, s in spec.inputs}
    outs = {"output": np.full((rows, h), np.nan, dt.numpy), "mean": np.full((rows, 1), np.nan, np.float32)}
    ortlib.Bound(ortlib.make_session(ortlib.build_model(spec, dt), 1, "off"), spec, 1, ins, outs).run()
    assert (outs["mean"] == 0).all()


def test_from_node_skip_simplified_mean_is_declined():
    op = ops_pkg.get("SkipSimplifiedLayerNormalization")
    ok = op.from_node(_node("SkipSimplifiedLayerNormalization", [(2, 8), (2, 8), (8,)], ["y", "", "", "s"],
                            domain="com.microsoft", attrs={"epsilon": 1e-6}))
    assert ok.case.p == {"rows": 2, "hidden": 8, "skip_rows": 0, "bias": 0, "stats": 0, "sum": 1, "eps": "1e-06"}
    with pytest.raises(NodeUnsupported, match="no mean"):
        op.from_node(_node("SkipSimplifiedLayerNormalization", [(2, 8), (2, 8), (8,)], ["y", "m"],
                           domain="com.microsoft"))
