"""Native kernels against float64 numpy references, on every ISA path this CPU supports, in f32,
f16 and bf16, with 1 and 2 threads: softmax and rotary embedding (odd shapes that exercise the
vector tails), in-place softmax, NaN / infinity handling, the bit-exact cast kernel, and the
no-scratch fallback of 16-bit softmax."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from perfbench import numerics
from perfbench.errors import NativeError
from perfbench.kernels_ffi import load, wrappers

ROOT = Path(__file__).resolve().parents[2]
DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
BITS = {2: np.uint16, 4: np.uint32}

# which ISA paths to test is a property of this machine: ask the library at collection
_LIB = load()
SUPPORTED = [i for i in _LIB.isa_supported if i]


@pytest.fixture(params=SUPPORTED)
def isa(lib, request):
    """Select one ISA path for the test; always back to "auto" afterwards."""
    lib.select_isa(request.param)
    try:
        assert lib.isa_active == request.param
        yield request.param
    finally:
        lib.select_isa("auto")


# ---- references -------------------------------------------------------------------------------


def softmax64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def rotary64(x, pos, cos, sin, *, interleaved: bool, num_heads: int | None) -> np.ndarray:
    """x: (B, S, N*H) with num_heads, or (B, N, S, H); float64 in and out."""
    x, cos, sin = (np.asarray(a, np.float64) for a in (x, cos, sin))
    if x.ndim == 3:
        b, s, nh = x.shape
        xb = x.reshape(b, s, num_heads, nh // num_heads).transpose(0, 2, 1, 3)
    else:
        xb = x
    h = xb.shape[-1]
    c = cos[pos][:, None]  # (B, 1, S, H/2)
    sn = sin[pos][:, None]
    if interleaved:
        x1, x2 = xb[..., 0::2], xb[..., 1::2]
    else:
        x1, x2 = xb[..., : h // 2], xb[..., h // 2:]
    o1 = x1 * c - x2 * sn
    o2 = x2 * c + x1 * sn
    out = np.empty_like(xb)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = o1, o2
    else:
        out[..., : h // 2], out[..., h // 2:] = o1, o2
    if x.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return out


def guarded(shape, dtype, guard: int = 37):
    """An output array inside a bigger buffer filled with a sentinel; check() says whether the
    kernel wrote outside its output."""
    n = int(np.prod(shape))
    buf = np.full(n + 2 * guard, 7.0, dtype=dtype)
    arr = buf[guard: guard + n].reshape(shape)
    assert arr.flags.c_contiguous

    def untouched() -> bool:
        u = BITS[buf.itemsize]
        sentinel = np.array(7.0, dtype=dtype).view(u)
        return bool((buf[:guard].view(u) == sentinel).all() and (buf[guard + n:].view(u) == sentinel).all())

    return arr, untouched


def softmax_inputs(shape, dtype, rng):
    x = rng.standard_normal(shape) * 2.0
    rows = x.reshape(-1, shape[-1])
    rows[0, 0] += 8.0  # dominant first key
    rows[-1, -1] += 8.0  # dominant last key (lives in the vector tail for odd lengths)
    if rows.shape[0] > 2:
        rows[rows.shape[0] // 2] += 50.0  # needs the max subtracted
    return np.ascontiguousarray(x.astype(dtype))


SOFTMAX_SHAPES = [(4, 1), (5, 7), (2, 3, 33), (3, 4097)]
SOFTMAX_SHAPES_2T = [(17, 4097)]  # >= 2 x 32768 elements: the pool really splits the rows


def _threads_shapes(threads, small, big):
    return small + (big if threads > 1 else [])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_matches_reference(lib, isa, dtype, threads):
    rng = np.random.default_rng(100 + threads)
    floor = numerics.FLOORS[dtype]
    for shape in _threads_shapes(threads, SOFTMAX_SHAPES, SOFTMAX_SHAPES_2T):
        x = softmax_inputs(shape, DTYPES[dtype], rng)
        x_before = x.copy()
        y, untouched = guarded(shape, DTYPES[dtype])
        wrappers.softmax(lib, x, y, threads).run()
        err = numerics.error(y, softmax64(x), shape[-1])
        assert err <= floor, f"{isa} {dtype} threads={threads} shape={shape}: err={err:.3g} > floor {floor:g}"
        assert untouched(), f"{isa} {dtype} {shape}: wrote outside its output"
        assert np.array_equal(x.view(BITS[x.itemsize]), x_before.view(BITS[x.itemsize])), "input modified"


def _rotary_case(rng, dtype, *, b, s, n, h, layout, interleaved, max_pos=1040):
    shape = (b, s, n * h) if layout == "bsnh" else (b, n, s, h)
    x = rng.standard_normal(shape).astype(dtype)
    # different positions per batch row, never arange from 0: row 0 mid-context, row 1 scattered
    pos = np.empty((b, s), np.int64)
    pos[0] = 1000 + np.arange(s)
    for r in range(1, b):
        pos[r] = rng.permutation(max_pos)[:s]
    inv_freq = 10000.0 ** (-np.arange(0, h, 2) / h)
    ang = np.arange(max_pos)[:, None] * inv_freq[None, :]
    cos = np.ascontiguousarray(np.cos(ang).astype(dtype))
    sin = np.ascontiguousarray(np.sin(ang).astype(dtype))
    return x, pos, cos, sin


ROTARY_CONFIGS = [
    dict(b=2, s=33, n=3, h=h, layout=layout, interleaved=il)
    for h in (2, 6, 80, 96)
    for layout in ("bsnh", "bnsh")
    for il in (0, 1)
]
ROTARY_CONFIGS_2T = [  # 2 x 33 x 8 x 128 = 67584 elements: two threads really run
    dict(b=2, s=33, n=8, h=128, layout=layout, interleaved=il) for layout in ("bsnh", "bnsh") for il in (0, 1)
]


def _run_rotary(lib, x, pos, cos, sin, out, cfg, threads):
    wrappers.rotary_embedding(lib, x, pos, cos, sin, out, interleaved=bool(cfg["interleaved"]),
                              num_heads=cfg["n"] if cfg["layout"] == "bsnh" else None, threads=threads).run()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rotary_matches_reference(lib, isa, dtype, threads):
    rng = np.random.default_rng(200 + threads)
    floor = numerics.FLOORS[dtype]
    for cfg in _threads_shapes(threads, ROTARY_CONFIGS, ROTARY_CONFIGS_2T):
        x, pos, cos, sin = _rotary_case(rng, DTYPES[dtype], **cfg)
        out, untouched = guarded(x.shape, DTYPES[dtype])
        _run_rotary(lib, x, pos, cos, sin, out, cfg, threads)
        ref = rotary64(x, pos, cos, sin, interleaved=bool(cfg["interleaved"]), num_heads=cfg["n"])
        err = numerics.error(out, ref, cfg["h"])
        assert err <= floor, f"{isa} {dtype} threads={threads} {cfg}: err={err:.3g} > floor {floor:g}"
        assert untouched(), f"{isa} {dtype} {cfg}: wrote outside its output"


def test_avx512_path(lib):
    """The AVX-512 path is covered by the parametrized tests where the CPU runs it; where it is
    compiled in but this CPU cannot run it, say so loudly instead of passing silently."""
    if "avx512" not in lib.isa_compiled:
        pytest.skip(f"the AVX-512 path is not compiled into this build (compiled: {lib.isa_compiled})")
    if "avx512" in lib.isa_supported:
        assert "avx512" in SUPPORTED  # so every kernel test above ran on it
        assert lib.isa_active == "avx512"  # auto picks the best path
        return
    before = lib.isa_active
    with pytest.raises(NativeError) as ei:
        lib.select_isa("avx512")
    assert ei.value.status == 2 and "cannot run" in ei.value.message
    assert lib.isa_active == before
    assert "portable16" in SUPPORTED  # its 16-lane kernel logic is at least tested via portable16
    pytest.skip(
        "AVX-512 path is compiled in but cannot run on this CPU "
        f"(supported: {','.join(lib.isa_supported)}): its kernels are NOT tested here; "
        "run these tests on an AVX-512 host"
    )


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_in_place(lib, isa, dtype, threads):
    rng = np.random.default_rng(300)
    for shape in _threads_shapes(threads, [(5, 7), (3, 33), (3, 4097)], SOFTMAX_SHAPES_2T):
        x = softmax_inputs(shape, DTYPES[dtype], rng)
        y = np.empty_like(x)
        wrappers.softmax(lib, x, y, threads).run()
        wrappers.softmax(lib, x, x, threads).run()
        u = BITS[x.itemsize]
        assert np.array_equal(x.view(u), y.view(u)), f"{isa} {dtype} {shape}: in place differs"


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_nan_and_inf_rows(lib, isa, dtype):
    dt = DTYPES[dtype]
    rng = np.random.default_rng(400)
    for cols in (1, 7, 33, 4097):
        for where in sorted({0, cols // 2, cols - 1}):
            x = rng.standard_normal((6, cols)).astype(dt)
            x[1, where] = np.nan
            x[3, where] = np.inf
            x[4, where] = -np.inf
            y = np.empty_like(x)
            wrappers.softmax(lib, x, y, 1).run()
            yf = y.astype(np.float64)
            ctx = f"{isa} {dtype} cols={cols} at={where}"
            assert np.isnan(yf[1]).all(), f"{ctx}: a NaN row must be all NaN, got {yf[1][:8]}"
            assert np.isnan(yf[3]).all(), f"{ctx}: a +inf row gives NaN like numpy, got {yf[3][:8]}"
            assert np.isfinite(yf[[0, 2, 5]]).all(), f"{ctx}: NaN leaked into other rows"
            ref = softmax64(x)
            assert np.isnan(ref[3]).all()  # numpy agrees: inf - inf
            if cols > 1:  # a -inf logit gets (about) zero weight, the row stays finite
                assert np.isfinite(yf[4]).all(), ctx
                assert yf[4, where] < 1e-30, ctx
            # and the whole result, NaN pattern included, matches numpy within the floor
            err = numerics.error(y, ref, cols)
            assert err <= numerics.FLOORS[dtype], f"{ctx}: err={err}"


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rotary_nan_propagates_like_the_reference(lib, isa, dtype):
    dt = DTYPES[dtype]
    rng = np.random.default_rng(500)
    for h in (6, 80):
        for layout in ("bsnh", "bnsh"):
            for il in (0, 1):
                cfg = dict(b=2, s=5, n=3, h=h, layout=layout, interleaved=il)
                x, pos, cos, sin = _rotary_case(rng, dt, **cfg)
                flat = x.reshape(-1)
                for k in (0, h // 2, h - 1, flat.size // 2 + 1, flat.size - 1):  # incl. tail lanes
                    flat[k] = np.nan
                out = np.empty_like(x)
                _run_rotary(lib, x, pos, cos, sin, out, cfg, 1)
                ref = rotary64(x, pos, cos, sin, interleaved=bool(il), num_heads=3)
                got_nan = np.isnan(out.astype(np.float64))
                assert np.array_equal(got_nan, np.isnan(ref)), (
                    f"{isa} {dtype} {cfg}: NaN at {np.argwhere(got_nan != np.isnan(ref))[:4].tolist()} differs")
                assert np.isnan(ref).sum() >= 5
                assert numerics.error(out, ref, h) <= numerics.FLOORS[dtype]


# ---- cast --------------------------------------------------------------------------------------

SPECIAL_BITS = [
    0x3F808000, 0x3F818000,  # bf16 ties: to even (down), to even (up)
    0x3F801000, 0x3F803000,  # f16 ties: to even (down), to even (up)
    0x3F807FFF, 0x3F808001,  # just below / above a bf16 tie
    0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFF800001, 0x7FC00000, 0x7FA00000, 0x7F80FFFF,  # NaNs
    0x7F800000, 0xFF800000,  # infinities
    0x00000000, 0x80000000,  # signed zeros
    0x00000001, 0x80000001, 0x007FFFFF, 0x00400000,  # f32 subnormals
    0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x387FFFFF, 0x38800000, 0x38000000,  # f16 subnormal edges
    0x477FE000, 0x477FEFFF, 0x477FF000, 0xC77FF000, 0x477FFFFF, 0x47800000,  # f16 overflow edges
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000,  # bf16 overflow edges
]


def _f32_patterns() -> np.ndarray:
    rng = np.random.default_rng(600)
    parts = [
        np.array(SPECIAL_BITS, np.uint32),
        rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32),  # every exponent
        np.arange(0x33000000, 0x38800000, 2003, dtype=np.uint32),  # f16 subnormal range, dense
        np.arange(0x477F0000, 0x47810000, 7, dtype=np.uint32),  # around f16 max
        (np.arange(0x3F80, 0x3FA0, dtype=np.uint32) << 16) | 0x8000,  # bf16 ties
        (np.arange(0x3C00, 0x3C40, dtype=np.uint32) << 13 | 0x1000) + 0x38000000,  # f16 ties
    ]
    p = np.concatenate(parts)
    return np.concatenate([p, p ^ 0x80000000])  # and every one negated


_PATTERNS = _f32_patterns()


def _same_bits_or_both_nan(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    u = BITS[got.itemsize]
    same = got.view(u) == want.view(u)
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return same | both_nan


def _far_apart(n: int, a_dtype, b_dtype):
    """Two arrays of n elements carved from one buffer with a gap of 4n bytes between them, so
    that no overlap check can mistake them for overlapping (see test_cast_between_adjacent_buffers)."""
    buf = np.zeros(16 * n, np.uint8)
    a = buf[: n * np.dtype(a_dtype).itemsize].view(a_dtype)
    b = buf[8 * n: 8 * n + n * np.dtype(b_dtype).itemsize].view(b_dtype)
    return a, b


@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_cast_from_f32_is_bit_exact(lib, isa, dst):
    assert _PATTERNS.size >= 1_000_000
    with np.errstate(over="ignore", invalid="ignore"):
        want = _PATTERNS.view(np.float32).astype(DTYPES[dst])
    for threads in (1, 2):
        src, got = _far_apart(_PATTERNS.size, np.float32, DTYPES[dst])
        src[:] = _PATTERNS.view(np.float32)
        wrappers.cast(lib, src, got, threads).run()
        ok = _same_bits_or_both_nan(got, want)
        bad = np.flatnonzero(~ok)[:6]
        assert ok.all(), (
            f"{isa} f32->{dst} threads={threads}: {(~ok).sum()} mismatches, e.g. "
            + ", ".join(f"{_PATTERNS[i]:#010x} -> {got.view(np.uint16)[i]:#06x} (want {want.view(np.uint16)[i]:#06x})"
                        for i in bad))
        # NaN stays NaN, whatever its payload
        assert np.isnan(got.astype(np.float32)[np.isnan(src)]).all()


@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_cast_to_f32_round_trips(lib, isa, src):
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(DTYPES[src])
    for threads in (1, 2):
        narrow, wide = _far_apart(every.size, DTYPES[src], np.float32)
        narrow[:] = every
        wrappers.cast(lib, narrow, wide, threads).run()
        ok = _same_bits_or_both_nan(wide, every.astype(np.float32))
        assert ok.all(), f"{isa} {src}->f32: {(~ok).sum()} mismatches, e.g. {np.flatnonzero(~ok)[:6]}"
        wide2, back = _far_apart(every.size, np.float32, DTYPES[src])
        wide2[:] = wide
        wrappers.cast(lib, wide2, back, threads).run()
        ok = _same_bits_or_both_nan(back, every)
        assert ok.all(), f"{isa} {src}->f32->{src}: {(~ok).sum()} values changed, e.g. {np.flatnonzero(~ok)[:6]}"
        not_nan = ~np.isnan(wide)
        assert np.array_equal(back.view(np.uint16)[not_nan], every.view(np.uint16)[not_nan])


@pytest.mark.parametrize("narrow", ["f16", "bf16"])
def test_cast_between_adjacent_buffers(lib, narrow):
    """Disjoint buffers that sit next to each other in memory are a valid cast: the kernel must
    not reject them as overlapping (its overlap check must use each buffer's own size)."""
    n = 1000
    values = np.linspace(-3, 3, n).astype(np.float32).astype(DTYPES[narrow]).astype(np.float32)
    buf = np.zeros(6 * n, np.uint8)
    # f32 -> 16-bit, the 16-bit destination just below the source: bytes [0, 2n) and [2n, 6n)
    dst, src = buf[: 2 * n].view(DTYPES[narrow]), buf[2 * n:].view(np.float32)
    src[:] = values
    wrappers.cast(lib, src, dst).run()
    assert np.array_equal(dst.astype(np.float32), values)
    # 16-bit -> f32, the f32 destination just above the source: bytes [0, 2n) and [2n, 6n)
    buf2 = np.zeros(6 * n, np.uint8)
    src16, dst32 = buf2[: 2 * n].view(DTYPES[narrow]), buf2[2 * n:].view(np.float32)
    src16[:] = values.astype(DTYPES[narrow])
    wrappers.cast(lib, src16, dst32).run()
    assert np.array_equal(dst32, values)


# ---- scratch-limit fallback (a fresh process: the limit is read once) ----------------------------

_SCRATCH_SCRIPT = r"""
import json, sys
import ml_dtypes, numpy as np
from perfbench import numerics
from perfbench.kernels_ffi import load, wrappers
sys.path.insert(0, sys.argv[1])
from tests.kernels_ffi.test_kernels import softmax64, softmax_inputs
lib = load()
res = []
for isa in [i for i in lib.isa_supported if i]:
    lib.select_isa(isa)
    for name, dt in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        for threads, shape in ((1, (4, 1)), (1, (5, 7)), (1, (2, 3, 33)), (1, (3, 4097)), (2, (17, 4097))):
            x = softmax_inputs(shape, np.dtype(dt), np.random.default_rng(7))
            y = np.empty_like(x)
            wrappers.softmax(lib, x, y, threads).run()
            err = numerics.error(y, softmax64(x), shape[-1])
            x2 = x.copy()
            wrappers.softmax(lib, x2, x2, threads).run()
            res.append(dict(isa=isa, dtype=name, shape=list(shape), threads=threads, err=err,
                            floor=numerics.FLOORS[name],
                            in_place_same=bool(np.array_equal(x2.view(np.uint16), y.view(np.uint16)))))
lib.select_isa("auto")
print(json.dumps(res))
"""


def test_softmax_16bit_without_scratch():
    env = dict(os.environ)
    env["PERFBENCH_SCRATCH_MAX_BYTES"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PERFBENCH_ISA", None)
    r = subprocess.run([sys.executable, "-c", _SCRATCH_SCRIPT, str(ROOT)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert {x["isa"] for x in res} == set(SUPPORTED)
    bad = [x for x in res if not (x["err"] <= x["floor"]) or not x["in_place_same"]]
    assert not bad, bad
