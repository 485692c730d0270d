"""ReduceMean beyond the op contract (tests/ops/test_contract.py): empty and rank-0 edges, a long sum
that stays accurate, from_node (axes as attribute or input, known or not)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops.base import NodeUnsupported
from tests.conftest import isas_to_test
from tests.helpers import library
from tests.helpers import node_info as _node

pytestmark = pytest.mark.usefixtures("auto_isa")

SUPPORTED = isas_to_test(library())


def test_reduce_mean_edges(lib):
    x = np.zeros((3, 0, 4), np.float32)
    y = np.full((3, 1, 4), 7.0, np.float32)
    eltwise.reduce_mean(lib, x, y, axes=[1]).run()
    assert np.isnan(y).all()  # the mean of nothing
    for dt in (np.float16, ml_dtypes.bfloat16):
        y16 = np.zeros((3, 4), dt)
        eltwise.reduce_mean(lib, x.astype(dt), y16, axes=[1]).run()
        assert np.isnan(y16.astype(np.float32)).all()
    empty = np.zeros((0, 5), np.float32)
    eltwise.reduce_mean(lib, empty, np.zeros((0, 1), np.float32), axes=[-1]).run()  # nothing to do
    s = np.array(3.5, np.float32)
    out = np.zeros((), np.float32)
    eltwise.reduce_mean(lib, s, out).run()
    assert out == 3.5


@pytest.mark.parametrize("isa", SUPPORTED)
def test_reduce_mean_long_sum_is_accurate(isa):
    """16M elements with a large mean, 1 and 2 threads: within 2e-7 of the float64 mean (a plain
    f32 running sum is off by ~1e-3 here)."""
    lib = library()
    lib.select_isa(isa)
    x = (np.random.default_rng(8).random(1 << 24, dtype=np.float32) + np.float32(10.0))
    want = x.astype(np.float64).mean()
    for threads in (1, 2):
        y = np.zeros(1, np.float32)
        eltwise.reduce_mean(lib, x, y, threads=threads).run()
        assert abs(float(y[0]) - want) <= 2e-7 * want


def test_from_node_reduce_mean():
    rm = ops_pkg.get("ReduceMean")
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    # opset 18: axes is an input whose value must be known
    b = rm.from_node(_node("ReduceMean", [("f32", (2, 5, 64)), ("i64", (1,))], values=[None, i64(-1)],
                           attrs={"keepdims": 0}))
    assert b.case.p == {"shape": "2x5x64", "axes": "last", "keepdims": 0}
    assert b.inputs == {"data": 0, "axes": 1} and b.outputs == {"reduced": (0, (2, 5))}
    with pytest.raises(NodeUnsupported, match="not a known constant"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 5, 64)), ("i64", (1,))]))
    # axes left out: every axis, or nothing at all with noop_with_empty_axes
    b = rm.from_node(_node("ReduceMean", [("f16", (4, 4096))], dtype="f16"))
    assert b.case.p == {"shape": "4x4096", "axes": "all", "keepdims": 1} and b.outputs["reduced"][1] == (1, 1)
    with pytest.raises(NodeUnsupported, match="noop_with_empty_axes=1"):
        rm.from_node(_node("ReduceMean", [("f32", (4, 8))], attrs={"noop_with_empty_axes": 1}))
    # a middle run of axes, negative and unsorted
    b = rm.from_node(_node("ReduceMean", [("f32", (2, 3, 4, 5)), ("i64", (2,))], values=[None, i64(-2, 1)]))
    assert b.case.p["axes"] == "1-2" and b.outputs["reduced"][1] == (2, 1, 1, 5)
    # the whole tensor named axis by axis is "all"
    b = rm.from_node(_node("ReduceMean", [("f32", (3, 7)), ("i64", (2,))], values=[None, i64(0, 1)]))
    assert b.case.p["axes"] == "all" and b.inputs == {"data": 0}
    with pytest.raises(NodeUnsupported, match="not adjacent"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 3, 4)), ("i64", (2,))], values=[None, i64(0, 2)]))
    with pytest.raises(UsageError, match="out of range"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 3)), ("i64", (1,))], values=[None, i64(2)]))
    # opset 13: axes is an attribute
    b = rm.from_node(_node("ReduceMean", [("bf16", (6, 32))], opset=13, attrs={"axes": [1], "keepdims": 1},
                           dtype="bf16"))
    assert b.case.p == {"shape": "6x32", "axes": "last", "keepdims": 1} and b.inputs == {"data": 0}
    b = rm.from_node(_node("ReduceMean", [("f32", (6, 32))], opset=13))
    assert b.case.p["axes"] == "all"
    with pytest.raises(UsageError, match="1 inputs expected|1 input"):
        rm.from_node(_node("ReduceMean", [("f32", (6, 32)), ("i64", (1,))], opset=13, values=[None, i64(1)]))
