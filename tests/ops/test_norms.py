"""The norms group (suites/norms.toml) against REAL ONNX Runtime sessions: LayerNormalization,
SkipLayerNormalization, SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization and
RMSNormalization.

- positive control: our kernel passes the numerics gate (CONTRACTS §8) in f32, f16 and bf16 on
  the numerics-only odd shapes of the suite (tails at 4, 8 and 16 lanes, a skip repeated over the
  batch, every optional input and output), with ORT as the yardstick -- in bf16 head to head
  (ORT has bf16 kernels) except RMSNormalization, which ORT runs in f32 there;
- negative controls: every mutant fails the gate in every dtype, and so does our real kernel fed
  a bug-inducing argument (wrong epsilon, simplified form switched);
- what ORT really returns for the optional outputs (statistics filled; SkipSimplified's mean is
  zeros, which is why the op never asks for it);
- K-copy graphs run K times; which path ORT takes per dtype;
- every ISA path (portable, portable16: the AVX-512 logic on 16 lanes) and 2 threads;
- from_node on hand-built NodeInfo: flattening at axis, skip broadcast, attributes declined."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import norms as ffi_norms
from perfbench.ops import _norms
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec, NodeInfo, NodeUnsupported, to_f64

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")
NORM_OPS = ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
            "SkipSimplifiedLayerNormalization", "RMSNormalization")

# the numerics-only odd shapes of suites/norms.toml, plus small representatives of its cases
CASES = {
    "LayerNormalization": [
        {"rows": 3, "hidden": 903, "stats": 1},
        {"rows": 5, "hidden": 37, "beta": 0},
        {"rows": 2, "hidden": 4136, "stats": 1},
        {"rows": 1, "hidden": 896},
    ],
    "SkipLayerNormalization": [
        {"rows": 3, "hidden": 903, "stats": 1, "sum": 1},
        {"rows": 6, "hidden": 37, "skip_rows": 3, "bias": 0, "beta": 0, "sum": 1},
        {"rows": 4, "hidden": 4136, "skip_rows": 2, "stats": 1, "sum": 1},
        {"rows": 1, "hidden": 896, "sum": 1},
    ],
    "SimplifiedLayerNormalization": [
        {"rows": 3, "hidden": 903, "stats": 1},
        {"rows": 5, "hidden": 37},
        {"rows": 2, "hidden": 4136, "stats": 1},
    ],
    "SkipSimplifiedLayerNormalization": [
        {"rows": 3, "hidden": 903, "stats": 1, "sum": 1},
        {"rows": 6, "hidden": 37, "skip_rows": 3, "sum": 1},
        {"rows": 4, "hidden": 4136, "skip_rows": 2, "bias": 1, "stats": 1, "sum": 1},
        {"rows": 1, "hidden": 896, "sum": 1},
    ],
    "RMSNormalization": [
        {"rows": 3, "hidden": 903},
        {"rows": 5, "hidden": 37, "eps": "1e-06"},
        {"rows": 2, "hidden": 4136},
    ],
}
ORT_DTYPE = {op: {"f32": "f32", "f16": "f16", "bf16": "bf16"} for op in NORM_OPS}
ORT_DTYPE["RMSNormalization"]["bf16"] = "f32"


@functools.cache
def _lib():
    from perfbench.kernels_ffi import load

    return load()


@pytest.fixture(autouse=True)
def _auto_isa():
    _lib().select_isa("auto")
    yield
    _lib().select_isa("auto")


class Cell:
    """One (op, case, dtype): inputs, the float64 oracle, ORT's real outputs (the yardstick)."""

    def __init__(self, op_name: str, case_index: int, dtype: str):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(CASES[op_name][case_index])
        self.dt = dtypes.get(dtype)
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(SEED))
        self.inputs64 = to_f64(self.inputs)
        self.oracle = self.op.oracle(self.case, self.inputs64)
        self.row_sizes = self.op.row_sizes(self.case)
        self.floor = self.op.floor(self.dt.name)
        ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt, 1, fill=np.nan)
        assert ran is not None, f"ORT cannot run {self.case.case_id} in {dtype}"
        self.ort_dt, _, self.ort_out = ran

    def ours(self, threads: int = 1, **overrides) -> dict:
        out = self.op.new_outputs(self.case, self.dt.numpy, self.inputs)
        for a in out.values():
            a[...] = np.nan
        call = self.op.prepare_ours(_lib(), self.case, self.inputs, out, threads)
        for k, v in overrides.items():
            setattr(call.args, k, v)
        call.run()
        return out

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.row_sizes, self.floor)

    def as_kernel_output(self, outputs: dict) -> dict:
        types = self.op.output_dtypes(self.case, self.dt.numpy)
        return {k: np.asarray(v).astype(types[k]).astype(np.float64) for k, v in outputs.items()}


