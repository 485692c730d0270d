"""pb_matmul / pb_matmul_pack_b (issue 18) against a float64 product, on every ISA path this CPU
runs, in f32, f16 and bf16: transposes, alpha/beta/C broadcast, batch broadcasting, K past one
cache block (small cache sizes force the blocking on tiny shapes), M = 1 (the GEMV path), k = 0,
B packed once outside the call; and the bad arguments C refuses with a status."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from perfbench import dtypes
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import matmul as mm
from tests.conftest import isas_to_test

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}  # relative to 1 + |Y| per element; sums in f32, Y rounded


@pytest.fixture()
def small_caches(lib):
    """L1d 4 KiB and L2 8 KiB: kc = 64 and mc = 16 rows (12 on the 6-row paths; 32 on the bf16
    pair paths, whose panels take half the bytes), so K = 150 takes 3 K steps, M = 29 two row
    blocks (three; one for bf16 pairs) and M = 40 three (four; two for bf16 pairs); restored
    after."""
    lib.check(lib.lib.pb_set_core_cache_bytes(4096, 8192), "set caches")
    yield lib
    lib._set_llc()
    lib.select_isa("auto")


def _ref(A, B, ta, tb, alpha, beta, C):
    a, b = A.astype(np.float64), B.astype(np.float64)
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    y = alpha * (a @ b)
    return y + beta * C.astype(np.float64) if C is not None else y


def _err(Y, ref):
    return float(np.max(np.abs(Y.astype(np.float64) - ref) / (1 + np.abs(ref)))) if Y.size else 0.0


# (23 and 14 rows, K = 150: the 7- and 6-row tiles of the 8-row paths over several K steps; 40
# rows: more than one row block on the bf16 pair paths too)
SHAPES = [(1, 33, 17), (1, 150, 70), (3, 33, 5), (29, 150, 70), (6, 64, 64), (7, 5, 1), (23, 150, 70), (14, 150, 70),
          (40, 150, 70)]


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_matmul_matches_float64_on_every_path(small_caches, dt):
    lib = small_caches
    rng = np.random.default_rng(5)
    d = dtypes.get(dt)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for (m, k, n), ta, tb, packed, threads in itertools.product(SHAPES, (0, 1), (0, 1), (0, 1), (1, 2)):
            A = rng.standard_normal((k, m) if ta else (m, k)).astype(d.numpy)
            B = rng.standard_normal((n, k) if tb else (k, n)).astype(d.numpy)
            C = rng.standard_normal((n,)).astype(d.numpy)
            Y = np.full((m, n), np.nan, d.numpy)
            pk = mm.pack_b(lib, B, trans_b=bool(tb), threads=threads) if packed else None
            mm.matmul(lib, A, B, Y, trans_a=bool(ta), trans_b=bool(tb), alpha=0.5, beta=-1.5, c=C, packed=pk,
                      threads=threads).run()
            err = _err(Y, _ref(A, B, ta, tb, 0.5, -1.5, C))
            assert err <= TOL[dt], (isa, m, k, n, ta, tb, packed, threads, err)


def test_two_threads_split_the_blocked_path_and_the_m1_path(small_caches):
    """Shapes past the grain, so both threads work: items over row blocks and panel groups across
    K steps (f16: sums in scratch between them), the M = 1 path over column chunks, B's packing."""
    lib = small_caches
    rng = np.random.default_rng(8)
    for dt, (m, k, n) in itertools.product(("f32", "f16"), ((12, 700, 140), (1, 700, 3000))):
        d = dtypes.get(dt)
        A = rng.standard_normal((m, k)).astype(d.numpy)
        B = rng.standard_normal((k, n)).astype(d.numpy)
        for packed in (None, mm.pack_b(lib, B, threads=2)):
            Y = np.full((m, n), np.nan, d.numpy)
            before = int(lib.lib.pb_pool_multi_regions())
            mm.matmul(lib, A, B, Y, packed=packed, threads=2).run()
            assert int(lib.lib.pb_pool_multi_regions()) > before, (dt, m, k, n, packed is not None)
            assert _err(Y, _ref(A, B, 0, 0, 1.0, 0.0, None)) <= TOL[dt], (dt, m, k, n)


