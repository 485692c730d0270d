"""The measurement protocol for one cell (CONTRACTS §4), run inside a worker process.

Definition, the same for both sides: the marginal cost of one more kernel call, with harness
overhead removed.

* Ours (warm): a native loop of `iters` calls on warm buffers, timed in C; per call =
  loop / iters minus the per-call floor of the same loop around a no-op kernel.
* ORT (warm): the differential estimate. A graph whose K copies of the node are each a graph
  output, all K outputs bound through IOBinding to one shared buffer; per call =
  (t_K - t_1) / (K - 1), the medians of alternating K-copy and 1-copy runs within a block.
* Cold (both sides): each call timed alone after touching a buffer larger than the last-level
  cache, minus that side's harness floor measured the same way (our no-op kernel; ORT's
  1-node run of a trivial graph).

A replicate is fresh ORT sessions and fresh buffers; within it ours and ORT alternate in
blocks of at least `block_ms` (quiescing our pool between blocks). One ours/ORT ratio per
replicate: ours is the median of that replicate's blocks; ORT's is the differential of the
medians of all its K-copy and 1-copy runs in the replicate (robust to one slow run when a
large op fits only one run per block).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import EvictBuffer, wrappers
from perfbench.ops import ort as ortlib
from perfbench.ops.base import to_f64
from perfbench.timing.caches import last_level_bytes

SPIN_ON_US = 100  # our pool's spin time under the "on" policy
TARGET_DIFF_NS = 300_000  # K is chosen so the K-copy run exceeds the 1-copy run by ~this
MAX_K = 64


@dataclass
class CellSpec:
    """Everything a worker needs to measure one cell (plain data: it crosses a pipe)."""

    op: str
    params: list  # [[name, value], ...]
    dtype: str
    threads: int
    cache: str = "warm"
    spin: str = "off"
    device: str = "cpu"
    seed: int = 0
    replicates: int = 8
    rounds: int = 3
    block_ms: float = 3.0
    numerics_only: bool = False
    evict_bytes: int = 0  # cold mode: size of the eviction buffer
    evict_threads: int = 1


@dataclass
class CellOutcome:
    ours_status: str = "ok"
    ours_message: str = ""
    ort_status: str = "ok"
    ort_message: str = ""
    ort_path: str = ""
    ort_ops: list = field(default_factory=list)
    ort_dtype: str = ""
    err_ours: float | None = None
    err_ort: float | None = None
    err_ours_vs_ort: float | None = None
    tol: float | None = None
    floor: float | None = None
    ours_ns: list = field(default_factory=list)  # per replicate
    ort_ns: list = field(default_factory=list)
    ours_blocks: list = field(default_factory=list)  # per replicate, per block
    ort_blocks: list = field(default_factory=list)
    K: int = 0
    ours_iters: int = 0
    ort_runs: int = 0
    ours_floor_ns: float = 0.0
    ort_floor_ns: float = 0.0
    isa: str = ""
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class Harness:
    """Per-worker state: the loaded library, floors measured once, the eviction buffer."""

    def __init__(self, lib, progress=lambda phase: None):
        self.lib = lib
        self.progress = progress
        self._ours_floor: dict = {}
        self._ort_cold_floor: dict = {}
        self._evict: dict = {}

    # ---- floors ----
    def ours_warm_floor(self, threads: int) -> float:
        if threads not in self._ours_floor:
            call = wrappers.noop(self.lib, threads)
            iters = 200_000
            self._ours_floor[threads] = min(call.time_warm(iters) for _ in range(3)) / iters
        return self._ours_floor[threads]

    def evict_buffer(self, spec: CellSpec) -> EvictBuffer:
        key = (spec.evict_bytes, spec.evict_threads)
        if key not in self._evict:
            self._evict.clear()
            self._evict[key] = EvictBuffer(self.lib, spec.evict_bytes, spec.evict_threads)
        return self._evict[key]

    def ours_cold_floor(self, spec: CellSpec) -> float:
        key = ("cold", spec.threads, spec.evict_bytes)
        if key not in self._ours_floor:
            call = wrappers.noop(self.lib, spec.threads)
            self._ours_floor[key] = float(np.median(call.time_cold(31, self.evict_buffer(spec))))
        return self._ours_floor[key]

    def ort_warm_floor(self, spec: CellSpec) -> float:
        """ORT's fixed cost of one IOBinding run (a 1-node Identity graph), for choosing K."""
        key = ("warm", spec.threads, spec.spin)
        if key not in self._ort_cold_floor:
            bound = self._identity_session(spec)
            for _ in range(50):
                bound.run()
            self._ort_cold_floor[key] = min(_time_once(bound) for _ in range(200))
        return self._ort_cold_floor[key]

    def _identity_session(self, spec: CellSpec):
        gs = ops_pkg.base.GraphSpec("Identity", "", 13, [("x", "float", (1,))], [("y", (1,))])
        sess = ortlib.make_session(ortlib.build_model(gs, dtypes.F32), spec.threads, spec.spin)
        return ortlib.Bound(sess, gs, 1, {"x": np.ones(1, np.float32)}, {"y": np.empty(1, np.float32)})

    def ort_cold_floor(self, spec: CellSpec) -> float:
        """ORT's harness floor: a 1-node graph of a trivial op run cold, the way cells are."""
        key = (spec.threads, spec.spin, spec.evict_bytes)
        if key not in self._ort_cold_floor:
            bound = self._identity_session(spec)
            bound.run()
            ev = self.evict_buffer(spec)
            ts = []
            for _ in range(31):
                self.lib.evict(ev)
                t0 = time.perf_counter_ns()
                bound.run()
                ts.append(time.perf_counter_ns() - t0)
            self._ort_cold_floor[key] = float(np.median(ts))
        return self._ort_cold_floor[key]

    # ---- one cell ----
    def measure(self, spec: CellSpec) -> CellOutcome:
        t_start = time.perf_counter()
        out = CellOutcome(isa=self.lib.isa_active)
        op = ops_pkg.get(spec.op)
        case = op.make_case(dict(spec.params))
        dt = dtypes.get(spec.dtype)
        rng = np.random.default_rng(spec.seed)
        inputs = op.make_inputs(case, dt, rng)
        graph = op.graph(case)
        shapes = op.output_shapes(case)
        self.lib.set_spin(SPIN_ON_US if spec.spin == "on" else 0)

        # which ORT dtype: the cell's own, else the op's declared substitute (CONTRACTS §2)
        self.progress("ort-session")
        ort_dt = self._ort_dtype(op, graph, dt, spec, out)
        ort_inputs = ortlib.to_ort_dtype(inputs, ort_dt) if ort_dt else None

        # ---- numerics first: a mismatch is a failed cell, never a timing ----
        self.progress("ours-numerics")
        ours_out = {n: np.empty(s, dt.numpy) for n, s in shapes.items()}
        try:
            op.prepare_ours(self.lib, case, inputs, ours_out, spec.threads).run()
        except (NativeError, UsageError) as e:
            out.ours_status = "no-kernel" if isinstance(e, NativeError) and e.status == 2 else "error"
            out.ours_message = str(e)
            ours_out = None
        ort_out = None
        if ort_dt is not None:
            self.progress("ort-numerics")
            ort_out = {n: np.empty(s, ort_dt.numpy) for n, s in shapes.items()}
            try:
                sess = ortlib.make_session(ortlib.build_model(graph, ort_dt), spec.threads, spec.spin)
                ortlib.Bound(sess, graph, 1, ort_inputs, ort_out).run()
                out.ort_path, out.ort_ops = ortlib.profile_path(
                    graph, ort_dt, spec.threads, spec.spin, ort_inputs,
                    {n: np.empty(s, ort_dt.numpy) for n, s in shapes.items()})
                if ort_dt.name != dt.name:
                    out.ort_path = "substituted"
            except Exception as e:  # noqa: BLE001 - ORT failures are data
                out.ort_status, out.ort_message = "error", f"ORT failed: {e}"
                ort_out = None

        self.progress("oracle")
        oracle = op.oracle(case, to_f64(inputs))
        floor = op.floor(dt.name)
        out.floor = floor
        if ours_out is not None:
            g = numerics.gate(ours_out, ort_out, oracle, op.row_sizes(case), floor)
            out.err_ours, out.err_ort, out.err_ours_vs_ort, out.tol = g.err_ours, g.err_ort, g.err_ours_vs_ort, g.tol
            if not g.ours_ok:
                out.ours_status = "mismatch"
                out.ours_message = f"numerics: {g.describe()}"
            if g.ort_discrepancy and out.ort_status == "ok":
                out.ort_status = "ort-discrepancy"
                out.ort_message = f"ORT departs from the oracle: err(ORT)={g.err_ort:.3g} > 10 x floor {floor:g}"
        elif ort_out is not None:
            out.err_ort = numerics.max_error(ort_out, oracle, op.row_sizes(case))

        can_time_ours = out.ours_status == "ok"
        can_time_ort = out.ort_status in ("ok", "ort-discrepancy")
        if spec.numerics_only or not (can_time_ours and can_time_ort):
            out.wall_s = time.perf_counter() - t_start
            return out

        # ---- timing ----
        if spec.cache == "cold":
            self._time_cold(op, case, dt, ort_dt, graph, shapes, inputs, spec, out)
        else:
            self._time_warm(op, case, dt, ort_dt, graph, shapes, inputs, spec, out)
        res = max(self.lib.timer_resolution_ns(), 1)
        if out.ours_ns and np.median(out.ours_ns) <= res:
            out.ours_status, out.ours_message = "below-resolution", (
                f"our per-call time {np.median(out.ours_ns):.1f} ns is at or below the timer resolution")
        if out.ort_ns and np.median(out.ort_ns) <= res:
            out.ort_status, out.ort_message = "below-resolution", (
                f"ORT's differential estimate {np.median(out.ort_ns):.1f} ns is at or below zero / the timer resolution")
        out.wall_s = time.perf_counter() - t_start
        return out

    def _ort_dtype(self, op, graph, dt, spec, out):
        for cand in [dt.name] + ([op.ort_substitute[dt.name]] if dt.name in op.ort_substitute else []):
            cdt = dtypes.get(cand)
            try:
                ortlib.make_session(ortlib.build_model(graph, cdt), spec.threads, spec.spin)
                out.ort_dtype = cdt.name
                return cdt
            except Exception as e:  # noqa: BLE001
                if not ortlib.is_missing_kernel(e):
                    out.ort_status, out.ort_message = "error", f"ORT cannot load the graph: {e}"
                    return None
        out.ort_status = "no-kernel"
        out.ort_message = f"ORT has no CPU kernel for {op.name} in {dt.name}" + (
            f" nor in the substitute {op.ort_substitute[dt.name]}" if dt.name in op.ort_substitute else "")
        return None

    def _fresh(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, copies):
        """Fresh buffers (same bytes) and fresh ORT sessions for one replicate."""
        mine = {k: v.copy() for k, v in inputs.items()}
        ours_out = {n: np.empty(s, dt.numpy) for n, s in shapes.items()}
        call = op.prepare_ours(self.lib, case, mine, ours_out, spec.threads)
        theirs = ortlib.to_ort_dtype(inputs, ort_dt) if ort_dt.name != dt.name else {k: v.copy() for k, v in inputs.items()}
        ort_out = {n: np.empty(s, ort_dt.numpy) for n, s in shapes.items()}
        bound = {}
        for k in sorted(set(copies)):
            sess = ortlib.make_session(ortlib.build_model(graph, ort_dt, k), spec.threads, spec.spin)
            bound[k] = ortlib.Bound(sess, graph, k, theirs, ort_out)
        return call, bound

    def _time_warm(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, out):
        floor = self.ours_warm_floor(spec.threads)
        out.ours_floor_ns = floor
        block_ns = spec.block_ms * 1e6
        K = iters = runs = None
        gap = 0.002 if spec.spin == "on" else 0.0  # let ORT's spinning workers stop
        for rep in range(spec.replicates):
            self.progress(f"replicate {rep + 1}/{spec.replicates}")
            if K is None:
                # calibrate K from a 1-copy run, our iterations from one call
                call, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1])
                for _ in range(3):
                    bound[1].run()
                t1 = min(_time_once(bound[1]) for _ in range(5))
                est = max(t1 - self.ort_warm_floor(spec), 200.0)  # the op alone, roughly
                K = int(min(MAX_K, max(2, math.ceil(TARGET_DIFF_NS / est) + 1)))
                call.run()
                one = min(call.time_warm(1) for _ in range(3))
                iters = int(max(1, math.ceil(block_ns / max(one, 1))))
                runs = int(max(1, math.ceil(block_ns / max(t1 * (K + 1), 1))))
                out.K, out.ours_iters, out.ort_runs = K, iters, runs
            call, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1, K])
            call.run()  # warm up both sides once
            bound[K].run()
            bound[1].run()
            ob, tb, all_k, all_1 = [], [], [], []
            for _ in range(spec.rounds):
                self.lib.quiesce()
                ob.append(call.time_warm(iters) / iters - floor)
                self.lib.quiesce()
                tk, t1s = [], []
                for _ in range(runs):
                    tk.append(_time_once(bound[K]))
                    t1s.append(_time_once(bound[1]))
                tb.append((float(np.median(tk)) - float(np.median(t1s))) / (K - 1))
                all_k += tk
                all_1 += t1s
                if gap:
                    time.sleep(gap)
            out.ours_blocks.append(ob)
            out.ort_blocks.append(tb)
            out.ours_ns.append(float(np.median(ob)))
            # ORT's replicate estimate from the medians of all its K-copy and 1-copy runs in the
            # replicate: one slow run (a page fault, a neighbour) cannot turn it negative
            out.ort_ns.append((float(np.median(all_k)) - float(np.median(all_1))) / (K - 1))

    def _time_cold(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, out):
        ev = self.evict_buffer(spec)
        ours_floor = self.ours_cold_floor(spec)
        ort_floor = self.ort_cold_floor(spec)
        out.ours_floor_ns, out.ort_floor_ns = ours_floor, ort_floor
        calls = None
        for rep in range(spec.replicates):
            self.progress(f"replicate {rep + 1}/{spec.replicates}")
            call, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1])
            call.run()
            bound[1].run()
            if calls is None:
                one = call.time_cold(1, ev)[0]
                calls = int(min(64, max(5, math.ceil(spec.block_ms * 1e6 / max(one + 2e6, 1)))))
                out.ours_iters = out.ort_runs = calls
            ob, tb = [], []
            for _ in range(spec.rounds):
                self.lib.quiesce()
                ob.append(float(np.median(call.time_cold(calls, ev))) - ours_floor)
                self.lib.quiesce()
                ts = []
                for _ in range(calls):
                    self.lib.evict(ev)
                    ts.append(_time_once(bound[1]))
                tb.append(float(np.median(ts)) - ort_floor)
            out.ours_blocks.append(ob)
            out.ort_blocks.append(tb)
            out.ours_ns.append(float(np.median(ob)))
            out.ort_ns.append(float(np.median(tb)))


def _time_once(bound) -> float:
    t0 = time.perf_counter_ns()
    bound.run()
    return float(time.perf_counter_ns() - t0)


def default_evict_bytes() -> int:
    """Twice the last-level cache (64 MiB if it cannot be read)."""
    llc = last_level_bytes()
    return 2 * llc if llc else 64 * 1024**2
