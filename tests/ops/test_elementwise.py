"""The elementwise group (Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu, ReduceMean)
against real ORT:

* our kernel passes the numerics gate (float64 oracle, ORT's error as the yardstick) on tiny odd
  shapes in every dtype, with 1 and 2 threads (cases large enough that 2 threads are really
  used), on every ISA path this CPU supports;
* every mutant fails the gate in the dtypes where it is visible (the forms of Gelu differ below
  16-bit rounding, QuickGelu's error sits at bfloat16's floor: the ops list those limits);
* the ORT graphs load; K copies run K times, inserted Casts included; the Harness's numerics-only
  pass reports the ORT paths the suite's header describes;
* kernel details: broadcasting is bit-exact against numpy's own f32/f16/bf16 arithmetic on many
  shape pairs, in place works, Gelu's and the sigmoid's error over a dense grid, NaN and
  infinities, ReduceMean's edges;
* from_node maps real nodes (attributes, opsets, axes as attribute or input) or declines them.
"""

from __future__ import annotations

import functools
import itertools

import ml_dtypes
import numpy as np
import pytest

from perfbench import dtypes, numerics, suites
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise, load
from perfbench.ops import _eltwise as el
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported, to_f64
from perfbench.timing.protocol import CellSpec, Harness
from tests.conftest import isas_to_test

SEED = 20261130
DTYPES = ("f32", "f16", "bf16")
OPS = ("Add", "Mul", "Gelu", "FastGelu", "BiasGelu", "Sigmoid", "QuickGelu", "ReduceMean")
SUPPORTED = isas_to_test(load())

# the suite's numerics-only shapes, plus cases big enough for 2 threads (work >= 2 x grain)
CASES = {
    "Add": [
        {"a": "1031", "b": "1031"},
        {"a": "7x1031", "b": "1031"},
        {"a": "2x3x33x33", "b": "2x1x33x33"},
        {"a": "33x1", "b": "1x37"},
        {"a": "scalar", "b": "5x7"},
        {"a": "3x5x7", "b": "5x1"},
        {"a": "4x41x1031", "b": "41x1"},  # 2 threads; a column broadcast inside
    ],
    "Mul": [
        {"a": "7x1031", "b": "7x1"},
        {"a": "1031", "b": "scalar"},
        {"a": "2x1x9", "b": "2x5x1"},
        {"a": "130x1031", "b": "1031"},  # 2 threads
    ],
    "Gelu": [
        {"rows": 3, "cols": 1031},
        {"rows": 5, "cols": 1031, "approximate": "tanh"},
        {"rows": 1, "cols": 7},
        {"rows": 33, "cols": 1031},  # 2 threads
    ],
    "FastGelu": [
        {"rows": 3, "cols": 1031, "bias": 1},
        {"rows": 3, "cols": 1031, "bias": 0},
        {"rows": 2, "cols": 13, "bias": 1},
        {"rows": 33, "cols": 1031, "bias": 1},  # 2 threads, the bias restarting inside a block
    ],
    "BiasGelu": [
        {"rows": 3, "cols": 1031},
        {"rows": 4, "cols": 9},
        {"rows": 33, "cols": 1031},
    ],
    "Sigmoid": [
        {"rows": 3, "cols": 1031},
        {"rows": 1, "cols": 1020},
        {"rows": 1, "cols": 13},
        {"rows": 257, "cols": 1031},  # 2 threads (>= 2 x the 131072-element grain)
    ],
    "QuickGelu": [
        {"rows": 3, "cols": 1031},
        {"rows": 1, "cols": 1020, "alpha": "1.0"},
        {"rows": 1, "cols": 7},
        {"rows": 257, "cols": 1031, "alpha": "1.0"},  # 2 threads
    ],
    "ReduceMean": [
        {"shape": "7x1031", "axes": "last"},
        {"shape": "9x33", "axes": "last", "keepdims": 0},
        {"shape": "3x100x70", "axes": "1-1"},
        {"shape": "5x7x33", "axes": "1-2", "keepdims": 0},
        {"shape": "1031", "axes": "all"},
        {"shape": "300007", "axes": "all"},  # one row split across 2 threads
        {"shape": "300x1031", "axes": "last"},  # rows across 2 threads
        {"shape": "4194311", "axes": "all"},  # the long sum
    ],
}


@functools.cache
def _lib():
    return load()


@pytest.fixture(autouse=True)
def _auto_isa():
    _lib().select_isa("auto")
    yield
    _lib().select_isa("auto")


