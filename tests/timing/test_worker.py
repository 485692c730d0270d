"""Workers: a crash or a hang becomes the cell's status (attributed to the side that was running)
and a fresh worker takes the next cell; a harness exception is an `error` cell, not a dead sweep."""

from __future__ import annotations

import pytest

from perfbench.kernels_ffi import builder
from perfbench.timing.protocol import CellSpec
from perfbench.timing.worker import Worker

SMALL = [["heads", 1], ["queries", 1], ["keys", 16]]


@pytest.fixture()
def worker(monkeypatch, lib):
    monkeypatch.setenv("PERFBENCH_EXTRA_OPS", "tests.fixtures.ops_for_tests")
    w = Worker(builder.build().to_dict())
    yield w
    w.stop()


def spec(op, **kw):
    base = dict(op=op, params=SMALL, dtype="f32", threads=1, replicates=2, rounds=1, block_ms=0.2)
    base.update(kw)
    return CellSpec(**base)


def test_healthy_cell_is_measured(worker):
    out = worker.measure(spec("Softmax"), timeout_s=60)
    assert out.ours_status == "ok" and out.ort_status == "ok"
    assert len(out.ours_ns) == 2 and len(out.ort_ns) == 2
    assert all(v > 0 for v in out.ours_ns)
    assert out.err_ours is not None and out.err_ours <= out.tol


def test_crash_is_recorded_and_next_cell_gets_a_fresh_worker(worker):
    worker.start()
    crashed_pid = worker.info["pid"]
    out = worker.measure(spec("CrashingOp"), timeout_s=60)
    assert out.ours_status == "crashed"
    assert "SIGSEGV" in out.ours_message and "ours: numerics" in out.ours_message
    assert out.ort_status == "error" and "not measured" in out.ort_message
    assert not worker.alive()  # the crashed worker is gone
    healthy = worker.measure(spec("Softmax"), timeout_s=60)
    assert healthy.ours_status == "ok"
    assert worker.alive() and worker.info["pid"] != crashed_pid


def test_hang_times_out_and_worker_is_replaced(worker):
    out = worker.measure(spec("HangingOp"), timeout_s=6)
    assert out.ours_status == "timeout"
    assert "did not finish within 6 s" in out.ours_message
    assert not worker.alive()
    assert worker.measure(spec("Softmax"), timeout_s=60).ours_status == "ok"


def test_harness_exception_is_an_error_cell(worker):
    out = worker.measure(spec("RaisingOp"), timeout_s=60)
    assert out.ours_status == "error"
    assert "deliberate failure" in out.ours_message
    assert worker.alive()  # the worker survives an exception


def test_wrong_numbers_are_a_mismatch_and_never_timed(worker):
    out = worker.measure(spec("WrongOp", params=[["heads", 2], ["queries", 1], ["keys", 64]]), timeout_s=60)
    assert out.ours_status == "mismatch"
    assert out.err_ours > out.tol
    assert out.ours_ns == [] and out.ort_ns == []  # a mismatch is a failed cell, never a timing


def test_cold_cache_mode_times_both_sides(worker):
    out = worker.measure(spec("Softmax", cache="cold", evict_bytes=8 * 1024 * 1024, evict_threads=1), timeout_s=120)
    assert out.ours_status in ("ok", "below-resolution")
    assert len(out.ours_blocks) == 2 and len(out.ort_blocks) == 2
    assert out.ort_floor_ns > 0  # ORT's cold harness floor was measured and subtracted


def test_substituted_ort_dtype_for_bf16(worker):
    out = worker.measure(spec("Softmax", dtype="bf16"), timeout_s=60)
    assert out.ort_dtype == "f32" and out.ort_path == "substituted"
    assert out.ours_status == "ok"
