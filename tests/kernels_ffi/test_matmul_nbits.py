"""pb_matmul_nbits (issue 19) at accuracy_level 0 and 4 against the float64 references of perfbench/
ops/_nbits.py (reference; reference_int8_a at 4: both checked against ORT sessions in tests/ops/
test_nbits_reference.py), on every ISA path this CPU runs, in f32, f16 and bf16: bits 2, 4 and 8;
blocks whose bytes are fewer than a vector (2 bits x 16: 4 bytes) and more (4 bits x 256: 128
bytes); block counts under, at and past a packed group of 16 blocks; K not a multiple of the block; zero points packed, unpacked or absent; a bias; M > 1 over column
sub-blocks; 2 threads; k = 0; rounding ties; and the bad arguments Python and C refuse."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from perfbench import dtypes
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi.matmul_nbits import matmul_nbits
from perfbench.ops import _nbits as nb
from tests.conftest import isas_to_test

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}  # relative to 1 + |Y|


def _err(y, ref) -> float:
    return float(np.max(np.abs(np.asarray(y, np.float64) - ref) / (1 + np.abs(ref)))) if np.size(y) else 0.0


def _case(rng, dt, m, k, n, bits, bs, zp, bias):
    npdt = dtypes.get(dt).numpy
    b, s, z = nb.random_weights(rng, n, k, bits=bits, block_size=bs, packed_zp=zp != "float", scale_dtype=npdt)
    z = None if zp == "none" else z
    a = rng.standard_normal((m, k)).astype(npdt)
    bi = rng.standard_normal((n,)).astype(npdt) if bias else None
    return a, b, s, z, bi


def _ref(acc):
    return nb.reference_int8_a if acc == 4 else nb.reference


@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_matches_the_float64_reference_on_every_path(lib, dt, acc):
    rng = np.random.default_rng(21)
    # (2, 200, 9, 4, 16): 4-bit blocks of 8 bytes (under AVX-512's 16 lanes), 13 blocks (odd: the last
    # packed zero-point byte half used); (2, 100, 5, 8, 32): an 8-bit K tail; at accuracy 4, packed
    # groups of 16 blocks: (3, 1000, ...) 32 blocks (whole groups), (2, 4200, 6, 4, 256) 17 (a group
    # and one block of 32 words), (1, 2048, 3, 8, 128) 16, (1, 600, 4, 2, 16) 38 (one word a block)
    # at accuracy 0, M < 3 (the row kernel): (1, 1000, 7, 4, 32) and (2, 512, 9, 2, 64) take the lookup
    # form on 16-lane paths (a K tail; 2-bit indices holding the next fields' bits; an odd last column);
    # blocks of fewer bytes than a vector take several blocks a vector (nbits_cols_small; 4-bit block 16
    # and 2-bit block 32 on 16 lanes, 2-bit block 16 on 8 and 16). Scales (float zero points) are read a
    # vector at a time where the column has LANES blocks or more (its last vectors from LANES blocks
    # before its end), else element by element; packed zero points a vector's worth of bytes at a
    # time where the column has that many (at 2 bits from 13 blocks on 16 lanes, 5 on 8). Block counts
    # (kb) 16 lanes | 8: (2, 300, 9, 2, 16) 19, 4 a vector | 2, the last vector one block short;
    # (1, 600, 7, 4, 16) 38; (2, 1000, 5, 2, 32) 32, its last block cut short by K; (1, 270, 3, 4, 16)
    # 17, the last vector short; (1, 60, 3, 2, 16) 4: scales and zero points element by element on
    # both; (2, 232, 5, 2, 16) 15: scales element by element, zero points a vector on 16 lanes, the
    # last vector short; (1, 96, 3, 2, 16) 6: scales element by element, zero points a vector on 8 lanes;
    # (1, 80, 3, 2, 16) 5: the same with the last vector short
    shapes = [(1, 256, 40, 4, 32), (3, 1000, 17, 4, 32), (2, 300, 9, 2, 16), (1, 512, 33, 8, 64), (2, 512, 20, 4, 128),
              (1, 100, 5, 2, 32), (4, 64, 3, 8, 16), (2, 200, 9, 4, 16), (2, 100, 5, 8, 32), (1, 1000, 7, 4, 32),
              (2, 512, 9, 2, 64), (1, 600, 7, 4, 16), (2, 1000, 5, 2, 32), (1, 270, 3, 4, 16), (1, 60, 3, 2, 16),
              (2, 232, 5, 2, 16), (1, 96, 3, 2, 16), (1, 80, 3, 2, 16)]
    if acc == 4:
        shapes += [(2, 4200, 6, 4, 256), (1, 2048, 3, 8, 128), (1, 600, 4, 2, 16)]
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for (m, k, n, bits, bs), zp, bias in itertools.product(shapes, ("packed", "float", "none"), (False, True)):
            a, b, s, z, bi = _case(rng, dt, m, k, n, bits, bs, zp, bias)
            y = np.full((m, n), np.nan, a.dtype)
            matmul_nbits(lib, a, b, s, y, k=k, n=n, bits=bits, block_size=bs, zero_points=z, bias=bi,
                         accuracy_level=acc).run()
            ref = _ref(acc)(a, b, s, z, bi, k=k, bits=bits, block_size=bs)
            assert _err(y, ref) <= TOL[dt], (isa, m, k, n, bits, bs, zp, bias, _err(y, ref))
    lib.select_isa("auto")


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize(("value", "at"), [(np.nan, 40), (np.inf, 40), (-np.inf, 85), (np.nan, 89)])
def test_accuracy_4_a_nan_or_infinity_in_a_makes_its_row_nan(lib, dt, value, at):
    """As in reference_int8_a (an infinity's block: scale inf, every q 0 or NaN); k = 90 puts 89 in
    the last block's partial vector on every path (85 too on 16-lane paths)."""
    rng = np.random.default_rng(28)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        a, b, s, z, _ = _case(rng, dt, 2, 90, 5, 4, 32, "packed", False)
        a[1, at] = value
        assert np.isnan(nb.reference_int8_a(a, b, s, z, k=90, bits=4, block_size=32)[1]).all()
        y = np.zeros((2, 5), a.dtype)
        matmul_nbits(lib, a, b, s, y, k=90, n=5, bits=4, block_size=32, zero_points=z, accuracy_level=4).run()
        y = np.asarray(y, np.float32)
        assert np.isnan(y[1]).all() and np.isfinite(y[0]).all(), isa
    lib.select_isa("auto")


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_accuracy_4_a_block_whose_max_overflows_127_over_max(lib, dt):
    """max|a| = 1e-38 (f32 and bf16 can hold it; 127 / max overflows to inf): the block's zeros give
    0 x inf = NaN, quantized to 0 as reference_int8_a (v2) states, not to -128 (a saturating
    conversion of NaN); the row is tiny throughout, so Y is compared relative to itself."""
    rng = np.random.default_rng(33)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        _, b, s, z, _ = _case(rng, dt, 1, 64, 4, 4, 32, "packed", False)
        a = np.zeros((1, 64), np.float32)
        a[0, [3, 40]] = [1e-38, -1e-38]  # one value a block, the rest exact zeros
        a = a.astype(dtypes.get(dt).numpy)
        out = np.zeros((1, 4), a.dtype)
        matmul_nbits(lib, a, b, s, out, k=64, n=4, bits=4, block_size=32, zero_points=z, accuracy_level=4).run()
        ref = nb.reference_int8_a(a, b, s, z, k=64, bits=4, block_size=32)
        assert np.isfinite(ref).all() and np.abs(ref).max() > 0
        got = np.asarray(out, np.float64)
        assert np.allclose(got, ref, rtol=2e-2, atol=0), (isa, got, ref)
    lib.select_isa("auto")


def test_accuracy_4_rounds_ties_to_even(lib):
    """Row 0's first block holds 127 (A's int8 scale exactly 1) and x.5 values: rounded half to even
    (ORT's rule) they match reference_int8_a; rounded half away from zero the reference is far off."""
    from perfbench.ops.matmul_nbits import plant_ties

    rng = np.random.default_rng(27)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        a, b, s, z, _ = _case(rng, "f32", 2, 96, 7, 4, 32, "packed", False)
        plant_ties(a, 32)
        y = np.full((2, 7), np.nan, np.float32)
        matmul_nbits(lib, a, b, s, y, k=96, n=7, bits=4, block_size=32, zero_points=z, accuracy_level=4).run()
        assert _err(y, nb.reference_int8_a(a, b, s, z, k=96, bits=4, block_size=32)) <= TOL["f32"], isa
        away = nb.reference_int8_a(a, b, s, z, k=96, bits=4, block_size=32, half_even=False)
        assert _err(y, away) > 100 * TOL["f32"], isa
    lib.select_isa("auto")


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_accuracy_4_largest_products_stay_exact(lib, bits):
    """Every weight the largest field (3, 15 or 255), zero points 0 and A's int8 values +-127: every
    product and block sum is the largest it can be. AVX2's vpmaddubsw adds product pairs into
    saturating int16 (an 8-bit pair, 2 x 255 x 127, saturates: vi_dot_u8 splits the byte in nibbles),
    and a form that adds the pairs in int16 for a few words before widening must stop within int16
    (tried on AVX2, docs/matmul_nbits.md: run for eight times its bound, it failed here). Blocks of
    32 to 256, one row (two columns a tile) and five (a tile of four rows and one of one)."""
    rng = np.random.default_rng(35)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for bs, m in itertools.product([32, 128, 256], [1, 5]):
            k, n = 2 * bs + 16, 3
            _, b, s, z, _ = _case(rng, "f32", m, k, n, bits, bs, "packed", False)
            b[...] = 0xFF
            z[...] = 0
            a = np.where(np.arange(m)[:, None] % 2 == 0, -1.0, 1.0) * np.ones((m, k))
            a = a.astype(np.float32)
            y = np.full((m, n), np.nan, np.float32)
            matmul_nbits(lib, a, b, s, y, k=k, n=n, bits=bits, block_size=bs, zero_points=z, accuracy_level=4).run()
            ref = nb.reference_int8_a(a, b, s, z, k=k, bits=bits, block_size=bs)
            assert _err(y, ref) <= TOL["f32"], (isa, bits, bs, m, _err(y, ref))
    lib.select_isa("auto")


def test_accuracy_4_rows_quantized_over_two_threads(lib):
    """24 x 4096 values of A: past the quantization's grain, so two threads quantize rows; N = 1 is
    one column block, run by one thread, so the pool's multi-thread region is the quantization's.
    The result matches the int8 reference on every path, f32 and bf16."""
    rng = np.random.default_rng(31)
    for dt in ("f32", "bf16"):
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            a, b, s, z, bi = _case(rng, dt, 24, 4096, 1, 4, 64, "packed", True)
            y = np.full((24, 1), np.nan, a.dtype)
            before = int(lib.lib.pb_pool_multi_regions())
            matmul_nbits(lib, a, b, s, y, k=4096, n=1, bits=4, block_size=64, zero_points=z, bias=bi, threads=2,
                         accuracy_level=4).run()
            assert int(lib.lib.pb_pool_multi_regions()) > before, isa
            assert _err(y, nb.reference_int8_a(a, b, s, z, bi, k=4096, bits=4, block_size=64)) <= TOL[dt], (dt, isa)
    lib.select_isa("auto")


@pytest.mark.parametrize(("acc", "m"), [(0, 1), (0, 5), (4, 5)])
def test_two_threads_and_rows_over_column_sub_blocks(lib, acc, m):
    """Past the grain, so both threads work; the row kernel (accuracy 0, M = 1) and accuracy 4's row
    tiles over every column sub-block (the L2 is set to 8 KiB: a sub-block of 16 columns of 256
    bytes of weights each); accuracy 0 at M = 5 runs the GEMM over dequantized panels, K in steps."""
    rng = np.random.default_rng(22)
    lib.check(lib.lib.pb_set_core_cache_bytes(4096, 8192), "set caches")
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            for bits, bs in ((4, 32), (2, 16)):  # 2-bit block 16: several blocks a vector at accuracy 0
                a, b, s, z, bi = _case(rng, "f32", m, 512, 300, bits, bs, "packed", True)
                y = np.full((m, 300), np.nan, np.float32)
                before = int(lib.lib.pb_pool_multi_regions())
                matmul_nbits(lib, a, b, s, y, k=512, n=300, bits=bits, block_size=bs, zero_points=z, bias=bi,
                             threads=2, accuracy_level=acc).run()
                assert int(lib.lib.pb_pool_multi_regions()) > before, isa
                assert _err(y, _ref(acc)(a, b, s, z, bi, k=512, bits=bits, block_size=bs)) <= TOL["f32"], (isa, bits)
    finally:
        lib._set_llc()
        lib.select_isa("auto")


@pytest.mark.parametrize("l2", [147456, 540672])
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_accuracy_0_gemm_over_dequantized_panels(lib, dt, l2):
    """M >= 3 at accuracy 0: matmul.c's blocked GEMM over panels of B dequantized per kc x NR. The L2
    is set so that kc is 72 or 264 on 16-lane paths (NR = 32 floats: l2 / 16 / 128; 144 and 528 on
    8-lane paths): at 72 a K step is fewer words than a vector (the element-by-element chunk), at
    264 it holds whole vectors of 16 words (transposed in registers) and then a short one, and
    at 2 bits K steps start inside a word; N = 16 and 8 fill half a panel, N = 70 ends in a short
    panel; M = 9 and 20 span register tiles (MR 6 or 8); K = 1000 ends inside a block."""
    rng = np.random.default_rng(29)
    lib.check(lib.lib.pb_set_core_cache_bytes(4096, l2), "set caches")
    shapes = [(9, 1000, 70, 4, 32), (5, 700, 16, 2, 16), (3, 520, 8, 8, 64), (20, 300, 33, 4, 128),
              (4, 2000, 40, 2, 64), (4, 600, 40, 8, 32)]
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            for (m, k, n, bits, bs), zp, bias in itertools.product(shapes, ("packed", "float", "none"), (False, True)):
                a, b, s, z, bi = _case(rng, dt, m, k, n, bits, bs, zp, bias)
                y = np.full((m, n), np.nan, a.dtype)
                matmul_nbits(lib, a, b, s, y, k=k, n=n, bits=bits, block_size=bs, zero_points=z, bias=bi).run()
                ref = nb.reference(a, b, s, z, bi, k=k, bits=bits, block_size=bs)
                assert _err(y, ref) <= TOL[dt], (isa, m, k, n, bits, bs, zp, bias, _err(y, ref))
    finally:
        lib._set_llc()
        lib.select_isa("auto")


def test_k_zero_gives_the_bias(lib):
    y = np.full((2, 3), np.nan, np.float32)
    bias = np.array([1.0, -2.0, 3.5], np.float32)
    matmul_nbits(lib, np.zeros((2, 0), np.float32), np.zeros((3, 0, 16), np.uint8), np.zeros((3, 0), np.float32), y,
                 k=0, n=3, bits=4, block_size=32, bias=bias).run()
    assert (y == bias).all()


def test_python_refuses_bad_arguments(lib):
    rng = np.random.default_rng(23)
    a, b, s, z, bi = _case(rng, "f32", 2, 64, 4, 4, 32, "packed", True)
    y = np.zeros((2, 4), np.float32)
    ok = dict(k=64, n=4, bits=4, block_size=32, zero_points=z, bias=bi)
    for bad, msg in ((dict(bits=3), "bits=3"), (dict(block_size=24), "block_size=24"), (dict(k=65), "a must be"),
                     (dict(n=5), "b must be uint8"), (dict(zero_points=z[:, :0]), "packed zero_points"),
                     (dict(bias=bi[:3]), "bias must be"), (dict(accuracy_level=3), "accuracy_level=3"),
                     (dict(k=512, block_size=512, accuracy_level=4), "at most 256")):
        with pytest.raises(UsageError, match=msg):
            matmul_nbits(lib, a, b, s, y, **{**ok, **bad})
    with pytest.raises(UsageError, match="y must be"):
        matmul_nbits(lib, a, b, s, np.zeros((2, 5), np.float32), **ok)
    with pytest.raises(UsageError, match="scales dtype"):
        matmul_nbits(lib, a, b, s.astype(np.float16), y, **ok)


def test_c_refuses_what_python_would(lib):
    rng = np.random.default_rng(24)
    a, b, s, z, bi = _case(rng, "f32", 2, 64, 4, 4, 32, "packed", False)
    y = np.zeros((2, 4), np.float32)
    for field, value, msg in (("bits", 3, "bits=3"), ("block_size", 48, "block_size=48"), ("zp_packed", 2, "zp_packed=2"),
                              ("m", -1, "must be >= 0"), ("accuracy_level", 2, "accuracy_level=2")):
        call = matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z)
        setattr(call.args, field, value)
        with pytest.raises(NativeError, match=msg):
            call.run()
    call = matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, accuracy_level=4)
    call.args.block_size = 512  # with k = 64: one block (int32 sums of 2^17-value blocks would overflow)
    with pytest.raises(NativeError, match="at most 256"):
        call.run()
    call = matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z)
    call.args.y = call.args.a  # Y over A
    with pytest.raises(NativeError, match="overlaps"):
        call.run()


