"""The wrappers' two buffer checks (perfbench/kernels_ffi/checks.py), before C is called:

* aliasing by memory, not by identity (np.shares_memory): two views of one buffer that overlap
  are refused wherever one of them is written (an output against every input and every other
  output), while the in-place cases a kernel allows -- GQA's shared KV cache (present is past),
  ScatterND, Trilu, Softmax, the rotary kernels -- are allowed exactly: the same buffer (data
  address, dtype, shape, strides), whichever view object carries it; a partial overlap is refused;
* alignment: an array whose data address is not a multiple of its element size is refused, with
  the argument, its address and how to get an aligned copy."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.errors import UsageError
from perfbench.kernels_ffi import eltwise as el
from perfbench.kernels_ffi import movement as mv
from perfbench.kernels_ffi import onnx_attn as oa
from perfbench.kernels_ffi import wrappers as w

SENTINEL = 7.0

pytestmark = pytest.mark.usefixtures("auto_isa")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _views(n_elems: int, shape, shift: int, dtype=np.float32):
    """Two C-contiguous views of `shape` on one buffer, the second `shift` elements further on:
    they overlap (shift < size) without being the same array object or the same buffer."""
    size = int(np.prod(shape))
    buf = _rng().standard_normal(max(n_elems, size + shift)).astype(dtype)
    return buf[:size].reshape(shape), buf[shift:shift + size].reshape(shape)


def _misaligned(shape, dtype=np.float32, offset=1, fill=True):
    """A C-contiguous array of `shape` whose data starts `offset` bytes past a 64-byte boundary
    (a byte-offset slice of a uint8 buffer viewed as dtype)."""
    it = np.dtype(dtype).itemsize
    n = int(np.prod(shape))
    raw = np.zeros(n * it + 64 + offset, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    a = raw[start:start + n * it].view(dtype).reshape(shape)
    if fill:
        a[...] = _rng(1).standard_normal(shape).astype(dtype)
    return a


# ---- GroupQueryAttention: a decode, B=1, Nq=2, Nkv=1, H=16, past 4, present capacity 5 ---------

B, NQ, NKV, H, PAST, CAP = 1, 2, 1, 16, 4, 5


def _gqa(**over):
    r = _rng(2)
    a = dict(query=r.standard_normal((B, 1, NQ * H)).astype(np.float32),
             key=r.standard_normal((B, 1, NKV * H)).astype(np.float32),
             value=r.standard_normal((B, 1, NKV * H)).astype(np.float32),
             past_key=r.standard_normal((B, NKV, PAST, H)).astype(np.float32),
             past_value=r.standard_normal((B, NKV, PAST, H)).astype(np.float32),
             seqlens_k=np.array([PAST], np.int32), total_sequence_length=PAST + 1,
             output=np.full((B, 1, NQ * H), SENTINEL, np.float32),
             present_key=np.full((B, NKV, CAP, H), SENTINEL, np.float32),
             present_value=np.full((B, NKV, CAP, H), SENTINEL, np.float32))
    a.update(over)
    return a


def _shared_gqa(**over):
    """The shared-buffer mode: past and present one buffer of capacity CAP."""
    r = _rng(3)
    pk = r.standard_normal((B, NKV, CAP, H)).astype(np.float32)
    pv = r.standard_normal((B, NKV, CAP, H)).astype(np.float32)
    return _gqa(**{"past_key": pk, "past_value": pv, "present_key": pk, "present_value": pv, **over})


def _run_gqa(lib, a):
    w.group_query_attention(lib, **a, num_heads=NQ, kv_num_heads=NKV).run()


def _gqa_query_output_overlap():
    q, out = _views(0, (B, 1, NQ * H), 8)
    return _gqa(query=q, output=out)


def _gqa_present_past_partial():
    """Each present one row past its past, in one buffer of the same shape: the identity test
    saw two copy-mode caches (different objects, no error) and C, seeing different pointers,
    copied past into present while reading it."""
    pk, prk = _views(0, (B, NKV, CAP, H), H)
    pv, prv = _views(0, (B, NKV, CAP, H), H)
    return _shared_gqa(past_key=pk, present_key=prk, past_value=pv, present_value=prv)


def _gqa_present_k_v_overlap():
    prk, prv = _views(0, (B, NKV, CAP, H), 3)
    return _gqa(present_key=prk, present_value=prv)


def _gqa_output_on_seqlens():
    a = _gqa()
    out = np.full((B, 1, NQ * H), SENTINEL, np.float32)
    seqlens = out.reshape(-1)[:1].view(np.int32)  # seqlens_k inside the output's first element
    seqlens[0] = PAST
    return dict(a, seqlens_k=seqlens, output=out)


GQA_OVERLAPS = {
    "query-and-output-views": (_gqa_query_output_overlap, "output output overlaps input query"),
    "present-key-one-row-past-past-key": (_gqa_present_past_partial,
                                          "output present_key overlaps input past_key partially"),
    "present-key-and-present-value": (_gqa_present_k_v_overlap, "outputs present_key and present_value overlap"),
    "output-on-seqlens": (_gqa_output_on_seqlens, "output output overlaps input seqlens_k"),
}


@pytest.mark.parametrize("case", list(GQA_OVERLAPS))
def test_gqa_overlapping_views_are_refused(lib, case):
    make, words = GQA_OVERLAPS[case]
    a = make()
    before = {n: a[n].copy() for n in ("output", "present_key", "present_value")}
    with pytest.raises(UsageError) as ei:
        _run_gqa(lib, a)
    assert words in str(ei.value), str(ei.value)
    assert "pass separate arrays" in str(ei.value) or "in place needs" in str(ei.value)
    for n, b in before.items():
        assert np.array_equal(a[n], b)  # C was never called


def test_gqa_shared_cache_is_a_buffer_not_an_identity(lib):
    """present_key a view of past_key's buffer (another object, the same buffer) is the shared
    mode, as C sees it (equal pointers); the result equals passing the very same objects."""
    want = _shared_gqa()
    _run_gqa(lib, want)
    a = _shared_gqa()
    a["present_key"] = a["past_key"].view()
    a["present_value"] = a["past_value"]  # this one the same object
    assert a["present_key"] is not a["past_key"]
    _run_gqa(lib, a)
    for n in ("output", "present_key", "present_value"):
        assert np.array_equal(a[n], want[n]), n
    # one cache shared and the other not is still refused
    a = _shared_gqa()
    a["present_value"] = a["past_value"].copy()
    with pytest.raises(UsageError, match="share both caches"):
        _run_gqa(lib, a)


# ---- MultiHeadAttention and ai.onnx Attention -------------------------------------------------


def _mha(**over):
    r = _rng(4)
    a = dict(query=r.standard_normal((1, 2, 2 * H)).astype(np.float32),
             key=r.standard_normal((1, 2, 2 * H)).astype(np.float32),
             value=r.standard_normal((1, 2, 2 * H)).astype(np.float32),
             output=np.zeros((1, 2, 2 * H), np.float32),
             past_key=r.standard_normal((1, 2, 3, H)).astype(np.float32),
             past_value=r.standard_normal((1, 2, 3, H)).astype(np.float32),
             present_key=np.zeros((1, 2, 5, H), np.float32), present_value=np.zeros((1, 2, 5, H), np.float32))
    a.update(over)
    return a


def _mha_query_output():
    q, out = _views(0, (1, 2, 2 * H), 1)
    return _mha(query=q, output=out)


def _mha_present_over_past():
    buf = np.zeros(2 * 5 * H, np.float32)
    return _mha(past_key=buf[:2 * 3 * H].reshape(1, 2, 3, H), present_key=buf.reshape(1, 2, 5, H))


def _mha_output_on_present():
    buf = np.zeros(2 * 5 * H, np.float32)
    return _mha(output=buf[:2 * 2 * H].reshape(1, 2, 2 * H), present_value=buf.reshape(1, 2, 5, H))


MHA_OVERLAPS = {
    "query-and-output-views": (_mha_query_output, "output output overlaps input query"),
    "present-key-over-past-key": (_mha_present_over_past, "output present_key overlaps input past_key"),
    "output-inside-present-value": (_mha_output_on_present, "outputs output and present_value overlap"),
}


@pytest.mark.parametrize("case", list(MHA_OVERLAPS))
def test_mha_overlapping_views_are_refused(lib, case):
    make, words = MHA_OVERLAPS[case]
    a = make()
    with pytest.raises(UsageError) as ei:
        w.multi_head_attention(lib, **a, num_heads=2)
    assert words in str(ei.value), str(ei.value)


def _att(**over):
    r = _rng(5)
    a = dict(query=r.standard_normal((1, 2, 3, 8)).astype(np.float32),
             key=r.standard_normal((1, 2, 3, 8)).astype(np.float32),
             value=r.standard_normal((1, 2, 3, 8)).astype(np.float32), output=np.zeros((1, 2, 3, 8), np.float32),
             qk_output=np.zeros((1, 2, 3, 3), np.float32))
    a.update(over)
    return a


def test_onnx_attention_overlaps_are_refused_in_python(lib):
    """C refuses them too (a NativeError at run time); the wrapper refuses before C is called."""
    buf = np.zeros(2 * 3 * 8 + 4, np.float32)
    a = _att(output=buf[:48].reshape(1, 2, 3, 8), qk_output=buf[4:22].reshape(1, 2, 3, 3))
    with pytest.raises(UsageError, match="outputs output and qk_output overlap"):
        oa.onnx_attention(lib, **a)
    q, out = _views(0, (1, 2, 3, 8), 2)
    with pytest.raises(UsageError, match="output output overlaps input query"):
        oa.onnx_attention(lib, **_att(query=q, output=out))
    oa.onnx_attention(lib, **_att()).run()  # the baseline is valid


# ---- the other wrappers: overlap refused, exact in place allowed -------------------------------


def _f(*shape, seed=6):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def test_softmax_and_cast_partial_overlap_refused_in_python(lib):
    x, y = _views(0, (4, 8), 3)
    with pytest.raises(UsageError, match="output y overlaps input x partially"):
        w.softmax(lib, x, y, 1)
    src, dst = _views(0, (16,), 5)
    with pytest.raises(UsageError, match="output dst overlaps input src partially"):
        w.cast(lib, src, dst)
    x = _f(4, 8)
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    w.softmax(lib, x, x.view(), 1).run()  # in place through another view of the same buffer
    assert np.allclose(x, want, rtol=1e-5, atol=1e-6)


def test_rotary_output_over_a_cache_refused_in_python(lib):
    """C refuses the output over a cache too (a NativeError at run time) for ai.onnx's kernel,
    and did not check it at all for com.microsoft's."""
    out = np.zeros(2 * 3 * 64, np.float32)
    cos_in_out = out[:80].reshape(10, 8)  # (max_pos, H/2), H = 16
    with pytest.raises(UsageError, match="output output overlaps input cos_cache"):
        w.rotary_embedding(lib, _f(2, 3, 64), np.array([[1, 2, 3], [5, 6, 7]], np.int64), cos_in_out,
                           _f(10, 8, seed=7), out.reshape(2, 3, 64), interleaved=False, num_heads=4)
    out = np.zeros(2 * 3 * 4 * 16, np.float32)
    with pytest.raises(UsageError, match="output output overlaps input sin_cache"):
        oa.onnx_rotary_embedding(lib, _f(2, 3, 4, 16), _f(10, 4, seed=8), out[:40].reshape(10, 4),
                                 out.reshape(2, 3, 4, 16), position_ids=np.array([[1, 2, 3, 4], [5, 6, 7, 8]]),
                                 rotary_embedding_dim=8)


