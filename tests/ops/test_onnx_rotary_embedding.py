"""ai.onnx RotaryEmbedding (op OnnxRotaryEmbedding) beyond the op contract (tests/ops/test_contract.py):
from_node maps 3-D and 4-D nodes, with and without position_ids, and rejects invalid ones. Tests
shared with OnnxAttention (numpy model = onnx.reference, kernel fed a wrong argument, ORT's path):
tests/ops/test_onnx_attention.py."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.ops.base import NodeInfo

pytestmark = pytest.mark.usefixtures("auto_isa")

ROT = "OnnxRotaryEmbedding"


def test_from_node_maps_rotary_embedding():
    op = ops_pkg.get(ROT)
    f32 = np.dtype(np.float32)
    node = NodeInfo("RotaryEmbedding", "", 23, {"num_heads": 8, "rotary_embedding_dim": 32, "interleaved": 1},
                    [(f32, (2, 5, 8 * 64)), (f32, (4096, 16)), (f32, (4096, 16)), (np.dtype(np.int64), (2, 5))],
                    ["Y"], "f32")
    b = op.from_node(node)
    p = b.case.p
    assert (p["layout"], p["heads"], p["head_size"], p["rotary_dim"], p["interleaved"]) == ("3d", 8, 64, 32, 1)
    assert (p["positions"], p["max_pos"]) == (1, 4096)
    assert b.inputs == {"X": 0, "cos_cache": 1, "sin_cache": 2, "position_ids": 3}
    assert op.graph(b.case).inputs[1][2] == (4096, 16)
    node = NodeInfo("RotaryEmbedding", "", 23, {}, [(f32, (1, 4, 5, 32)), (f32, (1, 5, 16)), (f32, (1, 5, 16))],
                    ["Y"], "f32")
    p = op.from_node(node).case.p
    assert (p["layout"], p["positions"], p["rotary_dim"]) == ("4d", 0, 0)
    with pytest.raises(UsageError):  # 3-D needs num_heads
        op.from_node(NodeInfo("RotaryEmbedding", "", 23, {}, [(f32, (1, 5, 64)), (f32, (1, 5, 32)),
                                                              (f32, (1, 5, 32))], ["Y"], "f32"))
    with pytest.raises(UsageError):  # caches do not match rotary_embedding_dim
        op.from_node(NodeInfo("RotaryEmbedding", "", 23, {"rotary_embedding_dim": 16},
                              [(f32, (1, 4, 5, 32)), (f32, (1, 5, 16)), (f32, (1, 5, 16))], ["Y"], "f32"))