class Cell:
    """One (op, case, dtype): inputs, the float64 oracle, ORT's real output (the yardstick)."""

    def __init__(self, op_name: str, i: int, dtype: str):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(CASES[op_name][i])
        self.dt = dtypes.get(dtype)
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(SEED))
        self.inputs64 = to_f64(self.inputs)
        self.oracle = self.op.oracle(self.case, self.inputs64)
        self.rows = self.op.row_sizes(self.case)
        ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt, 1)
        assert ran is not None, f"ORT cannot run {self.case.case_id}"
        self.ort_dt, _, self.ort_out = ran

    def ours(self, threads: int = 1) -> dict:
        out = self.op.new_outputs(self.case, self.dt.numpy, self.inputs)
        for a in out.values():
            a[...] = 7.0  # what a kernel must overwrite
        self.op.prepare_ours(_lib(), self.case, self.inputs, out, threads).run()
        return out

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.rows, self.op.floor(self.dt.name))


@functools.cache
def _cell(op_name: str, i: int, dtype: str) -> Cell:
    return Cell(op_name, i, dtype)


def _cell_params():
    return [pytest.param(op, i, dt, id=f"{ops_pkg.get(op).make_case(p).case_id}-{dt}")
            for op in OPS for i, p in enumerate(CASES[op]) for dt in DTYPES]


@pytest.mark.parametrize("op_name, i, dtype", _cell_params())
def test_our_kernel_passes_the_gate(op_name, i, dtype):
    cell = _cell(op_name, i, dtype)
    assert cell.ort_dt.name == {"f32": "f32", "f16": "f16", "bf16": "f32"}[dtype]
    for isa in SUPPORTED:
        _lib().select_isa(isa)
        for threads in (1, 2):
            g = cell.gate(cell.ours(threads))
            assert not g.ort_discrepancy, f"ORT departs from the oracle: {g.describe()}"
            assert g.ours_ok, f"{cell.case.case_id} {dtype} {isa} threads={threads}: {g.describe()}"


# ---- mutants ----------------------------------------------------------------------------------


def _mutant_applies_in(op, mutant, dtype: str) -> bool:
    """Some mutants are wrong only below a dtype's rounding: the op lists where they are visible."""
    return dtype in getattr(op, "mutant_dtypes", {}).get(mutant.name, DTYPES)


def _mutant_params():
    out = []
    for name in OPS:
        op = ops_pkg.get(name)
        for m in op.mutants:
            for dt in DTYPES:
                if not _mutant_applies_in(op, m, dt):
                    continue
                out.append(pytest.param(name, dt, m.name, id=f"{name}-{dt}-{m.name.replace(' ', '_')}"))
    return out