@functools.cache
def _cell(op_name: str, case_index: int, dtype: str) -> Cell:
    return Cell(op_name, case_index, dtype)


def _cell_params():
    return [pytest.param(op, i, dt, id=f"{op}-case{i}-{dt}")
            for op in NORM_OPS for i in range(len(CASES[op])) for dt in DTYPES]


def _slug(text: str) -> str:
    return text.replace(" ", "_")


def _mutant_params():
    out = []
    for name in NORM_OPS:
        op = ops_pkg.get(name)
        for dt in DTYPES:
            for m in op.mutants:
                out.append(pytest.param(name, dt, m.name, id=f"{name}-{dt}-{_slug(m.name)}"))
    return out


# ---- the yardstick and the positive control -------------------------------------------------


@pytest.mark.parametrize("op_name, case_index, dtype", _cell_params())
def test_our_kernel_passes_the_gate(op_name, case_index, dtype):
    cell = _cell(op_name, case_index, dtype)
    assert cell.ort_dt.name == ORT_DTYPE[op_name][dtype]
    g = cell.gate(cell.ours())
    assert not g.ort_discrepancy, f"ORT itself departs from the oracle: {g.describe()}"
    assert g.err_ort is not None and g.err_ort > 0
    assert g.ours_ok, f"{cell.case.case_id} {dtype}: {g.describe()}"


@pytest.mark.parametrize("op_name", NORM_OPS)
def test_two_threads_write_the_same_bits(op_name):
    """17 rows x 4136 (odd rows, a vector tail): past twice the per-thread grain, so two
    threads really split the rows (the small CASES run on one thread whatever is asked)."""
    op = ops_pkg.get(op_name)
    case = op.make_case({"rows": 17, "hidden": 4136})
    inputs = op.make_inputs(case, dtypes.BF16, np.random.default_rng(SEED))
    outs = []
    for threads in (1, 2):
        mine = op.private_inputs(case, inputs)
        out = op.new_outputs(case, dtypes.BF16.numpy, mine)
        for a in out.values():
            a[...] = np.nan
        op.prepare_ours(_lib(), case, mine, out, threads).run()
        outs.append(out)
    assert 17 * 4136 >= 2 * 32768  # PB_NORM_GRAIN: 2 threads are worth waking
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    for k in outs[0]:
        assert outs[0][k].tobytes() == outs[1][k].tobytes(), k
        assert numerics.error(outs[1][k], oracle[k], op.row_sizes(case)[k]) <= op.floor("bf16"), k


@pytest.mark.parametrize("isa", ["portable", "portable16"])
@pytest.mark.parametrize("op_name", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_every_isa_path_passes_the_gate(op_name, isa):
    if isa not in _lib().isa_supported:
        pytest.skip(f"{isa} not built")
    _lib().select_isa(isa)
    for i in range(len(CASES[op_name])):
        for dt in DTYPES:
            cell = _cell(op_name, i, dt)
            g = cell.gate(cell.ours())
            assert g.ours_ok, f"{isa} {cell.case.case_id} {dt}: {g.describe()}"


# ---- mutants: realistic wrong answers must fail -----------------------------------------------


@pytest.mark.parametrize("op_name, dtype, mutant_name", _mutant_params())
def test_mutant_fails_the_gate(op_name, dtype, mutant_name):
    op = ops_pkg.get(op_name)
    mutant = next(m for m in op.mutants if m.name == mutant_name)
    checked, accepted = [], []
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, dtype)
        if not mutant.applies(cell.case):
            continue
        out = cell.as_kernel_output(mutant.outputs(op, cell.case, cell.inputs64))
        assert set(out) == set(cell.oracle)
        g = cell.gate(out)
        checked.append(cell.case.case_id)
        if g.ours_ok or not (g.err_ours > g.tol):
            accepted.append(f"{cell.case.case_id}: {g.describe()}")
    assert checked, "the mutant applies to none of the chosen cases"
    assert not accepted, f"the gate ACCEPTED mutant {mutant_name!r} ({dtype}) on: " + "; ".join(accepted)


