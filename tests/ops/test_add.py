"""Add (and Mul: one binary kernel, one BinaryOp) beyond the op contract (tests/ops/test_contract.py):
broadcasting is bit-exact against numpy's own f32/f16/bf16 arithmetic on many shape pairs, both
directions, 1 and 2 threads, every ISA path; from_node maps broadcasting nodes or declines them."""

from __future__ import annotations

import itertools

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
NP_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)
SHAPE_PAIRS = [
    ((), ()), ((1,), (5,)), ((4, 1), (1, 9)), ((3, 1, 17), (5, 1)), ((2, 3, 4, 5), (3, 1, 5)),
    ((1, 1, 1), (6,)), ((8, 1, 1, 3), (1, 7, 2, 1)), ((2, 1, 3, 1, 4), (1, 5, 1, 6, 1)),
    ((2000, 70), (70,)), ((70, 1), (70, 2000)), ((1, 2, 1, 2, 1, 2, 1, 2), (2, 1, 2, 1, 2, 1, 2, 1)),
]


@pytest.mark.parametrize("isa", SUPPORTED)
def test_broadcasting_is_bit_exact_against_numpy(isa):
    """f32, f16 and bf16 arithmetic is one f32 operation rounded once, as numpy's own: identical
    bits, for every broadcast pattern (both directions) and 1 and 2 threads."""
    lib = library()
    lib.select_isa(isa)
    rng = np.random.default_rng(5)
    for (sa, sb), dt, (name, f) in itertools.product(SHAPE_PAIRS, NP_DTYPES, (("add", np.add), ("mul", np.multiply),
                                                                       ("sub", np.subtract))):
        for x_shape, y_shape in ((sa, sb), (sb, sa)):
            a = rng.standard_normal(x_shape).astype(dt)
            b = rng.standard_normal(y_shape).astype(dt)
            want = f(a, b)
            for threads in (1, 2):
                got = np.full(want.shape, 7, dt)
                getattr(eltwise, name)(lib, a, b, got, threads).run()
                assert got.tobytes() == want.tobytes(), (name, x_shape, y_shape, np.dtype(dt).name, threads)


def test_from_node_add_mul_broadcasting():
    add, mul = ops_pkg.get("Add"), ops_pkg.get("Mul")
    b = add.from_node(_node("Add", [("f16", (2, 1, 5)), ("f16", (3, 1))], opset=14, dtype="f16"))
    assert b.case.p == {"a": "2x1x5", "b": "3x1"}
    assert b.inputs == {"A": 0, "B": 1} and b.outputs == {"C": (0, (2, 3, 5))}
    b = mul.from_node(_node("Mul", [("f32", ()), ("f32", (4, 4096))], opset=13))
    assert b.case.p == {"a": "scalar", "b": "4x4096"}
    with pytest.raises(UsageError, match="do not broadcast"):
        add.from_node(_node("Add", [("f32", (3, 4)), ("f32", (5,))], opset=14))
    with pytest.raises(NodeUnsupported, match="opsets before 7"):
        add.from_node(_node("Add", [("f32", (3, 4)), ("f32", (4,))], opset=6, attrs={"broadcast": 1}))
    with pytest.raises(NodeUnsupported, match="element type"):
        add.from_node(_node("Add", [("i64", (3,)), ("i64", (3,))], opset=14, dtype=None))
    with pytest.raises(NodeUnsupported, match="rank 9"):
        add.from_node(_node("Add", [("f32", (1,) * 9), ("f32", (2,))], opset=14))
    with pytest.raises(UsageError, match="2 inputs"):
        add.from_node(_node("Add", [("f32", (3,))], opset=14))
