"""Bad arguments to the onnx_attn kernels (onnx_attention, onnx_rotary_embedding) never crash:
the Python wrappers raise UsageError before C is called, and the C layer reached with
hand-built args structs returns a status (1 invalid argument, 2 unsupported) that lib.call raises
as NativeError with a message naming the problem, having written nothing."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import onnx_attn as k

INVALID = 1
UNSUPPORTED = 2
SENTINEL = 7.0


pytestmark = pytest.mark.usefixtures("auto_isa")


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- Attention: Python wrapper ---------------------------------------------------------------


def _att(**over):
    """A valid 4-D GQA call with past: B=2, Nq=4, Nkv=2, S=T=3, H=8, past 5."""
    rng = np.random.default_rng(0)
    a = dict(query=_f32(rng, 2, 4, 3, 8), key=_f32(rng, 2, 2, 3, 8), value=_f32(rng, 2, 2, 3, 8),
             output=np.zeros((2, 4, 3, 8), np.float32), past_key=_f32(rng, 2, 2, 5, 8),
             past_value=_f32(rng, 2, 2, 5, 8), present_key=np.zeros((2, 2, 8, 8), np.float32),
             present_value=np.zeros((2, 2, 8, 8), np.float32), attn_mask=np.ones((3, 8), bool),
             qk_output=np.zeros((2, 4, 3, 8), np.float32))
    a.update(over)
    return a


def _call_att(lib, a, **kw):
    a = dict(a)
    q, key, v, out = a.pop("query"), a.pop("key"), a.pop("value"), a.pop("output")
    return k.onnx_attention(lib, q, key, v, out, **a, **kw)


def test_valid_attention_call_runs(lib):
    a = _att()
    _call_att(lib, a, is_causal=1, qk_matmul_output_mode=3).run()
    assert np.all(np.isfinite(a["output"]))
    assert np.array_equal(a["present_key"][:, :, :5], a["past_key"])


ATT_BAD = {
    "query-float64": dict(query=np.ones((2, 4, 3, 8))),
    "key-dtype-differs": dict(key=np.ones((2, 2, 3, 8), np.float16)),
    "ranks-differ": dict(key=np.ones((2, 3, 16), np.float32), value=np.ones((2, 3, 16), np.float32)),
    "query-2d": dict(query=np.ones((2, 8), np.float32)),
    "heads-not-multiple": dict(key=np.ones((2, 3, 3, 8), np.float32), value=np.ones((2, 3, 3, 8), np.float32)),
    "key-head-size-differs": dict(key=np.ones((2, 2, 3, 4), np.float32)),
    "value-shape-differs": dict(value=np.ones((2, 2, 4, 8), np.float32)),
    "output-shape": dict(output=np.zeros((2, 4, 3, 9), np.float32)),
    "output-read-only": dict(output=np.zeros((2, 4, 3, 8), np.float32)[...].view()),
    "query-not-contiguous": dict(query=np.ones((2, 4, 3, 16), np.float32)[..., ::2]),
    "past-without-present": dict(present_key=None, present_value=None),
    "past-key-only": dict(past_value=None),
    "present-wrong-length": dict(present_key=np.zeros((2, 2, 7, 8), np.float32),
                                 present_value=np.zeros((2, 2, 7, 8), np.float32)),
    "past-wrong-heads": dict(past_key=np.ones((2, 1, 5, 8), np.float32), past_value=np.ones((2, 1, 5, 8), np.float32)),
    "mask-int": dict(attn_mask=np.ones((3, 8), np.int32)),
    "mask-too-long": dict(attn_mask=np.ones((3, 9), bool)),
    "mask-not-broadcastable": dict(attn_mask=np.ones((2, 3, 8), bool)),
    "mask-5d": dict(attn_mask=np.ones((1, 1, 1, 3, 8), bool)),
    "qk-shape": dict(qk_output=np.zeros((2, 4, 3, 7), np.float32)),
}


@pytest.mark.parametrize("case", list(ATT_BAD))
def test_attention_wrapper_rejects(lib, case):
    a = _att(**ATT_BAD[case])
    if case == "output-read-only":
        a["output"].flags.writeable = False
    with pytest.raises(UsageError):
        _call_att(lib, a)


@pytest.mark.parametrize("kw", [dict(is_causal=2), dict(softcap=-1.0), dict(softcap=float("nan")),
                                dict(scale=float("inf")), dict(qk_matmul_output_mode=4), dict(threads=0),
                                dict(threads=1000), dict(q_num_heads=3)])
def test_attention_wrapper_rejects_attributes(lib, kw):
    with pytest.raises(UsageError):
        _call_att(lib, _att(), **kw)


def test_attention_wrapper_3d_needs_head_counts(lib):
    rng = np.random.default_rng(1)
    q, kk = _f32(rng, 1, 3, 32), _f32(rng, 1, 3, 16)
    with pytest.raises(UsageError, match="q_num_heads"):
        k.onnx_attention(lib, q, kk, kk, np.zeros_like(q))
    with pytest.raises(UsageError, match="key"):
        k.onnx_attention(lib, q, kk, kk, np.zeros_like(q), q_num_heads=4, kv_num_heads=4)


def test_mask_strides_broadcast_as_onnx():
    assert k.mask_strides("t", (3, 8), 2, 4, 3, 8) == (0, 0, 8, 8)
    assert k.mask_strides("t", (4, 3, 8), 2, 4, 3, 8) == (0, 24, 8, 8)
    assert k.mask_strides("t", (2, 1, 3, 8), 2, 4, 3, 8) == (24, 0, 8, 8)
    assert k.mask_strides("t", (2, 1, 1, 5), 2, 4, 3, 8) == (5, 0, 0, 5)  # short: padded, not broadcast
    with pytest.raises(UsageError):
        k.mask_strides("t", (3, 3, 8), 2, 4, 3, 8)


# ---- Attention: C layer ------------------------------------------------------------------------


class AttStruct:
    """The same valid call as _att(), as a raw args struct."""

    def __init__(self, lib):
        self.a = _att()
        for name in ("output", "present_key", "present_value", "qk_output"):
            self.a[name][...] = SENTINEL
        s = lib.ffi.new("pb_onnx_attention_args*")
        s.exec.device, s.exec.num_threads = 0, 2
        s.dtype, s.layout, s.is_causal, s.mask_type, s.qk_matmul_output_mode = 1, 1, 1, 1, 3
        s.scale, s.softcap = 0.0, 0.0
        s.batch, s.q_seq, s.kv_seq, s.past_seq = 2, 3, 3, 5
        s.q_num_heads, s.kv_num_heads, s.head_size = 4, 2, 8
        s.mask_sb, s.mask_sh, s.mask_ss, s.mask_len = 0, 0, 8, 8
        for name in ("query", "key", "value", "attn_mask", "past_key", "past_value", "output", "present_key",
                     "present_value"):
            setattr(s, name, lib.ptr(self.a[name]))
        s.qk_output = lib.ptr(self.a["qk_output"])
        self.s = s

    def untouched(self) -> bool:
        return all(np.all(self.a[n] == SENTINEL) for n in ("output", "present_key", "present_value", "qk_output"))


def test_c_attention_struct_is_valid(lib):
    st = AttStruct(lib)
    lib.call("onnx_attention", st.s)
    assert np.all(np.isfinite(st.a["output"]))


C_ATT_BAD = {
    "dtype": (lambda s, lib, a: setattr(s, "dtype", 7), UNSUPPORTED, "dtype"),
    "layout": (lambda s, lib, a: setattr(s, "layout", 2), INVALID, "layout"),
    "causal": (lambda s, lib, a: setattr(s, "is_causal", 3), INVALID, "is_causal"),
    "mask-type": (lambda s, lib, a: setattr(s, "mask_type", 5), INVALID, "mask_type"),
    "qk-mode": (lambda s, lib, a: setattr(s, "qk_matmul_output_mode", 4), INVALID, "qk_matmul_output_mode"),
    "threads-0": (lambda s, lib, a: setattr(s.exec, "num_threads", 0), INVALID, "thread"),
    "batch-0": (lambda s, lib, a: setattr(s, "batch", 0), INVALID, "batch"),
    "negative-kv-seq": (lambda s, lib, a: setattr(s, "kv_seq", -3), INVALID, "kv_seq"),
    "negative-past": (lambda s, lib, a: setattr(s, "past_seq", -1), INVALID, "past_seq"),
    "heads-not-multiple": (lambda s, lib, a: setattr(s, "kv_num_heads", 3), INVALID, "multiple"),
    "head-size-huge": (lambda s, lib, a: setattr(s, "head_size", 4096), UNSUPPORTED, "head_size"),
    "sizes-overflow": (lambda s, lib, a: setattr(s, "past_seq", 1 << 50), INVALID, "overflow"),
    "nan-scale": (lambda s, lib, a: setattr(s, "scale", float("nan")), INVALID, "scale"),
    "negative-softcap": (lambda s, lib, a: setattr(s, "softcap", -2.0), INVALID, "softcap"),
    "mode0-softcap": (lambda s, lib, a: (setattr(s, "softcap", 2.0), setattr(s, "qk_matmul_output_mode", 0)),
                      UNSUPPORTED, "qk_matmul_output_mode=0"),
    "null-query": (lambda s, lib, a: setattr(s, "query", lib.ffi.NULL), INVALID, "NULL"),
    "null-output": (lambda s, lib, a: setattr(s, "output", lib.ffi.NULL), INVALID, "NULL"),
    "past-without-present": (lambda s, lib, a: (setattr(s, "present_key", lib.ffi.NULL),
                                                setattr(s, "present_value", lib.ffi.NULL)), INVALID, "past_seq"),
    "present-key-only": (lambda s, lib, a: setattr(s, "present_value", lib.ffi.NULL), INVALID, "present"),
    "null-past": (lambda s, lib, a: (setattr(s, "past_key", lib.ffi.NULL), setattr(s, "past_value", lib.ffi.NULL)),
                  INVALID, "past"),
    "mask-null": (lambda s, lib, a: setattr(s, "attn_mask", lib.ffi.NULL), INVALID, "attn_mask"),
    "mask-without-type": (lambda s, lib, a: setattr(s, "mask_type", 0), INVALID, "attn_mask"),
    "mask-too-long": (lambda s, lib, a: setattr(s, "mask_len", 9), INVALID, "mask_len"),
    "mask-negative-stride": (lambda s, lib, a: setattr(s, "mask_ss", -8), INVALID, "mask strides"),
    "output-overlaps-query": (lambda s, lib, a: setattr(s, "output", lib.ffi.cast("void *", a["query"].ctypes.data + 16)),
                              INVALID, "overlaps"),
    "present-overlaps-past": (lambda s, lib, a: setattr(s, "present_key", lib.ptr(a["past_key"])), INVALID, "overlaps"),
    "qk-overlaps-output": (lambda s, lib, a: setattr(s, "qk_output", lib.ptr(a["output"])), INVALID, "overlaps"),
    "output-overlaps-mask": (lambda s, lib, a: setattr(s, "output", lib.ptr(a["attn_mask"])), INVALID, "overlaps"),
}


@pytest.mark.parametrize("case", list(C_ATT_BAD))
def test_c_attention_rejects(lib, case):
    st = AttStruct(lib)
    change, status, words = C_ATT_BAD[case]
    change(st.s, lib, st.a)
    with pytest.raises(NativeError) as ei:
        lib.call("onnx_attention", st.s)
    assert ei.value.status == status
    assert words in ei.value.message and "onnx_attention" in ei.value.message
    if case not in ("output-overlaps-query", "output-overlaps-mask", "present-overlaps-past", "qk-overlaps-output"):
        assert st.untouched()


def test_c_null_args(lib):
    for name in ("onnx_attention", "onnx_rotary_embedding"):
        with pytest.raises(NativeError) as ei:
            lib.call(name, lib.ffi.NULL)
        assert ei.value.status == INVALID and "NULL" in ei.value.message


def test_kernels_are_listed(lib):
    assert {"onnx_attention", "onnx_rotary_embedding"} <= set(lib.kernel_names())
    for name in ("onnx_attention", "onnx_rotary_embedding"):
        assert lib.lib.pb_kernel_lookup(name.encode()) != lib.ffi.NULL


# ---- RotaryEmbedding ------------------------------------------------------------------------------


def _rot(**over):
    rng = np.random.default_rng(2)
    a = dict(x=_f32(rng, 2, 3, 4, 16), cos_cache=_f32(rng, 10, 4), sin_cache=_f32(rng, 10, 4),
             out=np.zeros((2, 3, 4, 16), np.float32), position_ids=np.array([[1, 2, 3, 4], [5, 6, 7, 9]], np.int64))
    a.update(over)
    return a


def _call_rot(lib, a, **kw):
    a = dict(a)
    kw.setdefault("rotary_embedding_dim", 8)
    return k.onnx_rotary_embedding(lib, a.pop("x"), a.pop("cos_cache"), a.pop("sin_cache"), a.pop("out"), **a, **kw)


def test_valid_rotary_call_runs_and_copies_the_rest(lib):
    a = _rot()
    _call_rot(lib, a).run()
    assert np.array_equal(a["out"][..., 8:], a["x"][..., 8:])
    inplace = a["x"].copy()
    _call_rot(lib, dict(a, out=inplace, x=inplace)).run()
    assert np.array_equal(inplace, a["out"])


ROT_BAD = {
    "x-float64": (dict(x=np.ones((2, 3, 4, 16))), {}),
    "x-2d": (dict(x=np.ones((4, 16), np.float32), out=np.zeros((4, 16), np.float32)), {}),
    "cache-dtype": (dict(cos_cache=np.ones((10, 4), np.float16)), {}),
    "out-shape": (dict(out=np.zeros((2, 3, 4, 8), np.float32)), {}),
    "rot-odd": ({}, dict(rotary_embedding_dim=7)),
    "rot-too-big": ({}, dict(rotary_embedding_dim=18)),
    "cache-width": ({}, dict(rotary_embedding_dim=16)),
    "pos-int32": (dict(position_ids=np.ones((2, 4), np.int32)), {}),
    "pos-shape": (dict(position_ids=np.ones((2, 5), np.int64)), {}),
    "pos-out-of-range": (dict(position_ids=np.full((2, 4), 10, np.int64)), {}),
    "pos-negative": (dict(position_ids=np.full((2, 4), -1, np.int64)), {}),
    "no-pos-cache-shape": (dict(position_ids=None), {}),
    "3d-without-heads": (dict(x=np.ones((2, 4, 48), np.float32), out=np.zeros((2, 4, 48), np.float32)), {}),
    "heads-contradict": ({}, dict(num_heads=5)),
    "sin-shape": (dict(sin_cache=np.ones((9, 4), np.float32)), {}),
}


@pytest.mark.parametrize("case", list(ROT_BAD))
def test_rotary_wrapper_rejects(lib, case):
    over, kw = ROT_BAD[case]
    with pytest.raises(UsageError):
        _call_rot(lib, _rot(**over), **kw)


class RotStruct:
    def __init__(self, lib):
        self.a = _rot()
        self.a["out"][...] = SENTINEL
        s = lib.ffi.new("pb_onnx_rotary_embedding_args*")
        s.exec.device, s.exec.num_threads = 0, 1
        s.dtype, s.layout, s.interleaved = 1, 1, 0
        s.batch, s.seq, s.num_heads, s.head_size, s.rotary_dim, s.max_pos = 2, 4, 3, 16, 8, 10
        s.input, s.output = lib.ptr(self.a["x"]), lib.ptr(self.a["out"])
        s.cos_cache, s.sin_cache = lib.ptr(self.a["cos_cache"]), lib.ptr(self.a["sin_cache"])
        s.position_ids = lib.ffi.cast("const int64_t *", self.a["position_ids"].ctypes.data)
        self.s = s


C_ROT_BAD = {
    "dtype": (lambda s, lib, a: setattr(s, "dtype", 3), "dtype"),
    "layout": (lambda s, lib, a: setattr(s, "layout", 5), "layout"),
    "interleaved": (lambda s, lib, a: setattr(s, "interleaved", 2), "interleaved"),
    "seq-0": (lambda s, lib, a: setattr(s, "seq", 0), "seq"),
    "negative-heads": (lambda s, lib, a: setattr(s, "num_heads", -1), "num_heads"),
    "rot-odd": (lambda s, lib, a: setattr(s, "rotary_dim", 7), "rotary_dim"),
    "rot-above-head": (lambda s, lib, a: setattr(s, "rotary_dim", 18), "rotary_dim"),
    "max-pos-0": (lambda s, lib, a: setattr(s, "max_pos", 0), "max_pos"),
    "pos-out-of-range": (lambda s, lib, a: setattr(s, "max_pos", 9), "position_ids[1, 3]"),
    "null-input": (lambda s, lib, a: setattr(s, "input", lib.ffi.NULL), "NULL"),
    "null-cache": (lambda s, lib, a: setattr(s, "sin_cache", lib.ffi.NULL), "NULL"),
    "overflow": (lambda s, lib, a: setattr(s, "seq", 1 << 62), "overflow"),
    "partial-overlap": (lambda s, lib, a: setattr(s, "output", lib.ffi.cast("void *", a["x"].ctypes.data + 8)),
                        "overlap"),
    "output-on-cache": (lambda s, lib, a: setattr(s, "output", lib.ptr(a["cos_cache"])), "overlaps"),
}


def test_c_rotary_struct_is_valid(lib):
    st = RotStruct(lib)
    lib.call("onnx_rotary_embedding", st.s)
    assert np.all(st.a["out"] != SENTINEL)


@pytest.mark.parametrize("case", list(C_ROT_BAD))
def test_c_rotary_rejects(lib, case):
    st = RotStruct(lib)
    change, words = C_ROT_BAD[case]
    change(st.s, lib, st.a)
    with pytest.raises(NativeError) as ei:
        lib.call("onnx_rotary_embedding", st.s)
    assert ei.value.status == (UNSUPPORTED if case == "dtype" else INVALID)
    assert words in ei.value.message and "onnx_rotary_embedding" in ei.value.message
    if case not in ("partial-overlap", "output-on-cache"):
        assert np.all(st.a["out"] == SENTINEL)
