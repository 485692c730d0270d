"""The elementwise group (Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean) against real ORT:

* (the gate on every case, dtype, ISA path and thread count, the mutants, K ORT copies, bad
  arguments and the from_node round trip are the op contract's: tests/ops/test_contract.py, on
  the cases each op file declares as test_cases);
* the dtype-limited mutants are really invisible where the ops say; the Harness's numerics-only
  pass reports the ORT paths the suite's header describes;
* kernel details: broadcasting is bit-exact against numpy's own f32/f16/bf16 arithmetic on many
  shape pairs, in place works, Gelu's error over a dense grid, ReduceMean's edges;
* from_node maps real nodes (attributes, opsets, axes as attribute or input) or declines them.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from perfbench import dtypes, numerics, suites
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported
from perfbench.timing.protocol import CellSpec, Harness
from tests.conftest import isas_to_test
from tests.helpers import cell, library, mutant_applies_in

SEED = 20261130
DTYPES = ("f32", "f16", "bf16")
OPS = ("Add", "Mul", "Gelu", "FastGelu", "BiasGelu", "ReduceMean")
SUPPORTED = isas_to_test(library())
pytestmark = pytest.mark.usefixtures("auto_isa")

# ---- mutants ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op_name, mutant_name, dtype", [
    ("Gelu", "the other Gelu form", "f16"), ("Gelu", "the other Gelu form", "bf16"),
    ("Gelu", "x * sigmoid(1.702 x) instead", "bf16"),
])
def test_dtype_limited_mutants_are_really_invisible_there(op_name, mutant_name, dtype):
    """The exclusions above are honest: in these dtypes the mutant passes the gate on some
    chosen case (it is below that dtype's rounding)."""
    op = ops_pkg.get(op_name)
    m = next(m for m in op.mutants if m.name == mutant_name)
    assert not mutant_applies_in(op, m, dtype)
    passed = []
    for p in op.test_cases:
        if m.applies(op.make_case(p)):
            c = cell(op_name, p, dtype, seed=SEED)
            passed.append(c.gate(c.mutant_output(m)).ours_ok)
    assert any(passed)


# ---- ORT graphs ---------------------------------------------------------------------------------


ORT_PATHS = {  # (op, dtype) -> (ORT dtype, path)
    **{(op, "f32"): ("f32", "kernel") for op in OPS},
    **{(op, "bf16"): ("f32", "substituted") for op in OPS},
    **{(op, "f16"): ("f16", "casts") for op in ("Add", "Mul", "BiasGelu", "ReduceMean")},
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
    assert 100 <= len(timed) <= 150
    assert {c.case.op for c in timed} == set(OPS)
    quick, _ = s.expand(quick=True, max_threads=2)
    assert 0 < len([c for c in quick if not c.numerics_only]) <= 24


# ---- kernel details -----------------------------------------------------------------------------

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
    for (sa, sb), dt, (name, f) in itertools.product(SHAPE_PAIRS, NP_DTYPES, (("add", np.add), ("mul", np.multiply))):
        for x_shape, y_shape in ((sa, sb), (sb, sa)):
            a = rng.standard_normal(x_shape).astype(dt)
            b = rng.standard_normal(y_shape).astype(dt)
            want = f(a, b)
            for threads in (1, 2):
                got = np.full(want.shape, 7, dt)
                getattr(eltwise, name)(lib, a, b, got, threads).run()
                assert got.tobytes() == want.tobytes(), (name, x_shape, y_shape, np.dtype(dt).name, threads)


def _misaligned(shape, dt):
    """A C-contiguous array one element past a 64-byte boundary (streaming stores peel first)."""
    n = int(np.prod(shape))
    buf = np.empty(n + 64, dt)
    off = (-buf.ctypes.data % 64) // buf.itemsize + 1
    return buf[off:off + n].reshape(shape)


@pytest.mark.parametrize("isa", SUPPORTED)
def test_streaming_stores_past_8_mib(isa):
    """Working sets >= 8 MiB store with non-temporal stores (peel to alignment, stream, tail):
    the same bits as numpy (binary) and as the cached-store path (Gelu, computed row by row)."""
    lib = library()
    lib.select_isa(isa)
    rng = np.random.default_rng(10)
    for dt in NP_DTYPES:
        a = rng.standard_normal((1001, 1499)).astype(dt)
        b = rng.standard_normal(1499).astype(dt)
        for name, f in (("add", np.add), ("mul", np.multiply)):
            for bb, threads in ((b, 2), (a.copy(), 1), (np.array(1.5, dt), 2)):  # row, same shape, scalar
                y = _misaligned(a.shape, dt)
                getattr(eltwise, name)(lib, a, bb, y, threads).run()
                assert y.tobytes() == f(a, bb).tobytes(), (name, np.dtype(dt).name, bb.shape)
        x = rng.standard_normal((1500, 1499)).astype(dt)
        for approximate, bias in (("none", b), ("tanh", None)):
            y = _misaligned(x.shape, dt)
            eltwise.gelu(lib, x, y, approximate=approximate, bias=bias, threads=2).run()
            rows = np.empty_like(x)
            for r in range(0, 1500, 500):  # 500 rows: ~1.5-3 MiB, cached stores
                eltwise.gelu(lib, x[r:r + 500], rows[r:r + 500], approximate=approximate, bias=bias).run()
            assert y.tobytes() == rows.tobytes(), (approximate, np.dtype(dt).name)


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


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_error_over_a_dense_grid(isa, approximate):
    """Every f32 x in [-12, 12] (and a few far out): |ours - exact| <= 3e-7 (|exact| + 1)."""
    lib = library()
    lib.select_isa(isa)
    x = np.concatenate([np.linspace(-12, 12, 400_001), [-1e4, -100.0, -5.5437, 5.5437, 100.0, 1e4, 0.0, -0.0]])
    x = x.astype(np.float32)
    y = np.empty_like(x)
    eltwise.gelu(lib, x, y, approximate=approximate).run()
    exact = (el.gelu_erf64 if approximate == "none" else el.gelu_tanh64)(x.astype(np.float64))
    err = np.abs(y - exact) / (np.abs(exact) + 1.0)
    assert err.max() <= 3e-7, (x[np.argmax(err)], y[np.argmax(err)], exact[np.argmax(err)])


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_nan_and_infinities(approximate, dtype, isa):
    """NaN stays NaN, +inf gives +inf, -inf gives NaN (-inf * 0, as the definition), and very
    negative inputs give (-)0, not a denormal-scaled x, in both forms, every dtype and ISA path."""
    lib = library()
    lib.select_isa(isa)
    big = -3e38 if dtype is np.float32 else (-6e4 if dtype is np.float16 else -3e38)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1e4, big] + [1.0] * 10, np.float32).astype(dtype)
    y = np.empty_like(x)
    eltwise.gelu(lib, x, y, approximate=approximate).run()
    y32 = y.astype(np.float32)
    assert np.isnan(y32[0]) and y32[1] == np.inf and np.isnan(y32[2]) and y32[3] == 0.0, y32[:6]
    assert y32[4] == 0.0 and y32[5] == 0.0, y32[:6]
    lib.select_isa("auto")