@pytest.mark.parametrize(("m", "bits"), [(1, 4), (1, 2), (1, 8), (16, 4), (16, 2), (16, 8)])
def test_error_stays_at_the_f32_floor_at_k_4096(lib, m, bits):
    """The suite's data (the op's make_inputs) at M x 4096 x 512: within 1.2e-6 of float64
    (relative to 1 + |Y|; ORT's f32 path measured 7.7e-7 to 9.1e-7 at 16 and 128 x 4096 x 4096).
    M = 1 runs the row kernel, M = 16 the GEMM over dequantized panels. With the zero point folded
    in after the product (scale x zp x the block's x sum) the row kernel's cancellation gave 1.7e-6
    here (2.4e-6 at N = 4096 in the suite); the GEMM's tiles summing 512 k in registers before
    adding to Y gave 1.66e-6 and 1.86e-6 at 2 and 8 bits in the suite (ORT 7.7e-7 and 8.7e-7)."""
    from perfbench.ops.base import get

    op = get("MatMulNBits")
    case = op.make_case({"m": m, "k": 4096, "n": 512, "bits": bits}, "test")
    x = op.make_inputs(case, dtypes.get("f32"), np.random.default_rng(25))
    ref = nb.reference(x["A"], x["B"], x["scales"], x["zero_points"], k=4096, bits=bits, block_size=32)
    # M = 1 on every path: the row kernel's lookup form (AVX-512 4 bits, AVX2 and portable 2 bits)
    # and its field form
    for isa in isas_to_test(lib) if m == 1 else ["auto"]:
        lib.select_isa(isa)
        y = np.empty((m, 512), np.float32)
        matmul_nbits(lib, x["A"], x["B"], x["scales"], y, k=4096, n=512, bits=bits, block_size=32,
                     zero_points=x["zero_points"]).run()
        assert _err(y, ref) <= 1.2e-6, (isa, _err(y, ref))
    lib.select_isa("auto")


