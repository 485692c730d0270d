"""Transpose beyond the op contract (tests/ops/test_contract.py): large tiled transposes are exact on
every ISA path; from_node maps perm attributes onto cases that compute the node."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.ops.base import NodeUnsupported
from tests.helpers import array_node_info as _node
from tests.helpers import library, same_bits
from tests.helpers import run_binding as _run_binding

pytestmark = pytest.mark.usefixtures("auto_isa")

DTYPES = ("f32", "f16", "bf16")


def test_large_tiled_transposes_are_exact():
    """Shapes past the 32x32 tiles and the 8x8 register blocks, in every ISA path."""
    lib = library()
    from perfbench.kernels_ffi import movement as mvk

    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        dt = dtypes.get(dtype)
        for shape, perm in (((70, 45), (1, 0)), ((2, 37, 3, 41), (0, 2, 3, 1)), ((3, 40, 2, 33), (3, 1, 0, 2))):
            x = rng.standard_normal(shape).astype(dt.numpy)
            want = np.ascontiguousarray(x.transpose(perm))
            for isa in lib.isa_supported:
                lib.select_isa(isa)
                y = np.empty(want.shape, dt.numpy)
                mvk.transpose(lib, x, y, perm, 2).run()
                assert same_bits(y, want), (dtype, shape, perm, isa)
        lib.select_isa("auto")


def test_from_node_transpose():
    op = ops_pkg.get("Transpose")
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5, 1, 2, 3)).astype(np.float32)
    for perm in (None, [6, 0, 5, 1, 4, 2, 3]):  # default perm: axes reversed; a rank-7 permutation
        b = op.from_node(_node("Transpose", [(np.float32, x.shape)], {} if perm is None else {"perm": perm}))
        want = np.transpose(x, perm)
        assert b.outputs == {"y": (0, want.shape)}
        assert same_bits(_run_binding(op, b, [x]), np.ascontiguousarray(want))
    with pytest.raises(NodeUnsupported, match="int64"):
        op.from_node(_node("Transpose", [(np.int64, (2, 3))]))
    with pytest.raises(NodeUnsupported, match="rank 9"):
        op.from_node(_node("Transpose", [(np.float32, (1,) * 9)]))
    with pytest.raises(UsageError, match="not a permutation"):
        op.from_node(_node("Transpose", [(np.float32, (2, 3))], {"perm": [0, 0]}))
    with pytest.raises(UsageError, match="1 input expected, the node has 2"):
        op.from_node(_node("Transpose", [(np.float32, (2, 3)), (np.float32, (2, 3))]))