@pytest.mark.parametrize("op_name, dtype, mutant_name", _mutant_params())
def test_mutant_fails_the_gate(op_name, dtype, mutant_name):
    op = ops_pkg.get(op_name)
    mutant = next(m for m in op.mutants if m.name == mutant_name)
    checked, accepted = [], []
    for i, p in enumerate(CASES[op_name]):
        case = op.make_case(p)
        if not mutant.applies(case):
            continue
        cell = _cell(op_name, i, dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            out = {k: np.asarray(v).astype(cell.dt.numpy).astype(np.float64)
                   for k, v in mutant.outputs(op, cell.case, cell.inputs64).items()}
        g = cell.gate(out)
        checked.append(cell.case.case_id)
        if g.ours_ok:
            accepted.append(f"{cell.case.case_id}: {g.describe()}")
    assert checked, "the mutant applies to none of the chosen cases"
    assert not accepted, f"the gate ACCEPTED {mutant_name!r} ({dtype}) on: " + "; ".join(accepted)


@pytest.mark.parametrize("op_name", OPS)
def test_every_op_has_mutants_that_apply(op_name):
    op = ops_pkg.get(op_name)
    assert len(op.mutants) >= 3
    for m in op.mutants:
        assert any(m.applies(op.make_case(p)) for p in CASES[op_name]), m.name


@pytest.mark.parametrize("op_name, mutant_name, dtype", [
    ("Gelu", "the other Gelu form", "f16"), ("Gelu", "the other Gelu form", "bf16"),
    ("Gelu", "x * sigmoid(1.702 x) instead", "bf16"),
])
def test_dtype_limited_mutants_are_really_invisible_there(op_name, mutant_name, dtype):
    """The exclusions above are honest: in these dtypes the mutant passes the gate on some
    chosen case (it is below that dtype's rounding)."""
    op = ops_pkg.get(op_name)
    assert not _mutant_applies_in(op, next(m for m in op.mutants if m.name == mutant_name), dtype)
    m = next(m for m in op.mutants if m.name == mutant_name)
    passed = []
    for i, p in enumerate(CASES[op_name]):
        if m.applies(op.make_case(p)):
            cell = _cell(op_name, i, dtype)
            out = {k: np.asarray(v).astype(cell.dt.numpy).astype(np.float64)
                   for k, v in m.outputs(op, cell.case, cell.inputs64).items()}
            passed.append(cell.gate(out).ours_ok)
    assert any(passed)


# ---- ORT graphs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("op_name", OPS)
def test_k_copies_run_k_times(op_name, dtype):
    K = 4
    op = ops_pkg.get(op_name)
    case = op.make_case(CASES[op_name][0])
    dt = dtypes.get(dtype)
    spec = op.graph(case)
    inputs = op.make_inputs(case, dt, np.random.default_rng(3))
    outs = op.new_outputs(case, dt.numpy, inputs)
    one = ortlib.node_runs(ortlib.build_model(spec, dt, 1), 1, inputs, outs, spec, 1)
    many = ortlib.node_runs(ortlib.build_model(spec, dt, K), 1, inputs, outs, spec, K)
    assert many == {k: K * v for k, v in one.items()}
    if dtype == "f16":
        assert one.get("Cast", 0) >= 2  # ORT computes these in f32 between Casts


ORT_PATHS = {  # (op, dtype) -> (ORT dtype, path)
    **{(op, "f32"): ("f32", "kernel") for op in OPS},
    **{(op, "bf16"): ("f32", "substituted") for op in OPS},
    **{(op, "f16"): ("f16", "casts") for op in ("Add", "Mul", "BiasGelu", "Sigmoid", "QuickGelu", "ReduceMean")},
    **{(op, "f16"): ("f16", "function") for op in ("Gelu", "FastGelu")},
}


@pytest.mark.parametrize("op_name, dtype", sorted(ORT_PATHS))
def test_harness_numerics_only_cell(op_name, dtype):
    p = CASES[op_name][0]
    op = ops_pkg.get(op_name)
    spec = CellSpec(op=op_name, params=[list(kv) for kv in op.make_case(p).params], dtype=dtype, threads=1,
                    numerics_only=True)
    out = Harness(_lib()).measure(spec)
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
def test_broadcasting_is_bit_exact_against_numpy(isa):
    """f32, f16 and bf16 arithmetic is one f32 operation rounded once, as numpy's own: identical
    bits, for every broadcast pattern (both directions) and 1 and 2 threads."""
    lib = _lib()
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
    lib = _lib()
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
    lib = _lib()
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
    lib = _lib()
    lib.select_isa(isa)
    big = -3e38 if dtype is np.float32 else (-6e4 if dtype is np.float16 else -3e38)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1e4, big] + [1.0] * 10, np.float32).astype(dtype)
    y = np.empty_like(x)
    eltwise.gelu(lib, x, y, approximate=approximate).run()
    y32 = y.astype(np.float32)
    assert np.isnan(y32[0]) and y32[1] == np.inf and np.isnan(y32[2]) and y32[3] == 0.0, y32[:6]
    assert y32[4] == 0.0 and y32[5] == 0.0, y32[:6]
    lib.select_isa("auto")


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("alpha", [None, 1.702, 1.0, -0.5])
def test_sigmoid_error_over_a_dense_grid(isa, alpha):
    """Every f32 x in [-90, 30] (and a few far out). Sigmoid (alpha None): relative error
    <= 5e-7 wherever sigmoid is a normal float32 (the portable paths, whose fmadd is not fused:
    1.5e-6 for x > -30, 6e-6 below, the exp's one-constant range reduction, on values < 1e-13),
    and <= 1.2e-38 absolute below; x * sigmoid(alpha x): |ours - exact| <= 3e-7 (|exact| + 1)
    (1.5e-6 portable), the exact product taken with alpha in float32."""
    lib = _lib()
    lib.select_isa(isa)
    x = np.concatenate([np.linspace(-90, 30, 600_001), [-1e4, -100.0, 87.5, 100.0, 1e4, 3e38, -3e38]])
    x = x.astype(np.float32)
    y = np.full_like(x, 7.0)
    eltwise.sigmoid(lib, x, y, alpha=alpha).run()
    x64 = x.astype(np.float64)
    bound = 1.5e-6 if isa.startswith("portable") else None
    with np.errstate(invalid="ignore"):
        if alpha is None:
            exact = el.sigmoid64(x64)
            normal = exact >= np.finfo(np.float32).tiny
            err = np.abs(y[normal] - exact[normal]) / exact[normal]
            assert (np.abs(y[~normal] - exact[~normal]) <= 1.2e-38).all()
            bound = np.where(x[normal] > -30, 1.5e-6, 6e-6) if bound else 5e-7
        else:
            exact = el.quick_gelu64(x64, float(np.float32(alpha)))
            normal = np.isfinite(exact)
            err = np.abs(y[normal] - exact[normal]) / (np.abs(exact[normal]) + 1.0)
            bound = bound or 3e-7
    i = np.argmax(err / bound)
    assert (err <= bound).all(), (x[normal][i], y[normal][i], exact[normal][i], err[i])


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_sigmoid_nan_infinities_and_signed_zeros(dtype, isa):
    """Sigmoid: NaN -> NaN, +inf -> 1, -inf -> 0, +-0 -> 0.5, very negative -> 0, very positive
    -> 1. x * sigmoid(1.702 x): NaN -> NaN, +inf -> +inf, -inf -> NaN (-inf * 0, as the float64
    oracle), -0 -> -0, very negative -> -0 (not a denormal-scaled x), very positive -> x. Every
    dtype and ISA path (16 elements: the vector loop, not only the tail)."""
    lib = _lib()
    lib.select_isa(isa)
    big = 6e4 if dtype is np.float16 else 3e38
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1e4, 1e4, -big, big]
    x = np.array(vals + [1.0] * 7, np.float32).astype(dtype)
    y = np.full_like(x, 7.0)
    eltwise.sigmoid(lib, x, y).run()
    s = y.astype(np.float32)[:9]
    assert np.isnan(s[0]) and list(s[1:]) == [1.0, 0.0, 0.5, 0.5, 0.0, 1.0, 0.0, 1.0], s
    eltwise.sigmoid(lib, x, y, alpha=1.702).run()
    q = y.astype(np.float32)[:9]
    assert np.isnan(q[0]) and q[1] == np.inf and np.isnan(q[2]), q
    assert q[3] == 0.0 and not np.signbit(q[3]) and q[4] == 0.0 and np.signbit(q[4]), q
    assert q[5] == 0.0 and np.signbit(q[5]) and q[7] == 0.0 and np.signbit(q[7]), q
    assert q[6] == np.float32(x[6]) and q[8] == np.float32(x[8]), q


