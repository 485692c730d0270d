"""The measurement protocol for one cell (CONTRACTS §4), run inside a worker process.

Definition, the same for both sides: the marginal cost of one more kernel call, with harness
overhead removed.

* Ours (warm): a native loop of `iters` calls on warm buffers, timed in C; per call =
  loop / iters minus the per-call floor of the same loop around a no-op kernel.
* ORT (warm): the differential estimate. A graph of K copies of the node, each copy reading
  its own graph inputs and writing graph outputs (so ORT can neither merge copies nor share
  the Casts it inserts), all copies' inputs bound to the same buffers and all their outputs to
  one shared buffer through IOBinding; per call = (t_K - t_1) / (K - 1). A constant weight
  (GraphSpec.initializers) is the one input each copy holds for itself, as each node of a model
  does (ORT prepacks it per node); K is then capped so that the K copies' weights stay in the
  cache level one copy's live in (k_cap_for_weights), as our side's one packed weight does.
* Cold (both sides): each call timed alone after touching a buffer larger than the last-level
  cache (then quiescing our pool), minus that side's harness floor measured the same way (our
  no-op kernel; ORT's run of a graph with the cell's inputs and outputs, one element each).
* Spin on: within a block both sides' workers spin between calls (calls run back to back, so
  neither sleeps); between blocks neither side's workers may spin into the other's block: ours
  are quiesced before every block, and after ORT's block the harness waits until the process's
  CPU time stops advancing (ORT's pool cannot be told to stop; its workers kept spinning 21-24
  ms after the last Run on a 2-core Xeon, far past the fixed 2 ms gap this replaced).

A replicate is fresh ORT sessions and fresh buffers; within it ours and ORT alternate in
blocks of at least `block_ms`, each block preceded by one untimed unit of that side (ours:
one sub-loop; ORT: one K-copy/1-copy pair in the block's order, so every timed ORT run follows
the other graph with its own session warm) -- no block starts from the other side's cache
state -- and by quiescing our pool. ORT's K-copy and
1-copy runs alternate within its block, the order flipping every round. One ours/ORT ratio
per replicate: ours is the median of the replicate's blocks; ORT's is the differential of the
medians of all its K-copy and 1-copy runs in the replicate (one slow run cannot turn a large
op's estimate negative when only one run fits a block).

Progress phases are reported as "ours: ...", "ort: ..." or "harness: ...", so that a crash or
a hang is attributed to the side that was running.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import EvictBuffer, wrappers
from perfbench.ops import ort as ortlib
from perfbench.ops.base import ELEM_TYPES, GraphSpec
from perfbench.timing import caches
from perfbench.timing.caches import last_level_bytes, sysfs_last_level_bytes

SPIN_ON_US = 100  # our pool's spin time under the "on" policy
QUIET_WINDOW_S = 0.0005  # wait_quiet: the window over which process CPU time is sampled
QUIET_FRACTION = 0.25  # ... a window is quiet when the process used less CPU than this share of it
QUIET_CAP_S = 0.25  # ... and the wait gives up after this long (then the block goes on anyway)


def wait_quiet(window_s: float = QUIET_WINDOW_S, fraction: float = QUIET_FRACTION,
               cap_s: float = QUIET_CAP_S, clock=time.process_time) -> float:
    """Sleep until no thread of this process is spinning: two consecutive windows in which the
    process's CPU time advanced by less than `fraction` of the window (a spinning worker adds a
    whole window). Returns the seconds waited (at most about cap_s)."""
    t0 = time.perf_counter()
    quiet = 0
    while quiet < 2 and time.perf_counter() - t0 < cap_s:
        c0 = clock()
        time.sleep(window_s)
        quiet = quiet + 1 if clock() - c0 < fraction * window_s else 0
    return time.perf_counter() - t0
WILLIAMS_3 = ("ABC", "BCA", "CAB", "CBA", "ACB", "BAC")  # Harness._rotation
SUB_LOOPS = 5  # ours: a warm block is the median of this many timed sub-loops (at least 3 calls)
TARGET_DIFF_NS = 300_000  # K is chosen so the K-copy run exceeds the 1-copy run by ~this
MAX_K = 64
ORT_PROVIDERS = {"cpu": "CPUExecutionProvider"}  # ORT on other devices comes with their kernels


def _initializer_bytes(graph: GraphSpec, dt) -> int:
    """Bytes of the graph's initializers (its constant weights) in the ORT dtype."""
    return sum(math.prod(s) * (dt.itemsize if t == "float" else ELEM_TYPES[t].itemsize)
               for n, t, s in graph.inputs if n in graph.initializers)