def test_batch_broadcasting_and_c_forms(small_caches):
    lib = small_caches
    rng = np.random.default_rng(6)
    A = rng.standard_normal((2, 1, 13, 70)).astype(np.float32)
    B = rng.standard_normal((3, 70, 9)).astype(np.float32)
    Y = np.full((2, 3, 13, 9), np.nan, np.float32)
    mm.matmul(lib, A, B, Y, threads=2).run()
    np.testing.assert_allclose(Y, A @ B, rtol=1e-5, atol=1e-4)
    A2, B2 = rng.standard_normal((13, 70)).astype(np.float32), rng.standard_normal((70, 9)).astype(np.float32)
    for C in (np.float32(3.0) * np.ones((1,), np.float32), rng.standard_normal((13, 1)).astype(np.float32),
              rng.standard_normal((13, 9)).astype(np.float32), rng.standard_normal((1, 9)).astype(np.float32)):
        Y2 = np.empty((13, 9), np.float32)
        mm.matmul(lib, A2, B2, Y2, alpha=2.0, beta=0.25, c=C).run()
        np.testing.assert_allclose(Y2, 2.0 * (A2 @ B2) + 0.25 * C, rtol=1e-5, atol=1e-4)
    # beta 0 ignores C, NaN included (Gemm)
    Y2 = np.empty((13, 9), np.float32)
    mm.matmul(lib, A2, B2, Y2, beta=0.0, c=np.full((13, 9), np.nan, np.float32)).run()
    assert np.isfinite(Y2).all()


def test_k_zero_gives_beta_times_c_and_empty_outputs_are_fine(lib):
    A, B = np.zeros((4, 0), np.float32), np.zeros((0, 3), np.float32)
    C = np.arange(3, dtype=np.float32)
    Y = np.full((4, 3), np.nan, np.float32)
    mm.matmul(lib, A, B, Y, beta=2.0, c=C).run()
    assert np.array_equal(Y, np.tile(2.0 * C, (4, 1)))
    mm.matmul(lib, A, B, Y).run()
    assert np.array_equal(Y, np.zeros((4, 3), np.float32))
    mm.matmul(lib, np.zeros((0, 5), np.float32), np.zeros((5, 3), np.float32), np.zeros((0, 3), np.float32)).run()