@pytest.mark.parametrize("isa", SUPPORTED)
def test_sigmoid_streaming_stores_and_in_place(isa):
    """Past 8 MiB the output is streamed (peel to alignment, stream, tail): the same bits as the
    cached-store path computed in slices, in every dtype and both modes, with a misaligned
    output; and y = x in place gives the same bits as a separate y."""
    lib = _lib()
    lib.select_isa(isa)
    rng = np.random.default_rng(11)
    for dt in NP_DTYPES:
        x = (3.0 * rng.standard_normal((1500, 1499))).astype(dt)
        for alpha in (None, 1.702):
            y = _misaligned(x.shape, dt)
            eltwise.sigmoid(lib, x, y, alpha=alpha, threads=2).run()
            rows = np.empty_like(x)
            for r in range(0, 1500, 500):  # ~1.5-3 MiB per slice: cached stores
                eltwise.sigmoid(lib, x[r:r + 500], rows[r:r + 500], alpha=alpha).run()
            assert y.tobytes() == rows.tobytes(), (alpha, np.dtype(dt).name)
            z = x[:7].copy()
            eltwise.sigmoid(lib, z, z, alpha=alpha).run()
            assert z.tobytes() == rows[:7].tobytes(), (alpha, np.dtype(dt).name)


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
    lib = _lib()
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