def _garbage_padding(rng, b, z, k, bits, bs):
    """B's bits past K in the last block and the packed zero points' unused fields set at random
    (a real model may hold anything there)."""
    n, kb, blob = b.shape
    q = nb.unpack_bits(b.reshape(n, -1), bits, kb * bs)
    q[:, k:] = rng.integers(0, 1 << bits, size=(n, kb * bs - k))
    b = nb.pack_bits(q, bits).reshape(n, kb, blob)
    per = 8 // bits
    zq = nb.unpack_bits(z, bits, z.shape[1] * per)
    zq[:, kb:] = rng.integers(0, 1 << bits, size=(n, zq.shape[1] - kb))
    return b, nb.pack_bits(zq, bits)


@pytest.mark.parametrize("acc", [0, 4])
def test_padding_bits_are_ignored(lib, acc):
    rng = np.random.default_rng(26)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        # (2, 300, 9, 2, 16) and (1, 270, 3, 4, 16): several blocks a vector whose last packed zero
        # points are read a vector's worth at a time from before the column's end (padding fields included)
        for m, k, n, bits, bs in ((2, 200, 9, 4, 16), (1, 100, 5, 2, 32), (3, 70, 6, 8, 32), (2, 300, 9, 2, 16),
                                  (1, 270, 3, 4, 16)):
            a, b, s, z, _ = _case(rng, "f32", m, k, n, bits, bs, "packed", False)
            b, z = _garbage_padding(rng, b, z, k, bits, bs)
            y = np.full((m, n), np.nan, np.float32)
            matmul_nbits(lib, a, b, s, y, k=k, n=n, bits=bits, block_size=bs, zero_points=z, accuracy_level=acc).run()
            assert _err(y, _ref(acc)(a, b, s, z, k=k, bits=bits, block_size=bs)) <= TOL["f32"], (isa, bits, bs)
    lib.select_isa("auto")


