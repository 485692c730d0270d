"""Initializers in the ORT side's graph (GraphSpec.initializers, issue 18 part 2): a weight that ORT
sees as a model constant (and prepacks at session creation, as MatMul's B in a real model) instead
of a graph input bound per run. Against real ONNX Runtime: a MatMul whose B is an initializer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from perfbench import dtypes
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec

M, K, N = 3, 33, 5


def matmul(initializers=("B",)) -> GraphSpec:
    return GraphSpec("MatMul", "", 13, [("A", "float", (M, K)), ("B", "float", (K, N))], [("Y", (M, N))],
                     initializers=initializers)


def arrays(seed=3):
    rng = np.random.default_rng(seed)
    return {"A": rng.standard_normal((M, K)).astype(np.float32), "B": rng.standard_normal((K, N)).astype(np.float32)}


@pytest.mark.parametrize("copies", [1, 3])
def test_each_copy_has_its_own_constant_and_it_is_not_a_graph_input(copies):
    spec, x = matmul(), arrays()
    model = onnx.load_from_string(ortlib.build_model(spec, dtypes.F32, copies, values=ortlib.initializer_values(spec, x)))
    assert [i.name for i in model.graph.initializer] == [f"B__{k}" for k in range(copies)]
    assert all(np.array_equal(onnx.numpy_helper.to_array(t), x["B"]) for t in model.graph.initializer)
    assert [i.name for i in model.graph.input] == [f"A__{k}" for k in range(copies)]
    assert [list(n.input) for n in model.graph.node] == [[f"A__{k}", f"B__{k}"] for k in range(copies)]
    onnx.checker.check_model(model, full_check=True)
    plain = onnx.load_from_string(ortlib.build_model(spec, dtypes.F32, 1, plain_names=True, values=x))
    assert [i.name for i in plain.graph.initializer] == ["B"] and [i.name for i in plain.graph.input] == ["A"]


def test_k_copies_of_an_f16_node_with_a_constant_pay_k_times_every_node():
    """One tensor shared by the copies: ORT cast it once for all of them (1 copy: 2 Casts and 1
    MatMul; 3 copies: 7 Casts). One per copy: each copy pays its own, as each node of a model."""
    spec = matmul()
    x = {k: v.astype(np.float16) for k, v in arrays().items()}
    out = {"Y": np.empty((M, N), np.float16)}
    runs = {c: ortlib.node_runs(ortlib.build_model(spec, dtypes.F16, c, values=x), 1, x, out, spec, c) for c in (1, 3)}
    assert runs[3] == {op: 3 * n for op, n in runs[1].items()}


def test_ort_runs_the_constant_and_bound_does_not_bind_it():
    spec, x = matmul(), arrays()
    sess = ortlib.make_session(ortlib.build_model(spec, dtypes.F32, 2, values=ortlib.initializer_values(spec, x)), 1,
                               "off")
    out = {"Y": np.full((M, N), np.nan, np.float32)}
    b = x["B"].copy()
    bound = ortlib.Bound(sess, spec, 2, x, out)
    x["B"][...] = 0.0  # a bound input would now read zeros: the model's constant does not
    bound.run()
    np.testing.assert_allclose(out["Y"], x["A"] @ b, rtol=1e-5, atol=1e-5)
    # the same graph with B a runtime input reads the zeros
    spec_in = matmul(initializers=())
    sess_in = ortlib.make_session(ortlib.build_model(spec_in, dtypes.F32, 2), 1, "off")
    ortlib.Bound(sess_in, spec_in, 2, x, out).run()
    assert np.array_equal(out["Y"], np.zeros((M, N), np.float32))


def test_an_initializer_needs_its_value_of_its_declared_shape():
    spec = matmul()
    with pytest.raises(ValueError, match="initializer 'B' needs its value"):
        ortlib.build_model(spec, dtypes.F32)
    with pytest.raises(ValueError, match=r"initializer 'B__0': value of shape \(5, 33\)"):
        ortlib.build_model(spec, dtypes.F32, values={"B": np.zeros((N, K), np.float32)})
    # raw bytes of another width than the element type's: refused, not a model with short data
    with pytest.raises(ValueError, match="initializer 'B__0': values of dtype float32 for an element type of 2 bytes"):
        ortlib.build_model(spec, dtypes.F16, values={"B": np.zeros((K, N), np.float32)})


def test_a_bf16_and_f16_initializer_holds_the_values_bits():
    spec = matmul()
    for dt in (dtypes.BF16, dtypes.F16):
        b = arrays()["B"].astype(dt.numpy)
        # the initializers are appended to the serialized model as one more graph field (no
        # TensorProto built in Python): parsed, the graph holds every copy, whole and valid
        model = onnx.load_from_string(ortlib.build_model(spec, dt, 3, values={"B": b}))
        onnx.checker.check_model(model)
        assert [t.name for t in model.graph.initializer] == ["B__0", "B__1", "B__2"]
        assert [n.name for n in model.graph.node] == ["node0", "node1", "node2"]
        for t in model.graph.initializer:
            assert t.data_type == dt.onnx and list(t.dims) == [K, N]
            assert t.raw_data == b.tobytes()


def test_first_session_and_the_floor_graph_leave_initializers_out_of_what_is_bound():
    spec, x = matmul(), arrays()
    cdt, sess = ortlib.first_session(_Op(), spec, dtypes.F32, 1, "off")  # zeros: which kernel, not values
    assert cdt is dtypes.F32 and [i.name for i in sess.get_inputs()] == ["A__0"]
    cdt, sess = ortlib.first_session(_Op(), spec, dtypes.F32, 1, "off", x)
    assert [i.name for i in sess.get_inputs()] == ["A__0"]
    floor = ortlib.floor_graph(spec)
    assert [n for n, _, _ in floor.inputs] == ["A"] and floor.initializers == ()


class _Op:
    ort_substitute = {}


def test_k_is_capped_so_the_copies_weights_stay_in_the_level_of_one_copys(monkeypatch):
    from perfbench.timing import caches, protocol

    monkeypatch.setattr(caches, "cache_bytes", lambda level: {2: 1 << 20}.get(level))
    monkeypatch.setattr(protocol, "last_level_bytes", lambda: 32 << 20)
    assert protocol.k_cap_for_weights(0, 1) == protocol.MAX_K  # no weights
    assert protocol.k_cap_for_weights(256 << 10, 1) == 2  # L2: 2 x 256 KiB fill half of 1 MiB
    assert protocol.k_cap_for_weights(128 << 10, 2) == 8  # two threads' L2s: 2 MiB
    assert protocol.k_cap_for_weights(4 << 20, 1) == 4  # L3: 4 x 4 MiB = half of 32 MiB
    assert protocol.k_cap_for_weights(64 << 20, 1) == 2  # past half the LLC: the fewest copies
    spec = matmul()
    assert protocol._initializer_bytes(spec, dtypes.F16) == K * N * 2
    assert protocol._initializer_bytes(matmul(initializers=()), dtypes.F32) == 0