def test_movement_in_place_through_another_view(lib):
    """ScatterND and Trilu in place: output a view of data's buffer (not the same object) is
    allowed, a partial overlap refused."""
    d = _f(4, 3)
    u = _f(1, 3, seed=9)
    want = d.copy()
    want[2] = u[0]
    mv.scatter_nd(lib, d, np.array([[2]]), u, d.view()).run()
    assert np.array_equal(d, want)
    x = _f(4, 5)
    want = np.triu(x, 1)
    mv.trilu(lib, x, x.view(), 1, 1).run()
    assert np.array_equal(x, want)
    a, b = _views(0, (4, 3), 3)
    with pytest.raises(UsageError, match="output output overlaps input data partially"):
        mv.scatter_nd(lib, a, np.array([[1]]), _f(1, 3), b)


# ---- alignment -------------------------------------------------------------------------------


MISALIGNED = {
    # name: (call, argument named in the message, bytes past the element boundary, element size)
    "softmax-x-1-byte": (lambda lib: w.softmax(lib, _misaligned((4, 8)), np.zeros((4, 8), np.float32), 1), "x", 1, 4),
    "softmax-y-2-bytes": (lambda lib: w.softmax(lib, _f(4, 8), _misaligned((4, 8), offset=2, fill=False), 1),
                          "y", 2, 4),
    "add-y-streamed-output": (lambda lib: el.add(lib, _f(64), _f(64), _misaligned((64,), offset=3, fill=False)),
                              "y", 3, 4),
    "gelu-f16-x": (lambda lib: el.gelu(lib, _misaligned((32,), np.float16), np.zeros(32, np.float16)), "x", 1, 2),
    "gather-int64-indices-4-bytes": (
        lambda lib: mv.gather(lib, _f(10, 4), _misaligned((2,), np.int64, offset=4, fill=False),
                              np.zeros((2, 4), np.float32)), "indices", 4, 8),
    "gqa-present-key": (lambda lib: w.group_query_attention(
        lib, **_gqa(present_key=_misaligned((B, NKV, CAP, H), offset=1, fill=False)), num_heads=NQ,
        kv_num_heads=NKV), "present_key", 1, 4),
}


@pytest.mark.parametrize("case", list(MISALIGNED))
def test_misaligned_arrays_are_refused(lib, case):
    call, name, off, es = MISALIGNED[case]
    with pytest.raises(UsageError) as ei:
        call(lib)
    msg = str(ei.value)
    assert f"{name} is misaligned" in msg, msg
    assert f"{off} byte(s) past a multiple of {es}" in msg, msg
    assert "aligned copy" in msg and f"{name}.copy()" in msg, msg


def test_an_aligned_copy_is_accepted(lib):
    x = _misaligned((4, 8))
    y = np.zeros((4, 8), np.float32)
    w.softmax(lib, x.copy(), y, 1).run()
    w.softmax(lib, np.require(x, requirements="CA"), y, 1).run()
    assert np.allclose(y.sum(-1), 1.0, atol=1e-5)
    # an empty array has no element to misalign
    el.add(lib, _misaligned((0,)), np.zeros(0, np.float32), np.zeros(0, np.float32))
