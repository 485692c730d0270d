"""Verdicts (data, not rendering): per cell, on the ours/ORT ratio (CONTRACTS §2).

* win       ours ok, whole 95% CI of ours/ORT below 1 (the CI includes between-run variation:
            the spread between the replicates' worker processes and the calibrated sigma_b)
* loss      ours ok, whole CI above 1
* undecided ours ok, otherwise
* fail      ours mismatch / error / crashed / timeout
* n/a       no ratio: ORT has no kernel in any dtype, or either side below resolution, or a
            numerics-only cell

fast_1 = cells with ours ok and point ratio < 1 / all cells due except n/a (failures stay in
the denominator: breaking a cell never raises the score).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfbench import stats

FAIL_STATUSES = ("mismatch", "error", "crashed", "timeout")
VERDICTS = ("win", "loss", "undecided", "fail", "n/a")


@dataclass
class CellVerdict:
    verdict: str
    note: str = ""
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    n: int = 0
    mean_log: float | None = None
    sd_log: float | None = None
    method: str | None = None


def decide(ours_status: str, ort_status: str, ours_ns: list, ort_ns: list, numerics_only: bool = False,
           ort_message: str = "", groups: list | None = None, sigma_b: float = 0.0,
           sigma_dof: float = stats.PRIOR_DOF) -> CellVerdict:
    """The cell's verdict from its replicates. groups: the worker process of each replicate;
    sigma_b (with sigma_dof): the between-run spread of the log ratio (calibrated, else the
    stated default) -- both folded into the interval (stats.ratio_ci, CONTRACTS §2/§4), so that a
    win or a loss is a claim about the next run too."""
    if ours_status in FAIL_STATUSES:
        return CellVerdict("fail", f"ours {ours_status}")
    if numerics_only:
        return CellVerdict("n/a", "numerics-only shape")
    if ours_status == "no-kernel":
        # we cannot run it: that is a kernel we owe, not a pass (stays in the fast_1 denominator)
        return CellVerdict("fail", "ours no-kernel")
    if ort_status == "no-kernel":
        return CellVerdict("n/a", "ORT has no kernel in any dtype")
    if ours_status == "below-resolution" or ort_status == "below-resolution":
        return CellVerdict("n/a", "below the timer's resolution")
    if ort_status not in ("ok", "ort-discrepancy"):
        return CellVerdict("n/a", f"ORT {ort_status}")
    if len(ours_ns) < 2 or len(ours_ns) != len(ort_ns):
        return CellVerdict("n/a", "fewer than two replicates")
    if min(ours_ns) <= 0 or min(ort_ns) <= 0:
        return CellVerdict("n/a", "a replicate at or below zero (below resolution)")
    ci = stats.ratio_ci(ours_ns, ort_ns, groups=groups, sigma_b=sigma_b, sigma_dof=sigma_dof)
    if ci.hi < 1.0:
        v = "win"
    elif ci.lo > 1.0:
        v = "loss"
    else:
        v = "undecided"
    note = "ORT departs from the oracle (ort-discrepancy)" if ort_status == "ort-discrepancy" else ""
    return CellVerdict(v, note, ci.ratio, ci.lo, ci.hi, ci.n, ci.mean_log, ci.sd_log, ci.method)


def fast_1(cells) -> float | None:
    """cells: objects with .verdict, .ratio and an ours status (`ours_status` attribute)."""
    due = [c for c in cells if c.verdict != "n/a"]
    if not due:
        return None
    fast = [c for c in due if c.verdict != "fail" and c.ratio is not None and c.ratio < 1.0]
    return len(fast) / len(due)


def counts(cells) -> dict:
    out = {v: 0 for v in VERDICTS}
    for c in cells:
        out[c.verdict] = out.get(c.verdict, 0) + 1
    return out


def geomean(ratios) -> float | None:
    r = [x for x in ratios if x is not None and x > 0]
    return float(np.exp(np.mean(np.log(r)))) if r else None


# ---- throughput against this host's measured peaks ----

def cache_level(working_set: float, threads: int, l2: int | None, l3: int | None, l1: int | None = None) -> str:
    """Where a working set lives (a label; the ceiling is read_ceiling's): L1/L2 if it fits the
    participating cores' (3/4 full), L3 if it fits 3/4 of the L3, else DRAM."""
    if l1 and working_set <= 0.75 * l1 * threads:
        return "L1"
    if l2 and working_set <= 0.75 * l2 * threads:
        return "L2"
    if l3 and working_set <= 0.75 * l3:
        return "L3"
    return "DRAM"


def _at(cand: list, working_set: float, cold: bool) -> dict:
    """cand (one kind, one thread count) sorted by working set: the probe at the largest working
    set not above `working_set` (the smallest probed below it; the largest for a cold cell), or
    a faster one of the same cache level at a larger working set (the level's upper envelope).
    A loop over fewer bytes can go at least as fast as one over more, so that bounds what a loop
    over `working_set` bytes can reach; interpolating to the next probe could fall below it at a
    cache edge: Add 262144 f16 (1.5 MiB) at 1 thread was judged against 79 GB/s interpolated
    between 105 (1 MiB) and 61 (2 MiB) and reached 116% of it. The envelope stays within the
    level, so one probe of a deeper level cannot lift the ceilings of a shallower one."""
    if cold:
        return cand[-1]
    below = [p for p in cand if p["working_set_bytes"] <= working_set]
    at = below[-1] if below else cand[0]
    # the level's upper envelope: just past a cache edge a probe can read slower than a larger one
    # of the same level (64 KiB at 150 GB/s against 210 at 512 KiB, 1 thread, Zen 5, 48 KiB L1d)
    same = [p for p in cand if p["working_set_bytes"] >= at["working_set_bytes"] and p.get("level") == at.get("level")]
    return max(same, key=lambda p: p["value"])


# a sample more than this above its probe's median is a spike, not what the loop reaches: physical
# order is checked on the medians within the same 15% (peaks.TOL), so a ceiling stays within this of
# a checked figure (a DRAM probe with samples 29, 30 and 140 GB/s is bounded by 30, not 140)
SAMPLE_OVER_MEDIAN = 0.15


def best(p: dict | None) -> dict | None:
    """A stored peak row as a ceiling: its best sample within SAMPLE_OVER_MEDIAN of its median as
    the value (the median kept as "median"). A sample is a best-of-loops estimate of what the
    probe's loop can reach, and a ceiling is what it can reach, so a cell that moved faster than
    the median but within the samples is not above it: ReduceMean 4194304 f32 at 1 thread read
    81.2 GB/s, 102.5% of its 16 MiB probe's median 79.2 (samples 78.8-82.1; Zen 4, 2026-12-05).
    The median stays the stored value, the one physical order is checked on. Rows without samples
    (sets from before 0006, imported reference runs, tests) are their value."""
    if p is None or not p.get("samples"):
        return p
    med = float(p["value"])
    ok = [float(v) for v in p["samples"] if float(v) <= med * (1 + SAMPLE_OVER_MEDIAN)]
    return {**p, "value": max(ok + [med]), "median": med}


def _ladder(peaks: list, kind: str, threads: int) -> list:
    """The stored probes of one kind on the working-set ladder at `threads` (else at the largest
    thread count measured), sorted by working set, each as a ceiling (best)."""
    cand = [p for p in peaks if p["kind"] == kind and p.get("working_set_bytes")]
    if not cand:
        return []
    exact = [p for p in cand if p["threads"] == threads]
    return sorted((best(p) for p in exact or [p for p in cand if p["threads"] == max(q["threads"] for q in cand)]),
                  key=lambda p: p["working_set_bytes"])


def read_ceiling(peaks: list, threads: int, working_set: float, cold: bool = False) -> dict | None:
    """The bandwidth a read loop over `working_set` bytes at `threads` threads can reach: the stored
    read probes (`perfbench peaks`) of that thread count (else the largest measured), read at the
    largest probed working set not above the cell's, or its level's envelope (_at). A cold cell's
    data comes from DRAM whatever its size: the largest working set probed. Returns the peak row
    (None: no read probes stored)."""
    cand = _ladder(peaks, "read", threads)
    return _at(cand, working_set, cold) if cand else None


def bandwidth_ceiling(peaks: list, threads: int, working_set: float, cold: bool = False,
                      write_share: float = 0.0) -> dict | None:
    """The bandwidth a loop over `working_set` bytes that writes `write_share` of them can reach.
    A read-only loop (share 0) reaches the read probe (read_ceiling); a copy (share 1/2: every
    byte read is written once) the copy probe at the same point (_at, the same rule); a share w
    in between moves 1 - 2w of its bytes as reads and 2w as a copy does, so its time per byte
    is the harmonic mix (1 - 2w)/read + 2w/copy. Shares above 1/2 (Trilu's 2/3, outer-product
    broadcasts) are clamped to 1/2: no probe writes only, and a write-mostly streaming loop may
    beat the copy figure. The ceiling is the larger of that mix and the read probe: a copy with
    the library's streaming stores (past LLC/3) reads and writes L3-sized sets slower than a read
    loop (16 MiB at 1 thread: 55.2 against 81.8 GB/s) while a kernel storing normally (ORT's)
    keeps them in L3, so the copy figure bounds nothing there; for our kernels, which stream past
    LLC/3 as the probe does, the read figure there is a generous ceiling. A cold side that writes
    gets the DRAM mix whatever its size (generous too: a small cold kernel storing normally pays
    read-for-ownership traffic). From DRAM the copy is faster: 45.5 against 31.1 GB/s at 1 thread, 90.6 against 59.4 at 2
    (one Zen 4 set, 2026-12-05); read probes alone left RotaryEmbedding seq 4096 x 32 x 128 at 1
    thread (about half its bytes written) at up to 109% of the read figure. The mix is a model
    (reads and streaming writes can overlap more than it assumes), not a proven bound. No copy
    probe at or below the working set (they start at COPY_MIN_PER_THREAD per thread): the read
    probe alone. Returns a peak-like row; a mixed one has kind "read+copy" and the two figures it
    mixes."""
    read = read_ceiling(peaks, threads, working_set, cold)
    w = min(max(float(write_share or 0.0), 0.0), 0.5)
    if read is None or w <= 0.0:
        return read
    cand = _ladder(peaks, "copy", threads)
    if not cand or (not cold and cand[0]["working_set_bytes"] > working_set):
        return read
    copy = _at(cand, working_set, cold)
    if copy["value"] <= read["value"]:
        return read
    value = 1.0 / ((1.0 - 2.0 * w) / read["value"] + 2.0 * w / copy["value"])
    mixed = {k: v for k, v in copy.items() if k not in ("samples", "median")}  # neither probe's samples
    return {**mixed, "kind": "read+copy", "value": value, "write_share": w,
            "read": read["value"], "copy": copy["value"]}


def ceiling_for(peaks: list, bound: str, threads: int, nbytes: float, cold: bool = False,
                write_share: float = 0.0, compute_kind: str = "fma_f32") -> dict | None:
    """The peak row a side's throughput is divided by: for compute-bound cells the compute probe
    its kernel can reach (compute_kind: the f32 FMA peak, or for a bf16 kernel on bf16 pairs,
    Op.compute_peak, the higher of it and the bf16 dot peak), else the bandwidth at the side's own working set for its
    share of written bytes (bandwidth_ceiling); each probe's best sample (best)."""
    if bound == "compute":
        fma = best(pick_peak(peaks, "fma_f32", threads))
        if compute_kind != "bf16_dot":
            return fma
        # where the path has no bf16 dot, the bf16 kernel converts to f32 FMA and the bf16_dot probe
        # (conversion + FMA) sits below the FMA peak: the higher of the two is what the kernel can reach
        dot = best(pick_peak(peaks, "bf16_dot", threads))
        return max((p for p in (fma, dot) if p), key=lambda p: p["value"], default=None)
    return bandwidth_ceiling(peaks, threads, nbytes, cold, write_share)


def resolve_bound(bound: str, peaks: list, threads: int, flops: float, nbytes: float, cold: bool = False,
                  write_share: float = 0.0, compute_kind: str = "fma_f32") -> str:
    """An op's "roofline" bound made this host's: "compute" where its flops at the compute ceiling
    take longer than its bytes at the bandwidth ceiling of their working set, else "memory" (the
    lower of the two attainable throughputs is the one a cell is judged by). "memory" and
    "compute" come back as they are; "roofline" without both peaks is "memory"."""
    if bound != "roofline":
        return bound
    comp = ceiling_for(peaks, "compute", threads, nbytes, cold, write_share, compute_kind)
    mem = ceiling_for(peaks, "memory", threads, nbytes, cold, write_share)
    if comp and mem and comp["value"] > 0 and mem["value"] > 0 and flops / comp["value"] > nbytes / mem["value"]:
        return "compute"
    return "memory"


# a share of peak above 1 says the ceiling is wrong for that cell (a probe or the working-set
# model), never that the cell did something impossible: a mark in tables and the dashboard,
# never a status
OVER_CEILING = "\u2191"


def over_ceiling(share: float | None) -> bool:
    return share is not None and share > 1.0


def pick_peak(peaks: list, kind: str, threads: int, level: str | None = None, working_set: float | None = None):
    """The stored peak for (kind, threads[, level]); for several at one level the one whose
    working set is nearest (log scale). Falls back to the largest thread count measured."""
    cand = [p for p in peaks if p["kind"] == kind and (level is None or p["level"] == level)]
    if not cand:
        return None
    exact = [p for p in cand if p["threads"] == threads]
    cand = exact or [p for p in cand if p["threads"] == max(q["threads"] for q in cand)]
    if working_set and len(cand) > 1:
        cand.sort(key=lambda p: abs(np.log(max(p["working_set_bytes"] or 1, 1)) - np.log(max(working_set, 1))))
    return cand[0]


# ---- kernel-only ratio: ORT's per-node dispatch subtracted ----

# dispatch above this share of ORT's time marks a cell: the as-run ratio there is mostly ORT's
# executor, not its kernel
DISPATCH_HALF = 0.5


def kernel_only_of(c, dispatch: dict | None) -> dict | None:
    """kernel_only for a stored Cell: ORT's replicates, the nodes its profile shows, its cache mode."""
    ort = c.side("ort")
    if ort is None:
        return None
    return kernel_only(c.ratio, c.ratio_lo, c.ratio_hi, ort.replicates_ns or ort.median_ns, dispatch,
                       nodes=len(ort.detail or []) or 1, cold=c.cache == "cold")


def dispatch_heavy(k: dict | None) -> bool:
    """A kernel_only answer whose dispatch is more than half of ORT's time (the † / ½ mark)."""
    return bool(k) and k["dispatch_share"] > DISPATCH_HALF


def kernel_only(ratio: float | None, lo: float | None, hi: float | None, ort_ns, dispatch: dict | None,
                nodes: int = 1, cold: bool = False) -> dict | None:
    """The ours/ORT ratio with ORT's measured per-node dispatch taken out of ORT's time: ORT ran
    `nodes` nodes for the cell (its op, plus any Casts or function-body nodes), so D = nodes x d
    comes out of each replicate's time t_i: the as-run ratio and interval shift by the mean over
    replicates of log(t_i / (t_i - D)), evaluated at the dispatch samples' smallest d for the low
    end and largest for the high end, so the interval holds the dispatch's uncertainty too.
    ort_ns: ORT's replicate times (or its median). n/a (ratio None, with why) where the smallest
    t_i - D is at or below the resolution of the difference: the dispatch samples' range times
    nodes (at least 1 ns). None without a ratio, ORT time or dispatch, and for cold cells (their
    ORT time is already net of a cold run of a graph with the cell's inputs and outputs: a run's
    and a node's dispatch are out)."""
    if cold or ratio is None or lo is None or hi is None or not ort_ns or not dispatch or not dispatch.get("value"):
        return None
    ts = [float(t) for t in (ort_ns if isinstance(ort_ns, (list, tuple)) else [ort_ns]) if t and t > 0]
    if not ts:
        return None
    nodes = max(1, int(nodes))
    d = float(dispatch["value"])
    ds = [float(x) for x in (dispatch.get("samples") or [d])]
    d_lo, d_hi = min(ds + [d]) * nodes, max(ds + [d]) * nodes
    D = d * nodes
    t_med = float(np.median(ts))
    share = D / t_med
    resolution = max(d_hi - d_lo, 1.0)
    base = {"dispatch_ns": D, "dispatch_share": share, "nodes": nodes}
    if min(ts) - d_hi <= resolution:
        return {"ratio": None, "ci_low": None, "ci_high": None, **base,
                "note": f"ORT's time {min(ts):.0f} ns (fastest replicate) minus its dispatch {D:.0f} ns "
                        f"[{d_lo:.0f}, {d_hi:.0f}] ({nodes} node(s)) is at or below resolution"}

    def shift(dd):
        return float(np.exp(np.mean([np.log(t / (t - dd)) for t in ts])))

    return {"ratio": ratio * shift(D), "ci_low": lo * shift(d_lo), "ci_high": hi * shift(d_hi), **base, "note": None}
