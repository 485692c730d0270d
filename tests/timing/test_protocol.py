"""The measurement protocol in-process: ORT-side failures are ORT's status, a replicate at or
below zero makes the side below-resolution, other devices report no-kernel, failed workers keep
our numerics verdict, and the harness's peaks and self-check produce sane figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfbench.compare import render, verdicts
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import EvictBuffer, wrappers
from perfbench.ops import ort as ortlib
from perfbench.timing import peaks, selfcheck
from perfbench.timing.protocol import CellOutcome, CellSpec, Harness, merge_outcomes, ours_block, sub_loops
from perfbench.timing.worker import _failed, _side_of

SMALL = [["heads", 2], ["queries", 1], ["keys", 256]]


def spec(**kw):
    base = dict(op="Softmax", params=SMALL, dtype="f32", threads=1, replicates=2, rounds=1, block_ms=0.3)
    base.update(kw)
    return CellSpec(**base)


def test_ort_failure_while_timed_is_orts_not_ours(lib, monkeypatch):
    real = ortlib.make_session

    def failing_for_k_copies(model, threads, spin, profile_dir=None):
        import onnx

        if len(onnx.load_from_string(model).graph.node) > 1:  # only the K-copy graphs of timing
            raise RuntimeError("injected ORT failure")
        return real(model, threads, spin, profile_dir)

    monkeypatch.setattr(ortlib, "make_session", failing_for_k_copies)
    out = Harness(lib).measure(spec())
    assert out.ours_status == "ok"  # numerics passed; our side did nothing wrong
    assert out.ort_status == "error" and "injected ORT failure" in out.ort_message
    v = verdicts.decide(out.ours_status, out.ort_status, out.ours_ns, out.ort_ns)
    assert v.verdict == "n/a"  # an ORT failure never fails our cell


def test_a_non_positive_replicate_makes_the_side_below_resolution(lib):
    h = Harness(lib)
    out = CellOutcome(ours_ns=[100.0, 120.0], ort_ns=[500.0, -3.0])
    h.check_resolution(out)
    assert out.ours_status == "ok"
    assert out.ort_status == "below-resolution" and "1 of 2 replicates" in out.ort_message
    assert verdicts.decide(out.ours_status, out.ort_status, out.ours_ns, out.ort_ns).verdict == "n/a"


def test_cuda_cells_report_no_kernel_on_both_sides(lib):
    out = Harness(lib).measure(spec(device="cuda"))
    assert out.ours_status == "no-kernel" and "device 1" in out.ours_message
    assert out.ort_status == "no-kernel"
    assert verdicts.decide(out.ours_status, out.ort_status, [], []).verdict == "fail"  # a kernel we owe


def test_phases_map_to_sides():
    assert _side_of("ours: numerics") == "ours"
    assert _side_of("ort: replicate 2/8 block 1") == "ort"
    assert _side_of("harness: oracle") == "harness"


def test_a_worker_dying_in_ort_keeps_our_numerics_verdict():
    facts = {"ours_err": 2e-7, "floor": 1e-5, "ort_dtype": "f32"}
    out = _failed("crashed", "ort: numerics", "worker died", facts)["ours"]
    assert out.ort_status == "crashed" and out.ours_status == "ok"
    assert out.err_ours == 2e-7 and out.tol == 1e-5 and out.ort_dtype == "f32"
    bad = _failed("timeout", "ort: replicate 1/8 block 1", "hung", {"ours_err": 5e-4, "floor": 1e-5})["ours"]
    assert bad.ours_status == "mismatch"  # judged at the floor: ORT could not be compared
    ours = _failed("crashed", "ours: numerics", "worker died", facts)["ours"]
    assert ours.ours_status == "crashed" and ours.ort_status == "error"
    harness = _failed("error", "harness: oracle", "boom", facts)["ours"]
    assert harness.ours_status == "error"  # our tool failing the cell counts against us


def test_a_worker_failure_in_one_build_blames_that_build_only():
    facts = {"base_err": 2e-7, "head_err": 3e-2, "floor": 1e-5, "ort_dtype": "f32"}
    outs = _failed("crashed", "head: replicate 1/8 block 2", "worker died", facts, ("base", "head"))
    assert outs["head"].ours_status == "crashed"
    assert outs["base"].ours_status == "error" and "not measured" in outs["base"].ours_message
    assert _side_of("head: numerics", ("base", "head")) == "head"
    assert _side_of("ours: numerics", ("base", "head")) == "harness"
    ort = _failed("timeout", "ort: numerics", "hung", facts, ("base", "head"))
    assert ort["base"].ours_status == "ok" and ort["head"].ours_status == "mismatch"  # each judged at the floor
    assert ort["base"].ort_status == ort["head"].ort_status == "timeout"


def test_cold_mode_subtracts_measured_floors(lib):
    out = Harness(lib).measure(spec(params=[["heads", 16], ["queries", 1], ["keys", 4096]], cache="cold",
                                    evict_bytes=16 * 1024 * 1024, evict_threads=1))
    assert out.ours_floor_ns > 0 and out.ort_floor_ns > 0
    assert out.K == 0 and out.ours_iters >= 5
    assert out.ours_status in ("ok", "below-resolution") and out.ort_status in ("ok", "below-resolution")
    assert len(out.ours_blocks) == 2 and all(len(b) == 1 for b in out.ours_blocks)


def test_spin_policy_and_quiesce(lib):
    lib.set_spin(100)
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    y = np.empty_like(x)
    try:
        wrappers.softmax(lib, x, y, 2).run()
        lib.quiesce()  # returns once every worker sleeps
    finally:
        lib.set_spin(0)
    with pytest.raises(NativeError, match="spin_us"):
        lib.set_spin(-1)


def test_evict_and_probe_arguments_are_checked(lib):
    ev = EvictBuffer(lib, 1024 * 1024, 1)
    ev.threads = 1000
    with pytest.raises(NativeError, match="threads"):
        lib.evict(ev)
    with pytest.raises(UsageError):
        wrappers.read_bandwidth(lib, np.ones(64, np.float64), 1)
    with pytest.raises(UsageError):
        wrappers.read_bandwidth(lib, np.ones(64, np.float32)[::-1], 1)
    with pytest.raises(UsageError):
        wrappers.peak(lib, "peak_fma_f32", 0, 1)
    with pytest.raises(UsageError):
        wrappers.rotary_embedding(lib, np.zeros((1, 1, 8), np.float32), np.zeros((1, 1), np.int64),
                                  np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32),
                                  np.zeros((1, 1, 8), np.float32), interleaved=False, num_heads=2.0)


def test_peaks_are_positive_and_labelled(lib):
    rows = peaks.measure(lib, [1], 256 * 1024, 1024 * 1024, dram_bytes=8 * 1024 * 1024, target_ns=2e6)
    kinds = {(r["kind"], r["level"]) for r in rows}
    assert {("fma_f32", None), ("bf16_dot", None), ("read", "L2"), ("read", "L3"), ("read", "DRAM")} <= kinds
    assert all(r["value"] > 0 and math.isfinite(r["value"]) for r in rows)
    assert {r["unit"] for r in rows} == {"GFLOP/s", "GB/s"}


def test_selfcheck_pieces_return_finite_figures(lib):
    d = selfcheck.differential_vs_plain(m=64, k=64, n=64, reps=3)
    assert math.isfinite(d["rel_diff"]) and d["K"] == 4
    assert selfcheck.ort_floor_ns(n=200) > 0
    assert selfcheck.session_run_floor_ns(n=200) > 0
    assert math.isfinite(selfcheck.ort_node_dispatch_ns(chain=8, n=50))
    f = selfcheck.ours_floors(lib)
    assert f["warm_ns"] > 0 and f["cold_ns"] > 0


def test_json_has_no_bare_infinity():
    doc = {"cells": [{"numerics": {"err_ours": float("inf"), "err_ort": float("nan"), "tol": 1e-5}}]}
    text = render.to_json(doc)

    def reject(name):
        raise ValueError(f"bare {name} in JSON")

    back = json.loads(text, parse_constant=reject)
    assert back["cells"][0]["numerics"] == {"err_ours": "inf", "err_ort": "nan", "tol": 1e-5}


# ---- protocol 2: replicates over worker processes, balanced order, one estimator ----

def test_a_later_share_measures_timing_only_and_records_its_process_and_design(lib):
    h = Harness(lib)
    out = h.measure(spec(replicates=2, rounds=2, timing_only=True, process=2, rep_offset=3))
    assert out.ours_status == "ok" and out.err_ours is None  # no numerics in a later share
    assert out.process == [2, 2] and len(out.ours_ns) == 2
    # the order design runs on the cell's replicate clock: replicate 3 -> rounds 6, 7
    assert out.order == [Harness._rotation(["ours"], 6) + Harness._rotation(["ours"], 7),
                         Harness._rotation(["ours"], 8) + Harness._rotation(["ours"], 9)]
    first = h.measure(spec(replicates=2, rounds=2))
    assert first.err_ours is not None and first.process == [0, 0]


def test_an_ort_crash_in_a_later_share_never_fails_our_cell():
    first = CellOutcome(ours_ns=[100.0, 110.0, 105.0], ort_ns=[200.0, 210.0, 190.0], process=[0, 0, 0],
                        err_ours=1e-7, tol=1e-5)
    # share 2 died while ORT was timed: it has no numerics facts, so _failed says ours "not measured"
    later = _failed("crashed", "ort: replicate 5 block 2", "worker died", {})["ours"]
    assert later.ours_status == "error" and later.ours_message.startswith("not measured")
    m = merge_outcomes([first, later])
    assert m.ours_status == "ok" and m.err_ours == 1e-7  # the first share's judgment stands
    assert m.ort_status == "crashed" and m.ours_ns == []  # timed whole or not at all
    assert verdicts.decide(m.ours_status, m.ort_status, m.ours_ns, m.ort_ns).verdict == "n/a"
    # one of our builds failing in a later share: the other is "not measured" (ab measures it
    # alone), and the failing one fails
    outs = _failed("crashed", "head: replicate 4 block 1", "worker died", {}, ("base", "head"))
    base = merge_outcomes([CellOutcome(ours_ns=[1.0, 2.0], ort_ns=[3.0, 4.0]), outs["base"]])
    assert base.ours_status == "error" and base.ours_message.startswith("not measured")
    head = merge_outcomes([CellOutcome(ours_ns=[1.0, 2.0], ort_ns=[3.0, 4.0]), outs["head"]])
    assert head.ours_status == "crashed"
    # below resolution in the first share, a crash of ours in a later one: the crash wins
    low = CellOutcome(ours_status="below-resolution", ours_ns=[1.0, 2.0], ort_ns=[3.0, 4.0])
    crash = _failed("crashed", "ours: replicate 3 block 1", "died", {})["ours"]
    assert merge_outcomes([low, crash]).ours_status == "crashed"


def test_the_williams_order_balances_predecessors_in_the_whole_block_stream():
    # 8 replicates x 3 rounds, as the default: count, for each build, the side just before each
    # of its blocks, across round junctions and the session setup ("start") of each replicate
    counts = {}
    for rep in range(8):
        stream = [x for rnd in range(3) for x in Harness._rotation(["base", "head"], rep * 3 + rnd)]
        for i, side in enumerate(stream):
            prev = stream[i - 1] if i else "start"
            counts[(side, prev)] = counts.get((side, prev), 0) + 1
    swap = {"base": "head", "head": "base"}
    for (side, prev), n in counts.items():
        if side in swap:  # base after X exactly as often as head after X (X's role swapped alike)
            assert counts.get((swap[side], swap.get(prev, prev)), 0) == n, (side, prev, counts)
    assert counts[("base", "ort")] == counts[("head", "ort")]
    assert counts.get(("base", "start"), 0) == counts.get(("head", "start"), 0)


def test_every_timed_ort_run_follows_a_run_of_the_other_graph_both_warmed(lib, monkeypatch):
    """ORT's block alternates its K-copy and 1-copy sessions from an untimed warm-up pair on:
    every timed run follows a run of the other graph and finds its own session warm since the
    other side's block. (Warming only the graph timed first put MultiHeadAttention prefill's
    (1, K) blocks at 2-3x its (K, 1) blocks; warming only the other, at 0.75-0.8x.)"""
    log = []
    real_run = ortlib.Bound.run
    monkeypatch.setattr(ortlib.Bound, "run", lambda self: (log.append(self.copies), real_run(self))[1])
    h = Harness(lib, mark=lambda phase: log.append(phase))
    out = h.measure(spec(replicates=2, rounds=3, block_ms=0.3))
    assert out.ort_status == "ok" and out.K >= 2
    blocks, cur = [], None
    for x in log:
        if isinstance(x, str):
            cur = [] if x.startswith("ort:") and "block" in x else None
            if cur is not None:
                blocks.append(cur)
        elif cur is not None:
            cur.append(x)
    assert len(blocks) == 2 * 3 and all(len(b) == 2 + 2 * out.ort_runs for b in blocks)
    for b in blocks:
        assert all(x != y for x, y in zip(b, b[1:])), b  # alternating, from the warm-up on
        assert set(b[:2]) == {1, out.K}  # both sessions warmed before the first timed run
    # both orders on the cell's clock, flipping every second round (by the replicate's own round,
    # rounds 0 and 2 of every replicate were (K, 1); by the round's parity, ORT first was always
    # (1, K)): rounds 0-5 of the cell are (K, 1), (K, 1), (1, K), (1, K), (K, 1), (K, 1)
    firsts = [b[2] for b in blocks]
    assert firsts == [out.K, out.K, 1, 1, out.K, out.K], firsts
    # ... and crossed with ORT's place in the round (second, first, second, first, ...)
    rounds = [[m.split(":")[0] for m in log if isinstance(m, str) and f"replicate {r} block {b}" in m]
              for r in (1, 2) for b in (1, 2, 3)]
    places = [r.index("ort") for r in rounds]
    assert places == [1, 0, 1, 0, 1, 0], rounds
    assert set(zip(places, firsts)) == {(0, 1), (0, out.K), (1, 1), (1, out.K)}


@pytest.mark.parametrize("labels", [["ours"], ["base", "head"]])
def test_ort_k1_order_is_crossed_with_ort_place_in_the_rotation(labels):
    """Over the default 8 x 3 rounds, every (ORT's place, K/1 order) pair is equally frequent, one
    build (run) or two (ab): an order effect cannot pose as a position effect or the reverse."""
    counts = {}
    for clock in range(24):
        key = (Harness._rotation(labels, clock).index("ort"), Harness._k_first(clock))
        counts[key] = counts.get(key, 0) + 1
    places = len(labels) + 1
    assert len(counts) == 2 * places and set(counts.values()) == {24 // (2 * places)}, counts


def test_one_estimator_ours_is_the_median_of_sub_loops(lib):
    out = Harness(lib).measure(spec(replicates=2, rounds=1, block_ms=1.0))
    assert out.ours_status == "ok"
    assert out.ours_iters % 5 == 0 or out.ours_iters in (3, 4)  # 5 sub-loops of iters (3-5 of one call)


class _ScriptedLoop:
    """A stand-in for a kernel call whose timed loops take the scripted times (ns), in order."""

    def __init__(self, totals):
        self.totals = list(totals)

    def time_warm(self, iters):
        return self.totals.pop(0)


def test_ours_block_is_the_median_of_its_sub_loops_after_one_untimed_one():
    # warm-up 9e6 (discarded), then 5 sub-loops of 10 calls, one interrupted (5e6 instead of 1e4)
    block = ours_block(_ScriptedLoop([9e6, 1e4, 1.1e4, 5e6, 0.9e4, 1e4]), iters=10, subs=5, floor_ns=2.0)
    assert block == 1e3 - 2.0  # median per call minus the floor; a mean would be ~1e5
    assert sub_loops(3e6, 1e3) == (600, 5)  # 5 sub-loops of 600 calls fill 3 ms
    assert sub_loops(3e6, 2e6) == (1, 3)  # a 2 ms call: 3 single calls at least
    assert sub_loops(3e6, 7e5) == (1, 5)  # 0.7 ms: 5 single calls (3 ms / 0.7 ms, capped at 5)


# ---- spin on: no side's workers spin into the other's block (issue 17, finding 3) ----

def test_wait_quiet_waits_while_a_thread_spins_and_not_after():
    import threading
    import time

    from perfbench.timing.protocol import wait_quiet

    stop = time.perf_counter() + 0.03

    def spin():
        while time.perf_counter() < stop:
            pass

    t = threading.Thread(target=spin)
    t.start()
    waited = wait_quiet()
    t.join()
    assert waited >= 0.015  # the spinning thread (30 ms) kept the process busy until it stopped
    assert wait_quiet() < 0.02  # nothing spinning: two quiet windows


def test_spin_on_starts_every_block_with_the_process_quiet(lib):
    h = Harness(lib)
    out = h.measure(spec(threads=2, spin="on", replicates=2, rounds=2))
    assert out.ours_status == "ok" and out.ort_status == "ok"
    assert len(h.spin_waits) == 2 * 2 * 2  # before every block of either side
    h.measure(spec(threads=2, spin="off"))
    assert h.spin_waits == []


def test_spin_on_cold_waits_before_every_ort_call(lib):
    h = Harness(lib)
    out = h.measure(spec(threads=2, spin="on", replicates=1, rounds=1, cache="cold", evict_bytes=4 * 1024 * 1024,
                         evict_threads=2))
    assert out.ours_status in ("ok", "below-resolution")
    # before both blocks, and before each of ORT's calls_n cold calls
    assert len(h.spin_waits) == 2 + out.ort_runs


@pytest.mark.parametrize("acc", [0, 4])
def test_plain_errors_are_recorded_where_the_op_is_judged_against_another_reference(lib, acc):
    """MatMulNBits at accuracy 4 is judged against the int8-activation reference; its errors against
    the op's stated (unquantized) semantics are recorded beside, for ours and ORT, and judge
    nothing. At accuracy 0 the judging oracle is the stated one: nothing extra."""
    params = [["m", 2], ["k", 256], ["n", 8], ["bits", 4], ["block_size", 32], ["zp", "packed"], ["bias", 0],
              ["accuracy_level", acc]]
    out = Harness(lib).measure(spec(op="MatMulNBits", params=params, numerics_only=True))
    assert out.ours_status == "ok" and out.err_ours is not None
    if acc == 0:
        assert out.err_ours_plain is None and out.err_ort_plain is None
        return
    # the int8 quantization of A is far above the f32 floor the judged error sits at
    assert out.err_ours_plain > 100 * out.err_ours and out.err_ort_plain > 100 * out.err_ours
    doc_cell = {"numerics": {"err_ours": out.err_ours, "tol": out.tol, "err_ours_plain": out.err_ours_plain,
                             "err_ort_plain": out.err_ort_plain}, "ours": {"status": "ok"}}
    assert f" plain {out.err_ours_plain:.1e}|{out.err_ort_plain:.1e}" in render.fmt_numerics(doc_cell)
