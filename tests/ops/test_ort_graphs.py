"""The ORT side of a case (perfbench.ops.ort) against real ONNX Runtime: K-copy models load and
every node of the graph (inserted Casts included) runs K times (that K copies run K times into one
shared buffer, for every op and test case, is the op contract's: tests/ops/test_contract.py), which path ORT takes (its own kernel or an
ONNX function body), and bf16 sessions fail as a missing kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from perfbench import dtypes, ops
from perfbench.ops import ort as ortlib

# tiny cases: odd lengths on purpose
CASES = {
    "Softmax": {"batch": 2, "heads": 2, "queries": 3, "keys": 33},
    "RotaryEmbedding": {"batch": 2, "seq": 5, "heads": 2, "head_size": 8},
}


def _cell(op_name: str, dtype: dtypes.DType, seed: int = 11):
    op = ops.get(op_name)
    case = op.make_case(CASES[op_name])
    spec = op.graph(case)
    inputs = op.make_inputs(case, dtype, np.random.default_rng(seed))
    outputs = {n: np.full(s, np.nan, dtype.numpy) for n, s in op.output_shapes(case).items()}
    return op, case, spec, inputs, outputs


@pytest.mark.parametrize("copies", [1, 4])
@pytest.mark.parametrize("op_name", list(CASES))
def test_build_model_is_loadable(op_name, copies):
    op, case, spec, inputs, outputs = _cell(op_name, dtypes.F32)
    blob = ortlib.build_model(spec, dtypes.F32, copies)
    model = onnx.load_from_string(blob)
    assert model.ir_version == ortlib.IR_VERSION
    assert len(model.graph.node) == copies
    assert {n.op_type for n in model.graph.node} == {spec.op_type}
    assert {n.domain or "" for n in model.graph.node} == {spec.domain}
    # every copy's output is a graph output (so ORT cannot merge the copies)
    expect = [f"{name}__{k}" for k in range(copies) for name, _ in spec.outputs]
    assert [o.name for o in model.graph.output] == expect
    sess = ortlib.make_session(blob, 1, "off")  # ORT accepts this IR version
    assert [o.name for o in sess.get_outputs()] == expect
    # every copy reads its own inputs (so inserted Casts cannot be shared between copies)
    assert [i.name for i in sess.get_inputs()] == [f"{n}__{k}" for k in range(copies) for n, _, _ in spec.inputs]


@pytest.mark.parametrize("op_name", list(CASES))
def test_k_copies_pay_k_times_every_node_incl_inserted_casts(op_name):
    """f16 Softmax runs as a function body with Casts: the K-copy graph must run every node of
    it K times, input Casts included, or the differential would leave them out."""
    K = 4
    op, case, spec, inputs, outputs = _cell(op_name, dtypes.F16)
    one = ortlib.node_runs(ortlib.build_model(spec, dtypes.F16, 1), 1, inputs, outputs, spec, 1)
    many = ortlib.node_runs(ortlib.build_model(spec, dtypes.F16, K), 1, inputs, outputs, spec, K)
    assert many == {k: K * v for k, v in one.items()}
    if op_name == "Softmax":
        assert one.get("Cast", 0) >= 2  # the function body's input and output Casts


def test_bound_binds_all_copies_to_the_same_buffer():
    K = 3
    op, case, spec, inputs, outputs = _cell("Softmax", dtypes.F32)
    sess = ortlib.make_session(ortlib.build_model(spec, dtypes.F32, K), 1, "off")
    bound = ortlib.Bound(sess, spec, K, inputs, outputs)
    bound.run()
    ptr = outputs["y"].ctypes.data
    got = bound.binding.get_outputs()
    assert len(got) == K
    assert {v.data_ptr() for v in got} == {ptr}
    assert np.isfinite(outputs["y"]).all()


@pytest.mark.parametrize(
    "op_name, dtype, expected",
    [
        ("Softmax", dtypes.F32, "kernel"),
        ("Softmax", dtypes.F16, "function"),
        ("RotaryEmbedding", dtypes.F16, "kernel"),
        ("RotaryEmbedding", dtypes.F32, "kernel"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_profile_path_classifies_what_ort_ran(op_name, dtype, expected):
    op, case, spec, inputs, outputs = _cell(op_name, dtype)
    kind, ran = ortlib.profile_path(spec, dtype, 1, "off", inputs, outputs)
    assert kind == expected, ran
    if expected == "kernel":
        assert ran == [spec.op_type]
    else:  # the ONNX function body of Softmax: no Softmax node, its pieces instead
        assert spec.op_type not in ran
        assert {"Exp", "ReduceSum"} <= set(ran)


@pytest.mark.parametrize("op_name", list(CASES))
def test_bf16_session_is_a_missing_kernel(op_name):
    op, case, spec, inputs, outputs = _cell(op_name, dtypes.F32)
    with pytest.raises(Exception) as ei:
        ortlib.make_session(ortlib.build_model(spec, dtypes.BF16), 1, "off")
    assert ortlib.is_missing_kernel(ei.value), str(ei.value)


def test_is_missing_kernel_is_not_true_for_other_errors():
    with pytest.raises(Exception) as ei:
        ortlib.make_session(b"definitely not an onnx model", 1, "off")
    assert not ortlib.is_missing_kernel(ei.value)
    assert not ortlib.is_missing_kernel(ValueError("shape mismatch"))


def test_a_graph_with_its_own_type_error_is_not_a_missing_kernel():
    """A graph whose inputs disagree on a type parameter (an op file's typo: Add of a 'float' and
    an 'f32' input in an f16 cell) must fail loudly, not be compared against ORT's f32."""
    from perfbench.ops.base import GraphSpec

    class _Op:
        ort_substitute = {"f16": "f32"}

    spec = GraphSpec("Add", "", 14, [("X", "float", (4,)), ("B", "f32", (4,))], [("Y", (4,))])
    with pytest.raises(Exception, match="Type"):
        ortlib.first_session(_Op(), spec, dtypes.F16, 1, "off")