def test_accuracy_4_with_b_packed_once_gives_the_same_bytes(lib):
    """pack_b's regrouping (made once, as ORT prepacks a constant weight) and the call's own
    regrouping give identical Y on every path; 17 blocks: a group of 16 and one past it."""
    from perfbench.kernels_ffi.matmul_nbits import pack_b

    rng = np.random.default_rng(29)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for m, k, n, bits, bs in ((5, 17 * 32, 6, 4, 32), (1, 300, 3, 8, 16), (2, 1024, 4, 2, 256)):
            a, b, s, z, bi = _case(rng, "f32", m, k, n, bits, bs, "packed", True)
            y1, y2 = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
            kw = dict(k=k, n=n, bits=bits, block_size=bs, zero_points=z, bias=bi, accuracy_level=4)
            matmul_nbits(lib, a, b, s, y1, **kw).run()
            matmul_nbits(lib, a, b, s, y2, packed_b=pack_b(lib, b, n=n, k=k, bits=bits, block_size=bs, zero_points=z),
                         **kw).run()
            assert y1.tobytes() == y2.tobytes(), (isa, bits, bs)
            assert _err(y2, nb.reference_int8_a(a, b, s, z, bi, k=k, bits=bits, block_size=bs)) <= TOL["f32"]
    lib.select_isa("auto")
    a, b, s, z, _ = _case(rng, "f32", 1, 64, 4, 4, 32, "packed", False)
    y = np.zeros((1, 4), np.float32)
    pb = pack_b(lib, b, n=4, k=64, bits=4, block_size=32)
    with pytest.raises(UsageError, match="packed_b is for accuracy_level 4"):
        matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, packed_b=pb)
    with pytest.raises(UsageError, match="pack_b's result"):  # another b of the same shape
        matmul_nbits(lib, a, b.copy(), s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, packed_b=pb,
                     accuracy_level=4)
    b2 = np.zeros((4, 1, 16), np.uint8)  # 2 bits, block 64: as many packed bytes as 4 bits, block 32
    with pytest.raises(UsageError, match="pack_b's result"):
        matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, accuracy_level=4,
                     packed_b=dataclasses.replace(pack_b(lib, b2, n=4, k=64, bits=2, block_size=64), source=b))
    with pytest.raises(NativeError, match="block_size=512"):
        pack_b(lib, np.zeros((4, 1, 256), np.uint8), n=4, k=64, bits=4, block_size=512)
    # the call reads the packed copy's zero points: B packed without them (or with other ones) is refused
    with pytest.raises(UsageError, match="packed without these packed zero_points"):
        matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, packed_b=pb, accuracy_level=4)
    with pytest.raises(UsageError, match="packed without these packed zero_points"):
        matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, accuracy_level=4,
                     packed_b=pack_b(lib, b, n=4, k=64, bits=4, block_size=32, zero_points=z.copy()))
    with pytest.raises(UsageError, match="zero_points must be the packed ones"):
        pack_b(lib, b, n=4, k=64, bits=4, block_size=32, zero_points=z.astype(np.float32))
    call = matmul_nbits(lib, a, b, s, y, k=64, n=4, bits=4, block_size=32, zero_points=z, accuracy_level=4,
                        packed_b=pack_b(lib, b, n=4, k=64, bits=4, block_size=32, zero_points=z))
    call.args.b_packed = lib.ptr(pb.buf)  # C: the same bytes of B, no zero points
    with pytest.raises(NativeError, match="packed without zero points"):
        call.run()
    bogus = np.zeros_like(pb.buf)
    call.args.b_packed = lib.ptr(bogus)
    with pytest.raises(NativeError, match="not pb_matmul_nbits_pack_b's output"):
        call.run()
    other = pack_b(lib, b2, n=4, k=64, bits=2, block_size=64)  # as many bytes, packed for another problem
    assert other.buf.size == pb.buf.size
    call.args.b_packed = lib.ptr(other.buf)
    with pytest.raises(NativeError, match="not pb_matmul_nbits_pack_b's output"):
        call.run()
    # B packed with its zero points serves calls without them or with float ones (they are not read)
    withzp = pack_b(lib, b, n=4, k=64, bits=4, block_size=32, zero_points=z)
    zf = rng.integers(0, 16, (4, 2)).astype(np.float32)
    for zc in (None, zf):
        y3 = np.full((1, 4), np.nan, np.float32)
        matmul_nbits(lib, a, b, s, y3, k=64, n=4, bits=4, block_size=32, zero_points=zc, packed_b=withzp,
                     accuracy_level=4).run()
        assert _err(y3, nb.reference_int8_a(a, b, s, zc, k=64, bits=4, block_size=32)) <= TOL["f32"]
    empty = pack_b(lib, np.zeros((0, 2, 16), np.uint8), n=0, k=64, bits=4, block_size=32)  # n = 0: the trailer alone
    assert empty.buf.size == 64