@pytest.mark.parametrize("op_name", NORM_OPS)
def test_every_op_has_mutants_that_apply(op_name):
    op = ops_pkg.get(op_name)
    cases = [op.make_case(p) for p in CASES[op_name]]
    assert len(op.mutants) >= 3
    for m in op.mutants:
        assert any(m.applies(c) for c in cases), f"{op_name} mutant {m.name!r} applies to no chosen case"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bug", ["epsilon-0", "simplified-flipped"])
def test_our_kernel_fed_a_wrong_argument_fails_the_gate(bug, dtype):
    for op_name in ("LayerNormalization", "SimplifiedLayerNormalization"):
        cell = _cell(op_name, 0, dtype)  # 3 x 903: a quiet first row, an offset last row
        if bug == "epsilon-0":
            out = cell.ours(epsilon=0.0)
        else:
            over = {"simplified": 1 - int(cell.op.simplified)}
            if not cell.op.simplified:
                over.update(beta=_lib().ffi.NULL, mean=_lib().ffi.NULL)  # what the simplified form allows
            out = cell.ours(**over)
        g = cell.gate(out)
        assert not g.ours_ok, f"{op_name} {dtype}: the gate accepted {bug}: {g.describe()}"
        assert cell.gate(cell.ours()).ours_ok


# ---- what ORT really returns --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_ort_fills_the_statistics_it_defines(dtype):
    """LayerNormalization, SkipLayerNormalization: mean and inv_std written (NaN-filled buffers
    come back finite); Simplified*: inv_std written."""
    for op_name, i in (("LayerNormalization", 0), ("SkipLayerNormalization", 0), ("SimplifiedLayerNormalization", 0),
                       ("SkipSimplifiedLayerNormalization", 0)):
        cell = _cell(op_name, i, dtype)
        stats = [n for n in cell.ort_out if cell.ort_out[n].dtype == np.float32 and cell.ort_out[n].shape[-1] == 1
                 and cell.case.p["hidden"] > 1]
        assert stats, op_name
        for n in stats:
            assert np.isfinite(cell.ort_out[n]).all(), f"{op_name}: ORT left {n} unwritten"


@pytest.mark.parametrize("dtype", DTYPES)
def test_ort_skip_simplified_mean_is_zeros(dtype):
    """Why SkipSimplifiedLayerNormalization never asks for `mean`: ORT writes zeros there."""
    dt = dtypes.get(dtype)
    rows, h = 3, 37
    spec = GraphSpec("SkipSimplifiedLayerNormalization", "com.microsoft", 1,
                     [("input", "float", (rows, h)), ("skip", "float", (rows, h)), ("gamma", "float", (h,))],
                     [("output", (rows, h)), ("mean", (rows, 1), "f32")], {"epsilon": 1e-5})
    rng = np.random.default_rng(0)
    ins = {n: (rng.standard_normal(s) + 2).astype(dt.numpy) for n, _, s in spec.inputs}
    outs = {"output": np.full((rows, h), np.nan, dt.numpy), "mean": np.full((rows, 1), np.nan, np.float32)}
    ortlib.Bound(ortlib.make_session(ortlib.build_model(spec, dt), 1, "off"), spec, 1, ins, outs).run()
    assert (outs["mean"] == 0).all()


@pytest.mark.parametrize("op_name", NORM_OPS)
def test_k_copies_execute_k_times(op_name):
    K = 4
    cell = _cell(op_name, len(CASES[op_name]) - 1, "f16")
    spec = cell.op.graph(cell.case)
    ort_in = ortlib.to_ort_dtype(cell.inputs, cell.ort_dt)
    outs = cell.op.new_outputs(cell.case, cell.ort_dt.numpy, ort_in)
    assert ortlib.count_node_runs(ortlib.build_model(spec, cell.ort_dt, K), 1, ort_in, outs, spec, K) == K
    assert ortlib.count_node_runs(ortlib.build_model(spec, cell.ort_dt, 1), 1, ort_in, outs, spec, 1) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_name", NORM_OPS)