def k_cap_for_weights(weight_bytes: int, threads: int) -> int:
    """The most ORT copies whose weights stay in the cache level one copy's weights live in.
    Each copy of the K-copy graph has its own constant weight, prepacked for that node as in a
    model, while our side runs one packed weight over and over: K x 4 MiB (a 1024 x 1024 f32 B; K
    reaches MAX_K for a fast cell) can be timed from DRAM on ORT's side against ours from a 32 MiB
    L3. The level is the
    smallest of the threads' L2s and the last-level cache holding twice the weights. Past half
    the last-level cache: K = 2, the fewest (ORT's second copy then comes from DRAM while ours may
    still be in L3 up to the whole LLC: a bias against ORT no K removes; and K copies of a large
    weight make a model past protobuf's 2 GiB). The level is judged on ORT's bytes; our packed
    copy is f32 (twice an f16 weight). MAX_K without weights."""
    if weight_bytes <= 0:
        return MAX_K
    l2 = (caches.cache_bytes(2) or 0) * max(1, threads)
    llc = last_level_bytes() or 0
    for level in (l2, llc):
        if level and 2 * weight_bytes <= level:
            return max(2, level // (2 * weight_bytes))
    return 2


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
    # a cell's replicates are spread over worker processes (CONTRACTS §4): this slice is process
    # `process`; its replicates are the cell's rep_offset, rep_offset + 1, ... (the order design
    # continues across slices); timing_only: numerics were judged by the first slice
    process: int = 0
    rep_offset: int = 0
    timing_only: bool = False


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
    err_ours_plain: float | None = None  # against op.plain_oracle, where the op has one (judges nothing)
    err_ort_plain: float | None = None
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
    process: list = field(default_factory=list)  # per replicate: the worker process (slice) that measured it
    order: list = field(default_factory=list)  # per replicate: the side of each block, in time order

    def to_dict(self) -> dict:
        return asdict(self)


class OrtSideError(Exception):
    """ORT failed while being timed: the cell's ORT status, never ours."""


class Harness:
    """Per-worker state: the loaded library, floors measured once, the eviction buffer.

    progress(phase, **facts) reports what is running (and facts the parent keeps if the worker
    dies: the ORT dtype)."""

    def __init__(self, lib, progress=lambda phase, **facts: None, mark=None):
        self.lib = lib
        self.progress = progress
        # mark(phase): what runs now, for blame if the worker dies, without waking the parent
        # (a message is a parent wake-up and a terminal write: never in the instant before a
        # timed block); progress() at replicate granularity only
        self.mark = mark or (lambda phase: None)
        self._floors: dict = {}
        self.spin_waits: list = []  # seconds waited for ORT's workers to stop spinning, this cell
        self._evict: dict = {}

    # ---- floors ----
    def ours_warm_floor(self, threads: int, lib=None) -> float:
        lib = lib or self.lib
        key = ("ours-warm", threads, lib.info.path)
        if key not in self._floors:
            call = wrappers.noop(lib, threads)
            iters = 200_000
            self._floors[key] = min(call.time_warm(iters) for _ in range(3)) / iters
        return self._floors[key]

    def evict_buffer(self, spec: CellSpec) -> EvictBuffer:
        key = (spec.evict_bytes, spec.evict_threads)
        if key not in self._evict:
            self._evict.clear()
            self._evict[key] = EvictBuffer(self.lib, spec.evict_bytes, spec.evict_threads)
        return self._evict[key]

    def ours_cold_floor(self, spec: CellSpec, lib=None) -> float:
        lib = lib or self.lib
        key = ("ours-cold", spec.threads, spec.evict_bytes, lib.info.path)
        if key not in self._floors:
            call = wrappers.noop(lib, spec.threads)
            self._floors[key] = float(np.median(call.time_cold(31, self.evict_buffer(spec))))
        return self._floors[key]

    def _identity(self, spec: CellSpec):
        gs = GraphSpec("Identity", "", 13, [("x", "float", (1,))], [("y", (1,))])
        sess = ortlib.make_session(ortlib.build_model(gs, dtypes.F32), spec.threads, spec.spin)
        return ortlib.Bound(sess, gs, 1, {"x": np.ones(1, np.float32)}, {"y": np.empty(1, np.float32)})

    def ort_warm_floor(self, spec: CellSpec) -> float:
        """ORT's fixed cost of one IOBinding run (a 1-node Identity graph), for choosing K."""
        key = ("ort-warm", spec.threads, spec.spin)
        if key not in self._floors:
            bound = self._identity(spec)
            for _ in range(50):
                bound.run()
            self._floors[key] = min(_time_once(bound) for _ in range(200))
        return self._floors[key]

    def ort_cold_floor(self, spec: CellSpec, graph: GraphSpec | None = None, ort_dt=None) -> float:
        """ORT's harness floor for cold cells: a graph with the cell's inputs and outputs (count
        and element types, each of one element; ortlib.floor_graph) run cold, the way cells are.
        Without `graph`: the 1-input Identity graph (the floor before issue 17, which left ORT's
        cold per-input cost of a many-input op in its time)."""
        if graph is None or not any(n and n not in graph.initializers for n, _, _ in graph.inputs):
            graph, sig = None, None
        else:
            sig = (tuple(t for n, t, _ in graph.inputs if n and n not in graph.initializers),  # floor_graph's
                   tuple(o[2] if len(o) > 2 else "float" for o in graph.outputs if o[0]), ort_dt.name)
        key = ("ort-cold", spec.threads, spec.spin, spec.evict_bytes, sig)
        if key not in self._floors:
            bound = self._identity(spec) if graph is None else self._floor_session(spec, graph, ort_dt)
            bound.run()
            ev = self.evict_buffer(spec)
            ts = []
            for _ in range(31):
                self.lib.evict(ev)
                if spec.spin == "on":  # measured the way cold cells are
                    wait_quiet()
                ts.append(_time_once(bound))
            self._floors[key] = float(np.median(ts))
        return self._floors[key]

    @staticmethod
    def _floor_session(spec: CellSpec, graph: GraphSpec, ort_dt) -> ortlib.Bound:
        floor = ortlib.floor_graph(graph)

        def arr(t):
            return np.ones(1, ort_dt.numpy if t == "float" else ELEM_TYPES[t])

        sess = ortlib.make_session(ortlib.build_floor_model(floor, ort_dt), spec.threads, spec.spin)
        return ortlib.Bound(sess, floor, 1, {n: arr(t) for n, t, _ in floor.inputs},
                            {o[0]: arr(o[2]) for o in floor.outputs})

    # ---- one cell ----
    def measure(self, spec: CellSpec) -> CellOutcome:
        """One cell of our library against ORT."""
        return self.measure_sides(spec, {"ours": self.lib})["ours"]

    def measure_sides(self, spec: CellSpec, libs: dict) -> dict:
        """One cell for each of several builds of our library (label -> Library; `perfbench ab`
        has "base" and "head") against one ORT, all on the same input bytes and timed in one
        rotation. Returns label -> CellOutcome, each a whole cell (that build as "ours"; the ORT
        side is the same measurement in all of them)."""
        t_start = time.perf_counter()
        self.spin_waits = []
        outs = {label: CellOutcome(isa=lib.isa_active) for label, lib in libs.items()}
        shared = CellOutcome()  # the ORT side and what all sides share
        self.progress("harness: inputs")
        op = ops_pkg.get(spec.op)
        case = op.make_case(dict(spec.params))
        dt = dtypes.get(spec.dtype)
        inputs = op.make_inputs(case, dt, np.random.default_rng(spec.seed))
        graph = op.graph(case)
        shapes = op.output_shapes(case)
        rows = op.row_sizes(case)
        for lib in libs.values():
            lib.set_spin(SPIN_ON_US if spec.spin == "on" else 0)
        floor = op.floor(dt.name)
        shared.floor = floor

        # which ORT dtype: the cell's own, else the op's declared substitute (CONTRACTS §2). A
        # session is only created here (the cell key's timing definition needs the answer even
        # if the worker dies later).
        self.progress("ort: session")
        ort_dt = self._ort_dtype(op, graph, dt, spec, shared)
        if ort_dt is not None:
            self.progress("ort: dtype", ort_dtype=ort_dt.name)
        if spec.timing_only:  # a later slice of a cell whose numerics the first slice judged
            for o in outs.values():
                _share_ort(shared, o)
                o.floor = floor
        else:
            self._numerics(op, case, dt, ort_dt, graph, rows, inputs, spec, libs, outs, shared, floor)
        return self._timing(op, case, dt, ort_dt, graph, shapes, inputs, spec, libs, outs, t_start)

    def _numerics(self, op, case, dt, ort_dt, graph, rows, inputs, spec, libs, outs, shared, floor) -> None:
        self.progress("harness: oracle")
        x64 = op.oracle_inputs(case, inputs)
        oracle = op.oracle(case, x64)

        # ---- numerics first: a mismatch is a failed cell, never a timing. Ours runs before
        # ORT's numerics, and its error is reported, so that if ORT then crashes or hangs, ours
        # is still judged (CONTRACTS §8: where ORT cannot run the case, tol = floor)
        ours_outs = {}
        for label, lib in libs.items():
            o = outs[label]
            self.progress(f"{label}: numerics")
            mine = op.private_inputs(case, inputs)  # aliased KV caches: ours writes its own copy
            ours_outs[label] = op.new_outputs(case, dt.numpy, mine)
            try:
                op.prepare_ours(lib, case, mine, ours_outs[label], spec.threads, device=spec.device).run()
                self.progress(f"{label}: numerics done", floor=floor,
                              **{f"{label}_err": numerics.max_error(ours_outs[label], oracle, rows)})
            except (NativeError, UsageError) as e:
                o.ours_status = "no-kernel" if isinstance(e, NativeError) and e.status == 2 else "error"
                o.ours_message = str(e)
                ours_outs[label] = None

        ort_inputs = ortlib.to_ort_dtype(inputs, ort_dt) if ort_dt else None
        ort_out = None
        if ort_dt is not None:
            self.progress("ort: numerics")
            ort_out = op.new_outputs(case, ort_dt.numpy, ort_inputs)
            try:
                sess = ortlib.make_session(ortlib.build_model(graph, ort_dt, values=ortlib.initializer_values(
                    graph, ort_inputs)), spec.threads, spec.spin)
                ortlib.Bound(sess, graph, 1, ort_inputs, ort_out).run()
                prof_in = op.private_inputs(case, ort_inputs)
                shared.ort_path, shared.ort_ops = ortlib.profile_path(
                    graph, ort_dt, spec.threads, spec.spin, prof_in, op.new_outputs(case, ort_dt.numpy, prof_in))
                if ort_dt.name != dt.name:
                    shared.ort_path = "substituted"
            except Exception as e:  # noqa: BLE001 - ORT failures are data
                shared.ort_status, shared.ort_message = "error", f"ORT failed: {e}"
                ort_out = None

        self.progress("harness: gate")
        try:  # recorded only, never judging: a failure here leaves the errors NULL, not the cell failed
            plain = op.plain_oracle(case, x64)
        except Exception:  # noqa: BLE001
            plain = None
        err_ort_plain = None if plain is None or ort_out is None else numerics.max_error(ort_out, plain, rows)
        for label, o in outs.items():
            o.err_ort_plain = err_ort_plain
            if plain is not None and ours_outs[label] is not None:
                o.err_ours_plain = numerics.max_error(ours_outs[label], plain, rows)
            _share_ort(shared, o)
            o.floor = floor
            if ours_outs[label] is not None:
                g = numerics.gate(ours_outs[label], ort_out, oracle, rows, floor)
                o.err_ours, o.err_ort, o.err_ours_vs_ort, o.tol = g.err_ours, g.err_ort, g.err_ours_vs_ort, g.tol
                if not g.ours_ok:
                    o.ours_status = "mismatch"
                    o.ours_message = f"numerics: {g.describe()}"
                if g.ort_discrepancy and o.ort_status == "ok":
                    o.ort_status = "ort-discrepancy"
                    o.ort_message = f"ORT departs from the oracle: err(ORT)={g.err_ort:.3g} > 10 x floor {floor:g}"
            elif ort_out is not None:
                o.err_ort = numerics.max_error(ort_out, oracle, rows)

    def _timing(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, libs, outs, t_start) -> dict:
        timed = {label: lib for label, lib in libs.items() if outs[label].ours_status == "ok"}
        can_time_ort = all(o.ort_status in ("ok", "ort-discrepancy") for o in outs.values())
        if spec.numerics_only or not (timed and can_time_ort):
            for o in outs.values():
                o.wall_s = time.perf_counter() - t_start
            return outs

        # ---- timing ----
        tim = {label: outs[label] for label in timed}
        try:
            if spec.cache == "cold":
                self._time_cold(op, case, dt, ort_dt, graph, shapes, inputs, spec, timed, tim)
            else:
                self.time_warm(op, case, dt, ort_dt, graph, shapes, inputs, spec, timed, tim)
        except OrtSideError as e:
            for o in tim.values():
                o.ort_status, o.ort_message = "error", f"ORT failed while being timed: {e}"
                o.ours_ns, o.ort_ns = [], []
        except OursSideError as e:
            for label, o in tim.items():
                if label == e.label:
                    o.ours_status, o.ours_message = "error", f"our kernel failed while being timed: {e.error}"
                else:
                    o.ours_status, o.ours_message = "error", f"not measured: the {e.label} build failed while being timed"
                o.ours_ns, o.ort_ns = [], []
        for o in outs.values():
            self.check_resolution(o)
            o.wall_s = time.perf_counter() - t_start
        return outs

    def check_resolution(self, out: CellOutcome) -> None:
        """A replicate at or below zero / the timer's resolution: that side is below-resolution
        (CONTRACTS §3), never a ratio."""
        res = max(self.lib.timer_resolution_ns(), 1)
        for side, what in (("ours", "our per-call time"), ("ort", "ORT's differential estimate")):
            values = getattr(out, f"{side}_ns")
            low = [v for v in values if v <= res]
            if values and low and getattr(out, f"{side}_status") in ("ok", "ort-discrepancy"):
                setattr(out, f"{side}_status", "below-resolution")
                setattr(out, f"{side}_message",
                        f"{what} was at or below {res} ns (zero / the timer's resolution) in {len(low)} of "
                        f"{len(values)} replicates (lowest {min(low):.0f} ns): the op is too small to resolve")

    def _ort_dtype(self, op, graph, dt, spec, out):
        if spec.device not in ORT_PROVIDERS:
            out.ort_status = "no-kernel"
            out.ort_message = f"perfbench runs ORT on {', '.join(ORT_PROVIDERS)} only so far (device {spec.device})"
            return None
        try:
            cdt, _ = ortlib.first_session(op, graph, dt, spec.threads, spec.spin)
        except Exception as e:  # noqa: BLE001
            out.ort_status, out.ort_message = "error", f"ORT cannot load the graph: {e}"
            return None
        if cdt is not None:
            out.ort_dtype = cdt.name
            return cdt
        out.ort_status = "no-kernel"
        out.ort_message = f"ORT has no CPU kernel for {op.name} in {dt.name}" + (
            f" nor in the substitute {op.ort_substitute[dt.name]}" if dt.name in op.ort_substitute else "")
        return None

    def _fresh(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, copies, libs):
        """Fresh buffers (same bytes) and fresh ORT sessions for one replicate: one kernel call
        per build of ours (each on its own buffers) and the ORT graphs of `copies` copies."""
        calls = {}
        for label, lib in libs.items():
            if len(libs) > 1:
                # several builds: every build's buffers start at the same offset in a page, so
                # no build is favoured by where its arrays happened to land (4K aliasing between
                # inputs and outputs differs with their page offsets; A/A showed a steady ~6% on
                # one cell when they were left to the allocator)
                mine = {k: _fresh_copy(v, _page_aligned) for k, v in inputs.items()}
                ours_out = {n: (o if any(o is x for x in mine.values()) else _page_aligned(np.empty_like(o)))
                            for n, o in op.new_outputs(case, dt.numpy, mine).items()}
            else:
                mine = {k: _fresh_copy(v) for k, v in inputs.items()}
                ours_out = op.new_outputs(case, dt.numpy, mine)
            calls[label] = op.prepare_ours(lib, case, mine, ours_out, spec.threads, device=spec.device)
        theirs = ortlib.to_ort_dtype(inputs, ort_dt) if ort_dt.name != dt.name else {k: _fresh_copy(v) for k, v in inputs.items()}
        ort_out = op.new_outputs(case, ort_dt.numpy, theirs)
        bound = {}
        with ort_side():
            for k in sorted(set(copies)):
                sess = ortlib.make_session(ortlib.build_model(graph, ort_dt, k, values=ortlib.initializer_values(
                    graph, theirs)), spec.threads, spec.spin)
                bound[k] = ortlib.Bound(sess, graph, k, theirs, ort_out)
        return calls, bound

    def _quiesce(self, libs, spec: CellSpec | None = None) -> None:
        """Before every block: our pool's workers asleep, and with spin on, the process quiet
        (ORT's workers stopped spinning after whatever ORT ran last: its block, its calibration
        or warm-up runs)."""
        for lib in libs.values():
            lib.quiesce()
        if spec is not None and spec.spin == "on":
            self.spin_waits.append(wait_quiet())

    @staticmethod
    def _rotation(labels: list, rnd: int) -> list:
        """The order of the sides in the cell's `rnd`-th round (counted across the cell's replicates,
        whichever worker process measures them): a Williams design, so that every side is preceded
        by every other side equally often (carry-over balanced, not only positions). One build:
        ours, ORT in even rounds, ORT, ours in odd ones. Three sides (`ab`): the six sequences
        ABC BCA CAB CBA ACB BAC in turn, in which each ordered pair of sides is adjacent exactly
        twice, the two builds' roles (A, B) swapped every other cycle; 8 replicates x 3 rounds = 24
        rounds = 2 pairs of cycles, balanced in the whole block stream (the quick 5 x 3 = 15 rounds
        leave a partial pair)."""
        order = list(labels) + ["ort"]
        if len(order) == 2:
            return order if rnd % 2 == 0 else order[::-1]
        if len(order) == 3:
            a, b, c = order
            if (rnd // 6) % 2:  # every other cycle with the two builds' roles swapped: with 3
                a, b = b, a     # rounds a replicate, the full block stream (junctions between
                                # rounds and "start" included) then treats both builds alike
            return [{"A": a, "B": b, "C": c}[x] for x in WILLIAMS_3[rnd % 6]]
        k = rnd % len(order)  # more sides: a plain rotation (positions balanced only)
        return order[k:] + order[:k]

    @staticmethod
    def _k_first(rnd: int) -> bool:
        """Whether ORT's block in the cell's `rnd`-th round runs its K-copy graph first (K, 1) or
        its 1-copy graph first (1, K). Protocol 5: the order flips every second round of the cell's
        clock, so it is crossed with ORT's position in the Williams rotation (which flips every
        round with one build): each (position, order) pair is equally frequent over whole windows
        of 4 rounds (one build) or 12 (`ab`'s three sides; the default 8 x 3 = 24 rounds hold
        whole windows of both; docs/protocol.md says what partial ones give).
        Protocol 4 flipped on the round's parity, the same as ORT's position with one build: ORT
        first was always (1, K), so an order effect and a position effect were one; protocol 3
        (and 4 before review) flipped on the replicate's own round, so (K, 1) held rounds 0 and 2
        of every replicate: a bias of the same sign in every run."""
        return (rnd // 2) % 2 == 0

    def time_warm(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, libs, outs):
        floors = {label: self.ours_warm_floor(spec.threads, lib) for label, lib in libs.items()}
        for label, o in outs.items():
            o.ours_floor_ns = floors[label]
        first = next(iter(libs))
        block_ns = spec.block_ms * 1e6
        K = iters = subs = runs = None
        ort_ns, ort_blocks = [], []
        for rep in range(spec.replicates):
            g_rep = spec.rep_offset + rep  # the replicate's index in the cell (the design's clock)
            if K is None:
                # calibrate K from a 1-copy run minus ORT's fixed cost, our iterations from one
                # call (of the first build: every build runs the same number)
                self.progress("ort: calibration")
                calls, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1], libs)
                with ort_side():
                    for _ in range(3):
                        bound[1].run()
                    t1 = min(_time_once(bound[1]) for _ in range(5))
                est = max(t1 - self.ort_warm_floor(spec), 200.0)
                K = int(min(MAX_K, max(2, math.ceil(TARGET_DIFF_NS / est) + 1),
                            k_cap_for_weights(_initializer_bytes(graph, ort_dt), spec.threads)))
                self.progress(f"{first}: calibration")
                with ours_side(first):
                    calls[first].run()
                    one = min(calls[first].time_warm(1) for _ in range(3))
                iters, subs = sub_loops(block_ns, one)
            self.progress(f"ort: replicate {g_rep + 1} sessions")
            calls, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1, K], libs)
            if runs is None:
                with ort_side():
                    bound[K].run()
                    bound[1].run()
                    pair = _time_once(bound[K]) + _time_once(bound[1])
                runs = int(max(1, math.ceil(block_ns / max(pair, 1))))
                for o in outs.values():
                    o.K, o.ours_iters, o.ort_runs = K, iters * subs, runs
            ob = {label: [] for label in libs}
            tb, all_k, all_1, seq = [], [], [], []
            for rnd in range(spec.rounds):
                for side in self._rotation(list(libs), g_rep * spec.rounds + rnd):
                    self.mark(f"{side}: replicate {g_rep + 1} block {rnd + 1}")
                    seq.append(side)
                    self._quiesce(libs, spec)
                    if side != "ort":
                        with ours_side(side):
                            ob[side].append(ours_block(calls[side], iters, subs, floors[side]))
                        continue
                    order = (K, 1) if self._k_first(g_rep * spec.rounds + rnd) else (1, K)
                    tk, t1s = [], []
                    with ort_side():
                        # untimed warm-up: one pair of runs in the block's order, so that every
                        # timed run follows a run of the other graph and finds its own session's
                        # state warm since the other side's block (ORT's unit of work is a pair,
                        # as ours' is a sub-loop). MultiHeadAttention prefill (K = 2, one pair a
                        # block) showed why: warming only the graph timed first, a (1, K) block's
                        # differential was 2-3x a (K, 1) block's; warming only the graph timed
                        # second, 0.75-0.8x (the first timed run's session still cold); whether
                        # the one flipped round of a replicate moved its pooled medians varied
                        # from run to run -- a win in one full run, a loss in the next (issue 16)
                        for k in order:
                            bound[k].run()
                        for _ in range(runs):
                            for k in order:
                                (tk if k == K else t1s).append(_time_once(bound[k]))
                    tb.append((float(np.median(tk)) - float(np.median(t1s))) / (K - 1))
                    all_k += tk
                    all_1 += t1s
            for label, o in outs.items():
                o.ours_blocks.append(ob[label])
                o.ours_ns.append(float(np.median(ob[label])))
                o.process.append(spec.process)
                o.order.append(list(seq))
            ort_blocks.append(tb)
            ort_ns.append((float(np.median(all_k)) - float(np.median(all_1))) / (K - 1))
        for o in outs.values():
            o.ort_blocks, o.ort_ns = [list(b) for b in ort_blocks], list(ort_ns)

    def _time_cold(self, op, case, dt, ort_dt, graph, shapes, inputs, spec, libs, outs):
        ev = self.evict_buffer(spec)
        self.progress("harness: cold floors")
        floors = {label: self.ours_cold_floor(spec, lib) for label, lib in libs.items()}
        with ort_side():
            ort_floor = self.ort_cold_floor(spec, graph, ort_dt)
        for label, o in outs.items():
            o.ours_floor_ns, o.ort_floor_ns = floors[label], ort_floor
        calls_n = None
        ort_ns, ort_blocks = [], []
        for rep in range(spec.replicates):
            g_rep = spec.rep_offset + rep
            self.progress(f"ort: replicate {g_rep + 1} sessions")
            calls, bound = self._fresh(op, case, dt, ort_dt, graph, shapes, inputs, spec, [1], libs)
            for label, call in calls.items():
                with ours_side(label):
                    call.run()
            with ort_side():
                bound[1].run()
            if calls_n is None:
                first = next(iter(calls))
                with ours_side(first):
                    one = calls[first].time_cold(1, ev)[0]
                calls_n = int(min(64, max(5, math.ceil(spec.block_ms * 1e6 / max(one + 2e6, 1)))))
                for o in outs.values():
                    o.ours_iters = o.ort_runs = calls_n
            ob = {label: [] for label in libs}
            tb, seq = [], []
            for rnd in range(spec.rounds):
                for side in self._rotation(list(libs), g_rep * spec.rounds + rnd):
                    self.mark(f"{side}: replicate {g_rep + 1} block {rnd + 1}")
                    seq.append(side)
                    if side != "ort":
                        self._quiesce(libs, spec)
                        with ours_side(side):
                            ob[side].append(float(np.median(calls[side].time_cold(calls_n, ev))) - floors[side])
                        continue
                    ts = []
                    self._quiesce(libs, spec)
                    with ort_side():
                        for _ in range(calls_n):
                            self.lib.evict(ev)  # evicts, then quiesces our pool, as before our calls
                            if spec.spin == "on":  # and ORT's workers asleep too, as ours are
                                self.spin_waits.append(wait_quiet())
                            ts.append(_time_once(bound[1]))
                    tb.append(float(np.median(ts)) - ort_floor)
            for label, o in outs.items():
                o.ours_blocks.append(ob[label])
                o.ours_ns.append(float(np.median(ob[label])))
                o.process.append(spec.process)
                o.order.append(list(seq))
            ort_blocks.append(tb)
            ort_ns.append(float(np.median(tb)))
        for o in outs.values():
            o.ort_blocks, o.ort_ns = [list(b) for b in ort_blocks], list(ort_ns)


