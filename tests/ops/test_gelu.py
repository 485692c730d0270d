"""The Gelu family (Gelu, FastGelu, BiasGelu: one kernel) beyond the op contract
(tests/ops/test_contract.py): the dtype-limited mutants are really invisible where Op.mutant_dtypes
says; the error over a dense grid; NaN and infinities; from_node maps the family's nodes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise
from perfbench.ops import _eltwise as el
from tests.conftest import isas_to_test
from tests.helpers import cell, library, mutant_applies_in
from tests.helpers import node_info as _node

pytestmark = pytest.mark.usefixtures("auto_isa")

SEED = 20261130
SUPPORTED = isas_to_test(library())


@pytest.mark.parametrize("op_name, mutant_name, dtype", [
    ("Gelu", "the other Gelu form", "f16"), ("Gelu", "the other Gelu form", "bf16"),
    ("Gelu", "x * sigmoid(1.702 x) instead", "bf16"),
])
def test_dtype_limited_mutants_are_really_invisible_there(op_name, mutant_name, dtype):
    """The exclusions (Op.mutant_dtypes) are honest: in these dtypes the mutant passes the gate on some
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