def test_ort_runs_its_own_kernel(op_name, dtype):
    op = ops_pkg.get(op_name)
    case = op.make_case(CASES[op_name][1])
    dt = dtypes.get(dtype)
    spec = op.graph(case)
    if ORT_DTYPE[op_name][dtype] != dtype:
        with pytest.raises(Exception) as ei:
            ortlib.make_session(ortlib.build_model(spec, dt), 1, "off")
        assert ortlib.is_missing_kernel(ei.value), str(ei.value)
        return
    inputs = op.make_inputs(case, dt, np.random.default_rng(1))
    kind, ran = ortlib.profile_path(spec, dt, 1, "off", inputs, op.new_outputs(case, dt.numpy, inputs))
    assert (kind, ran) == ("kernel", [spec.op_type])


# ---- the op definitions ---------------------------------------------------------------------------


def test_bytes_and_rows():
    op = ops_pkg.get("SkipLayerNormalization")
    case = op.make_case({"rows": 8, "hidden": 16, "skip_rows": 4, "stats": 1, "sum": 1})
    # x 8x16, skip 4x16, gamma, beta, bias 16 each, y and sum 8x16 (2 bytes); mean, inv_std 8 floats
    assert op.bytes_moved(case, dtypes.BF16) == (128 + 64 + 48 + 256) * 2 + 2 * 8 * 4
    assert op.row_sizes(case) == {"output": 16, "mean": 8, "inv_std_var": 8, "input_skip_bias_sum": 16}
    assert op.graph(case).inputs[0][2] == (2, 4, 16)  # batch 2 x the 4 rows the skip holds
    assert op.output_dtypes(case, np.float16)["mean"] == np.float32


@pytest.mark.parametrize("bad, msg", [
    ({"eps": "1e-5"}, "as '1e-05'"), ({"eps": "abc"}, "not a number"), ({"eps": "-1"}, ">= 0"),
    ({"eps": "1e40"}, "float32"), ({"skip_rows": 3}, "divide"),
])
def test_case_validation(bad, msg):
    op = ops_pkg.get("SkipLayerNormalization")
    with pytest.raises(UsageError, match=msg):
        op.make_case({"rows": 8, "hidden": 16, **bad})


def test_wrapper_rejects_outputs_that_overlap(lib):
    x = np.ones((4, 8), np.float32)
    g = np.ones(8, np.float32)
    with pytest.raises(UsageError, match="overlaps input x"):
        ffi_norms.layer_norm(lib, x, g, x, epsilon=1e-5)


# ---- from_node ----------------------------------------------------------------------------------


def _node(op_type, inputs, outputs=("y",), domain="", opset=17, attrs=None, dtype=np.float32):
    dt = np.dtype(dtype)
    ins = [None if s is None else (dt, tuple(s)) for s in inputs]
    name = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}.get(dt, dtypes.BF16.name
                                                                          if dt == dtypes.BF16.numpy else None)
    return NodeInfo(op_type, domain, opset, dict(attrs or {}), ins, list(outputs), name)


def test_from_node_flattens_at_axis():
    op = ops_pkg.get("LayerNormalization")
    b = op.from_node(_node("LayerNormalization", [(2, 3, 4, 5), (4, 5), (1, 4, 5)], ["y", "", "istd"],
                           attrs={"axis": -2, "epsilon": 1e-6}))
    assert b.case.p == {"rows": 6, "hidden": 20, "beta": 1, "stats": 1, "eps": "1e-06"}
    assert b.inputs == {"X": 0, "Scale": 1, "B": 2}
    assert b.outputs == {"Y": (0, (2, 3, 4, 5)), "InvStdDev": (2, (2, 3, 1, 1))}
    b = op.from_node(_node("LayerNormalization", [(2, 3, 4), (2, 3, 4)], attrs={"axis": 0}, dtype=np.float16))
    assert (b.case.p["rows"], b.case.p["hidden"], b.case.p["beta"], b.case.p["stats"]) == (1, 24, 0, 0)
    rms = ops_pkg.get("RMSNormalization")
    b = rms.from_node(_node("RMSNormalization", [(5, 7, 9), (7, 9)], opset=23, attrs={"axis": 1},
                            dtype=dtypes.BF16.numpy))
    assert (b.case.p["rows"], b.case.p["hidden"]) == (5, 63)