def test_from_node_sigmoid_family():
    sig = ops_pkg.get("Sigmoid")
    b = sig.from_node(_node("Sigmoid", [("bf16", (2, 3, 64))], opset=13, dtype="bf16"))
    assert b.case.p == {"rows": 6, "cols": 64} and b.inputs == {"X": 0} and b.outputs == {"Y": (0, (2, 3, 64))}
    assert sig.from_node(_node("Sigmoid", [("f32", ())], opset=6)).case.p == {"rows": 1, "cols": 1}
    with pytest.raises(NodeUnsupported, match="opsets before 6"):
        sig.from_node(_node("Sigmoid", [("f32", (4, 8))], opset=1, attrs={"consumed_inputs": [0]}))
    with pytest.raises(NodeUnsupported, match="element type"):
        sig.from_node(_node("Sigmoid", [("f32", (4, 8))], opset=13, dtype=None))
    with pytest.raises(NodeUnsupported, match="zero-size"):
        sig.from_node(_node("Sigmoid", [("f32", (0, 8))], opset=13))
    with pytest.raises(UsageError, match="1 inputs"):
        sig.from_node(_node("Sigmoid", [("f32", (4, 8)), ("f32", (4, 8))], opset=13))

    qg = ops_pkg.get("QuickGelu")
    ms = dict(domain="com.microsoft", opset=1)
    b = qg.from_node(_node("QuickGelu", [("f16", (2, 7, 96))], attrs={"alpha": 1.0}, dtype="f16", **ms))
    assert b.case.p == {"rows": 14, "cols": 96, "alpha": "1.0"} and b.outputs == {"Y": (0, (2, 7, 96))}
    assert qg.from_node(_node("QuickGelu", [("f32", (5, 8))], **ms)).case.p["alpha"] == "1.702"  # the default
    # an attribute as ONNX stores it (float32) maps to its shortest decimal
    b = qg.from_node(_node("QuickGelu", [("f32", (5, 8))], attrs={"alpha": float(np.float32(1.702))}, **ms))
    assert b.case.p["alpha"] == "1.702" and qg.alpha(b.case) == float(np.float32(1.702))
    # ORT runs a non-finite alpha; our kernel does not: declined (exit 3), not a usage error
    for bad in (float("inf"), float("nan"), 1e300):
        with pytest.raises(NodeUnsupported, match="non-finite in float32"):
            qg.from_node(_node("QuickGelu", [("f32", (5, 8))], attrs={"alpha": bad}, **ms))
    # ORT refuses an alpha that is not a FLOAT attribute ("Mismatched attribute type")
    for bad in ("1.7", 2, True):
        with pytest.raises(UsageError, match="must be a FLOAT attribute"):
            qg.from_node(_node("QuickGelu", [("f32", (5, 8))], attrs={"alpha": bad}, **ms))
    with pytest.raises(NodeUnsupported, match="attribute 'beta' is not implemented"):
        qg.from_node(_node("QuickGelu", [("f32", (5, 8))], attrs={"alpha": 1.0, "beta": 3.0}, **ms))
    with pytest.raises(NodeUnsupported, match="element type"):
        qg.from_node(_node("QuickGelu", [("i64", (5, 8))], dtype=None, **ms))
    with pytest.raises(UsageError, match="1 inputs"):
        qg.from_node(_node("QuickGelu", [], **ms))
    # the case parameter itself: a float32 number in canonical form
    with pytest.raises(UsageError, match="canonical"):
        qg.make_case({"rows": 1, "cols": 8, "alpha": "1.70"})
    with pytest.raises(UsageError, match="must be a number"):
        qg.make_case({"rows": 1, "cols": 8, "alpha": "fast"})


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
    op.prepare_ours(_lib(), binding.case, mine, out, 1).run()
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
    op.prepare_ours(_lib(), case, mine, ours, 1).run()
    g = numerics.gate(ours, theirs, oracle, op.row_sizes(case), op.floor("f32"))
    assert g.ours_ok and not g.ort_discrepancy, g.describe()


def _single_node_model(path, node, elem, shape, opsets):
    import onnx
    from onnx import helper
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info("y", elem, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 10
    onnx.save(m, str(path))
    return str(path)


def test_perfbench_node_runs_sigmoid_and_quick_gelu(tmp_path):
    """`perfbench node` on single-node models: Sigmoid (f16, rank 3) and QuickGelu (alpha 1.0 and
    the default) match ORT (exit 0); a QuickGelu whose alpha is not finite is a usage error."""
    from onnx import TensorProto, helper

    from perfbench import node

    ms = [("", 17), ("com.microsoft", 1)]
    models = [
        (helper.make_node("Sigmoid", ["x"], ["y"]), TensorProto.FLOAT16, [2, 3, 1031], [("", 13)]),
        (helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.0), TensorProto.FLOAT, [5, 1031], ms),
        (helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft"), TensorProto.FLOAT, [3, 77], ms),
    ]
    for i, (n, elem, shape, opsets) in enumerate(models):
        rep = node.run(_single_node_model(tmp_path / f"m{i}.onnx", n, elem, shape, opsets), timing=False, lib=_lib())
        assert rep.exit_code == 0 and rep.ort_status == "ok", node.render(rep)
    bad = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=float("inf"))
    rep = node.run(_single_node_model(tmp_path / "inf.onnx", bad, TensorProto.FLOAT, [3, 8], ms), timing=False, lib=_lib())
    assert rep.exit_code == 3 and "non-finite" in node.render(rep), node.render(rep)
    bad = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=2)  # an INT attribute
    with pytest.raises(UsageError, match="must be a FLOAT attribute"):
        node.run(_single_node_model(tmp_path / "int.onnx", bad, TensorProto.FLOAT, [3, 8], ms), timing=False, lib=_lib())