def sub_loops(block_ns: float, one_ns: float) -> tuple[int, int]:
    """(calls per sub-loop, sub-loops) of one warm block of ours: SUB_LOOPS sub-loops filling
    `block_ns` together; an op too large for that (one call >= block/SUB_LOOPS) runs 3..SUB_LOOPS
    sub-loops of one call (ORT's block is at least K + 1 calls, K >= 2, for the same reason)."""
    iters = int(max(1, math.ceil(block_ns / SUB_LOOPS / max(one_ns, 1))))
    subs = SUB_LOOPS if iters > 1 else int(min(SUB_LOOPS, max(3, math.ceil(block_ns / max(one_ns, 1)))))
    return iters, subs


def ours_block(call, iters: int, subs: int, floor_ns: float) -> float:
    """One warm block of ours: one untimed sub-loop (the warm-up, as ORT's one untimed K/1 pair),
    then the median per-call time of `subs` timed sub-loops of `iters` calls, minus the per-call
    floor -- an interruption costs one sub-loop, not the block (ORT's estimate is medians too)."""
    call.time_warm(iters)
    return float(np.median([call.time_warm(iters) / iters - floor_ns for _ in range(subs)]))


def slices(replicates: int, processes: int) -> list[tuple[int, int]]:
    """(first replicate, count) of each worker process's share of a cell's replicates: as equal
    as they divide (8 over 3: 3, 3, 2), at least 2 in each (a process's own spread needs two: 5
    over 3 is 3, 2), one share when there are fewer than 4 replicates."""
    P = max(1, min(int(processes), int(replicates) // 2))
    q, r = divmod(int(replicates), P)
    out, off = [], 0
    for p in range(P):
        n = q + (1 if p < r else 0)
        out.append((off, n))
        off += n
    return out


_OURS_RANK = {"ok": 0, "below-resolution": 1}  # anything else is a failure (2)
_ORT_RANK = {"ok": 0, "ort-discrepancy": 1, "below-resolution": 2}  # else a failure (3)


def merge_outcomes(parts: list[CellOutcome]) -> CellOutcome:
    """Shares of one cell measured in several worker processes (or turns) -> one outcome: the
    replicates in order, the first share's numerics and ORT path; each side's status is the
    worst any share had (failure > below-resolution > ok), with its message. A later share has
    no numerics of its own, so where ORT failed in it our build was merely "not measured"
    (worker._failed) and the first share's judgment of ours stands: an ORT failure never fails
    our cell. A failure on either side leaves the cell without timing (timed whole or not)."""
    out = parts[0]
    for p in parts[1:]:
        # ORT itself failed (not "not measured" because one of our builds failed)
        ort_failed = _ORT_RANK.get(p.ort_status, 3) == 3 and not p.ort_message.startswith("not measured")
        if _ORT_RANK.get(p.ort_status, 3) > _ORT_RANK.get(out.ort_status, 3):
            out.ort_status, out.ort_message = p.ort_status, p.ort_message
        ours_untouched = ort_failed and p.ours_message.startswith("not measured")
        if not ours_untouched and _OURS_RANK.get(p.ours_status, 2) > _OURS_RANK.get(out.ours_status, 2):
            out.ours_status, out.ours_message = p.ours_status, p.ours_message
        out.ours_ns += p.ours_ns
        out.ort_ns += p.ort_ns
        out.ours_blocks += p.ours_blocks
        out.ort_blocks += p.ort_blocks
        out.process += p.process
        out.order += p.order
        out.wall_s += p.wall_s
    if _OURS_RANK.get(out.ours_status, 2) == 2 or _ORT_RANK.get(out.ort_status, 3) == 3:
        out.ours_ns, out.ort_ns = [], []
    return out


class OursSideError(Exception):
    """One build of ours failed while being timed (label says which)."""

    def __init__(self, label: str, error: NativeError):
        self.label, self.error = label, error
        super().__init__(str(error))


@contextlib.contextmanager
def ours_side(label: str):
    """A step of one build of ours: its native errors are that build's failure."""
    try:
        yield
    except NativeError as e:
        raise OursSideError(label, e) from e


def _fresh_copy(a: np.ndarray, copy=np.copy) -> np.ndarray:
    """A replicate's fresh buffer for input `a`; read-only inputs (no side can write them, e.g.
    Gather's memory-mapped embedding table of up to 1 GB) are shared, not copied."""
    return a if not a.flags.writeable else copy(a)


def page_aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array whose data starts at a page boundary (4096 bytes)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + 4096, np.uint8)
    off = (-buf.ctypes.data) % 4096
    return buf[off:off + nbytes].view(dtype).reshape(shape)


def _page_aligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts at a page boundary (4096 bytes)."""
    out = page_aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _share_ort(shared: CellOutcome, o: CellOutcome) -> None:
    """The ORT side (and what every build shares) copied into one build's outcome."""
    for f in ("ort_status", "ort_message", "ort_path", "ort_dtype"):
        setattr(o, f, getattr(shared, f))
    o.ort_ops = list(shared.ort_ops)


@contextlib.contextmanager
def ort_side():
    """An ORT step: any exception in it is ORT's failure, not ours (our native errors pass)."""
    try:
        yield
    except (NativeError, OrtSideError, OursSideError):
        raise
    except Exception as e:  # noqa: BLE001
        raise OrtSideError(str(e)) from e


def _time_once(bound) -> float:
    t0 = time.perf_counter_ns()
    bound.run()
    return float(time.perf_counter_ns() - t0)


def default_evict_bytes() -> int:
    """Twice the last-level cache (64 MiB if it cannot be read). A $PERFBENCH_LLC_BYTES below what
    sysfs reports moves the non-temporal threshold only, never the eviction: evicting less than
    the cache would leave cold cells warm (evicting more only costs time)."""
    llc = max(last_level_bytes() or 0, sysfs_last_level_bytes() or 0)
    return 2 * llc if llc else 64 * 1024**2
