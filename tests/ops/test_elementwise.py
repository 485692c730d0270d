"""The elementwise suite (suites/elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid,
QuickGelu, ReduceMean)
as a group; per-op tests are in tests/ops/test_<op>.py, the op contract in test_contract.py:

* the Harness's numerics-only pass reports the ORT paths the suite's header describes; the suite
  expands within its budget;
* kernels shared across the group: streaming stores past 8 MiB (binary and Gelu), in place;
* from_node bindings compute what the node computes (Add, ReduceMean, FastGelu, Sigmoid,
  QuickGelu); rank-0 operands
  stay rank 0 (Add, ReduceMean).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench import dtypes, numerics, suites
from perfbench import ops as ops_pkg
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import ort as ortlib
from perfbench.timing.protocol import CellSpec, Harness
from tests.conftest import isas_to_test
from tests.helpers import CACHED, STREAM, library, llc_bytes, misaligned
from tests.helpers import node_info as _node

SEED = 20261130
DTYPES = ("f32", "f16", "bf16")
OPS = ("Add", "Mul", "Sub", "Gelu", "FastGelu", "BiasGelu", "Sigmoid", "QuickGelu", "ReduceMean")
SUPPORTED = isas_to_test(library())
pytestmark = pytest.mark.usefixtures("auto_isa")

# ---- mutants ----------------------------------------------------------------------------------


# ---- ORT graphs ---------------------------------------------------------------------------------


ORT_PATHS = {  # (op, dtype) -> (ORT dtype, path)
    **{(op, "f32"): ("f32", "kernel") for op in OPS},
    **{(op, "bf16"): ("f32", "substituted") for op in OPS},
    **{(op, "f16"): ("f16", "casts") for op in ("Add", "Mul", "Sub", "BiasGelu", "Sigmoid", "QuickGelu", "ReduceMean")},
    **{(op, "f16"): ("f16", "function") for op in ("Gelu", "FastGelu")},
}


@pytest.mark.parametrize("op_name, dtype", sorted(ORT_PATHS))
def test_harness_numerics_only_cell(op_name, dtype):
    op = ops_pkg.get(op_name)
    p = op.test_cases[0]
    spec = CellSpec(op=op_name, params=[list(kv) for kv in op.make_case(p).params], dtype=dtype, threads=1,
                    numerics_only=True)
    out = Harness(library()).measure(spec)
    assert out.ours_status == "ok", out.ours_message
    assert out.ort_status == "ok", out.ort_message
    assert (out.ort_dtype, out.ort_path) == ORT_PATHS[(op_name, dtype)], out.ort_ops
    assert out.err_ours is not None and out.err_ours <= out.tol


def test_suite_expands_within_budget():
    s = suites.load("elementwise")
    cells, _ = s.expand(max_threads=2)
    timed = [c for c in cells if not c.numerics_only]
    assert 100 <= len(timed) <= 200
    assert {c.case.op for c in timed} == set(OPS)
    quick, _ = s.expand(quick=True, max_threads=2)
    assert 0 < len([c for c in quick if not c.numerics_only]) <= 30  # 5 quick cases x 3 dtypes x 2 threads


# ---- kernel details -----------------------------------------------------------------------------

NP_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)
SHAPE_PAIRS = [
    ((), ()), ((1,), (5,)), ((4, 1), (1, 9)), ((3, 1, 17), (5, 1)), ((2, 3, 4, 5), (3, 1, 5)),
    ((1, 1, 1), (6,)), ((8, 1, 1, 3), (1, 7, 2, 1)), ((2, 1, 3, 1, 4), (1, 5, 1, 6, 1)),
    ((2000, 70), (70,)), ((70, 1), (70, 2000)), ((1, 2, 1, 2, 1, 2, 1, 2), (2, 1, 2, 1, 2, 1, 2, 1)),
]


@pytest.mark.parametrize("isa", SUPPORTED)
def test_streaming_stores_give_the_cached_bits(isa):
    """With the library's LLC set so that every output streams (peel to alignment, stream, tail)
    the bits are numpy's (binary: row, same-shape, scalar on either side) and those of the same
    call with plain stores (Gelu): on any host, whatever its cache."""
    lib = library()
    lib.select_isa(isa)
    rng = np.random.default_rng(10)
    for dt in NP_DTYPES:
        a = rng.standard_normal((101, 149)).astype(dt)
        b = rng.standard_normal(149).astype(dt)
        for name, f in (("add", np.add), ("mul", np.multiply), ("sub", np.subtract)):
            for first, second, threads in ((a, b, 2), (a, a.copy(), 1), (a, np.array(1.5, dt), 2),
                                           (np.array(1.5, dt), a, 2), (b, a, 1)):
                y = misaligned(np.broadcast_shapes(first.shape, second.shape), dt)
                with llc_bytes(lib, STREAM):
                    getattr(eltwise, name)(lib, first, second, y, threads).run()
                want = f(first, second)
                assert y.tobytes() == want.tobytes(), (name, np.dtype(dt).name, first.shape, second.shape)
        x = rng.standard_normal((150, 149)).astype(dt)
        for approximate, bias in (("none", b), ("tanh", None)):
            y = misaligned(x.shape, dt)
            with llc_bytes(lib, STREAM):
                eltwise.gelu(lib, x, y, approximate=approximate, bias=bias, threads=2).run()
            plain = misaligned(x.shape, dt)
            with llc_bytes(lib, CACHED):
                eltwise.gelu(lib, x, plain, approximate=approximate, bias=bias, threads=2).run()
            assert y.tobytes() == plain.tobytes(), (approximate, np.dtype(dt).name)


def test_binary_in_place(lib):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((300, 257)).astype(np.float32)
    b = rng.standard_normal(257).astype(np.float32)
    want = a + b
    eltwise.add(lib, a, b, a, 2).run()
    assert np.array_equal(a, want)
    c = rng.standard_normal((1, 1)).astype(np.float32)
    want = c * a
    eltwise.mul(lib, c, a, a, 2).run()  # y is b
    assert np.array_equal(a, want)
    x = rng.standard_normal((3, 1031)).astype(np.float32)
    y = x.copy()
    eltwise.gelu(lib, y, y, approximate="tanh").run()
    z = np.empty_like(x)
    eltwise.gelu(lib, x, z, approximate="tanh").run()
    assert np.array_equal(y, z)


# ---- from_node ----------------------------------------------------------------------------------


@pytest.mark.parametrize("node_args, want", [
    ((("Add", [("f32", (3, 1, 6)), ("f32", (4, 1))]), {"opset": 14}), None),
    ((("ReduceMean", [("f32", (3, 4, 6)), ("i64", (1,))]), {"values": [None, np.array([1])], "attrs": {"keepdims": 0}}),
     None),
    ((("FastGelu", [("f32", (3, 6)), ("f32", (6,))]), {"domain": "com.microsoft", "opset": 1}), None),
    ((("Sigmoid", [("f32", (2, 3, 37))]), {"opset": 13}), None),
    ((("QuickGelu", [("f32", (2, 3, 37))]), {"domain": "com.microsoft", "opset": 1, "attrs": {"alpha": 0.75}}), None),
])
def test_from_node_case_computes_the_node(node_args, want):
    """The bound case, fed the node's arrays reshaped to the op's shapes, gives the node's output
    (checked against onnx.reference / numpy on the node's own shapes)."""
    (op_type, inputs), kw = node_args
    node = _node(op_type, inputs, **kw)
    op = next(o for o in ops_pkg.REGISTRY.values() if (node.domain, op_type) in o.node_types)
    binding = op.from_node(node)
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal(s[1]).astype(np.float32) if s[0] != np.int64 else kw["values"][i]
              for i, s in enumerate(node.inputs)]
    spec = op.graph(binding.case)
    shapes = {n: s for n, _, s in spec.inputs if n}
    mine = {name: np.ascontiguousarray(arrays[idx]).reshape(shapes[name]) for name, idx in binding.inputs.items()}
    for name in shapes:
        mine.setdefault(name, op.make_inputs(binding.case, dtypes.F32, rng)[name])
    out = op.new_outputs(binding.case, np.float32, mine)
    op.prepare_ours(library(), binding.case, mine, out, 1).run()
    (oname, (idx, oshape)), = binding.outputs.items()
    got = out[oname].reshape(oshape)
    if op_type == "Add":
        ref = arrays[0].astype(np.float64) + arrays[1]
    elif op_type == "ReduceMean":
        ref = arrays[0].astype(np.float64).mean(axis=1)
    elif op_type == "Sigmoid":
        ref = 1.0 / (1.0 + np.exp(-arrays[0].astype(np.float64)))
    elif op_type == "QuickGelu":
        a = arrays[0].astype(np.float64)
        ref = a / (1.0 + np.exp(-0.75 * a))
    else:
        ref = el.gelu_tanh64(arrays[0].astype(np.float64) + arrays[1])
    assert got.shape == ref.shape
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_name,params", [("Add", {"a": "scalar", "b": "scalar"}), ("Add", {"a": "scalar", "b": "5x7"}),
                                            ("ReduceMean", {"shape": "scalar", "axes": "all"})])
def test_rank0_operands_stay_rank0_and_pass_against_ort(op_name, params):
    op = ops_pkg.get(op_name)
    case = op.make_case(params)
    inputs = op.make_inputs(case, dtypes.F32, np.random.default_rng(3))
    assert any(a.ndim == 0 for a in inputs.values())
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    _, _, theirs = ortlib.run_case(op, case, inputs, dtypes.F32)
    mine = op.private_inputs(case, inputs)
    ours = op.new_outputs(case, np.float32, mine)
    op.prepare_ours(library(), case, mine, ours, 1).run()
    g = numerics.gate(ours, theirs, oracle, op.row_sizes(case), op.floor("f32"))
    assert g.ours_ok and not g.ort_discrepancy, g.describe()
