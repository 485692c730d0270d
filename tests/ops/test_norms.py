"""The norms group (suites/norms.toml) against REAL ONNX Runtime sessions: LayerNormalization,
SkipLayerNormalization, SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization and
RMSNormalization.

- (the gate on every test case, dtype, ISA path and 1/2 threads, the mutants, K ORT copies, bad
  arguments and the from_node round trip are the op contract's: tests/ops/test_contract.py);
- our real kernel fed a bug-inducing argument (wrong epsilon, simplified form switched) fails;
- what ORT really returns for the optional outputs (statistics filled; SkipSimplified's mean is
  zeros, which is why the op never asks for it);
- which path ORT takes per dtype (bf16 head to head, RMSNormalization's in f32); 2 threads give the same bits;
- from_node on hand-built NodeInfo: flattening at axis, skip broadcast, attributes declined."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import norms as ffi_norms
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec, NodeInfo, NodeUnsupported, tail_len, to_f64
from tests.helpers import cell, library

SEED = 20261129
DTYPES = ("f32", "f16", "bf16")
NORM_OPS = ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
            "SkipSimplifiedLayerNormalization", "RMSNormalization")

# the numerics-only odd shapes of suites/norms.toml, plus small representatives of its cases
pytestmark = pytest.mark.usefixtures("auto_isa")


def _cell(op_name: str, i: int, dtype: str):
    """The op's i-th contract test case as a (cached) Cell: ORT's outputs and ours NaN-filled."""
    return cell(op_name, ops_pkg.get(op_name).test_cases[i], dtype, seed=SEED)


ORT_DTYPE = {op: {"f32": "f32", "f16": "f16", "bf16": "bf16"} for op in NORM_OPS}
ORT_DTYPE["RMSNormalization"]["bf16"] = "f32"


# ---- the yardstick and the positive control -------------------------------------------------


@pytest.mark.parametrize("op_name", NORM_OPS)
def test_two_threads_write_the_same_bits(op_name):
    """17 rows x 4136 (odd rows, a vector tail): past twice the per-thread grain, so two
    threads really split the rows (most test cases run on one thread whatever is asked)."""
    op = ops_pkg.get(op_name)
    case = op.make_case({"rows": 17, "hidden": 4136})
    inputs = op.make_inputs(case, dtypes.BF16, np.random.default_rng(SEED))
    outs = []
    for threads in (1, 2):
        mine = op.private_inputs(case, inputs)
        out = op.new_outputs(case, dtypes.BF16.numpy, mine)
        for a in out.values():
            a[...] = np.nan
        op.prepare_ours(library(), case, mine, out, threads).run()
        outs.append(out)
    assert 17 * 4136 >= 2 * 32768  # PB_NORM_GRAIN: 2 threads are worth waking
    oracle = op.oracle(case, op.oracle_inputs(case, inputs))
    for k in outs[0]:
        assert outs[0][k].tobytes() == outs[1][k].tobytes(), k
        assert numerics.error(outs[1][k], oracle[k], op.row_sizes(case)[k]) <= op.floor("bf16"), k


# ---- mutants: realistic wrong answers must fail -----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bug", ["epsilon-0", "simplified-flipped"])
def test_our_kernel_fed_a_wrong_argument_fails_the_gate(bug, dtype):
    for op_name in ("LayerNormalization", "SimplifiedLayerNormalization"):
        cell = _cell(op_name, 0, dtype)  # 3 x 903: a quiet first row, an offset last row
        if bug == "epsilon-0":
            out = cell.ours(library(), epsilon=0.0)
        else:
            over = {"simplified": 1 - int(cell.op.simplified)}
            if not cell.op.simplified:
                over.update(beta=library().ffi.NULL, mean=library().ffi.NULL)  # what the simplified form allows
            out = cell.ours(library(), **over)
        g = cell.gate(out)
        assert not g.ours_ok, f"{op_name} {dtype}: the gate accepted {bug}: {g.describe()}"
        assert cell.gate(cell.ours(library())).ours_ok


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
@pytest.mark.parametrize("op_name", NORM_OPS)
def test_ort_runs_its_own_kernel(op_name, dtype):
    op = ops_pkg.get(op_name)
    case = op.make_case(ops_pkg.get(op_name).test_cases[1])
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


def test_from_node_refuses_a_trailing_empty_input_slot_past_the_schema():
    # SimplifiedLayerNormalization(X, scale, "") has 3 input slots where the schema allows 2: ORT
    # refuses the model (INVALID_GRAPH) and onnx.checker does not know this contrib-style schema,
    # so from_node must (exit 2, not a run that ends without a reference)
    node = _node("SimplifiedLayerNormalization", [(4, 8), (8,)], opset=21)
    node.inputs.append(None)
    with pytest.raises(UsageError, match="2 inputs expected, the node has 3"):
        ops_pkg.get("SimplifiedLayerNormalization").from_node(node)
    node = _node("LayerNormalization", [(4, 8), (8,)])
    node.inputs[1] = None
    with pytest.raises(UsageError, match="input 1 is required"):
        ops_pkg.get("LayerNormalization").from_node(node)


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
    op.prepare_ours(library(), b.case, ours_in, out, 1).run()
    node_spec = GraphSpec("LayerNormalization", "", 17, [("X", "float", shape), ("S", "float", (4, 5)), ("B", "float", (4, 5))],
                          [("Y", shape), ("M", (2, 3, 1, 1), "f32"), ("I", (2, 3, 1, 1), "f32")], {"axis": -2})
    theirs = {"Y": np.empty(shape, np.float32), "M": np.empty((2, 3, 1, 1), np.float32),
              "I": np.empty((2, 3, 1, 1), np.float32)}
    ortlib.Bound(ortlib.make_session(ortlib.build_model(node_spec, dtypes.F32), 1, "off"), node_spec, 1,
                 dict(zip("XSB", node_in)), theirs).run()
    for name, (i, oshape) in b.outputs.items():
        np.testing.assert_allclose(out[name].reshape(oshape), theirs["YMI"[i]], rtol=2e-5, atol=2e-6)


def test_tail_len_matches_softmax_rule():
    assert [tail_len(n) for n in (903, 37, 4136, 4096)] == [7, 5, 8, 16]


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
        previous = ffi_norms.stream_mode(library(), mode)
        try:
            op.prepare_ours(library(), case, inputs, out, 2).run()
        finally:
            ffi_norms.stream_mode(library(), previous)
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
