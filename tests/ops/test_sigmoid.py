"""The Sigmoid family's own tests (Sigmoid, com.microsoft QuickGelu: one `sigmoid` kernel in two
modes); the op contract (tests/ops/test_contract.py) covers the gate on every ISA path and
thread count, the mutants, bad arguments through C, K ORT copies and the from_node round trip.

* the kernel over a dense f32 grid (the per-element guard against a small side cancelled to 0,
  which the gate's row-RMS floor cannot see), NaN / +-inf / +-0, streaming stores against cached
  stores, in place, 2 threads bit-identical to 1;
* from_node: the mapping, its declines (exit 3) and usage errors (exit 2);
* `perfbench node` on single-node models.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from perfbench.ops.base import NodeUnsupported
from tests.conftest import isas_to_test
from tests.helpers import CACHED, STREAM, library, llc_bytes, misaligned
from tests.helpers import node_info as _node

SUPPORTED = isas_to_test(library())
NP_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)
pytestmark = pytest.mark.usefixtures("auto_isa")


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("alpha", [None, 1.702, 1.0, -0.5])
def test_sigmoid_error_over_a_dense_grid(isa, alpha):
    """Every f32 x in [-90, 30] (and a few far out). Sigmoid (alpha None): relative error
    <= 5e-7 wherever sigmoid is a normal float32 (the portable paths, whose fmadd is not fused:
    1.5e-6 for x > -30, 6e-6 below, the exp's one-constant range reduction, on values < 1e-13),
    and <= 1.2e-38 absolute below; x * sigmoid(alpha x): |ours - exact| <= 3e-7 (|exact| + 1)
    (1.5e-6 portable), the exact product taken with alpha in float32."""
    lib = library()
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
    lib = library()
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
    """With every output streamed (the library's LLC set to 3 bytes: peel to alignment, stream,
    tail) the bits are those of plain stores, in every dtype and both modes, with a misaligned
    output; and y = x in place gives the same bits as a separate y."""
    lib = library()
    lib.select_isa(isa)
    rng = np.random.default_rng(11)
    for dt in NP_DTYPES:
        x = (3.0 * rng.standard_normal((150, 149))).astype(dt)
        for alpha in (None, 1.702):
            y = misaligned(x.shape, dt)
            with llc_bytes(lib, STREAM):
                eltwise.sigmoid(lib, x, y, alpha=alpha, threads=2).run()
            rows = misaligned(x.shape, dt)
            with llc_bytes(lib, CACHED):
                eltwise.sigmoid(lib, x, rows, alpha=alpha, threads=2).run()
            assert y.tobytes() == rows.tobytes(), (alpha, np.dtype(dt).name)
            z = x[:7].copy()
            eltwise.sigmoid(lib, z, z, alpha=alpha).run()
            assert z.tobytes() == rows[:7].tobytes(), (alpha, np.dtype(dt).name)



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
    with pytest.raises(UsageError, match="1 input expected"):
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
    with pytest.raises(UsageError, match="1 input expected"):
        qg.from_node(_node("QuickGelu", [], **ms))
    # the case parameter itself: a float32 number in canonical form
    with pytest.raises(UsageError, match="canonical"):
        qg.make_case({"rows": 1, "cols": 8, "alpha": "1.70"})
    with pytest.raises(UsageError, match="must be a number"):
        qg.make_case({"rows": 1, "cols": 8, "alpha": "fast"})



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
        rep = node.run(_single_node_model(tmp_path / f"m{i}.onnx", n, elem, shape, opsets), timing=False, lib=library())
        assert rep.exit_code == 0 and rep.ort_status == "ok", node.render(rep)
    bad = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=float("inf"))
    rep = node.run(_single_node_model(tmp_path / "inf.onnx", bad, TensorProto.FLOAT, [3, 8], ms), timing=False, lib=library())
    assert rep.exit_code == 3 and "non-finite" in node.render(rep), node.render(rep)
    bad = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=2)  # an INT attribute
    with pytest.raises(UsageError, match="must be a FLOAT attribute"):
        node.run(_single_node_model(tmp_path / "int.onnx", bad, TensorProto.FLOAT, [3, 8], ms), timing=False, lib=library())


def _bf16_ulps(a, b) -> np.ndarray:
    """Distance in bfloat16 ulps between two bf16 arrays of finite values (a monotone integer map)."""
    ia, ib = (np.asarray(v).view(np.uint16).astype(np.int32) for v in (a, b))
    ia = np.where(ia & 0x8000, 0x8000 - ia, ia)
    ib = np.where(ib & 0x8000, 0x8000 - ib, ib)
    return np.abs(ia - ib)


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("alpha", [None, 1.702, 1.0, -0.5])
def test_bf16_sigmoid_is_within_one_ulp_for_every_bf16_input(isa, alpha):
    """bf16 takes the sigmoid to bf16's precision (a degree-3 exp and a reciprocal estimate): for
    every one of the 65536 bf16 inputs the result is the float64 answer rounded to bf16, or one
    ulp beside it; special values exactly as the f32 form (NaN, +-inf, signed zeros); where
    alpha x < -87.3365 (the exp's flush, as the f32 form) the result is +-0."""
    lib = library()
    lib.select_isa(isa)
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    y = np.empty_like(x)
    eltwise.sigmoid(lib, x, y, alpha=alpha).run()
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        exact = el.sigmoid64(x64) if alpha is None else el.quick_gelu64(x64, float(np.float32(alpha)))
    want = exact.astype(ml_dtypes.bfloat16)
    got64 = y.astype(np.float64)
    nan = np.isnan(exact)
    assert np.array_equal(np.isnan(got64), nan)
    inf = np.isinf(exact)
    assert np.array_equal(got64[inf], exact[inf])
    z = x64 * (1.0 if alpha is None else float(np.float32(alpha)))
    tiny = ~nan & ~inf & (z < -87.3365478515625)  # e flushed to 0: +-0, exact |x| * sigmoid(z) < |x| * 1.2e-38
    assert np.all(got64[tiny] == 0) and np.all(np.abs(exact[tiny]) < np.abs(x64[tiny]) * 1.2e-38)
    rest = ~nan & ~inf & ~tiny
    d = _bf16_ulps(y[rest], want[rest])
    assert d.max() <= 1, (x[rest][d.argmax()], got64[rest][d.argmax()], exact[rest][d.argmax()])
    zeros = rest & (exact == 0)  # +-0 in: sigmoid 0.5, x * sigmoid(x) the signed zero
    assert np.array_equal(np.signbit(got64[zeros]), np.signbit(exact[zeros]))