def test_python_refuses_bad_arguments(lib):
    f = np.zeros((4, 5), np.float32)
    with pytest.raises(UsageError, match="inner dimensions differ"):
        mm.matmul(lib, f, np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(UsageError, match=r"y must have shape \(4, 3\)"):
        mm.matmul(lib, f, np.zeros((5, 3), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(UsageError, match="do not broadcast"):
        mm.matmul(lib, np.zeros((2, 4, 5), np.float32), np.zeros((3, 5, 3), np.float32), np.zeros((2, 4, 3), np.float32))
    with pytest.raises(UsageError, match="c of shape"):
        mm.matmul(lib, f, np.zeros((5, 3), np.float32), np.zeros((4, 3), np.float32), c=np.zeros((2, 3), np.float32))
    with pytest.raises(UsageError, match="alpha"):
        mm.matmul(lib, f, np.zeros((5, 3), np.float32), np.zeros((4, 3), np.float32), alpha=float("inf"))
    y = np.zeros((4, 5), np.float32)
    with pytest.raises(UsageError, match="overlaps"):
        mm.matmul(lib, y, np.zeros((5, 5), np.float32), y)
    b = np.zeros((5, 3), np.float32)
    with pytest.raises(UsageError, match="pack_b's result"):
        mm.matmul(lib, f, b, np.zeros((4, 3), np.float32), packed=mm.pack_b(lib, b.copy()))
    with pytest.raises(UsageError, match="dtype"):
        mm.matmul(lib, f, b.astype(np.float16), np.zeros((4, 3), np.float32))


def test_c_refuses_what_python_would_and_a_packed_b_of_another_problem(lib):
    """The args struct filled by hand past the wrapper: C returns a status, nothing crashes."""
    b = np.ones((5, 3), np.float32)
    call = mm.matmul(lib, np.ones((4, 5), np.float32), b, np.zeros((4, 3), np.float32))
    for field, value, msg in (("m", -1, "must be >= 0"), ("batch_rank", 9, "batch_rank"), ("trans_a", 2, "trans_a"),
                              ("alpha", float("nan"), "finite")):
        old = getattr(call.args, field)
        setattr(call.args, field, value)
        with pytest.raises(NativeError, match=msg):
            call.run()
        setattr(call.args, field, old)
    other = mm.pack_b(lib, np.ones((5, 4), np.float32))  # n = 4: not this problem's B
    call.args.b_packed = lib.ptr(other.buf)
    with pytest.raises(NativeError, match="b_packed was not packed for this problem"):
        call.run()



@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_m1_reading_b_where_it_lies_still_checks_the_packed_b(lib, dt):
    """M = 1 in f16 (and bf16 without pairs), and f32 with B's rows within the L2, reads B itself
    even when a packed B is given: the packed B is checked all the same, and a packed B of another
    problem is refused as at M > 1."""
    npdt = dtypes.get(dt).numpy
    b = np.ones((5, 3), np.float32).astype(npdt)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        y = np.zeros((1, 3), npdt)
        mm.matmul(lib, np.ones((1, 5), npdt), b, y, packed=mm.pack_b(lib, b)).run()
        assert np.array_equal(y.astype(np.float32), np.full((1, 3), 5, np.float32)), isa
        call = mm.matmul(lib, np.ones((1, 5), npdt), b, np.zeros((1, 3), npdt))
        other = mm.pack_b(lib, np.ones((5, 4), np.float32).astype(npdt))
        call.args.b_packed = lib.ptr(other.buf)
        with pytest.raises(NativeError, match="b_packed was not packed for this problem"):
            call.run()
    lib.select_isa("auto")


def test_a_packed_b_of_another_layout_is_refused(lib):
    """The header's layout field (bf16 pairs or f32 panels) is checked: flipped, the call fails."""
    bf = dtypes.get("bf16").numpy
    b = np.ones((5, 3), np.float32).astype(bf)
    pk = mm.pack_b(lib, b)
    mm.matmul(lib, np.ones((2, 5), bf), b, np.zeros((2, 3), bf), packed=pk).run()
    pk.buf.view(np.int32)[6] ^= 1  # mm_header.pairs
    with pytest.raises(NativeError, match="b_packed was not packed for this problem"):
        mm.matmul(lib, np.ones((2, 5), bf), b, np.zeros((2, 3), bf), packed=pk).run()


def test_kc_makes_a_b_panel_a_sixteenth_of_the_l2_or_half_the_l1d_in_bytes(lib):
    """The packed header's kc (int32 word 4; NR word 3, bf16 pairs word 6) follows the caches the
    library is given: one B panel (kc x NR, 4 bytes per k and column, 2 for bf16 pairs) is a
    sixteenth of the L2, or half the L1d where that is more, a multiple of 8 in [64, 1024], and K
    where K is less."""
    bf = dtypes.get("bf16").numpy
    try:
        for isa in isas_to_test(lib):
            lib.select_isa(isa)
            for (l1, l2), dt in itertools.product(((32768, 1 << 20), (49152, 1 << 18), (4096, 8192), (4096, 300000)),
                                                  (np.float32, bf)):
                lib.check(lib.lib.pb_set_core_cache_bytes(l1, l2), "set caches")
                words = mm.pack_b(lib, np.ones((4096, 40), dt)).buf.view(np.int32)
                assert bool(words[6]) == (dt is bf and isa in ("avx512", "portable16")), isa  # bf16 pairs
                nr, kc, kb = int(words[3]), int(words[4]), 2 if words[6] else 4
                want = max(l1 // 2 // (nr * kb), l2 // 16 // (nr * kb))
                assert kc == min(1024, max(64, want // 8 * 8)), (isa, l1, l2, dt, nr, kb)
                if (isa, l1, l2, dt) == ("portable16", 32768, 1 << 20, np.float32):
                    assert (nr, kc) == (32, 512)  # the Zen 4's AVX-512 shape: the L2 decides
                if (isa, l1, l2, dt) == ("portable16", 32768, 1 << 20, bf):
                    assert kc == 1024  # pairs: 2 bytes per k and column
                if (isa, l1, l2, dt) == ("portable16", 49152, 1 << 18, np.float32):
                    assert kc == 192  # half a 48 KiB L1d beats a sixteenth of a 256 KiB L2
                if (isa, l1, l2, dt) == ("portable16", 4096, 300000, np.float32):
                    assert kc == 144  # 146 rounded down to a multiple of 8 (pairs' K steps stay even)
                assert mm.pack_b(lib, np.ones((100, 40), dt)).buf.view(np.int32)[4] == min(kc, 100)
    finally:
        lib._set_llc()
        lib.select_isa("auto")


def _y_with_b_doubled_after_packing(lib, A, B, tb=False):
    """(Y, Y before): Y from a packed B whose source B was doubled in place after packing, so Y
    equals 2 * before where the call read B itself and before where it read the packed panels."""
    before = _ref(A, B, 0, tb, 1.0, 0.0, None)
    pk = mm.pack_b(lib, B, trans_b=tb)
    B *= 2  # in place: the packed panels still hold the old values
    Y = np.zeros(before.shape, A.dtype)
    mm.matmul(lib, A, B, Y, trans_b=tb, packed=pk).run()
    return Y, before


def test_m1_reads_b_itself_where_the_packed_panels_are_larger_or_rows_stream(lib):
    """B changed after packing shows which one M = 1 read: f16 (and bf16 where panels are f32, not
    pairs) read B itself, as does f32 with B's rows in order (not transB) where B fits the L2 (11 KiB
    here); f32 transB and bf16 pairs read the packed panels."""
    rng = np.random.default_rng(8)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for dt, tb in itertools.product(("f32", "f16", "bf16"), (False, True)):
            npdt = dtypes.get(dt).numpy
            A = rng.standard_normal((1, 40)).astype(npdt)
            B = rng.standard_normal((70, 40) if tb else (40, 70)).astype(npdt)
            Y, before = _y_with_b_doubled_after_packing(lib, A, B, tb)
            pairs = dt == "bf16" and isa not in ("avx2", "portable")
            reads_b = dt == "f16" or (dt == "bf16" and not pairs) or (dt == "f32" and not tb)
            want = 2 * before if reads_b else before
            assert _err(Y, want) <= TOL[dt], (isa, dt, tb, reads_b)
    lib.select_isa("auto")


def test_m1_f32_reads_the_packed_panels_where_b_is_larger_than_the_l2(small_caches):
    """With an 8 KiB L2 (small_caches) the same 11 KiB f32 B is read from its packed panels."""
    rng = np.random.default_rng(8)
    for isa in isas_to_test(small_caches):
        small_caches.select_isa(isa)
        A = rng.standard_normal((1, 40)).astype(np.float32)
        B = rng.standard_normal((40, 70)).astype(np.float32)
        Y, before = _y_with_b_doubled_after_packing(small_caches, A, B)
        assert _err(Y, before) <= TOL["f32"], isa
    small_caches.select_isa("auto")


def test_m1_f32_batched_a_with_one_packed_b_at_the_l2_boundary(small_caches):
    """A batch of M = 1 rows (A (3, 1, K)) with one packed f32 B and an 8 KiB L2: B of exactly 8 KiB
    (K = 32, N = 64) is read where it lies, every batch at its own A offset; 33 x 64 (8.25 KiB) reads
    the panels."""
    rng = np.random.default_rng(13)
    for isa in isas_to_test(small_caches):
        small_caches.select_isa(isa)
        for k, reads_b in ((32, True), (33, False)):
            A = rng.standard_normal((3, 1, k)).astype(np.float32)
            B = rng.standard_normal((k, 64)).astype(np.float32)
            Y, before = _y_with_b_doubled_after_packing(small_caches, A, B)
            assert _err(Y, 2 * before if reads_b else before) <= TOL["f32"], (isa, k)
    small_caches.select_isa("auto")


def _cancelling_columns(rng, n, k, npdt):
    """(N, K) columns whose entries are +-2048 at random places (as many each way: they cancel
    exactly) and small values elsewhere: the f32 partial sums reach ~1e4 while the result is ~0.1,
    so a different summation order shows in the f16/bf16 output bits (with random data the
    output's rounding hides it)."""
    cols = np.empty((n, k), np.float32)
    for j in range(n):
        big = rng.permutation(k)[: k // 2 // 2 * 2]
        cols[j] = rng.uniform(0.001, 0.01, k)
        cols[j, big] = np.where(np.arange(big.size) % 2 == 0, 2048.0, -2048.0)
    return cols.astype(npdt)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_m1_trans_b_four_columns_at_a_time_keep_each_columns_sum_bit_for_bit(lib, dt):
    """M = 1 with B's columns contiguous (transB) runs four columns at a time in f16/bf16: each
    column's result has the bits it has alone (N = 1: one column at a time), for N mod 4 = 0..3,
    N < 4, K shorter than two vectors (no vector step) and with vector and scalar tails; C a row
    (Gemm's bias) and a scalar. Random data is checked against float64, cancelling data bit for bit
    (seen failing with the four-column tail summed in reverse). On AVX-512 and portable16 bf16
    takes the pairs' blocked path only with a packed B; none is given here."""
    npdt = dtypes.get(dt).numpy
    rng = np.random.default_rng(12)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for k, n in ((150, 7), (34, 3), (6, 11), (70, 4), (64, 9), (98, 6)):
            A = rng.standard_normal((1, k)).astype(npdt)
            Bt = rng.standard_normal((n, k)).astype(npdt)  # (N, K): trans_b
            C = rng.standard_normal((1, n)).astype(npdt)
            Y = np.zeros((1, n), npdt)
            mm.matmul(lib, A, Bt, Y, trans_b=True, alpha=0.5, beta=-1.5, c=C).run()
            assert _err(Y, _ref(A, Bt, 0, 1, 0.5, -1.5, C)) <= TOL[dt], (isa, k, n)
            ones, Bc = np.ones((1, k), npdt), _cancelling_columns(rng, n, k, npdt)
            for C in (rng.standard_normal((1, n)).astype(npdt), np.full((1,), 0.25, npdt)):
                Y = np.zeros((1, n), npdt)
                mm.matmul(lib, ones, Bc, Y, trans_b=True, alpha=0.5, beta=-1.5, c=C).run()
                for j in range(n):
                    yj = np.zeros((1, 1), npdt)
                    cj = C[:, j:j + 1] if C.ndim == 2 else C
                    mm.matmul(lib, ones, np.ascontiguousarray(Bc[j:j + 1]), yj, trans_b=True, alpha=0.5, beta=-1.5,
                              c=cj).run()
                    assert Y[:, j].view(np.uint16) == yj[:, 0].view(np.uint16), (isa, k, n, j, C.shape)
    lib.select_isa("auto")


def test_a_last_row_block_of_one_row_takes_the_row_kernel_at_its_offset(small_caches):
    """f32 rows whose k values are contiguous run one at a time through matmul_row (A read where it
    lies, no A panel) wherever an item's row block is a single row: M = 1, and here M = 17 (blocks
    of 16 + 1 on the 8-row paths) and 13 (12 + 1 on the 6-row paths), so the row's offsets into A,
    Y and a full C are not 0; K = 150 and 700 take three and eleven K steps; B packed or not,
    transB or not; C full, a column, a row, and all NaN with beta 0 (ignored); 1 thread and 2 (the
    shapes are past the grain: a parallel region is asserted, so panel groups split across the
    threads). transA (rows not contiguous beyond M = 1) packs its one row as before."""
    lib = small_caches
    rng = np.random.default_rng(14)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for (m, k), ta, tb, packed, threads in itertools.product(((17, 150), (13, 150), (1, 700)), (0, 1), (0, 1),
                                                                 (0, 1), (1, 2)):
            n = 1100
            A = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
            B = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
            pk = mm.pack_b(lib, B, trans_b=bool(tb)) if packed else None
            for C, beta in ((rng.standard_normal((m, n)), -1.5), (rng.standard_normal((m, 1)), -1.5),
                            (rng.standard_normal((n,)), -1.5), (np.full((m, n), np.nan), 0.0)):
                C = C.astype(np.float32)
                Y = np.full((m, n), np.nan, np.float32)
                before = int(lib.lib.pb_pool_multi_regions())
                mm.matmul(lib, A, B, Y, trans_a=bool(ta), trans_b=bool(tb), alpha=0.5, beta=beta, c=C, packed=pk,
                          threads=threads).run()
                where = (isa, m, k, ta, tb, packed, threads, C.shape, beta)
                assert (int(lib.lib.pb_pool_multi_regions()) > before) == (threads == 2), where
                ref = _ref(A, B, ta, tb, 0.5, beta, C if beta != 0.0 else None)
                assert _err(Y, ref) <= TOL["f32"], where
    lib.select_isa("auto")


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_full_and_column_c_on_every_path(lib, dt):
    """Gemm's C as a full (M, N) matrix and as a column (M, 1), with full column panels on every
    path (N = 70: 2 x 32 + 6 on AVX-512, 4 x 16 + 6 on AVX2) and M = 13 (tiles of 8 + 5, 6 + 6 + 1)."""
    npdt = dtypes.get(dt).numpy
    rng = np.random.default_rng(9)
    A = rng.standard_normal((13, 50)).astype(npdt)
    B = rng.standard_normal((50, 70)).astype(npdt)
    for isa in isas_to_test(lib):
        lib.select_isa(isa)
        for C in (rng.standard_normal((13, 70)).astype(npdt), rng.standard_normal((13, 1)).astype(npdt)):
            Y = np.full((13, 70), np.nan, npdt)
            mm.matmul(lib, A, B, Y, alpha=0.5, beta=-1.5, c=C).run()
            assert _err(Y, _ref(A, B, 0, 0, 0.5, -1.5, C)) <= TOL[dt], (isa, C.shape)
    lib.select_isa("auto")


def test_bf16_pairs_flush_a_denormal_input_and_a_denormal_sum(lib):
    """On every path that multiplies bf16 pairs (portable16 everywhere, AVX-512 where it runs), a
    denormal input counts as 0 (2^-130 x 2^60: 0, not 2^-70) and a denormal sum is flushed (two
    products of 2^-127 in a pair: the first sum 2^-127 flushes, then the second: 0, not 2^-126)."""
    bf = dtypes.get("bf16").numpy
    A = np.zeros((2, 2), np.float32)
    B = np.zeros((2, 2), np.float32)
    A[0, 0], B[0, 0] = 2.0**-130, 2.0**60
    A[1, :], B[:, 1] = 2.0**-64, 2.0**-63
    A, B = A.astype(bf), B.astype(bf)
    assert float(A[0, 0].astype(np.float32)) == 2.0**-130  # bf16 holds the denormal exactly
    pair_paths = [i for i in isas_to_test(lib) if i in ("avx512", "portable16")]
    assert "portable16" in pair_paths
    for isa in pair_paths:
        lib.select_isa(isa)
        Y = np.full((2, 2), np.nan, bf)
        mm.matmul(lib, A, B, Y).run()
        y = Y.astype(np.float32)
        assert y[0, 0] == 0.0 and y[1, 1] == 0.0, (isa, y)
        assert y[1, 0] == np.float32(2.0**-4), (isa, y)
    lib.select_isa("auto")


def test_bf16_pairs_flush_denormals_as_the_instruction_does(lib):
    """Where the AVX-512 path runs (vdpbf16ps), the portable16 emulation gives the same bits with
    products, sums and inputs in f32's denormal range (DAZ on inputs, FTZ on each sum), and the
    flushing shows: Y differs from the same sums kept without flushing."""
    if "avx512" not in isas_to_test(lib):
        pytest.skip("the AVX-512 path cannot run on this CPU: the instruction is compared where it can")
    rng = np.random.default_rng(12)
    bf = dtypes.get("bf16").numpy
    m, k, n = 9, 40, 70
    def tiny(shape):  # magnitudes 2^-75 .. 2^-52: products 2^-150 .. 2^-104, around f32's 2^-126
        return (rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-75, -52, shape))).astype(np.float32)
    A, B = tiny((m, k)).astype(bf), tiny((k, n)).astype(bf)
    A[0, :4] = np.float32(2.0**-130)  # denormal inputs
    out = {}
    for isa in ("avx512", "portable16"):
        lib.select_isa(isa)
        Y = np.full((m, n), np.nan, bf)
        mm.matmul(lib, A, B, Y).run()
        out[isa] = Y.view(np.uint16).copy()
    lib.select_isa("auto")
    assert np.array_equal(out["avx512"], out["portable16"])
    unflushed = _pair_dot_reference(A, B, 10**6, 1.0).view(np.uint16)
    assert not np.array_equal(out["avx512"], unflushed)

def _pair_dot_reference(A, B, kc, alpha):
    """bf16 Y of the pair path, computed here: per K step of kc (sums from zero, then added to the
    steps before), per k pair the odd product added first, then the even, each sum rounded to f32
    (products of bf16 are exact in f64; normal values only, so no flushing). Y = bf16(alpha * sum)."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    m, k = a.shape
    total = None
    for p0 in range(0, k, kc):
        kk = min(kc, k - p0)
        s = np.zeros((m, b.shape[1]), np.float32)
        for w in range(0, kk, 2):
            if w + 1 < kk:  # odd k of the pair first (vdpbf16ps's order); a padded odd k adds 0
                s = (s + np.outer(a[:, p0 + w + 1], b[p0 + w + 1])).astype(np.float32)
            s = (s + np.outer(a[:, p0 + w], b[p0 + w])).astype(np.float32)
        total = s if total is None else (total + s).astype(np.float32)
    return (np.float32(alpha) * total).astype(dtypes.get("bf16").numpy)


def test_bf16_pair_path_is_the_dot_instructions_sum_order_bit_for_bit(small_caches):
    """Where a path multiplies bf16 pairs (AVX-512 with vdpbf16ps, portable16 emulating it), Y is
    that instruction's sum order exactly: odd k before even, each sum rounded, K steps of kc = 64
    added in order (K = 151: an odd last step, its last pair padded). Computed here in numpy, so
    the emulation is checked on any CPU and the instruction where the AVX-512 path runs."""
    lib = small_caches
    rng = np.random.default_rng(11)
    bf = dtypes.get("bf16").numpy
    pair_paths = [i for i in isas_to_test(lib) if i in ("avx512", "portable16")]
    assert "portable16" in pair_paths
    # Y rounded to bf16 hides most f32 order effects, so one case shows the order outright: the
    # products of k = 0..3 are 2^30, 0, 1, -2^30: odd first sums 0, 2^30, -2^30 → 0, + 1 → 1;
    # even first absorbs the 1 into 2^30 (Y = 0), as does one rounding per pair plus the sum
    reveal = (np.array([[2.0**15, 0.0, 1.0, -(2.0**15)]] * 2), np.array([[2.0**15], [7.0], [1.0], [2.0**15]]))
    cases = [(rng.standard_normal((m, k)), rng.standard_normal((k, n))) for m, k, n in ((5, 151, 40), (13, 64, 33))]
    for (a64, b64), tb in itertools.product([reveal, *cases], (0, 1)):
        A, Bk = a64.astype(bf), b64.astype(bf)
        m, n = A.shape[0], Bk.shape[1]
        B = np.ascontiguousarray(Bk.T) if tb else Bk
        want = _pair_dot_reference(A, Bk, 64, 0.75)
        for isa, packed in itertools.product(pair_paths, (0, 1)):
            lib.select_isa(isa)
            Y = np.full((m, n), np.nan, bf)
            pk = mm.pack_b(lib, B, trans_b=bool(tb)) if packed else None
            mm.matmul(lib, A, B, Y, trans_b=bool(tb), alpha=0.75, packed=pk).run()
            assert np.array_equal(Y.view(np.uint16), want.view(np.uint16)), (isa, A.shape, n, tb, packed)
    assert float(_pair_dot_reference(*(x.astype(bf) for x in reveal), 64, 1.0)[0, 0]) == 1.0