def test_reduce_mean_edges(lib):
    x = np.zeros((3, 0, 4), np.float32)
    y = np.full((3, 1, 4), 7.0, np.float32)
    eltwise.reduce_mean(lib, x, y, axes=[1]).run()
    assert np.isnan(y).all()  # the mean of nothing
    for dt in (np.float16, ml_dtypes.bfloat16):
        y16 = np.zeros((3, 4), dt)
        eltwise.reduce_mean(lib, x.astype(dt), y16, axes=[1]).run()
        assert np.isnan(y16.astype(np.float32)).all()
    empty = np.zeros((0, 5), np.float32)
    eltwise.reduce_mean(lib, empty, np.zeros((0, 1), np.float32), axes=[-1]).run()  # nothing to do
    s = np.array(3.5, np.float32)
    out = np.zeros((), np.float32)
    eltwise.reduce_mean(lib, s, out).run()
    assert out == 3.5


@pytest.mark.parametrize("isa", SUPPORTED)
def test_reduce_mean_long_sum_is_accurate(isa):
    """16M elements with a large mean, 1 and 2 threads: within 2e-7 of the float64 mean (a plain
    f32 running sum is off by ~1e-3 here)."""
    lib = library()
    lib.select_isa(isa)
    x = (np.random.default_rng(8).random(1 << 24, dtype=np.float32) + np.float32(10.0))
    want = x.astype(np.float64).mean()
    for threads in (1, 2):
        y = np.zeros(1, np.float32)
        eltwise.reduce_mean(lib, x, y, threads=threads).run()
        assert abs(float(y[0]) - want) <= 2e-7 * want


# ---- from_node ----------------------------------------------------------------------------------


def _node(op_type, inputs, *, domain="", opset=18, attrs=None, outputs=("y",), dtype="f32", values=None):
    np_dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i64": np.int64}
    ins = [None if i is None else (np.dtype(np_dt[i[0]]), tuple(i[1])) for i in inputs]
    return NodeInfo(op_type, domain, opset, dict(attrs or {}), ins, list(outputs), dtype, list(values or []))


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


