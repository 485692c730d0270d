"""GroupQueryAttention beyond the op contract (tests/ops/test_contract.py): outputs are allocated
as the Harness allocates them (shared-KV mode: present IS each side's own copy of past). More
GroupQueryAttention tests: tests/ops/test_attention.py."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import ops as ops_pkg
from tests.helpers import DTYPES, SEED, cell, same_bits

pytestmark = pytest.mark.usefixtures("auto_isa")


def _shared_kv_cases():
    op = ops_pkg.get("GroupQueryAttention")
    return [p for p in op.test_cases if op.make_case(p).p["kv"] == "shared"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cells_allocate_outputs_as_the_harness_does(lib, dtype):
    """Shared KV mode: each side's present IS its own copy of past (never the cell's inputs,
    never a fresh array); the cell's inputs are left as make_inputs made them."""
    assert _shared_kv_cases(), "no shared-KV GroupQueryAttention test case"
    for params in _shared_kv_cases():
        c = cell("GroupQueryAttention", params, dtype)
        pristine = c.op.make_inputs(c.case, c.dt, np.random.default_rng(SEED))
        for name in ("key", "value"):
            assert c.ort_out[f"present_{name}"] is c.ort_in[f"past_{name}"]
            assert c.ort_in[f"past_{name}"] is not c.inputs[f"past_{name}"]
        mine, out = c.ours_with_inputs(lib)
        for name in ("key", "value"):
            assert out[f"present_{name}"] is mine[f"past_{name}"]
            assert mine[f"past_{name}"] is not c.inputs[f"past_{name}"]
        for k, v in pristine.items():
            assert same_bits(c.inputs[k], v), f"{k} was written"
        # and the kernel wrote the new rows into its copy (the shared buffer is really written)
        assert not same_bits(mine["past_key"], pristine["past_key"])
