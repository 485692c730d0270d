"""RotaryEmbedding's token blocks and half-row chunks: blocks that span batch rows, the last
partial block, and head sizes whose half-row exceeds the stack buffer (chunked), on every
ISA path this CPU runs, in both layouts and pairings."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes, numerics, ops
from perfbench.ops.base import to_f64

SHAPES = [
    # batch, seq, heads, head_size, layout, interleaved
    (3, 100, 2, 128, "bnsh", 1),  # blocks of 32 tokens cross batch rows; last block partial
    (3, 100, 2, 128, "bsnh", 0),
    (2, 70, 3, 2, "bnsh", 1),  # the smallest head: blocks of 128 tokens
    (1, 3, 2, 8200, "bsnh", 1),  # half-row of 4100 pairs, x2 interleaved > 4096: chunked
    (1, 3, 2, 8200, "bnsh", 0),  # 4100 > 4096 floats: chunked
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}s{}n{}h{}-{}-i{}".format(*s))
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_blocks_and_chunks_match_the_oracle(lib, shape, dt):
    b, s, n, h, layout, il = shape
    op = ops.get("RotaryEmbedding")
    case = op.make_case(dict(batch=b, seq=s, heads=n, head_size=h, layout=layout, interleaved=il))
    d = dtypes.get(dt)
    inputs = op.make_inputs(case, d, np.random.default_rng(7))
    ref = op.oracle(case, to_f64(inputs))["output"]
    try:
        for isa in lib.isa_supported:
            lib.select_isa(isa)
            for threads in (1, 2):
                out = np.full(inputs["input"].shape, np.nan, d.numpy)
                op.prepare_ours(lib, case, inputs, {"output": out}, threads).run()
                err = numerics.error(out, ref, h)
                assert err <= numerics.FLOORS[dt], f"{isa} threads={threads}: err {err:.3g}"
    finally:
        lib.select_isa("auto")
