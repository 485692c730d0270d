"""The attention kernels' C layer reached with hand-built args structs (Python validation
bypassed): every bad value returns a non-zero status (1 invalid argument, 2 unsupported) that
lib.call raises as NativeError with a message naming the problem, writes nothing, and never
crashes the process; the kernels are listed by pb_kernel_name and found by pb_kernel_lookup."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.errors import NativeError
from perfbench.ops import _attention as att

INVALID = 1  # PB_ERR_INVALID_ARGUMENT
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED
F32 = 1  # PB_DTYPE_F32
SENTINEL = 7.0
GQA, MHA = "group_query_attention", "multi_head_attention"


pytestmark = pytest.mark.usefixtures("auto_isa")


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


class GqaStruct:
    """A valid decode: B=2, seq 1, Nq=4, Nkv=2, H=16, past capacity 8 (copy mode, present
    capacity 9), batch rows of 9 and 6 tokens, rotary caches of 12 positions (do_rotary off)."""

    B, S, NQ, NKV, H, PAST, CAP, MAXPOS = 2, 1, 4, 2, 16, 8, 9, 12

    def __init__(self, lib):
        rng = np.random.default_rng(3)
        B, S, NQ, NKV, H = self.B, self.S, self.NQ, self.NKV, self.H
        self.q = _f32(rng, B, S, NQ * H)
        self.k = _f32(rng, B, S, NKV * H)
        self.v = _f32(rng, B, S, NKV * H)
        self.pk = _f32(rng, B, NKV, self.PAST, H)
        self.pv = _f32(rng, B, NKV, self.PAST, H)
        self.seqlens = np.array([8, 5], np.int32)
        self.cos = _f32(rng, self.MAXPOS, H // 2)
        self.sin = _f32(rng, self.MAXPOS, H // 2)
        self.out = np.full((B, S, NQ * H), SENTINEL, np.float32)
        self.prk = np.full((B, NKV, self.CAP, H), SENTINEL, np.float32)
        self.prv = np.full((B, NKV, self.CAP, H), SENTINEL, np.float32)
        a = lib.ffi.new("pb_group_query_attention_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.do_rotary, a.rotary_interleaved = F32, 0, 0
        a.local_window_size, a.smooth_softmax, a.total_sequence_length = -1, -1, self.PAST + S
        a.scale, a.softcap = 0.0, 0.0
        a.batch, a.seq, a.num_heads, a.kv_num_heads, a.head_size = B, S, NQ, NKV, H
        a.past_capacity, a.present_capacity = self.PAST, self.CAP
        a.rotary_max_pos, a.rotary_half = self.MAXPOS, H // 2
        a.query, a.key, a.value = lib.ptr(self.q), lib.ptr(self.k), lib.ptr(self.v)
        a.past_key, a.past_value = lib.ptr(self.pk), lib.ptr(self.pv)
        a.seqlens_k = lib.ffi.cast("const int32_t *", self.seqlens.ctypes.data)
        a.cos_cache, a.sin_cache = lib.ffi.NULL, lib.ffi.NULL
        a.output, a.present_key, a.present_value = lib.ptr(self.out), lib.ptr(self.prk), lib.ptr(self.prv)
        self.args = a

    def untouched(self) -> bool:
        return all(np.all(x == SENTINEL) for x in (self.out, self.prk, self.prv))


class MhaStruct:
    """A valid decode with past: B=2, q_seq = kv_seq = 3, N=2, H=16, past 4 -> present 7."""

    B, SQ, SKV, N, H, PAST = 2, 3, 3, 2, 16, 4

    def __init__(self, lib):
        rng = np.random.default_rng(4)
        B, N, H = self.B, self.N, self.H
        total = self.PAST + self.SKV
        self.q = _f32(rng, B, self.SQ, N * H)
        self.k = _f32(rng, B, self.SKV, N * H)
        self.v = _f32(rng, B, self.SKV, N * H)
        self.pk = _f32(rng, B, N, self.PAST, H)
        self.pv = _f32(rng, B, N, self.PAST, H)
        self.mask = np.ones((B, total), np.int32)
        self.mask[1, -2:] = 0
        self.out = np.full((B, self.SQ, N * H), SENTINEL, np.float32)
        self.prk = np.full((B, N, total, H), SENTINEL, np.float32)
        self.prv = np.full((B, N, total, H), SENTINEL, np.float32)
        a = lib.ffi.new("pb_multi_head_attention_args*")
        a.exec.device, a.exec.num_threads = 0, 1
        a.dtype, a.unidirectional = F32, 0
        a.scale, a.mask_filter_value = 0.0, -10000.0
        a.batch, a.q_seq, a.kv_seq, a.num_heads, a.head_size, a.past_seq = B, self.SQ, self.SKV, N, H, self.PAST
        a.query, a.key, a.value, a.output = lib.ptr(self.q), lib.ptr(self.k), lib.ptr(self.v), lib.ptr(self.out)
        a.key_padding_mask = lib.ffi.NULL
        a.past_key, a.past_value = lib.ptr(self.pk), lib.ptr(self.pv)
        a.present_key, a.present_value = lib.ptr(self.prk), lib.ptr(self.prv)
        self.args = a

    def untouched(self) -> bool:
        return all(np.all(x == SENTINEL) for x in (self.out, self.prk, self.prv))

    def reference(self, unidirectional: int, mask: bool) -> np.ndarray:
        """float64 output: softmax(q k^T / sqrt(H) + mask bias) v over past ++ new keys."""
        B, N, H, SQ, SKV, P = self.B, self.N, self.H, self.SQ, self.SKV, self.PAST
        total = P + SKV
        k = np.concatenate([self.pk, self.k.reshape(B, SKV, N, H).transpose(0, 2, 1, 3)], axis=2)
        v = np.concatenate([self.pv, self.v.reshape(B, SKV, N, H).transpose(0, 2, 1, 3)], axis=2)
        t, pos = np.arange(total), P + np.arange(SQ)  # ORT: query s sees keys <= past + s
        out = np.empty((B, SQ, N, H))
        for b in range(B):
            visible = t[None, :] <= pos[:, None] if unidirectional else np.ones((SQ, total), bool)
            bias = np.where(self.mask[b] > 0, 0.0, -10000.0) if mask else None
            out[b] = att.attend64(self.q[b].reshape(SQ, N, H).astype(np.float64), k[b].astype(np.float64),
                                  v[b].astype(np.float64), 1.0 / np.sqrt(H), visible, bias)
        return out.reshape(B, SQ, N * H)


def _set(lib, holder, field, value):
    a = holder.args
    if field in ("device", "num_threads"):
        setattr(a.exec, field, value)
    elif isinstance(value, str) and value == "NULL":
        setattr(a, field, lib.ffi.NULL)
    elif callable(value):
        value(lib, holder)
    else:
        setattr(a, field, value)


def _expect(lib, kernel, holder, status, words):
    with pytest.raises(NativeError) as ei:
        lib.call(kernel, holder.args)
    e = ei.value
    assert e.status == status, e
    assert e.kernel == kernel
    for w in words:
        assert w in e.message, e.message
    assert holder.untouched(), "a declined call wrote into an output"


# ---- baselines -----------------------------------------------------------------------------------


def test_c_gqa_baseline_struct_is_valid(lib):
    h = GqaStruct(lib)
    lib.call(GQA, h.args)
    assert np.isfinite(h.out).all() and not np.any(h.out == SENTINEL)
    # copy mode: batch row 1 has 6 tokens, rows 6.. of its present are zero
    assert not np.any(h.prk[1, :, 6:]) and np.array_equal(h.prk[1, :, :5], h.pk[1, :, :5])


def test_c_mha_baseline_struct_is_valid(lib):
    h = MhaStruct(lib)
    lib.call(MHA, h.args)
    assert np.allclose(h.out, h.reference(0, False), rtol=1e-4, atol=1e-5)
    assert np.array_equal(h.prk[:, :, :4], h.pk)


def test_c_null_args_struct(lib):
    for kernel in (GQA, MHA):
        with pytest.raises(NativeError) as ei:
            lib.call(kernel, lib.ffi.NULL)
        assert ei.value.status == INVALID
        assert "NULL" in ei.value.message and kernel in ei.value.message


# ---- GroupQueryAttention --------------------------------------------------------------------------


def _share_key_only(lib, h):
    h.args.present_key = h.args.past_key  # past_key == present_key but past_value != present_value
    h.args.present_capacity = h.PAST


def _shared_capacity_differs(lib, h):
    h.args.present_key, h.args.present_value = h.args.past_key, h.args.past_value  # capacity 9 != 8


def _rotary_without_caches(lib, h):
    h.args.do_rotary = 1


def _rotary_with_caches(**fields):
    def change(lib, h):
        h.args.do_rotary = 1
        h.args.cos_cache, h.args.sin_cache = lib.ptr(h.cos), lib.ptr(h.sin)
        for k, v in fields.items():
            setattr(h.args, k, v)
    return change


def _seqlens(**rows):
    def change(lib, h):
        for b, v in rows.items():
            h.seqlens[int(b[1:])] = v
    return change


def _first_prompt_longer_than_seq(lib, h):
    h.args.total_sequence_length = 1  # seq == total: a first prompt, yet seqlens says 9 tokens
    h.args.past_capacity = 0
    h.args.past_key = h.args.past_value = lib.ffi.NULL


GQA_C = [
    # field, value, status, words the message must contain
    ("query", "NULL", INVALID, ["must not be NULL"]),
    ("output", "NULL", INVALID, ["must not be NULL"]),
    ("present_key", "NULL", INVALID, ["must not be NULL"]),
    ("seqlens_k", "NULL", INVALID, ["must not be NULL"]),
    ("key", "NULL", UNSUPPORTED, ["packed QKV"]),
    ("value", "NULL", UNSUPPORTED, ["packed QKV"]),
    ("past_key", "NULL", INVALID, ["past_capacity=8", "NULL"]),
    ("batch", 0, INVALID, ["batch=0"]),
    ("seq", 0, INVALID, ["seq=0"]),
    ("num_heads", 3, INVALID, ["num_heads=3 is not a multiple of kv_num_heads=2"]),
    ("kv_num_heads", 0, INVALID, ["kv_num_heads=0"]),
    ("head_size", 0, INVALID, ["head_size=0"]),
    ("head_size", 1025, UNSUPPORTED, ["head_size=1025", "1024"]),
    ("seqlens_k", _seqlens(b0=-1), INVALID, ["seqlens_k[0]=-1"]),
    ("seqlens_k", _seqlens(b1=-7), INVALID, ["seqlens_k[1]=-7"]),
    ("seqlens_k", _seqlens(b1=9), INVALID, ["seqlens_k[1]=9", "present capacity 9"]),
    ("seqlens_k", _seqlens(b0=8, b1=20), INVALID, ["seqlens_k[1]=20"]),
    ("total_sequence_length", 0, INVALID, ["total_sequence_length=0"]),
    ("total_sequence_length", 7, INVALID, ["seqlens_k[0]=8", "total_sequence_length=7"]),
    ("total_sequence_length", _first_prompt_longer_than_seq, INVALID, ["seqlens_k[0]=8", "total_sequence_length=1"]),
    ("present_capacity", 0, INVALID, ["present_capacity=0"]),
    ("past_capacity", -1, INVALID, ["past_capacity=-1"]),
    ("past_capacity", 2**40 + 1, INVALID, ["past_capacity=1099511627777"]),
    ("past_capacity", 4, INVALID, ["seqlens_k[0]=8", "past capacity 4"]),
    ("present_key", _share_key_only, INVALID, ["share both caches"]),
    ("present_key", _shared_capacity_differs, INVALID, ["past_capacity == present_capacity"]),
    ("do_rotary", _rotary_without_caches, INVALID, ["do_rotary=1 needs cos_cache and sin_cache"]),
    ("do_rotary", 2, INVALID, ["do_rotary=2"]),
    ("rotary_interleaved", 2, INVALID, ["rotary_interleaved=2"]),
    ("rotary_max_pos", _rotary_with_caches(rotary_max_pos=8), INVALID, ["position 8", "[0, 8)"]),
    ("rotary_half", _rotary_with_caches(rotary_half=9), INVALID, ["cos/sin caches", "head_size=16"]),
    ("rotary_half", _rotary_with_caches(rotary_half=0), INVALID, ["cos/sin caches"]),
    ("dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("dtype", 11, UNSUPPORTED, ["dtype 11"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("num_threads", -2, INVALID, ["num_threads=-2"]),
    ("num_threads", 1000, INVALID, ["num_threads=1000"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
    ("softcap", 0.5, UNSUPPORTED, ["softcap=0.5", "not implemented"]),
    ("local_window_size", 16, UNSUPPORTED, ["local_window_size=16", "not implemented"]),
    ("smooth_softmax", 1, UNSUPPORTED, ["smooth_softmax=1", "not implemented"]),
    ("smooth_softmax", 2, INVALID, ["smooth_softmax=2"]),
    ("scale", float("nan"), INVALID, ["scale=nan"]),
    ("scale", float("inf"), INVALID, ["scale=inf"]),
]


@pytest.mark.parametrize("field, value, status, words", GQA_C,
                         ids=[f"{c[0]}={getattr(c[1], '__name__', c[1])}-{i}" for i, c in enumerate(GQA_C)])
def test_c_gqa_returns_a_status(lib, field, value, status, words):
    h = GqaStruct(lib)
    _set(lib, h, field, value)
    _expect(lib, GQA, h, status, words)


def test_c_gqa_smooth_softmax_off_values_are_accepted(lib):
    ref = GqaStruct(lib)
    lib.call(GQA, ref.args)
    for v in (-1, 0):
        h = GqaStruct(lib)
        h.args.smooth_softmax = v
        lib.call(GQA, h.args)
        assert np.array_equal(h.out, ref.out) and np.array_equal(h.prk, ref.prk)


# ---- MultiHeadAttention ---------------------------------------------------------------------------


def _present_is_past(lib, h):
    h.args.present_key, h.args.present_value = h.args.past_key, h.args.past_value
    h.args.past_seq = MhaStruct.PAST  # (shapes differ anyway: the pointers alone must be refused)


MHA_C = [
    ("query", "NULL", INVALID, ["must not be NULL"]),
    ("key", "NULL", INVALID, ["must not be NULL"]),
    ("value", "NULL", INVALID, ["must not be NULL"]),
    ("output", "NULL", INVALID, ["must not be NULL"]),
    ("present_value", "NULL", INVALID, ["present_key and present_value"]),
    ("past_key", "NULL", INVALID, ["past_seq=4 needs past_key"]),
    ("present_key", _present_is_past, INVALID, ["different buffers"]),
    ("batch", 0, INVALID, ["batch=0"]),
    ("q_seq", 0, INVALID, ["q_seq=0"]),
    ("kv_seq", -1, INVALID, ["kv_seq=-1"]),
    ("num_heads", 0, INVALID, ["num_heads=0"]),
    ("head_size", 0, INVALID, ["head_size=0"]),
    ("head_size", 1025, UNSUPPORTED, ["head_size=1025", "1024"]),
    ("past_seq", -1, INVALID, ["past_seq=-1"]),
    ("unidirectional", 2, INVALID, ["unidirectional=2"]),
    ("q_seq", 9, INVALID, ["unidirectional needs past_seq + q_seq <= keys", "4 + 9 > 7"]),  # with unidirectional
    ("q_seq", 2, UNSUPPORTED, ["unidirectional with q_seq=2 != kv_seq=3"]),  # with unidirectional
    ("scale", float("nan"), INVALID, ["scale=nan"]),
    ("mask_filter_value", float("nan"), INVALID, ["mask_filter_value=nan"]),
    ("dtype", 7, UNSUPPORTED, ["dtype 7"]),
    ("num_threads", 0, INVALID, ["num_threads=0"]),
    ("device", 1, UNSUPPORTED, ["device 1"]),
]


@pytest.mark.parametrize("field, value, status, words", MHA_C,
                         ids=[f"{c[0]}={getattr(c[1], '__name__', c[1])}-{i}" for i, c in enumerate(MHA_C)])
def test_c_mha_returns_a_status(lib, field, value, status, words):
    h = MhaStruct(lib)
    if field == "q_seq":
        h.args.unidirectional = 1
    _set(lib, h, field, value)
    _expect(lib, MHA, h, status, words)


def test_c_mha_past_without_present_is_refused(lib):
    h = MhaStruct(lib)
    h.args.present_key = h.args.present_value = lib.ffi.NULL
    with pytest.raises(NativeError) as ei:
        lib.call(MHA, h.args)
    assert ei.value.status == INVALID and "past_seq=4 needs" in ei.value.message
    assert np.all(h.out == SENTINEL)


def _ort_mha(h, unidirectional: int, mask: np.ndarray, sq: int | None = None) -> np.ndarray:
    """ORT's own MultiHeadAttention on the struct's arrays (past, present, key padding mask);
    sq < h.SQ: only the first sq queries."""
    from perfbench import dtypes
    from perfbench.ops import ort as ortlib
    from perfbench.ops.base import GraphSpec

    B, N, H, SQ, SKV, P = h.B, h.N, h.H, sq or h.SQ, h.SKV, h.PAST
    spec = GraphSpec("MultiHeadAttention", "com.microsoft", 1,
                     [("query", "float", (B, SQ, N * H)), ("key", "float", (B, SKV, N * H)),
                      ("value", "float", (B, SKV, N * H)), ("", "", ()),
                      ("key_padding_mask", "int32", (B, P + SKV)), ("", "", ()),
                      ("past_key", "float", (B, N, P, H)), ("past_value", "float", (B, N, P, H))],
                     [("output", (B, SQ, N * H)), ("present_key", (B, N, P + SKV, H)),
                      ("present_value", (B, N, P + SKV, H))],
                     {"num_heads": N, "unidirectional": unidirectional})
    sess = ortlib.make_session(ortlib.build_model(spec, dtypes.F32), 1, "off")
    out = {"output": np.empty((B, SQ, N * H), np.float32), "present_key": np.empty((B, N, P + SKV, H), np.float32),
           "present_value": np.empty((B, N, P + SKV, H), np.float32)}
    ins = {"query": np.ascontiguousarray(h.q[:, :SQ]), "key": h.k, "value": h.v, "key_padding_mask": mask,
           "past_key": h.pk, "past_value": h.pv}
    ortlib.Bound(sess, spec, 1, ins, out).run()
    return out["output"]


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_c_mha_key_padding_mask_with_unidirectional_is_supported(lib, unidirectional):
    """Not a bad argument: a key padding mask combines with the causal rule; ours agrees with a
    float64 reference and with ORT's CPU kernel run on the same arrays, and the mask matters.
    Mask values other than 0/1 too: ORT keeps a key where the mask is > 0 (2 keeps, -1 masks)."""
    h = MhaStruct(lib)
    h.mask[0, 1] = -1  # masked, like 0
    h.mask[1, 0] = 2  # kept, like 1
    h.args.key_padding_mask = lib.ffi.cast("const int32_t *", h.mask.ctypes.data)
    h.args.unidirectional = unidirectional
    lib.call(MHA, h.args)
    assert np.allclose(h.out, h.reference(unidirectional, True), rtol=1e-4, atol=1e-5)
    assert np.allclose(h.out, _ort_mha(h, unidirectional, h.mask), rtol=1e-4, atol=1e-5)
    assert not np.allclose(h.out, h.reference(unidirectional, False), rtol=1e-4, atol=1e-5)


# ---- registration -----------------------------------------------------------------------------------


def test_attention_kernels_are_listed_and_found(lib):
    names = [lib.string(lib.lib.pb_kernel_name(i)) for i in range(lib.lib.pb_kernel_count())]
    for kernel in (GQA, MHA):
        assert kernel in names
        assert names.count(kernel) == 1
        assert kernel in lib.kernel_names()
        fn = lib.lib.pb_kernel_lookup(kernel.encode())
        assert fn != lib.ffi.NULL
        # the looked-up entry point is the kernel itself: it declines a NULL args pointer the same way
        assert fn(lib.ffi.NULL) == INVALID
        assert kernel in lib.string(lib.lib.pb_last_error())
    assert lib.lib.pb_kernel_lookup(b"group_query_attention_") == lib.ffi.NULL
    assert lib.string(lib.lib.pb_kernel_name(lib.lib.pb_kernel_count())) == ""


def test_library_still_works_after_attention_errors(lib):
    h = GqaStruct(lib)
    h.args.batch = 0
    with pytest.raises(NativeError):
        lib.call(GQA, h.args)
    h.args.batch = GqaStruct.B
    lib.call(GQA, h.args)
    assert not np.any(h.out == SENTINEL)


def test_c_mha_unidirectional_single_query_sees_every_key_as_ort(lib):
    """ORT applies the causal rule only with more than one query: one query over 3 new keys
    (and the past) sees all of them -- ours too, on the same arrays."""
    h = MhaStruct(lib)
    q1 = np.ascontiguousarray(h.q[:, :1])
    out1 = np.full((h.B, 1, h.N * h.H), SENTINEL, np.float32)
    h.args.q_seq = 1
    h.args.query, h.args.output = lib.ptr(q1), lib.ptr(out1)
    h.args.unidirectional = 1
    lib.call(MHA, h.args)
    assert np.allclose(out1, _ort_mha(h, 1, np.ones_like(h.mask), sq=1), rtol=1e-4, atol=1e-5)
    h.args.unidirectional = 0  # the same as without the attribute
    out0 = out1.copy()
    lib.call(MHA, h.args)
    assert np.array_equal(out0, out1)
