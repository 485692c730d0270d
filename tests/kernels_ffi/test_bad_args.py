"""Bad arguments never crash the process: the Python wrappers raise UsageError before C is
called, and the C layer itself (reached with hand-built args structs, validation bypassed)
returns a status that lib.call raises as NativeError with a message naming the problem."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import wrappers
from tests.helpers import readonly

INVALID = 1  # PB_ERR_INVALID_ARGUMENT
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED


pytestmark = pytest.mark.usefixtures("auto_isa")


# ---- Python wrappers --------------------------------------------------------------------------


def _sm(shape=(4, 8), dtype=np.float32):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    return x, np.zeros_like(x)




SOFTMAX_BAD = {
    "x-float64": lambda: (np.ones((4, 8)), np.ones((4, 8)), 1),
    "y-dtype-differs": lambda: (_sm()[0], np.zeros((4, 8), np.float16), 1),
    "y-shape-differs": lambda: (_sm()[0], np.zeros((4, 9), np.float32), 1),
    "y-transposed-shape": lambda: (_sm()[0], np.zeros((8, 4), np.float32), 1),
    "x-not-contiguous": lambda: (np.ones((4, 16), np.float32)[:, ::2], np.zeros((4, 8), np.float32), 1),
    "y-not-contiguous": lambda: (_sm()[0], np.zeros((4, 16), np.float32)[:, ::2], 1),
    "x-fortran-order": lambda: (np.asfortranarray(np.ones((4, 8), np.float32)), np.zeros((4, 8), np.float32), 1),
    "y-read-only": lambda: (_sm()[0], readonly(_sm()[1]), 1),
    "x-not-an-array": lambda: ([[1.0, 2.0]], np.zeros((1, 2), np.float32), 1),
    "threads-0": lambda: (*_sm(), 0),
    "threads-1000": lambda: (*_sm(), 1000),
    "threads-negative": lambda: (*_sm(), -1),
    "threads-float": lambda: (*_sm(), 1.5),
}


@pytest.mark.parametrize("case", list(SOFTMAX_BAD))
def test_softmax_wrapper_rejects(lib, case):
    x, y, threads = SOFTMAX_BAD[case]()
    before = np.array(y, copy=True)
    with pytest.raises(UsageError):
        wrappers.softmax(lib, x, y, threads)
    assert np.array_equal(np.asarray(y), before)  # nothing ran


def _rot(b=2, s=3, n=2, h=8, layout="bsnh", dtype=np.float32, max_pos=16):
    rng = np.random.default_rng(0)
    shape = (b, s, n * h) if layout == "bsnh" else (b, n, s, h)
    x = rng.standard_normal(shape).astype(dtype)
    pos = (np.arange(s)[None, :] + np.array([[0], [5]])[:b]).astype(np.int64)
    cos = rng.standard_normal((max_pos, h // 2)).astype(dtype)
    sin = rng.standard_normal((max_pos, h // 2)).astype(dtype)
    return dict(x=x, position_ids=pos, cos_cache=cos, sin_cache=sin, out=np.zeros_like(x), num_heads=n,
                threads=1, interleaved=False)


def _rot_with(**changes):
    def make():
        a = _rot(**{k: v for k, v in changes.items() if k in ("b", "s", "n", "h", "layout", "dtype", "max_pos")})
        for k, v in changes.items():
            if k not in ("b", "s", "n", "h", "layout", "dtype", "max_pos"):
                a[k] = v(a) if callable(v) else v
        return a

    return make


ROTARY_BAD = {
    "input-float64": _rot_with(dtype=np.float64),
    "output-dtype-differs": _rot_with(out=lambda a: np.zeros(a["x"].shape, np.float16)),
    "cos-dtype-differs": _rot_with(cos_cache=lambda a: a["cos_cache"].astype(np.float16)),
    "sin-bf16-input-f32": _rot_with(sin_cache=lambda a: a["sin_cache"].astype(ml_dtypes.bfloat16)),
    "output-shape-differs": _rot_with(out=lambda a: np.zeros((2, 3, 15), np.float32)),
    "input-not-contiguous": _rot_with(x=lambda a: np.ones((2, 6, 16), np.float32)[:, ::2]),
    "position-ids-not-contiguous": _rot_with(position_ids=lambda a: np.ones((2, 6), np.int64)[:, ::2]),
    "cos-not-contiguous": _rot_with(cos_cache=lambda a: np.ones((16, 8), np.float32)[:, ::2]),
    "output-read-only": _rot_with(out=lambda a: readonly(a["out"])),
    "threads-0": _rot_with(threads=0),
    "threads-1000": _rot_with(threads=1000),
    "position-id-equal-to-max-pos": _rot_with(position_ids=lambda a: np.where(a["position_ids"] == 7, 16, a["position_ids"])),
    "position-id-negative": _rot_with(position_ids=lambda a: a["position_ids"] - 1),
    "odd-head-size-bnsh": _rot_with(layout="bnsh", h=5),
    "odd-head-size-bsnh": _rot_with(h=5),
    "position-ids-int32": _rot_with(position_ids=lambda a: a["position_ids"].astype(np.int32)),
    "position-ids-float": _rot_with(position_ids=lambda a: a["position_ids"].astype(np.float32)),
    "position-ids-wrong-shape": _rot_with(position_ids=lambda a: np.zeros((2, 4), np.int64)),
    "position-ids-transposed": _rot_with(position_ids=lambda a: np.ascontiguousarray(a["position_ids"].T)),
    "position-ids-1d": _rot_with(position_ids=lambda a: np.zeros(3, np.int64)),
    "num-heads-missing-bsnh": _rot_with(num_heads=None),
    "num-heads-not-dividing": _rot_with(num_heads=3),
    "cache-wrong-width": _rot_with(cos_cache=lambda a: np.zeros((16, 3), np.float32),
                                   sin_cache=lambda a: np.zeros((16, 3), np.float32)),
    "cos-sin-shapes-differ": _rot_with(sin_cache=lambda a: np.zeros((15, 4), np.float32)),
    "input-5d": _rot_with(x=lambda a: np.zeros((1, 2, 3, 2, 8), np.float32),
                          out=lambda a: np.zeros((1, 2, 3, 2, 8), np.float32)),
}


def test_rotary_baseline_arguments_are_valid(lib):
    a = _rot()
    wrappers.rotary_embedding(lib, a["x"], a["position_ids"], a["cos_cache"], a["sin_cache"], a["out"],
                              interleaved=False, num_heads=a["num_heads"], threads=1).run()
    assert np.isfinite(a["out"]).all() and a["out"].any()


@pytest.mark.parametrize("case", list(ROTARY_BAD))
def test_rotary_wrapper_rejects(lib, case):
    a = ROTARY_BAD[case]()
    before = np.array(a["out"], copy=True)
    with pytest.raises(UsageError):
        wrappers.rotary_embedding(lib, a["x"], a["position_ids"], a["cos_cache"], a["sin_cache"], a["out"],
                                  interleaved=a["interleaved"], num_heads=a["num_heads"], threads=a["threads"])
    assert np.array_equal(a["out"], before)


CAST_BAD = {
    "src-float64": lambda: (np.ones(8), np.zeros(8, np.float16)),
    "size-differs": lambda: (np.ones(8, np.float32), np.zeros(7, np.float16)),
    "neither-side-f32": lambda: (np.ones(8, np.float16), np.zeros(8, ml_dtypes.bfloat16)),
    "dst-read-only": lambda: (np.ones(8, np.float32), readonly(np.zeros(8, np.float16))),
    "src-not-contiguous": lambda: (np.ones(16, np.float32)[::2], np.zeros(8, np.float16)),
}


@pytest.mark.parametrize("case", list(CAST_BAD))
def test_cast_wrapper_rejects(lib, case):
    src, dst = CAST_BAD[case]()
    with pytest.raises(UsageError):
        wrappers.cast(lib, src, dst)


# ---- the C layer, validation bypassed -----------------------------------------------------------


class SoftmaxStruct:
    def __init__(self, lib, rows=4, cols=8):
        self.x = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
        self.y = np.zeros_like(self.x)
        a = lib.ffi.new("pb_softmax_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.rows, a.cols = 1, rows, cols
        a.x, a.y = lib.ptr(self.x), lib.ptr(self.y)
        self.args = a


def _set(lib, holder, field, value):
    a = holder.args
    if field in ("device", "num_threads"):
        setattr(a.exec, field, value)
    elif value == "NULL":
        setattr(a, field, lib.ffi.NULL)
    else:
        setattr(a, field, value)


SOFTMAX_C = [
    # field, value, status, words the message must contain
    ("x", "NULL", INVALID, ["NULL"]),
    ("y", "NULL", INVALID, ["NULL"]),
    ("rows", -1, INVALID, ["rows=-1"]),
    ("cols", -5, INVALID, ["cols=-5"]),
    ("dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("dtype", 11, UNSUPPORTED, ["dtype 11"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("num_threads", 1000, INVALID, ["num_threads=1000"]),
    ("num_threads", -3, INVALID, ["num_threads=-3"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
    ("device", 99, UNSUPPORTED, ["device 99"]),
]


def test_c_softmax_baseline_struct_is_valid(lib):
    h = SoftmaxStruct(lib)
    lib.call("softmax", h.args)
    assert np.allclose(h.y.sum(axis=-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("field, value, status, words", SOFTMAX_C, ids=[f"{c[0]}={c[1]}" for c in SOFTMAX_C])
def test_c_softmax_returns_a_status(lib, field, value, status, words):
    h = SoftmaxStruct(lib)
    _set(lib, h, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("softmax", h.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == "softmax"
    for w in words:
        assert w in e.message, e.message
    assert not h.y.any()  # validation happens before any work


def test_c_softmax_partial_overlap(lib):
    h = SoftmaxStruct(lib)
    # y starts one element into x: the rows would overwrite inputs not yet read
    h.args.y = lib.ffi.cast("void *", h.x.ctypes.data + 4)
    before = h.x.copy()
    with pytest.raises(NativeError) as ei:
        lib.call("softmax", h.args)
    assert ei.value.status == INVALID
    assert "overlap" in ei.value.message
    assert np.array_equal(h.x, before)
    # y ending inside x overlaps too
    h.args.y = lib.ffi.cast("void *", h.x.ctypes.data - 8)
    with pytest.raises(NativeError) as ei:
        lib.call("softmax", h.args)
    assert "overlap" in ei.value.message
    # exactly in place is allowed
    h.args.y = lib.ptr(h.x)
    lib.call("softmax", h.args)
    assert np.allclose(h.x.sum(axis=-1), 1.0, atol=1e-5)


def test_c_null_args_struct(lib):
    for kernel in ("noop", "softmax", "rotary_embedding", "cast"):
        with pytest.raises(NativeError) as ei:
            lib.call(kernel, lib.ffi.NULL)
        assert ei.value.status == INVALID
        assert "NULL" in ei.value.message


class RotaryStruct:
    def __init__(self, lib, b=2, s=3, n=2, h=8, max_pos=16):
        rng = np.random.default_rng(2)
        self.x = rng.standard_normal((b, s, n * h)).astype(np.float32)
        self.out = np.zeros_like(self.x)
        self.pos = (np.arange(s)[None, :] + np.array([[0], [9]])).astype(np.int64)
        self.cos = rng.standard_normal((max_pos, h // 2)).astype(np.float32)
        self.sin = rng.standard_normal((max_pos, h // 2)).astype(np.float32)
        a = lib.ffi.new("pb_rotary_embedding_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.layout, a.interleaved = 1, 0, 0
        a.batch, a.seq, a.num_heads, a.head_size, a.max_pos = b, s, n, h, max_pos
        a.input, a.output = lib.ptr(self.x), lib.ptr(self.out)
        a.position_ids = lib.ffi.cast("const int64_t *", self.pos.ctypes.data)
        a.cos_cache, a.sin_cache = lib.ptr(self.cos), lib.ptr(self.sin)
        self.args = a


ROTARY_C = [
    ("input", "NULL", INVALID, ["NULL"]),
    ("output", "NULL", INVALID, ["NULL"]),
    ("position_ids", "NULL", INVALID, ["NULL"]),
    ("cos_cache", "NULL", INVALID, ["NULL"]),
    ("sin_cache", "NULL", INVALID, ["NULL"]),
    ("batch", -2, INVALID, ["batch=-2"]),
    ("seq", 0, INVALID, ["seq=0"]),
    ("num_heads", 0, INVALID, ["num_heads=0"]),
    ("max_pos", 0, INVALID, ["max_pos=0"]),
    ("dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
    ("layout", 5, INVALID, ["layout=5"]),
    ("interleaved", 2, INVALID, ["interleaved=2"]),
    ("head_size", 5, INVALID, ["head_size=5"]),
    ("head_size", 0, INVALID, ["head_size=0"]),
    ("max_pos", 11, INVALID, ["position_ids[1, 2] = 11", "[0, 11)"]),  # batch row 1 holds 9, 10, 11
]


def test_c_rotary_baseline_struct_is_valid(lib):
    h = RotaryStruct(lib)
    lib.call("rotary_embedding", h.args)
    assert h.out.any() and np.isfinite(h.out).all()


@pytest.mark.parametrize("field, value, status, words", ROTARY_C, ids=[f"{c[0]}={c[1]}" for c in ROTARY_C])
def test_c_rotary_returns_a_status(lib, field, value, status, words):
    h = RotaryStruct(lib)
    _set(lib, h, field, value)
    with pytest.raises(NativeError) as ei:
        lib.call("rotary_embedding", h.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == "rotary_embedding"
    for w in words:
        assert w in e.message, e.message
    assert not h.out.any()


def test_c_rotary_position_id_out_of_range(lib):
    for bad, where in ((-1, "[0, 1]"), (16, "[1, 0]"), (2**40, "[0, 2]")):
        h = RotaryStruct(lib)
        b, s = where.strip("[]").split(", ")
        h.pos[int(b), int(s)] = bad
        with pytest.raises(NativeError) as ei:
            lib.call("rotary_embedding", h.args)
        assert ei.value.status == INVALID
        assert f"position_ids{where} = {bad}" in ei.value.message, ei.value.message


def test_c_rotary_partial_overlap(lib):
    h = RotaryStruct(lib)
    h.args.output = lib.ffi.cast("void *", h.x.ctypes.data + 8)
    with pytest.raises(NativeError) as ei:
        lib.call("rotary_embedding", h.args)
    assert ei.value.status == INVALID and "overlap" in ei.value.message
    h.args.output = lib.ptr(h.x)  # exactly in place is fine
    ref = RotaryStruct(lib)
    lib.call("rotary_embedding", ref.args)
    lib.call("rotary_embedding", h.args)
    assert np.array_equal(h.x, ref.out)


def test_c_cast_returns_a_status(lib):
    src = np.ones(8, np.float32)
    dst = np.zeros(8, np.float16)
    a = lib.ffi.new("pb_cast_args*")
    a.exec.device, a.exec.num_threads = 0, 1
    a.src_dtype, a.dst_dtype, a.n = 10, 16, 8  # f16 -> bf16: neither side is f32
    a.src, a.dst = lib.ptr(src), lib.ptr(dst)
    with pytest.raises(NativeError) as ei:
        lib.call("cast", a)
    assert ei.value.status == UNSUPPORTED and "float32" in ei.value.message
    a.src_dtype, a.dst_dtype, a.n = 1, 10, -1
    with pytest.raises(NativeError) as ei:
        lib.call("cast", a)
    assert ei.value.status == INVALID and "n=-1" in ei.value.message
    a.src_dtype, a.dst_dtype, a.n = 1, 3, 8
    with pytest.raises(NativeError) as ei:
        lib.call("cast", a)
    assert ei.value.status == UNSUPPORTED and "dtype 3" in ei.value.message
    a.dst_dtype = 10
    a.dst = lib.ffi.cast("void *", src.ctypes.data + 2)
    with pytest.raises(NativeError) as ei:
        lib.call("cast", a)
    assert "overlap" in ei.value.message
    a.dst = lib.ptr(dst)
    lib.call("cast", a)
    assert np.array_equal(dst, np.ones(8, np.float16))


def test_time_warm_unknown_kernel(lib):
    args = lib.ffi.new("pb_noop_args*")
    args.exec.num_threads = 1
    with pytest.raises(NativeError) as ei:
        lib.time_warm("no_such_kernel", args, 10)
    assert ei.value.status == INVALID
    assert "no_such_kernel" in ei.value.message
    with pytest.raises(NativeError) as ei:
        lib.time_warm("noop", args, 0)
    assert "iters=0" in ei.value.message
    # a kernel's own failure inside the timing loop comes back as its status
    args.exec.num_threads = 0
    with pytest.raises(NativeError) as ei:
        lib.time_warm("noop", args, 3)
    assert "num_threads=0" in ei.value.message
    args.exec.num_threads = 1
    assert lib.time_warm("noop", args, 3) >= 0


def test_select_unknown_isa(lib):
    before = lib.isa_active
    with pytest.raises(NativeError) as ei:
        lib.select_isa("sse9")
    assert ei.value.status == INVALID and "sse9" in ei.value.message
    assert lib.isa_active == before


def test_library_still_works_after_errors(lib):
    # after a failed call, a good one succeeds and is not reported as failing
    h = SoftmaxStruct(lib)
    h.args.rows = -1
    with pytest.raises(NativeError):
        lib.call("softmax", h.args)
    h.args.rows = 4
    lib.call("softmax", h.args)
    x, y = _sm((3, 33))
    wrappers.softmax(lib, x, y, 2).run()
    assert np.allclose(y.sum(axis=-1), 1.0, atol=1e-5)
