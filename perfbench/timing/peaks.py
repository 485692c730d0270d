"""Host peaks (`perfbench peaks`): f32 FMA peak, bf16 dot-product peak and read bandwidth by
working-set size (L2, L3, DRAM), measured with small native kernels through the same timing
loop as everything else. Each figure is the best of several ~40 ms timed loops (a peak is a
ceiling, so the best repetition is the estimate), at 1 thread and at every core."""

from __future__ import annotations

import math

import numpy as np

from perfbench.kernels_ffi import wrappers

TARGET_NS = 40e6
REPEATS = 5
DRAM_BYTES = 256 * 1024**2


def _best_loop(call, per_iter_guess_ns: float, target_ns: float = TARGET_NS) -> tuple[int, int]:
    """(iters, best elapsed ns) for a loop lasting about target_ns."""
    call.run()
    one = max(call.time_warm(1), 1)
    iters = max(1, int(math.ceil(target_ns / max(one, per_iter_guess_ns))))
    best = min(call.time_warm(iters) for _ in range(REPEATS))
    return iters, best


def measure(lib, thread_counts: list[int], l2: int | None, l3: int | None, log=lambda m: None,
            dram_bytes: int | None = None, target_ns: float = TARGET_NS) -> list[dict]:
    out = []
    l2 = l2 or 512 * 1024
    l3 = l3 or 16 * 1024**2
    for t in thread_counts:
        for kind in ("fma_f32", "bf16_dot"):
            call, flops, method = wrappers.peak(lib, "peak_" + kind, 100_000, t)
            call.run()
            elapsed = min(call.time_warm(1) for _ in range(REPEATS))
            # scale iterations so one call lasts ~target_ns
            iters = max(1000, int(100_000 * target_ns / max(elapsed, 1)))
            call, flops, method = wrappers.peak(lib, "peak_" + kind, iters, t)
            call.run()
            best = min(call.time_warm(1) for _ in range(REPEATS))
            per_call = flops[0]
            value = per_call / best  # flops per ns = GFLOP/s
            out.append({"kind": kind, "threads": t, "level": None, "working_set_bytes": None, "value": value,
                        "unit": "GFLOP/s", "method": lib.string(method[0]), "isa": lib.isa_active})
            log(f"  {kind:9s} threads={t}: {value:8.1f} GFLOP/s ({lib.string(method[0])})")
        dram = dram_bytes or max(DRAM_BYTES, 8 * l3)
        sizes = [("L2", l2 // 2 * t), ("L3", l3 // 4), ("L3", l3 * 3 // 4), ("DRAM", dram)]
        for level, ws in sizes:
            buf = np.ones(ws // 4, dtype=np.float32)
            call = wrappers.read_bandwidth(lib, buf, t)
            iters, best = _best_loop(call, 1.0, target_ns)
            value = ws * iters / best  # bytes per ns = GB/s
            out.append({"kind": "read", "threads": t, "level": level, "working_set_bytes": ws, "value": value,
                        "unit": "GB/s", "method": "streaming read, 8 accumulators", "isa": lib.isa_active})
            log(f"  read {level:4s} {ws / 1024**2:8.2f} MiB threads={t}: {value:8.1f} GB/s")
            del buf
    return out