@pytest.mark.parametrize("node, exc, msg", [
    (_node("LayerNormalization", [(4, 8), (8,)], attrs={"stash_type": 0}), NodeUnsupported, "stash_type=0"),
    (_node("LayerNormalization", [(4, 8), (1,)]), NodeUnsupported, "broadcast"),
    (_node("LayerNormalization", [(4, 8), (8,)], dtype=np.float64), NodeUnsupported, "float64"),
    (_node("LayerNormalization", [(4, 8), (8,)], attrs={"axis": 2}), UsageError, "axis=2"),
    (_node("LayerNormalization", [(4, 8)]), UsageError, "inputs"),
    (_node("LayerNormalization", [(4, 8), (8,)], attrs={"foo": 1}), NodeUnsupported, "'foo'"),
    (_node("RMSNormalization", [(4, 8), (8,)], opset=22), UsageError, "opset >= 23"),
    # ORT refuses a Scale that holds the right count but not X.shape[axis:]'s shape
    (_node("LayerNormalization", [(2, 3, 64), (64, 3)], attrs={"axis": -2}), UsageError, "does not broadcast"),
    (_node("LayerNormalization", [(2, 3, 4, 5), (4, 5), (20,)], attrs={"axis": -2}), UsageError, "does not broadcast"),
], ids=["stash_type", "scale-broadcast", "float64", "axis-out-of-range", "one-input", "unknown-attr", "rms-opset",
        "scale-transposed", "bias-flattened"])
def test_from_node_declines(node, exc, msg):
    op = ops_pkg.get(node.op_type)
    with pytest.raises(exc, match=msg):
        op.from_node(node)


def test_from_node_mixed_scale_type():
    node = _node("SimplifiedLayerNormalization", [(4, 8), (8,)], opset=21, dtype=np.float16)
    node.inputs[1] = (np.dtype(np.float32), (8,))
    with pytest.raises(NodeUnsupported, match="mixed"):
        ops_pkg.get("SimplifiedLayerNormalization").from_node(node)


def test_from_node_skip_broadcast_and_outputs():
    op = ops_pkg.get("SkipLayerNormalization")
    n = _node("SkipLayerNormalization", [(4, 3, 16), (3, 16), (16,), None, (16,)], ["y", "", "istd", "sum"],
              domain="com.microsoft", opset=1)
    b = op.from_node(n)
    assert b.case.p == {"rows": 12, "hidden": 16, "skip_rows": 3, "bias": 1, "beta": 0, "stats": 1, "sum": 1,
                        "eps": "1e-12"}  # the contrib schema's default epsilon
    assert b.inputs == {"input": 0, "skip": 1, "gamma": 2, "bias": 4}
    assert b.outputs == {"output": (0, (4, 3, 16)), "inv_std_var": (2, (4, 3, 1)), "input_skip_bias_sum": (3, (4, 3, 16))}
    b = op.from_node(_node("SkipLayerNormalization", [(4, 3, 16), (2, 3, 16), (16,)], domain="com.microsoft"))
    assert b.case.p["skip_rows"] == 6
    assert op.graph(b.case).inputs[0][2] == (2, 6, 16)  # the same 4*3*16 elements
    with pytest.raises(NodeUnsupported, match="not a multiple"):
        op.from_node(_node("SkipLayerNormalization", [(4, 3, 16), (3, 3, 16), (16,)], domain="com.microsoft"))
    with pytest.raises(UsageError, match="does not fit"):
        op.from_node(_node("SkipLayerNormalization", [(4, 16), (1, 16), (16,)], domain="com.microsoft"))
    with pytest.raises(UsageError, match="1-D"):
        op.from_node(_node("SkipLayerNormalization", [(4, 16), (4, 16), (1, 16)], domain="com.microsoft"))


def test_from_node_skip_simplified_mean_is_declined():
    op = ops_pkg.get("SkipSimplifiedLayerNormalization")
    ok = op.from_node(_node("SkipSimplifiedLayerNormalization", [(2, 8), (2, 8), (8,)], ["y", "", "", "s"],
                            domain="com.microsoft", attrs={"epsilon": 1e-6}))
    assert ok.case.p == {"rows": 2, "hidden": 8, "skip_rows": 0, "bias": 0, "stats": 0, "sum": 1, "eps": "1e-06"}
    with pytest.raises(NodeUnsupported, match="no mean"):
        op.from_node(_node("SkipSimplifiedLayerNormalization", [(2, 8), (2, 8), (8,)], ["y", "m"],
                           domain="com.microsoft"))


