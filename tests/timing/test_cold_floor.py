"""Cold floors matched to the cell's graph (issue 17, finding 4): ORT's cold floor has the cell's
inputs and outputs (count and element types), so a many-input op's cold per-input cost is
subtracted on ORT's side as ours' no-op floor subtracts ours."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from perfbench import dtypes, ops
from perfbench.ops import ort as ortlib
from perfbench.timing.protocol import CellSpec, Harness


def _gqa_graph():
    op = ops.get("GroupQueryAttention")
    case = op.make_case({"heads": 4, "kv_heads": 2, "head_size": 16, "past": 64})
    return op.graph(case)


def test_floor_graph_keeps_every_input_and_output_with_its_type():
    g = _gqa_graph()
    floor = ortlib.floor_graph(g)
    assert [(n, t) for n, t, _ in floor.inputs] == [(n, t) for n, t, _ in g.inputs if n]
    assert [o[0] for o in floor.outputs] == [o[0] for o in g.outputs if o[0]]
    assert all(shape == (1,) for _, _, shape in floor.inputs)
    assert len(floor.inputs) >= 5  # query, key, value, past_key, past_value, seqlens_k, total_sequence_length


def test_floor_model_runs_in_ort_with_unused_inputs_bound():
    g = _gqa_graph()
    floor = ortlib.floor_graph(g)
    model = ortlib.build_floor_model(floor, dtypes.F16)
    m = onnx.load_from_string(model)
    onnx.checker.check_model(m)
    assert len(m.graph.input) == len(floor.inputs) and len(m.graph.output) == len(floor.outputs)
    spec = CellSpec(op="GroupQueryAttention", params=[], dtype="f16", threads=1)
    bound = Harness._floor_session(spec, g, dtypes.F16)
    bound.run()
    first_float = next(n for n, t, _ in floor.inputs if t == "float")
    bound.inputs[first_float][:] = 3.0
    bound.run()
    assert all(np.all(bound.outputs[o[0]].astype(np.float32) == 3.0) for o in floor.outputs if o[2] == "float")
    assert [n.op_type for n in m.graph.node] == ["Identity"] * 3  # one per output


def test_cold_cell_subtracts_a_floor_keyed_by_its_graph(lib):
    h = Harness(lib)
    out = h.measure(CellSpec(op="Softmax", params=[["heads", 16], ["queries", 1], ["keys", 4096]], dtype="f32",
                             threads=1, replicates=2, rounds=1, block_ms=0.3, cache="cold",
                             evict_bytes=16 * 1024 * 1024, evict_threads=1))
    keys = [k for k in h._floors if k[0] == "ort-cold"]
    assert len(keys) == 1 and keys[0][-1] == (("float",), ("float",), "f32")
    assert out.ort_floor_ns == h._floors[keys[0]] > 0


def _every_op_case():
    for name in sorted(ops.REGISTRY):
        op = ops.get(name)
        if op.test_cases:
            yield name, op.test_cases[0]


@pytest.mark.parametrize("name, params", list(_every_op_case()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dt", [dtypes.F32, dtypes.F16], ids=lambda d: d.name)
def test_every_ops_floor_graph_runs_in_ort_with_one_node_per_output(name, params, dt):
    op = ops.get(name)
    graph = op.graph(op.make_case(params))
    floor = ortlib.floor_graph(graph)
    m = onnx.load_from_string(ortlib.build_floor_model(floor, dt))
    assert len(m.graph.node) == len(floor.outputs) == len([o for o in graph.outputs if o[0]])
    spec = CellSpec(op=name, params=[], dtype=dt.name, threads=1)
    Harness._floor_session(spec, graph, dt).run()
