"""Bad arguments to the elementwise kernels (add, mul, gelu, sigmoid, reduce_mean) never crash the process:
the Python wrappers raise UsageError before C is called, and the C layer itself (reached with
hand-built args structs, validation bypassed) returns a status with a message naming the
problem, having written nothing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import eltwise
from tests.helpers import readonly

INVALID = 1  # PB_ERR_INVALID_ARGUMENT
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED
SENTINEL = 7.0


pytestmark = pytest.mark.usefixtures("auto_isa")


def _rng():
    return np.random.default_rng(0)




def _f32(*shape):
    return _rng().standard_normal(shape).astype(np.float32)


# ---- Python wrappers ----------------------------------------------------------------------------

BINARY_BAD = {
    "a-float64": lambda: (np.ones((4, 8)), np.ones(8), np.zeros((4, 8))),
    "b-dtype-differs": lambda: (_f32(4, 8), np.ones(8, np.float16), np.zeros((4, 8), np.float32)),
    "y-dtype-differs": lambda: (_f32(4, 8), _f32(8), np.zeros((4, 8), ml_dtypes.bfloat16)),
    "no-broadcast": lambda: (_f32(4, 8), _f32(5), np.zeros((4, 8), np.float32)),
    "y-not-the-broadcast-shape": lambda: (_f32(4, 1), _f32(8), np.zeros((4, 1), np.float32)),
    "y-transposed": lambda: (_f32(4, 8), _f32(8), np.zeros((8, 4), np.float32)),
    "y-not-contiguous": lambda: (_f32(4, 8), _f32(8), np.zeros((4, 16), np.float32)[:, ::2]),
    "a-not-contiguous": lambda: (_f32(4, 16)[:, ::2], _f32(8), np.zeros((4, 8), np.float32)),
    "y-read-only": lambda: (_f32(4, 8), _f32(8), readonly(np.zeros((4, 8), np.float32))),
    "rank-9": lambda: (_f32(*(1,) * 8, 2), _f32(2), np.zeros((1,) * 8 + (2,), np.float32)),
    "a-not-an-array": lambda: ([[1.0] * 8] * 4, _f32(8), np.zeros((4, 8), np.float32)),
}


@pytest.mark.parametrize("kernel", ["add", "mul"])
@pytest.mark.parametrize("case", list(BINARY_BAD))
def test_binary_wrapper_rejects(lib, kernel, case):
    a, b, y = BINARY_BAD[case]()
    before = np.array(y, copy=True)
    with pytest.raises(UsageError):
        getattr(eltwise, kernel)(lib, a, b, y, 1)
    assert np.array_equal(np.asarray(y), before)


def test_binary_wrapper_rejects_overlap_and_threads(lib):
    buf = np.zeros(40, np.float32)
    a, y = buf[:32].reshape(4, 8), buf[8:40].reshape(4, 8)  # y starts one row into a
    with pytest.raises(UsageError, match="overlaps"):
        eltwise.add(lib, a, _f32(8), y)
    big = _f32(4, 8)
    with pytest.raises(UsageError, match="overlaps"):  # y is the broadcast operand's memory
        eltwise.add(lib, big, big[0], big)
    for threads in (0, 1000, -1, 1.5):
        with pytest.raises(UsageError, match="threads"):
            eltwise.mul(lib, _f32(4, 8), _f32(8), np.zeros((4, 8), np.float32), threads)
    eltwise.add(lib, big, _f32(8), big).run()  # exactly in place is fine


GELU_BAD = {
    "approximate-unknown": lambda: dict(approximate="fast"),
    "approximate-None": lambda: dict(approximate=None),
    "bias-2d": lambda: dict(bias=_f32(1, 8)),
    "bias-wrong-length": lambda: dict(bias=_f32(9)),
    "bias-dtype-differs": lambda: dict(bias=np.zeros(8, np.float16)),
    "bias-not-contiguous": lambda: dict(bias=_f32(16)[::2]),
    "y-shape-differs": lambda: dict(y=np.zeros((8, 4), np.float32)),
    "y-dtype-differs": lambda: dict(y=np.zeros((4, 8), np.float16)),
    "y-read-only": lambda: dict(y=readonly(np.zeros((4, 8), np.float32))),
    "x-float64": lambda: dict(x=np.ones((4, 8)), y=np.zeros((4, 8))),
    "threads-0": lambda: dict(threads=0),
}


@pytest.mark.parametrize("case", list(GELU_BAD))
def test_gelu_wrapper_rejects(lib, case):
    kw = dict(x=_f32(4, 8), y=np.full((4, 8), SENTINEL, np.float32), approximate="none", bias=None, threads=1)
    kw.update(GELU_BAD[case]())
    before = np.array(kw["y"], copy=True)
    with pytest.raises(UsageError):
        eltwise.gelu(lib, kw["x"], kw["y"], approximate=kw["approximate"], bias=kw["bias"], threads=kw["threads"])
    assert np.array_equal(kw["y"], before)


def test_gelu_wrapper_rejects_overlaps(lib):
    buf = np.zeros(40, np.float32)
    with pytest.raises(UsageError, match="overlap"):
        eltwise.gelu(lib, buf[:32].reshape(4, 8), buf[8:].reshape(4, 8))
    y = np.zeros((4, 8), np.float32)
    with pytest.raises(UsageError, match="bias overlaps y"):
        eltwise.gelu(lib, _f32(4, 8), y, bias=y[1])


SIGMOID_BAD = {
    "alpha-inf": lambda: dict(alpha=float("inf")),
    "alpha-nan": lambda: dict(alpha=float("nan")),
    "alpha-beyond-float32": lambda: dict(alpha=1e39),
    "alpha-a-string": lambda: dict(alpha="1.702"),
    "alpha-bool": lambda: dict(alpha=True),
    "y-shape-differs": lambda: dict(y=np.zeros((8, 4), np.float32)),
    "y-dtype-differs": lambda: dict(y=np.zeros((4, 8), ml_dtypes.bfloat16)),
    "y-read-only": lambda: dict(y=readonly(np.zeros((4, 8), np.float32))),
    "y-not-contiguous": lambda: dict(y=np.zeros((4, 16), np.float32)[:, ::2]),
    "x-float64": lambda: dict(x=np.ones((4, 8)), y=np.zeros((4, 8))),
    "x-not-an-array": lambda: dict(x=[[1.0] * 8] * 4),
    "threads-1000": lambda: dict(threads=1000),
    "device-unknown": lambda: dict(device="tpu"),
}


@pytest.mark.parametrize("case", list(SIGMOID_BAD))
def test_sigmoid_wrapper_rejects(lib, case):
    kw = dict(x=_f32(4, 8), y=np.full((4, 8), SENTINEL, np.float32), alpha=1.702, threads=1, device="cpu")
    kw.update(SIGMOID_BAD[case]())
    before = np.array(kw["y"], copy=True)
    with pytest.raises(UsageError):
        eltwise.sigmoid(lib, kw["x"], kw["y"], alpha=kw["alpha"], threads=kw["threads"], device=kw["device"])
    assert np.array_equal(kw["y"], before)


def test_sigmoid_wrapper_rejects_partial_overlap(lib):
    buf = np.full(40, SENTINEL, np.float32)
    with pytest.raises(UsageError, match="overlap"):
        eltwise.sigmoid(lib, buf[:32].reshape(4, 8), buf[8:].reshape(4, 8))
    assert (buf == SENTINEL).all()
    eltwise.sigmoid(lib, buf, buf, alpha=1.0).run()  # exactly in place is fine


REDUCE_BAD = {
    "axes-not-adjacent": lambda: dict(x=_f32(2, 3, 4), y=np.zeros((1, 3, 1), np.float32), axes=[0, 2]),
    "axis-out-of-range": lambda: dict(axes=[2]),
    "axis-negative-out-of-range": lambda: dict(axes=[-3]),
    "axes-repeated": lambda: dict(axes=[1, -1], y=np.zeros((4, 1), np.float32)),
    "axis-float": lambda: dict(axes=[1.0]),
    "axis-bool": lambda: dict(axes=[True]),
    "y-wrong-shape": lambda: dict(y=np.zeros((4, 2), np.float32)),
    "y-dtype-differs": lambda: dict(y=np.zeros((4, 1), np.float16)),
    "x-float64": lambda: dict(x=np.ones((4, 8))),
    "y-read-only": lambda: dict(y=readonly(np.zeros((4, 1), np.float32))),
    "threads-1000": lambda: dict(threads=1000),
}


@pytest.mark.parametrize("case", list(REDUCE_BAD))
def test_reduce_mean_wrapper_rejects(lib, case):
    kw = dict(x=_f32(4, 8), y=np.full((4, 1), SENTINEL, np.float32), axes=[-1], threads=1)
    kw.update(REDUCE_BAD[case]())
    before = np.array(kw["y"], copy=True)
    with pytest.raises(UsageError):
        eltwise.reduce_mean(lib, kw["x"], kw["y"], axes=kw["axes"], threads=kw["threads"])
    assert np.array_equal(kw["y"], before)


def test_reduce_mean_wrapper_rejects_overlap(lib):
    x = _f32(4, 8)
    with pytest.raises(UsageError, match="overlap"):
        eltwise.reduce_mean(lib, x, x.reshape(-1)[:4], axes=[1])  # y is x's first row


# ---- the C layer, validation bypassed -----------------------------------------------------------


class BinaryStruct:
    def __init__(self, lib, a_shape=(4, 8), b_shape=(8,), y_shape=(4, 8)):
        self.a = _f32(*a_shape)
        self.b = _f32(*b_shape)
        self.y = np.zeros(y_shape, np.float32)
        args = lib.ffi.new("pb_binary_args*")
        args.exec.device, args.exec.num_threads = 0, 1
        args.dtype, args.rank = 1, len(y_shape)
        for i, n in enumerate(y_shape):
            args.y_shape[i] = n
        for arr, field in ((a_shape, args.a_shape), (b_shape, args.b_shape)):
            for i, n in enumerate((1,) * (len(y_shape) - len(arr)) + tuple(arr)):
                field[i] = n
        args.a, args.b, args.y = lib.ptr(self.a), lib.ptr(self.b), lib.ptr(self.y)
        self.args = args


def _setf(lib, args, field, value):
    if field in ("device", "num_threads"):
        setattr(args.exec, field, value)
    elif field.endswith("]"):
        name, idx = field[:-1].split("[")
        getattr(args, name)[int(idx)] = value
    elif value == "NULL":
        setattr(args, field, lib.ffi.NULL)
    else:
        setattr(args, field, value)


BINARY_C = [
    ("a", "NULL", INVALID, ["NULL"]),
    ("b", "NULL", INVALID, ["NULL"]),
    ("y", "NULL", INVALID, ["NULL"]),
    ("rank", -1, INVALID, ["rank=-1"]),
    ("rank", 9, INVALID, ["rank=9"]),
    ("a_shape[1]", -8, INVALID, ["negative"]),
    ("b_shape[1]", 5, INVALID, ["do not broadcast"]),
    ("a_shape[0]", 3, INVALID, ["axis 0", "do not broadcast"]),
    ("y_shape[0]", 5, INVALID, ["do not broadcast"]),  # a is 4 there
    ("y_shape[0]", 1 << 62, INVALID, ["do not broadcast"]),
    ("dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("num_threads", 1000, INVALID, ["num_threads=1000"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
]


@pytest.mark.parametrize("kernel", ["add", "mul"])
def test_c_binary_baseline_struct_is_valid(lib, kernel):
    h = BinaryStruct(lib)
    lib.call(kernel, h.args)
    want = h.a + h.b if kernel == "add" else h.a * h.b
    assert np.array_equal(h.y, want)


@pytest.mark.parametrize("field, value, status, words", BINARY_C, ids=[f"{c[0]}={c[1]}" for c in BINARY_C])
def test_c_binary_returns_a_status(lib, field, value, status, words):
    h = BinaryStruct(lib)
    _setf(lib, h.args, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("add", h.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == "add"
    for w in words:
        assert w in e.message, e.message
    assert not h.y.any()


def test_c_binary_sizes_overflow(lib):
    h = BinaryStruct(lib, a_shape=(1, 1), b_shape=(1, 1), y_shape=(1, 1))
    for i, n in enumerate(((1 << 31), (1 << 31))):
        h.args.y_shape[i] = n
        h.args.a_shape[i] = n
    with pytest.raises(NativeError) as ei:
        lib.call("mul", h.args)
    assert ei.value.status == INVALID and "overflow" in ei.value.message


def test_c_binary_overlaps(lib):
    h = BinaryStruct(lib)
    # y one element into a: partial overlap
    h.args.y = lib.ffi.cast("void *", h.a.ctypes.data + 4)
    with pytest.raises(NativeError) as ei:
        lib.call("add", h.args)
    assert ei.value.status == INVALID and "overlaps" in ei.value.message
    # y is the broadcast operand b (smaller than y): refused
    h.args.y = lib.ptr(h.b)
    with pytest.raises(NativeError) as ei:
        lib.call("add", h.args)
    assert "overlaps" in ei.value.message
    # y is a (same shape): in place
    h.args.y = lib.ptr(h.a)
    want = h.a + h.b
    lib.call("add", h.args)
    assert np.array_equal(h.a, want)


def test_c_binary_zero_size_and_rank_0(lib):
    h = BinaryStruct(lib, a_shape=(0, 8), b_shape=(8,), y_shape=(0, 8))
    h.args.a = lib.ffi.NULL  # nothing is read when y is empty
    lib.call("add", h.args)
    h = BinaryStruct(lib, a_shape=(), b_shape=(), y_shape=())
    lib.call("mul", h.args)
    assert h.y == h.a * h.b


class GeluStruct:
    def __init__(self, lib, rows=4, cols=8):
        self.x = _f32(rows, cols)
        self.bias = _f32(cols)
        self.y = np.zeros((rows, cols), np.float32)
        a = lib.ffi.new("pb_gelu_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.approximate, a.rows, a.cols = 1, 0, rows, cols
        a.x, a.bias, a.y = lib.ptr(self.x), lib.ptr(self.bias), lib.ptr(self.y)
        self.args = a


GELU_C = [
    ("x", "NULL", INVALID, ["NULL"]),
    ("y", "NULL", INVALID, ["NULL"]),
    ("approximate", 2, INVALID, ["approximate=2"]),
    ("approximate", -1, INVALID, ["approximate=-1"]),
    ("rows", -1, INVALID, ["rows=-1"]),
    ("cols", -3, INVALID, ["cols=-3"]),
    ("rows", 1 << 62, INVALID, ["overflows"]),
    ("dtype", 11, UNSUPPORTED, ["dtype 11"]),
    ("num_threads", -2, INVALID, ["num_threads=-2"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
]


def test_c_gelu_baseline_struct_is_valid(lib):
    h = GeluStruct(lib)
    lib.call("gelu", h.args)
    assert np.isfinite(h.y).all() and h.y.any()
    h.args.bias = lib.ffi.NULL  # the bias is optional
    lib.call("gelu", h.args)


@pytest.mark.parametrize("field, value, status, words", GELU_C, ids=[f"{c[0]}={c[1]}" for c in GELU_C])
def test_c_gelu_returns_a_status(lib, field, value, status, words):
    h = GeluStruct(lib)
    _setf(lib, h.args, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("gelu", h.args)
    assert ei.value.status == status and ei.value.kernel == "gelu"
    for w in words:
        assert w in ei.value.message, ei.value.message
    assert not h.y.any()


def test_c_gelu_overlaps(lib):
    h = GeluStruct(lib)
    h.args.y = lib.ffi.cast("void *", h.x.ctypes.data + 8)
    with pytest.raises(NativeError) as ei:
        lib.call("gelu", h.args)
    assert ei.value.status == INVALID and "overlap" in ei.value.message
    h = GeluStruct(lib)
    h.args.bias = lib.ffi.cast("void *", h.y.ctypes.data + 16)  # the bias inside y
    with pytest.raises(NativeError) as ei:
        lib.call("gelu", h.args)
    assert "bias overlaps y" in ei.value.message
    assert not h.y.any()


class SigmoidStruct:
    def __init__(self, lib, n=32, mode=1):
        self.x = _f32(n)
        self.y = np.zeros(n, np.float32)
        a = lib.ffi.new("pb_sigmoid_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.mode, a.alpha, a.n = 1, mode, 1.702, n
        a.x, a.y = lib.ptr(self.x), lib.ptr(self.y)
        self.args = a


SIGMOID_C = [
    ("x", "NULL", INVALID, ["NULL"]),
    ("y", "NULL", INVALID, ["NULL"]),
    ("mode", 2, INVALID, ["mode=2"]),
    ("mode", -1, INVALID, ["mode=-1"]),
    ("alpha", float("inf"), INVALID, ["alpha=inf", "finite"]),
    ("alpha", float("nan"), INVALID, ["alpha=nan", "finite"]),
    ("n", -1, INVALID, ["n=-1"]),
    ("n", 1 << 62, INVALID, ["overflows"]),
    ("dtype", 11, UNSUPPORTED, ["dtype 11"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
]


def test_c_sigmoid_baseline_struct_is_valid(lib):
    h = SigmoidStruct(lib)
    lib.call("sigmoid", h.args)
    want = h.x.astype(np.float64) / (1.0 + np.exp(-np.float32(1.702) * h.x.astype(np.float64)))
    assert np.allclose(h.y, want, rtol=1e-6, atol=1e-7)
    h.args.mode, h.args.alpha = 0, float("nan")  # Sigmoid: alpha is not read
    lib.call("sigmoid", h.args)
    assert np.allclose(h.y, 1.0 / (1.0 + np.exp(-h.x.astype(np.float64))), rtol=1e-6)
    h.args.n, h.args.x = 0, lib.ffi.NULL  # nothing to do: nothing is read
    lib.call("sigmoid", h.args)


@pytest.mark.parametrize("field, value, status, words", SIGMOID_C, ids=[f"{c[0]}={c[1]}" for c in SIGMOID_C])
def test_c_sigmoid_returns_a_status(lib, field, value, status, words):
    h = SigmoidStruct(lib)
    _setf(lib, h.args, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("sigmoid", h.args)
    assert ei.value.status == status and ei.value.kernel == "sigmoid"
    for w in words:
        assert w in ei.value.message, ei.value.message
    assert not h.y.any()


def test_c_sigmoid_overlap(lib):
    h = SigmoidStruct(lib)
    h.args.y = lib.ffi.cast("void *", h.x.ctypes.data + 4)  # one element into x
    before = h.x.copy()
    with pytest.raises(NativeError) as ei:
        lib.call("sigmoid", h.args)
    assert ei.value.status == INVALID and "overlap" in ei.value.message
    assert np.array_equal(h.x, before) and not h.y.any()


class ReduceStruct:
    def __init__(self, lib, outer=4, reduce=8, inner=1):
        self.x = _f32(outer, reduce, inner)
        self.y = np.zeros((outer, inner), np.float32)
        a = lib.ffi.new("pb_reduce_mean_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.outer, a.reduce, a.inner = 1, outer, reduce, inner
        a.x, a.y = lib.ptr(self.x), lib.ptr(self.y)
        self.args = a


REDUCE_C = [
    ("x", "NULL", INVALID, ["NULL"]),
    ("y", "NULL", INVALID, ["NULL"]),
    ("outer", -1, INVALID, ["outer=-1"]),
    ("reduce", -2, INVALID, ["reduce=-2"]),
    ("inner", -3, INVALID, ["inner=-3"]),
    ("reduce", 1 << 61, INVALID, ["overflow"]),
    ("inner", 1 << 62, INVALID, ["overflow"]),
    ("dtype", 0, UNSUPPORTED, ["dtype 0"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("device", 3, UNSUPPORTED, ["device 3"]),
]


def test_c_reduce_mean_baseline_struct_is_valid(lib):
    h = ReduceStruct(lib)
    lib.call("reduce_mean", h.args)
    assert np.allclose(h.y, h.x.mean(axis=1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("field, value, status, words", REDUCE_C, ids=[f"{c[0]}={c[1]}" for c in REDUCE_C])
def test_c_reduce_mean_returns_a_status(lib, field, value, status, words):
    h = ReduceStruct(lib)
    _setf(lib, h.args, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("reduce_mean", h.args)
    assert ei.value.status == status and ei.value.kernel == "reduce_mean"
    for w in words:
        assert w in ei.value.message, ei.value.message
    assert not h.y.any()


def test_c_reduce_mean_overlap(lib):
    h = ReduceStruct(lib)
    h.args.y = lib.ffi.cast("void *", h.x.ctypes.data + 4 * 30)  # inside x
    before = h.x.copy()
    with pytest.raises(NativeError) as ei:
        lib.call("reduce_mean", h.args)
    assert ei.value.status == INVALID and "overlap" in ei.value.message
    assert np.array_equal(h.x, before)


def test_c_null_args_struct(lib):
    for kernel in ("add", "mul", "gelu", "sigmoid", "reduce_mean"):
        with pytest.raises(NativeError) as ei:
            lib.call(kernel, lib.ffi.NULL)
        assert ei.value.status == INVALID and "NULL" in ei.value.message
