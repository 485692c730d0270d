"""Bad arguments to the norms group's kernel (`layer_norm`) never crash the process: the Python
wrapper raises UsageError before C is called, and the C layer itself (reached with hand-built
args structs, validation bypassed) returns a status whose message names the problem, having
written nothing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi.norms import layer_norm
from tests.helpers import readonly

INVALID = 1  # PB_ERR_INVALID_ARGUMENT
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED
ROWS, H = 4, 24


pytestmark = pytest.mark.usefixtures("auto_isa")


# ---- Python wrapper ---------------------------------------------------------------------------


def _args(dtype=np.float32, **changes):
    rng = np.random.default_rng(0)
    a = dict(x=rng.standard_normal((ROWS, H)).astype(dtype), scale=np.ones(H, dtype), y=np.zeros((ROWS, H), dtype),
             epsilon=1e-5, skip=rng.standard_normal((ROWS, H)).astype(dtype), bias=np.zeros(H, dtype),
             beta=np.zeros(H, dtype), mean=np.zeros(ROWS, np.float32), inv_std=np.zeros((ROWS, 1), np.float32),
             sum_out=np.zeros((ROWS, H), dtype), threads=1)
    for k, v in changes.items():
        a[k] = v(a) if callable(v) else v
    return a




WRAPPER_BAD = {
    "x-float64": (dict(x=lambda a: a["x"].astype(np.float64)), "float64"),
    "x-1d": (dict(x=lambda a: a["x"].ravel(), y=lambda a: a["y"].ravel()), "(rows, hidden)"),
    "x-not-contiguous": (dict(x=lambda a: np.repeat(a["x"], 2, axis=1)[:, ::2]), "C-contiguous"),
    "y-dtype": (dict(y=lambda a: a["y"].astype(np.float16)), "y must match x"),
    "y-shape": (dict(y=np.zeros((ROWS, H + 1), np.float32)), "y must match x"),
    "y-read-only": (dict(y=lambda a: readonly(a["y"])), "writeable"),
    "scale-shape": (dict(scale=np.ones(H + 1, np.float32)), "scale must be"),
    "scale-dtype": (dict(scale=np.ones(H, np.float16)), "scale must be"),
    "beta-2d": (dict(beta=np.zeros((1, H), np.float32)), "beta must be"),
    "bias-dtype": (dict(bias=np.zeros(H, ml_dtypes.bfloat16)), "bias must be"),
    "skip-hidden": (dict(skip=np.zeros((ROWS, H + 1), np.float32)), "skip must be"),
    "skip-rows-not-dividing": (dict(skip=np.zeros((3, H), np.float32)), "divide"),
    "skip-1d": (dict(skip=np.zeros(H, np.float32)), "skip must be"),
    "mean-float16": (dict(mean=np.zeros(ROWS, np.float16)), "mean must be float32"),
    "inv-std-size": (dict(inv_std=np.zeros(ROWS + 1, np.float32)), "inv_std must be float32"),
    "sum-shape": (dict(sum_out=np.zeros((ROWS, H - 1), np.float32)), "sum must match x"),
    "y-is-x": (dict(y=lambda a: a["x"]), "output y overlaps input x"),
    "sum-is-y": (dict(sum_out=lambda a: a["y"]), "outputs y and sum overlap"),
    "mean-inside-inv-std": (dict(inv_std=np.zeros(2 * ROWS, np.float32)[:ROWS],
                                 mean=lambda a: a["inv_std"]), "overlap"),
    "epsilon-negative": (dict(epsilon=-1e-5), "epsilon"),
    "epsilon-nan": (dict(epsilon=float("nan")), "epsilon"),
    "epsilon-overflows-float32": (dict(epsilon=1e39), "epsilon"),
    "epsilon-string": (dict(epsilon="1e-5"), "epsilon"),
    "threads-0": (dict(threads=0), "threads"),
    "threads-float": (dict(threads=1.5), "threads"),
}


@pytest.mark.parametrize("case", list(WRAPPER_BAD))
def test_wrapper_rejects(lib, case):
    changes, words = WRAPPER_BAD[case]
    a = _args(**changes)
    y = a["y"]
    before = np.array(y, copy=True)
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        layer_norm(lib, a.pop("x"), a.pop("scale"), a.pop("y"), **a)
    assert np.array_equal(np.asarray(y), before)  # nothing ran


@pytest.mark.parametrize("what", ["beta", "mean"])
def test_wrapper_rejects_what_the_simplified_form_lacks(lib, what):
    a = _args(**({"beta": None} if what == "mean" else {}))
    with pytest.raises(UsageError, match=f"{what} is not defined for the simplified"):
        layer_norm(lib, a.pop("x"), a.pop("scale"), a.pop("y"), simplified=True, **a)


def test_wrapper_accepts_the_full_set(lib):
    a = _args()
    y = a["y"]
    layer_norm(lib, a.pop("x"), a.pop("scale"), a.pop("y"), **a).run()
    assert np.isfinite(y).all() and y.any()


# ---- the C layer, validation bypassed -----------------------------------------------------------


class Struct:
    """A valid pb_layer_norm_args over numpy buffers (every optional input and output set)."""

    def __init__(self, lib, rows=ROWS, hidden=H, skip_rows=ROWS):
        rng = np.random.default_rng(1)
        self.x = rng.standard_normal((rows, hidden)).astype(np.float32)
        self.skip = rng.standard_normal((skip_rows, hidden)).astype(np.float32)
        self.scale = np.ones(hidden, np.float32)
        self.beta = np.zeros(hidden, np.float32)
        self.bias = np.zeros(hidden, np.float32)
        self.y = np.zeros((rows, hidden), np.float32)
        self.sum = np.zeros((rows, hidden), np.float32)
        self.mean = np.zeros(rows, np.float32)
        self.inv_std = np.zeros(rows, np.float32)
        a = lib.ffi.new("pb_layer_norm_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.simplified, a.epsilon = 1, 0, 1e-5
        a.rows, a.hidden, a.skip_rows = rows, hidden, skip_rows
        for name in ("x", "skip", "scale", "beta", "bias", "y", "sum"):
            setattr(a, name, lib.ptr(getattr(self, name)))
        a.mean = lib.ffi.cast("float *", self.mean.ctypes.data)
        a.inv_std = lib.ffi.cast("float *", self.inv_std.ctypes.data)
        self.args = a
        self.lib = lib

    def set(self, field, value):
        a = self.args
        if field in ("device", "num_threads"):
            setattr(a.exec, field, value)
        elif value == "NULL":
            setattr(a, field, self.lib.ffi.NULL)
        elif isinstance(value, tuple):  # ("at", buffer, element offset): a pointer into a buffer
            _, buf, off = value
            setattr(a, field, self.lib.ffi.cast("float *" if field in ("mean", "inv_std") else "void *",
                                                getattr(self, buf).ctypes.data + 4 * off))
        else:
            setattr(a, field, value)

    def written(self) -> bool:
        return bool(self.y.any() or self.sum.any() or self.mean.any() or self.inv_std.any())


C_BAD = [
    # field(s) = value(s), status, words the message must contain
    ({"x": "NULL"}, INVALID, ["x, scale and y must not be NULL"]),
    ({"scale": "NULL"}, INVALID, ["must not be NULL"]),
    ({"y": "NULL"}, INVALID, ["must not be NULL"]),
    ({"rows": -1}, INVALID, ["rows=-1"]),
    ({"hidden": 0}, INVALID, ["hidden=0"]),
    ({"hidden": -8}, INVALID, ["hidden=-8"]),
    ({"rows": 1 << 61, "skip_rows": 1}, INVALID, ["overflows"]),
    ({"skip_rows": 3}, INVALID, ["skip_rows=3", "divide rows=4"]),
    ({"skip_rows": 0}, INVALID, ["skip_rows=0"]),
    ({"skip_rows": -2}, INVALID, ["skip_rows=-2"]),
    ({"skip": "NULL"}, INVALID, ["skip_rows=4 without a skip"]),
    ({"simplified": 2}, INVALID, ["simplified=2"]),
    ({"simplified": 1}, INVALID, ["beta is not defined for the simplified"]),
    ({"simplified": 1, "beta": "NULL"}, INVALID, ["mean is not defined for the simplified"]),
    ({"epsilon": -1.0}, INVALID, ["epsilon"]),
    ({"epsilon": float("inf")}, INVALID, ["epsilon"]),
    ({"epsilon": float("nan")}, INVALID, ["epsilon"]),
    ({"dtype": 11}, UNSUPPORTED, ["dtype 11"]),
    ({"num_threads": 0}, INVALID, ["num_threads=0"]),
    ({"num_threads": 1000}, INVALID, ["num_threads=1000"]),
    ({"device": 1}, UNSUPPORTED, ["device 1"]),
    # a pointer into another buffer: the message names the output and an overlap (which other
    # buffer it names first depends on where numpy placed the arrays)
    ({"y": ("at", "x", 0)}, INVALID, ["output y overlaps input x"]),
    ({"y": ("at", "x", 5)}, INVALID, ["output y overlaps input x"]),
    ({"y": ("at", "skip", -3)}, INVALID, ["output y overlaps input"]),
    ({"sum": ("at", "scale", 0)}, INVALID, ["sum", "overlap"]),
    ({"mean": ("at", "bias", H - 1)}, INVALID, ["mean", "overlap"]),
    ({"inv_std": ("at", "mean", 2)}, INVALID, ["inv_std", "overlap"]),
    ({"sum": ("at", "y", ROWS * H - 1)}, INVALID, ["outputs y and sum overlap"]),
]


def _id(c):
    return ",".join(f"{k}={'ptr:' + v[1] + '+' + str(v[2]) if isinstance(v, tuple) else v}" for k, v in c[0].items())


def test_c_baseline_struct_is_valid(lib):
    h = Struct(lib)
    lib.call("layer_norm", h.args)
    v = h.x + h.skip
    assert np.allclose(h.sum, v) and np.allclose(h.mean, v.mean(1), atol=1e-6)
    assert np.allclose(h.y, (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + 1e-5), atol=1e-5)


@pytest.mark.parametrize("changes, status, words", C_BAD, ids=[_id(c) for c in C_BAD])
def test_c_returns_a_status(lib, changes, status, words):
    h = Struct(lib)
    for field, value in changes.items():
        h.set(field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("layer_norm", h.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == "layer_norm"
    for w in words:
        assert w in e.message, e.message
    assert not h.written()  # validation happens before any work


def test_c_null_args_struct(lib):
    with pytest.raises(NativeError) as ei:
        lib.call("layer_norm", lib.ffi.NULL)
    assert ei.value.status == INVALID and "args is NULL" in ei.value.message


def test_c_zero_rows_is_a_no_op(lib):
    h = Struct(lib)
    h.set("rows", 0)
    h.set("skip", "NULL")
    h.set("skip_rows", 0)
    for f in ("x", "y", "scale"):
        h.set(f, "NULL")  # nothing is read or written
    lib.call("layer_norm", h.args)


def test_c_broadcast_skip_and_optional_outputs_off(lib):
    h = Struct(lib, rows=6, hidden=5, skip_rows=3)
    for f in ("sum", "mean", "inv_std", "bias", "beta"):
        h.set(f, "NULL")
    lib.call("layer_norm", h.args)
    v = h.x + np.tile(h.skip, (2, 1))
    assert np.allclose(h.y, (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + 1e-5), atol=1e-5)
    assert not h.sum.any() and not h.mean.any() and not h.inv_std.any()