def test_from_node_gelu_family():
    gelu = ops_pkg.get("Gelu")
    b = gelu.from_node(_node("Gelu", [("bf16", (2, 3, 64))], opset=20, attrs={"approximate": "tanh"}, dtype="bf16"))
    assert b.case.p == {"rows": 6, "cols": 64, "approximate": "tanh"}
    assert b.outputs == {"Y": (0, (2, 3, 64))}
    assert gelu.from_node(_node("Gelu", [("f32", (8,))], opset=21)).case.p["approximate"] == "none"
    ms = gelu.from_node(_node("Gelu", [("f32", (4, 8))], domain="com.microsoft", opset=1))
    assert ms.case.p["approximate"] == "none"
    with pytest.raises(UsageError, match="approximate='fast'"):
        gelu.from_node(_node("Gelu", [("f32", (4, 8))], opset=20, attrs={"approximate": "fast"}))
    with pytest.raises(UsageError, match="opset 20"):
        gelu.from_node(_node("Gelu", [("f32", (4, 8))], opset=18))

    fast = ops_pkg.get("FastGelu")
    b = fast.from_node(_node("FastGelu", [("f16", (2, 7, 96)), ("f16", (96,))], domain="com.microsoft", opset=1,
                             dtype="f16"))
    assert b.case.p == {"rows": 14, "cols": 96, "bias": 1} and b.inputs == {"X": 0, "bias": 1}
    b = fast.from_node(_node("FastGelu", [("f32", (5, 96)), None], domain="com.microsoft", opset=1))
    assert b.case.p["bias"] == 0 and b.inputs == {"X": 0}
    with pytest.raises(UsageError, match="bias must be 1-D"):
        fast.from_node(_node("FastGelu", [("f32", (5, 96)), ("f32", (5, 96))], domain="com.microsoft", opset=1))

    bg = ops_pkg.get("BiasGelu")
    b = bg.from_node(_node("BiasGelu", [("f32", (3, 5, 40)), ("f32", (40,))], domain="com.microsoft", opset=1))
    assert b.case.p == {"rows": 15, "cols": 40} and b.inputs == {"A": 0, "B": 1}
    with pytest.raises(UsageError, match="2 inputs"):
        bg.from_node(_node("BiasGelu", [("f32", (3, 40))], domain="com.microsoft", opset=1))


def test_from_node_reduce_mean():
    rm = ops_pkg.get("ReduceMean")
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    # opset 18: axes is an input whose value must be known
    b = rm.from_node(_node("ReduceMean", [("f32", (2, 5, 64)), ("i64", (1,))], values=[None, i64(-1)],
                           attrs={"keepdims": 0}))
    assert b.case.p == {"shape": "2x5x64", "axes": "last", "keepdims": 0}
    assert b.inputs == {"data": 0, "axes": 1} and b.outputs == {"reduced": (0, (2, 5))}
    with pytest.raises(NodeUnsupported, match="not a known constant"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 5, 64)), ("i64", (1,))]))
    # axes left out: every axis, or nothing at all with noop_with_empty_axes
    b = rm.from_node(_node("ReduceMean", [("f16", (4, 4096))], dtype="f16"))
    assert b.case.p == {"shape": "4x4096", "axes": "all", "keepdims": 1} and b.outputs["reduced"][1] == (1, 1)
    with pytest.raises(NodeUnsupported, match="noop_with_empty_axes=1"):
        rm.from_node(_node("ReduceMean", [("f32", (4, 8))], attrs={"noop_with_empty_axes": 1}))
    # a middle run of axes, negative and unsorted
    b = rm.from_node(_node("ReduceMean", [("f32", (2, 3, 4, 5)), ("i64", (2,))], values=[None, i64(-2, 1)]))
    assert b.case.p["axes"] == "1-2" and b.outputs["reduced"][1] == (2, 1, 1, 5)
    # the whole tensor named axis by axis is "all"
    b = rm.from_node(_node("ReduceMean", [("f32", (3, 7)), ("i64", (2,))], values=[None, i64(0, 1)]))
    assert b.case.p["axes"] == "all" and b.inputs == {"data": 0}
    with pytest.raises(NodeUnsupported, match="not adjacent"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 3, 4)), ("i64", (2,))], values=[None, i64(0, 2)]))
    with pytest.raises(UsageError, match="out of range"):
        rm.from_node(_node("ReduceMean", [("f32", (2, 3)), ("i64", (1,))], values=[None, i64(2)]))
    # opset 13: axes is an attribute
    b = rm.from_node(_node("ReduceMean", [("bf16", (6, 32))], opset=13, attrs={"axes": [1], "keepdims": 1},
                           dtype="bf16"))
    assert b.case.p == {"shape": "6x32", "axes": "last", "keepdims": 1} and b.inputs == {"data": 0}
    b = rm.from_node(_node("ReduceMean", [("f32", (6, 32))], opset=13))
    assert b.case.p["axes"] == "all"
    with pytest.raises(UsageError, match="1 inputs expected|1 input"):
        rm.from_node(_node("ReduceMean", [("f32", (6, 32)), ("i64", (1,))], opset=13, values=[None, i64(1)]))


@pytest.mark.parametrize("node_args, want", [
    ((("Add", [("f32", (3, 1, 6)), ("f32", (4, 1))]), {"opset": 14}), None),
    ((("ReduceMean", [("f32", (3, 4, 6)), ("i64", (1,))]), {"values": [None, np.array([1])], "attrs": {"keepdims": 0}}),
     None),
    ((("FastGelu", [("f32", (3, 6)), ("f32", (6,))]), {"domain": "com.microsoft", "opset": 1}), None),
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
