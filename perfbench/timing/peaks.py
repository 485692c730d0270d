"""Host peaks (`perfbench peaks`): the ceilings a cell's throughput is divided by.

- f32 FMA and bf16 dot-product peaks (GFLOP/s), at 1 thread and at every core;
- read bandwidth (GB/s) on a ladder of working sets, 16 KiB doubling to twice the
  L3, then DRAM, so a cell's ceiling is read at its own working-set size and thread count
  (verdicts.read_ceiling) instead of a level guessed from the cache sizes;
- copy bandwidth (bytes read + written, the library's copy and store policy) on the same ladder
  from COPY_MIN_PER_THREAD per thread: a side that writes part of its bytes is divided by a mix
  of the two (verdicts.bandwidth_ceiling), a model rather than a proven bound.

Robust estimate: each probe is measured SAMPLES times, interleaved with the other probes (a
transient hits one sample of several probes, not every sample of one); a sample is the best of
REPEATS timed loops of ~TARGET_NS (a peak is a ceiling, so the best loop estimates it); the
median sample is stored, with every sample (`perfbench peaks --show` prints their spread), and
physical order is checked on it; a cell is divided by the best sample within 15% of the median
(verdicts.best), and order is checked on those ceilings too (set_violations).

Physical order: more threads are never slower, a deeper level never reads faster than a shallower
one (each within TOL); within one level a point just past a cache edge may read slower than a
larger one, by up to TOL_WITHIN_LEVEL (see _level_bests). A set that breaks either is re-measured (REMEASURE rounds of the probes involved)
and then refused (PeaksError): nothing is stored. On the Zen 5 the old one-shot probes stored
2-thread L2 read at 43.8, 46.8 and 269.9 GB/s in three fresh databases against ~250 at 1
thread; a call reading 1 MiB lasted ~5 us, so the pool's wake-up decided the figure. A read
call now covers READ_CALL_BYTES (several passes over a small buffer)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from perfbench.compare import verdicts
from perfbench.errors import PerfbenchError
from perfbench.kernels_ffi import wrappers
from perfbench.timing.protocol import page_aligned_empty

TARGET_NS = 10e6
REPEATS = 3
SAMPLES = 3
TOL = 0.15
# within one cache level a larger working set may read faster, up to this: just past a cache's
# edge (the Zen 5's 48 KiB L1d) 64 KiB read 146-155 GB/s against 172-215 at 512 KiB, up to 1.43x
# within one round, in 3 fresh sets (2 of them refused by the old point-by-point check); more than
# this within a level is a flaky probe (the old Zen 5 2-thread L2 figures differed 6x),
# re-measured and then refused like any other break of order
TOL_WITHIN_LEVEL = 0.75
REMEASURE = 2
DRAM_BYTES = 256 * 1024**2  # the DRAM probe reads max(this, 4 x L3), at most DRAM_CAP
DRAM_CAP = 2 * 1024**3  # a VM may report a huge L3 (one here: 480 MiB); 2 GiB misses any real one
SPIN_US = 1000  # the pool spins between probe calls: a call is never charged a worker's wake-up
LADDER_FROM = 16 * 1024
READ_CALL_BYTES = 8 * 1024**2  # per thread per call: ~40 us even from L1
# copy probes start where each thread's slice is at least this: below it the copy routine's
# per-call cost, not bandwidth, decided the figure (16 KiB over 2 threads copied at 105 GB/s
# against 137 at 1 thread on an earlier host, 2026-12-03); a side that small is judged against
# the read probe alone
COPY_MIN_PER_THREAD = 128 * 1024
COPY_METHOD = "copy, bytes read + written"
# a copy moves half its bytes as reads, which a read loop of the same working set bounds: a copy
# probe above COPY_OVER_READ x its read probe (within TOL) is a flaky figure. Zen 4, two sets,
# 2026-12-05: up to 1.67x from DRAM (64 MiB, 1 thread), at most 1.05x from the caches
COPY_OVER_READ = 2.0
PEAK_ITERS_PER_CALL = 200_000  # ~1-2 ms of arithmetic per call


class PeaksError(PerfbenchError):
    """The probes disagree with physics after re-measuring: the set is not stored."""


@dataclass
class Probe:
    kind: str
    threads: int
    level: str | None
    ws: int | None
    unit: str
    method: str
    make: object = field(repr=False)  # () -> (KernelCall, work per call in flops or bytes)
    samples: list = field(default_factory=list)

    def row(self) -> dict:
        return {"kind": self.kind, "threads": self.threads, "level": self.level, "working_set_bytes": self.ws,
                "value": float(np.median(self.samples)), "samples": [float(v) for v in self.samples],
                "unit": self.unit, "method": self.method}


def ladder(threads: int, l3: int, dram: int) -> list[int]:
    """Working sets (bytes, in all) of the read probes: LADDER_FROM doubling up to 2 x L3 (and
    at most half of dram), then dram. The same points at every thread count, so that physical
    order is checked between thread counts at every working set."""
    out, ws = [], LADDER_FROM
    while ws <= 2 * l3 and ws <= dram // 2:
        out.append(ws)
        ws *= 2
    return out + [dram]


def is_current(rows: list[dict]) -> bool:
    """Whether a stored set has this version's probes: repeated samples, and at every thread count
    a copy probe at each read point from COPY_MIN_PER_THREAD per thread (sets from before copy
    probes, and those whose copy probes started elsewhere, are measured again by a run)."""
    reads = [r for r in rows if r["kind"] == "read" and r.get("working_set_bytes")]
    if not reads or not all(r.get("samples") for r in reads):
        return False
    for t in {r["threads"] for r in reads}:
        want = {r["working_set_bytes"] for r in reads if r["threads"] == t
                and r["working_set_bytes"] >= COPY_MIN_PER_THREAD * t}
        have = {r["working_set_bytes"] for r in rows if r["kind"] == "copy" and r["threads"] == t and r.get("samples")}
        if not want or have != want:
            return False
    return True


def _sample(call, work: float, target_ns: float) -> float:
    """Best of REPEATS loops of ~target_ns: work per ns (GFLOP/s or GB/s)."""
    call.run()
    one = max(call.time_warm(1), 1)
    iters = max(1, int(math.ceil(target_ns / one)))
    return work * iters / min(call.time_warm(iters) for _ in range(REPEATS))


def order_violations(rows: list[dict], tol: float = TOL) -> list[tuple[dict, dict, str]]:
    """Pairs (a, b, why) that break physical order: b at more threads than a (same kind and
    working set) but slower beyond tol; the fastest read probe of a deeper level faster than
    that of a shallower one beyond tol; or, within one level, b at a larger working set than a
    faster beyond TOL_WITHIN_LEVEL (same threads); a copy probe faster than COPY_OVER_READ x the
    read probe of its working set and threads beyond tol (its read half cannot outrun a read loop).
    Copy probes are not ordered by working set: past LLC/3 the library's copy turns to streaming
    stores, which move an L3-sized set slower than a DRAM-sized one on some hosts (Xeon, 1 thread:
    10.8 GB/s at 128 MiB, 23.6 at 256 MiB)."""
    out = []
    by_kind: dict = {}
    for r in rows:
        if r["kind"] in ("fma_f32", "bf16_dot", "read", "copy"):
            by_kind.setdefault(r["kind"], []).append(r)
    for kind, rs in by_kind.items():
        for a in rs:
            for b in rs:
                if a["working_set_bytes"] == b["working_set_bytes"] and b["threads"] > a["threads"] \
                        and b["value"] < a["value"] * (1 - tol):
                    out.append((a, b, f"{b['threads']} threads slower than {a['threads']}"))
        if kind == "copy":
            reads = {(r["threads"], r["working_set_bytes"]): r for r in by_kind.get("read", [])}
            for b in rs:
                a = reads.get((b["threads"], b["working_set_bytes"]))
                if a and b["value"] > COPY_OVER_READ * a["value"] * (1 + tol):
                    out.append((a, b, f"a copy faster than {COPY_OVER_READ:g}x the read of its working set"))
        if kind == "read":
            for t in {r["threads"] for r in rs}:
                seq = _level_bests(r for r in rs if r["threads"] == t)
                for i, b in enumerate(seq[1:], 1):
                    a = min(seq[:i], key=lambda r: r["value"])  # the slowest shallower level
                    if b["value"] > a["value"] * (1 + tol):
                        out.append((a, b, "a larger working set read faster (a deeper level beat a shallower one)"))
                for level in {_level_key(r) for r in rs if r["threads"] == t}:
                    same = sorted((r for r in rs if r["threads"] == t and _level_key(r) == level),
                                  key=lambda r: r["working_set_bytes"])
                    for i, b in enumerate(same[1:], 1):
                        a = min(same[:i], key=lambda r: r["value"])
                        if b["value"] > a["value"] * (1 + TOL_WITHIN_LEVEL):
                            out.append((a, b, "a larger working set read faster within one level"))
    return out


def set_violations(rows: list[dict]) -> list[tuple[dict, dict, str]]:
    """order_violations of the medians (the stored values) and of the ceilings cells are divided
    by (verdicts.best: each probe's best sample within 15% of its median), so that neither the
    figures shown nor those used can be out of order: medians in order within 15% could otherwise
    give ceilings out of order by up to 1.15 x 1.15 (an L3 median of 100 against a DRAM median of
    114 with a sample at 131)."""
    ceilings = [verdicts.best(r) for r in rows]
    out = order_violations(rows)
    seen = {(_key(a), _key(b)) for a, b, _ in out}
    return out + [(a, b, why + " (ceilings)") for a, b, why in order_violations(ceilings)
                  if (_key(a), _key(b)) not in seen]


def _key(r: dict) -> tuple:
    """A probe's identity in a set (its median row and its ceiling row share it)."""
    return (r["kind"], r["threads"], r.get("working_set_bytes"))


def _level_key(r: dict):
    return r.get("level") or ("ws", r["working_set_bytes"])


def _level_bests(rows) -> list[dict]:
    """The fastest read probe of each level, in order of working set. Order by working set is a
    law between levels (L1 >= L2 >= L3 >= DRAM), not between every two points of one level: just
    past a cache's edge a working set can read slower than a larger one of the same level. On the
    Zen 5 (48 KiB L1d), 64 KiB at 1 thread read 146-155 GB/s against 172-215 at 512 KiB in 3 of 3
    fresh sets, and the point-by-point check refused 2 of them. Rows without a level (tests) are a
    level each."""
    seq = sorted(rows, key=lambda r: r["working_set_bytes"])
    out: list[dict] = []
    keys: list = []
    for r in seq:
        key = _level_key(r)
        if keys and keys[-1] == key:
            if r["value"] > out[-1]["value"]:
                out[-1] = r
        else:
            keys.append(key)
            out.append(r)
    return out


def _label(r: dict) -> str:
    ws = f" {r['working_set_bytes'] / 1024**2:.3g} MiB" if r.get("working_set_bytes") else ""
    return f"{r['kind']}{ws} threads={r['threads']} {r['value']:.1f} {r['unit']}"


def page_aligned_ones(n: int) -> np.ndarray:
    """n float32 ones starting at a page boundary, as every cell's buffers do (protocol's
    page_aligned_empty). numpy places a large array 16 bytes past one, so every 64-byte load of the
    AVX-512 read crossed two cache lines: 16 KiB at 1 thread read 135 GB/s against 213 aligned
    (Zen 4, 2026-12-05, 3 interleaved rounds each), and 87 GB/s in some fresh sets, below the
    L2's 111, which refused the set and left full runs without shares."""
    buf = page_aligned_empty(n, np.float32)
    buf[:] = 1.0
    return buf


def probes(lib, thread_counts: list[int], l1: int | None, l2: int | None, l3: int | None,
           dram_bytes: int | None = None) -> tuple[list[Probe], np.ndarray]:
    """Every probe of a peak set, and the one buffer the read probes share (prefix views)."""
    l3 = l3 or 16 * 1024**2
    dram = dram_bytes or min(max(DRAM_BYTES, 4 * l3), DRAM_CAP)
    buf = page_aligned_ones(dram // 4)
    out = []
    for t in thread_counts:
        for kind in ("fma_f32", "bf16_dot"):
            call, flops, method = wrappers.peak(lib, "peak_" + kind, PEAK_ITERS_PER_CALL, t)
            call.run()
            out.append(Probe(kind, t, None, None, "GFLOP/s", lib.string(method[0]),
                             (lambda c=call, f=flops: (c, f[0]))))
        for ws in ladder(t, l3, dram):
            passes = max(1, READ_CALL_BYTES * t // ws)
            level = "DRAM" if ws == dram else verdicts.cache_level(ws, t, l2, l3, l1)
            out.append(Probe("read", t, level, ws, "GB/s", "streaming read, 8 accumulators",
                             (lambda w=ws, p=passes, t=t: (wrappers.read_bandwidth(lib, buf[:w // 4], t, p), w * p))))
            if ws >= COPY_MIN_PER_THREAD * t:  # the same working set, its first half copied onto its second
                out.append(Probe("copy", t, level, ws, "GB/s", COPY_METHOD,
                                 (lambda w=ws, p=passes, t=t: (wrappers.read_bandwidth(lib, buf[:w // 4], t, p, copy=True),
                                                               w * p))))
    return out, buf


def measure(lib, thread_counts: list[int], l2: int | None, l3: int | None, log=lambda m: None,
            dram_bytes: int | None = None, target_ns: float = TARGET_NS, l1: int | None = None,
            adjust=None) -> list[dict]:
    """Measure every probe SAMPLES times (interleaved), re-measure what breaks physical order,
    and return the rows to store, or raise PeaksError. adjust(probe, value) -> value lets a test
    inject a bad figure where the hardware would produce one."""
    lib.set_spin(SPIN_US)
    try:
        return _measure(lib, thread_counts, l1, l2, l3, dram_bytes, target_ns, adjust, log)
    finally:
        lib.set_spin(0)


def _measure(lib, thread_counts, l1, l2, l3, dram_bytes, target_ns, adjust, log) -> list[dict]:
    todo, _buf = probes(lib, thread_counts, l1, l2, l3, dram_bytes)

    def run(sel: list[Probe]) -> None:
        for p in sel:
            p.samples = []
        for _ in range(SAMPLES):
            for p in sel:
                call, work = p.make()
                v = _sample(call, work, target_ns)
                p.samples.append(adjust(p, v) if adjust else v)

    run(todo)
    for attempt in range(REMEASURE + 1):
        rows = [p.row() for p in todo]
        bad = set_violations(rows)
        if not bad:
            break
        if attempt == REMEASURE:
            lines = "; ".join(f"{_label(a)} vs {_label(b)}: {why}" for a, b, why in bad[:6])
            raise PeaksError(f"host peaks break physical order after {REMEASURE} re-measurements ({len(bad)} "
                             f"pair(s)): {lines}. Nothing was stored: is something else running on this host? "
                             "Re-run `perfbench peaks` when it is quiet.")
        involved = {_key(r) for a, b, _ in bad for r in (a, b)}
        again = [p for p, r in zip(todo, rows) if _key(r) in involved]
        log(f"  re-measuring {len(again)} probe(s) out of physical order: "
            + "; ".join(f"{_label(a)} vs {_label(b)}" for a, b, _ in bad[:3]))
        run(again)
    for r in rows:
        r["isa"] = lib.isa_active
    for line in describe(rows):
        log("  " + line)
    return rows


def spread(r: dict) -> float | None:
    """(max - min) / median of a row's samples; None without samples."""
    s = r.get("samples") or []
    return (max(s) - min(s)) / r["value"] if len(s) > 1 and r["value"] else None


def describe(rows: list[dict]) -> list[str]:
    """One line per figure: kind, working set and level, threads, median, samples' range, and the
    figure a cell is divided by (verdicts.best: the best sample within 15% of the median)."""
    out = []
    order = {"fma_f32": 0, "bf16_dot": 1, "read": 2, "copy": 3, "ort_node_dispatch": 4}
    for r in sorted(rows, key=lambda r: (order.get(r["kind"], 9), r["threads"], r.get("working_set_bytes") or 0)):
        ws = r.get("working_set_bytes")
        where = f"{ws / 1024**2:9.3f} MiB {r['level'] or '':4s}" if ws else " " * 18
        s = r.get("samples") or []
        # what cells are divided by: the FMA and read figures, the copy figure through the mix
        ceil = f", ceiling {verdicts.best(r)['value']:.1f}" if r["kind"] in ("fma_f32", "read", "copy") else ""
        rng = (f"  [{min(s):.1f} .. {max(s):.1f}] over {len(s)}, spread {100 * spread(r):.1f}%{ceil}"
               if len(s) > 1 else "  (one figure)")
        out.append(f"{r['kind']:17s} {where} threads={r['threads']}: {r['value']:8.1f} {r['unit']:7s}{rng}"
                   + (f"  ({r['method']})" if r["kind"] != "read" and r.get("method") else ""))
    return out
