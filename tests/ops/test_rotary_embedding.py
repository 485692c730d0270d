"""com.microsoft RotaryEmbedding beyond the op contract (tests/ops/test_contract.py): our kernel fed
a bug-inducing argument (interleaved flipped, positions ignored) fails the numerics gate."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.kernels_ffi import wrappers
from tests.helpers import DTYPES, Cell, cell

pytestmark = pytest.mark.usefixtures("auto_isa")


def _rotary_with(lib, c: Cell, *, flip_interleaved: bool = False, arange_positions: bool = False) -> dict:
    p = c.case.p
    x = c.inputs
    pos = x["position_ids"]
    if arange_positions:
        b, s = pos.shape
        pos = np.ascontiguousarray(np.tile(np.arange(s, dtype=np.int64), (b, 1)))
    out = np.empty(c.shapes["output"], c.dt.numpy)
    interleaved = bool(p["interleaved"]) != flip_interleaved
    wrappers.rotary_embedding(lib, x["input"], pos, x["cos_cache"], x["sin_cache"], out,
                              interleaved=interleaved, num_heads=p["heads"], threads=1).run()
    return {"output": out}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bug", ["interleaved-flipped", "positions-arange"])
def test_rotary_kernel_fed_a_wrong_argument_fails_the_gate(lib, bug, dtype):
    op = ops_pkg.get("RotaryEmbedding")
    for params in op.test_cases:
        c = cell(op.name, params, dtype)
        kw = {"flip_interleaved": True} if bug == "interleaved-flipped" else {"arange_positions": True}
        g = c.gate(_rotary_with(lib, c, **kw))
        assert not g.ours_ok, f"{c.case.case_id} {dtype}: the gate accepted {bug}: {g.describe()}"
        # the same call without the bug passes (the rejection is the argument's doing)
        assert c.gate(_rotary_with(lib, c)).ours_ok