def test_accuracy_4_tiles_of_rows_run_k_in_chunks_when_the_l1_is_small(lib):
    """An L1d of 4 KiB: a tile of 4 rows then runs K in chunks of one group of 16 blocks (35 blocks:
    16 + 16 + 3), over blocks of 64 columns (70 columns: 64 + 6); M = 6 = a tile of 4 and 2 rows
    alone. Same Y as the reference on every path."""
    rng = np.random.default_rng(30)
    lib.check(lib.lib.pb_set_core_cache_bytes(4096, 0), "set caches")
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            a, b, s, z, bi = _case(rng, "f32", 6, 1100, 70, 4, 32, "packed", True)
            y = np.full((6, 70), np.nan, np.float32)
            matmul_nbits(lib, a, b, s, y, k=1100, n=70, bits=4, block_size=32, zero_points=z, bias=bi,
                         accuracy_level=4).run()
            assert _err(y, nb.reference_int8_a(a, b, s, z, bi, k=1100, bits=4, block_size=32)) <= TOL["f32"], isa
    finally:
        lib._set_llc()
        lib.select_isa("auto")


@pytest.mark.parametrize("llc", [3, 0])
def test_accuracy_4_one_row_two_or_four_columns_at_a_time(lib, llc):
    """One row takes four columns at a time where the weights stay in the last-level cache, two where
    they would stream (nb_wide): an LLC of 3 bytes makes every weight set stream, so the two-column
    form runs; 0 restores the default (32 MiB: the four-column form). n = 7 (4 + 2 + 1, or 2 + 2 + 2
    + 1) at 2 and 4 bits, n = 5 at 8 bits (always two); f32 with packed zero points, and 4 bits at
    block 32 in every dtype and zero-point form. Same Y as the reference on every path."""
    rng = np.random.default_rng(31)
    cases = [(1000, 7, 4, 32, dt, zp) for dt in ("f32", "f16", "bf16") for zp in ("packed", "float", "none")]
    cases += [(512, 7, 4, 128, "f32", "packed"), (600, 7, 2, 16, "f32", "packed"), (512, 5, 8, 64, "f32", "packed")]
    lib.check(lib.lib.pb_set_llc_bytes(llc), "set the LLC")
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            for k, n, bits, bs, dt, zp in cases:
                a, b, s, z, bi = _case(rng, dt, 1, k, n, bits, bs, zp, True)
                y = np.full((1, n), np.nan, a.dtype)
                matmul_nbits(lib, a, b, s, y, k=k, n=n, bits=bits, block_size=bs, zero_points=z, bias=bi,
                             accuracy_level=4).run()
                ref = nb.reference_int8_a(a, b, s, z, bi, k=k, bits=bits, block_size=bs)
                assert _err(y, ref) <= TOL[dt], (isa, k, n, bits, bs, dt, zp, _err(y, ref))
    finally:
        lib._set_llc()
        lib.select_isa("auto")