def test_from_node_binding_runs_like_the_node():
    """The bound case computes the node: a (2, 3, 4, 5) LayerNormalization at axis -2 through our
    kernel, reshaped as the binding says, matches ORT running the real node."""
    op = ops_pkg.get("LayerNormalization")
    shape = (2, 3, 4, 5)
    b = op.from_node(_node("LayerNormalization", [shape, (4, 5), (4, 5)], ["y", "m", "i"], attrs={"axis": -2}))
    rng = np.random.default_rng(3)
    node_in = [rng.standard_normal(shape).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32),
               rng.standard_normal((4, 5)).astype(np.float32)]
    spec = op.graph(b.case)
    ours_in = {name: np.ascontiguousarray(node_in[i].reshape(next(s for n, _, s in spec.inputs if n == name)))
               for name, i in b.inputs.items()}
    out = op.new_outputs(b.case, np.float32, ours_in)
    op.prepare_ours(_lib(), b.case, ours_in, out, 1).run()
    node_spec = GraphSpec("LayerNormalization", "", 17, [("X", "float", shape), ("S", "float", (4, 5)), ("B", "float", (4, 5))],
                          [("Y", shape), ("M", (2, 3, 1, 1), "f32"), ("I", (2, 3, 1, 1), "f32")], {"axis": -2})
    theirs = {"Y": np.empty(shape, np.float32), "M": np.empty((2, 3, 1, 1), np.float32),
              "I": np.empty((2, 3, 1, 1), np.float32)}
    ortlib.Bound(ortlib.make_session(ortlib.build_model(node_spec, dtypes.F32), 1, "off"), node_spec, 1,
                 dict(zip("XSB", node_in)), theirs).run()
    for name, (i, oshape) in b.outputs.items():
        np.testing.assert_allclose(out[name].reshape(oshape), theirs["YMI"[i]], rtol=2e-5, atol=2e-6)


def test_tail_len_matches_softmax_rule():
    assert [_norms._tail_len(n) for n in (903, 37, 4136, 4096)] == [7, 5, 8, 16]


def _aligned_empty(shape, dtype, align=64):
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    buf = np.empty(n + align, np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + n].view(dt).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_name, params", [
    ("LayerNormalization", {"rows": 3, "hidden": 896, "stats": 1}),
    ("SkipLayerNormalization", {"rows": 4, "hidden": 912, "skip_rows": 2, "stats": 1, "sum": 1}),
    ("SkipSimplifiedLayerNormalization", {"rows": 3, "hidden": 928, "bias": 1, "sum": 1}),
    ("RMSNormalization", {"rows": 2, "hidden": 4112}),
])
def test_streaming_stores_write_the_same_bits(op_name, params, dtype):
    """Non-temporal stores (taken beyond half the last-level cache; forced here on small rows
    32-byte aligned) write exactly what plain stores write, the f32 skip rows recomputed rather
    than kept in y; and they pass the gate."""
    op = ops_pkg.get(op_name)
    case = op.make_case(params)
    dt = dtypes.get(dtype)
    inputs = op.make_inputs(case, dt, np.random.default_rng(SEED))
    assert case.p["hidden"] * dt.itemsize % 32 == 0
    got = {}
    for mode in (0, 1):
        out = {n: _aligned_empty(a.shape, a.dtype) for n, a in op.new_outputs(case, dt.numpy, inputs).items()}
        previous = ffi_norms.stream_mode(_lib(), mode)
        try:
            op.prepare_ours(_lib(), case, inputs, out, 2).run()
        finally:
            ffi_norms.stream_mode(_lib(), previous)
        got[mode] = out
    for k in got[0]:
        assert got[0][k].tobytes() == got[1][k].tobytes(), k
    ran = ortlib.run_case(op, case, inputs, dt)
    g = numerics.gate(got[1], ran[2], op.oracle(case, to_f64(inputs)), op.row_sizes(case), op.floor(dtype))
    assert g.ours_ok, g.describe()


def test_stream_mode_is_checked(lib):
    with pytest.raises(UsageError):
        ffi_norms.stream_mode(lib, 2)
    assert lib.lib.pb_layer_norm_stream_mode(7) == -2
    assert ffi_norms.stream_mode(lib, -1) == -1
