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
PEAK_ITERS_PER_CALL = 200_000


def _best_loop(call, target_ns: float = TARGET_NS) -> tuple[int, int]:
    """(iters, best elapsed ns) of REPEATS timed loops lasting about target_ns each."""
    call.run()
    one = max(call.time_warm(1), 1)
    iters = max(1, int(math.ceil(target_ns / one)))
    best = min(call.time_warm(iters) for _ in range(REPEATS))
    return iters, best


def measure(lib, thread_counts: list[int], l2: int | None, l3: int | None, log=lambda m: None,
            dram_bytes: int | None = None, target_ns: float = TARGET_NS) -> list[dict]:
    out = []
    l2 = l2 or 512 * 1024
    l3 = l3 or 16 * 1024**2
    for t in thread_counts:
        for kind in ("fma_f32", "bf16_dot"):
            # ~1-2 ms per call, so the pool's dispatch per call is noise next to the arithmetic
            call, flops, method = wrappers.peak(lib, "peak_" + kind, PEAK_ITERS_PER_CALL, t)
            iters, best = _best_loop(call, target_ns)
            value = flops[0] * iters / best  # flops per ns = GFLOP/s
            out.append({"kind": kind, "threads": t, "level": None, "working_set_bytes": None, "value": value,
                        "unit": "GFLOP/s", "method": lib.string(method[0]), "isa": lib.isa_active})
            log(f"  {kind:9s} threads={t}: {value:8.1f} GFLOP/s ({lib.string(method[0])})")
        dram = dram_bytes or max(DRAM_BYTES, 8 * l3)
        sizes = [("L2", l2 // 2 * t), ("L3", l3 // 4), ("L3", l3 * 3 // 4), ("DRAM", dram)]
        for level, ws in sizes:
            buf = np.ones(ws // 4, dtype=np.float32)
            iters, best = _best_loop(wrappers.read_bandwidth(lib, buf, t), target_ns)
            value = ws * iters / best  # bytes per ns = GB/s
            out.append({"kind": "read", "threads": t, "level": level, "working_set_bytes": ws, "value": value,
                        "unit": "GB/s", "method": "streaming read, 8 accumulators", "isa": lib.isa_active})
            log(f"  read {level:4s} {ws / 1024**2:8.2f} MiB threads={t}: {value:8.1f} GB/s")
            del buf
    return out
