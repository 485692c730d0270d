"""`perfbench run`: suite -> cells -> worker -> numerics + timing -> verdicts -> store.

Orchestration only; the CLI layer prints through the `ui` callbacks and exits. Every finished
cell is committed at once, so Ctrl-C / SIGTERM (run marked `interrupted`) loses nothing
measured, and `--resume RUN` measures only what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import select

from perfbench import PROTOCOL_VERSION, SCHEMA_VERSION, dtypes, ops, stats, suites
from perfbench import filters as filt
from perfbench.compare import change, verdicts
from perfbench.errors import Interrupted, UsageError
from perfbench.kernels_ffi import builder, load
from perfbench.store import hostinfo, repo
from perfbench.store import models as m
from perfbench.store.bundle_check import DISPATCH_NS
from perfbench.store.calibration import sigma_lookup
from perfbench.store.db import Store
from perfbench.timing import caches, selfcheck
from perfbench.timing import peaks as peaks_mod
from perfbench.timing.protocol import CellSpec, default_evict_bytes, merge_outcomes, slices
from perfbench.timing.worker import Worker


@dataclass
class RunOptions:
    suite: str
    filters: list = field(default_factory=list)  # filter strings
    quick: bool = False
    threads: list | None = None
    dtypes: list | None = None
    cache: list | None = None
    spin: list | None = None
    devices: list | None = None
    max_time: float | None = None
    resume: int | None = None
    db: str | None = None
    replicates: int | None = None
    processes: int | None = None
    runner_label: str | None = None


class NullUI:
    def info(self, msg): pass
    def warn(self, msg): pass
    def plan(self, n, est_s, notes): pass
    def start_cell(self, i, n, cell, eta_s): pass
    def phase(self, phase): pass
    def end_cell(self, i, n, cell, row): pass
    def done(self): pass


def lock_path() -> Path:
    return Path(os.environ.get("PERFBENCH_LOCK", os.path.join(tempfile.gettempdir(), "perfbench-host.lock")))


@contextlib.contextmanager
def host_lock(ui):
    """One measuring run per host: two runs would time each other."""
    path = lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            ui.warn(f"another perfbench run holds the host lock {path} ({holder}); waiting for it to finish "
                    "(Ctrl-C to give up)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def signals_as_exceptions():
    """SIGTERM (and SIGINT) become Interrupted, so `finally` blocks record what finished."""
    def handler(signum, _frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def ensure_peaks(store: Store, host_id: int, build_id: int, lib, facts, ui, force: bool = False) -> list[dict]:
    """This host's stored peaks, measured first if there are none (or if force). A set the
    probes cannot make consistent (peaks.PeaksError) is not stored: `perfbench peaks` (force)
    fails with it; a run warns and carries on without shares of peak."""
    with store.session() as s:
        host = s.get(m.Host, host_id)
        rows = repo.latest_peaks(s, host)
    # a set from before this version's probes (no samples, no copy probes, or copy probes on
    # other ladder points) is measured again
    if rows and not force and peaks_mod.is_current(rows):
        return rows
    if rows and not force:
        ui.info("this host's stored peaks predate repeated read and copy probes on a ladder: re-measuring")
    ui.info("measuring this host's peaks (once per host; `perfbench peaks` re-measures) ...")
    threads = sorted({1, facts.cores})
    try:
        measured = peaks_mod.measure(lib, threads, facts.l2_bytes, facts.l3_bytes, log=ui.info,
                                     l1=caches.cache_bytes(1))
    except peaks_mod.PeaksError as e:
        if force:
            raise
        ui.warn(f"{e} This run goes on without shares of peak.")
        return []
    # the dispatch is measured SAMPLES times too; its median is what kernel-only ratios subtract
    disp = [selfcheck.ort_node_dispatch_ns() for _ in range(peaks_mod.SAMPLES)]
    row = {"kind": "ort_node_dispatch", "threads": 1, "level": None, "working_set_bytes": None,
           "value": float(np.median(disp)), "samples": disp, "unit": "ns",
           "method": "Identity chain, graph optimizations off", "isa": ""}
    ui.info("  " + peaks_mod.describe([row])[0])
    lo, hi = DISPATCH_NS
    if all(lo <= x <= hi for x in disp):
        measured.append(row)
    else:  # never stored: `perfbench import` refuses it (a host this disturbed: the samples are noise)
        ui.warn(f"ORT's per-node dispatch samples {', '.join(f'{x:.0f}' for x in disp)} ns are outside "
                f"{lo:g}..{hi:g} ns: not stored (kernel-only ratios are left out)")
    with store.session() as s:
        repo.store_peaks(s, s.get(m.Host, host_id), s.get(m.Build, build_id), measured)
        return repo.latest_peaks(s, s.get(m.Host, host_id))


def estimate_cell_s(op, cell, settings: dict, peaks: list, facts, history: dict) -> float:
    """Seconds one cell will take: its last wall time on this host class, else a model."""
    if cell.key in history:
        return history[cell.key]
    dt = dtypes.get(cell.dtype)
    nbytes = op.bytes_moved(cell.case, dt)
    bw = verdicts.read_ceiling(peaks, cell.threads, nbytes, cold=cell.cache == "cold")
    op_s = nbytes / (0.4 * bw["value"] * 1e9) if bw else nbytes / 5e9
    if op.bound_for(cell.case) in ("compute", "roofline"):  # e.g. attention prefill: flops, not bytes, decide
        fma = verdicts.best(verdicts.pick_peak(peaks, "fma_f32", cell.threads))
        op_s = max(op_s, op.flops(cell.case) / (0.5 * fma["value"] * 1e9) if fma else op.flops(cell.case) / 2e10)
    if cell.numerics_only:
        return 0.15 + 5 * op_s
    reps = settings["replicates"]
    block = settings["block_ms"] / 1000
    if cell.cache == "cold":
        return 0.3 + reps * settings["rounds"] * 2 * 8 * (0.004 + op_s)
    # warm-ups: ours' sub-loop and ORT's K/1 pair (protocol 4: K + 1 >= 3 runs). With 4 op_s
    # the first full attention run on a fresh Zen 4 host (2026-12-04) took 14m28s by its own
    # "done in" (14m34s from start to exit) against an estimated 11m28s (warm timed cells 1.36x
    # the model; with 7 op_s, 1.19x)
    per_round = 2 * block + 7 * op_s + max(block, 3 * op_s)
    return 0.25 + reps * (0.04 + 3 * op_s + settings["rounds"] * per_round)


def _history(store: Store, host_class_id: int) -> dict:
    """Last wall time per cell key on this host class (invalidated runs are ignored)."""
    with store.session() as s:
        q = (select(m.Cell, m.Case.case_id).join(m.Case, m.Cell.case_pk == m.Case.id).join(m.Run)
             .where(m.Run.host_class_id == host_class_id, m.Run.invalidated.is_(False)).order_by(m.Cell.id))
        return {(cid, c.dtype, c.threads, c.device, c.cache, c.spin): c.wall_s for c, cid in s.execute(q)}


def run_sigma(lookup, op, cell, outcome) -> tuple[float, float]:
    """(sigma_b, its dof) of a cell's log ours/ORT ratio for its run verdict: this host class's
    calibration of the cell (`perfbench calibrate`), else the stated default (CONTRACTS §4)."""
    got = None
    if lookup is not None:
        row = {"case_id": cell.case.case_id, "dtype": cell.dtype, "threads": cell.threads, "device": cell.device,
               "cache": cell.cache, "spin": cell.spin}
        got = lookup(row, op.timing_definition(cell.case, cell.dtype, outcome.ort_dtype or cell.dtype))
    sigma, dof, _ = change.sigma_prior(got, "ratio")
    return sigma, dof


def write_share(op, case, dt) -> float:
    """The share of a cell's bytes that its op writes (outputs / bytes moved): where its bandwidth
    ceiling sits between the read and the copy probes (verdicts.bandwidth_ceiling)."""
    moved = op.bytes_moved(case, dt)
    return op.bytes_written(case, dt) / moved if moved > 0 else 0.0


def derive(op, cell, outcome, peaks: list, facts, lookup=None) -> dict:
    """Verdict, throughput and share of this host's peak for one measured cell. lookup: the
    calibration lookup of the run (store.calibration.sigma_lookup), for the verdict's sigma_b."""
    sigma, sigma_dof = run_sigma(lookup, op, cell, outcome)
    v = verdicts.decide(outcome.ours_status, outcome.ort_status, outcome.ours_ns, outcome.ort_ns,
                        cell.numerics_only, outcome.ort_message, groups=outcome.process or None,
                        sigma_b=sigma, sigma_dof=sigma_dof)
    dt = dtypes.get(cell.dtype)
    nbytes = op.bytes_moved(cell.case, dt)
    flops = op.flops(cell.case)
    # a cold cell's data comes from DRAM whatever its size (caches evicted before every call)
    level = "DRAM" if cell.cache == "cold" else verdicts.cache_level(nbytes, cell.threads, facts.l2_bytes,
                                                                       facts.l3_bytes, caches.cache_bytes(1))
    cold = cell.cache == "cold"
    ws, compute_kind = write_share(op, cell.case, dt), op.compute_peak(cell.case, dt.name)
    bound = verdicts.resolve_bound(op.bound_for(cell.case), peaks, cell.threads, flops, nbytes, cold, ws, compute_kind)
    if bound == "compute":
        # kernels compute in f32 whatever the storage type (f16/bf16 converted in registers), so
        # the f32 FMA peak is their ceiling; a bf16 kernel on bf16 pairs (MatMul) answers to the
        # bf16 dot peak instead (Op.compute_peak)
        work, unit = flops, "GFLOP/s"
    else:
        # the bandwidth at the working set this side's warm loop keeps resident, for its share of writes
        work, unit = nbytes, "GB/s"
    pk = verdicts.ceiling_for(peaks, bound, cell.threads, nbytes, cold, ws, compute_kind)
    sides = {}
    ort_dt = dtypes.get(outcome.ort_dtype) if outcome.ort_dtype else dt
    for impl, ns, status in (("ours", outcome.ours_ns, outcome.ours_status),
                             ("ort", outcome.ort_ns, outcome.ort_status)):
        med = stats.median(ns) if ns else None
        side_work, side_pk = work, pk
        if impl == "ort" and ort_dt is not dt:  # e.g. bf16 run by ORT in f32: ORT's bytes and kernel
            if bound == "memory":
                side_work = op.bytes_moved(cell.case, ort_dt)
            side_pk = verdicts.ceiling_for(peaks, bound, cell.threads, side_work, cold,
                                           write_share(op, cell.case, ort_dt), op.compute_peak(cell.case, ort_dt.name))
        tp = side_work / med if med and med > 0 and status in ("ok", "ort-discrepancy") else None
        sides[impl] = {"median_ns": med, "throughput": tp,
                       "share": (tp / side_pk["value"]) if tp and side_pk else None}
    return {"verdict": v, "flops": flops, "bytes": nbytes, "level": level if bound == "memory" else None, "bound": bound,
            "peak": pk["value"] if pk else None, "peak_unit": unit, "unit": unit, "sides": sides}


def record_cell(store: Store, run_id: int, cell, outcome, derived: dict, op, seed: int) -> None:
    with store.session() as s:
        ort_dtype = outcome.ort_dtype or cell.dtype
        case = repo.ensure_case(s, cell.case.case_id, cell.case.op, dict(cell.case.params),
                                op.timing_definition(cell.case, cell.dtype, ort_dtype))
        v = derived["verdict"]
        row = m.Cell(
            run_id=run_id, case_pk=case.id, dtype=cell.dtype, threads=cell.threads, device=cell.device,
            cache=cell.cache, spin=cell.spin, timing_hash=case.timing_hash, numerics_hash=op.numerics_definition(),
            seed=seed, numerics_only=cell.numerics_only, err_ours=outcome.err_ours, err_ort=outcome.err_ort,
            err_ours_vs_ort=outcome.err_ours_vs_ort, err_ours_plain=outcome.err_ours_plain,
            err_ort_plain=outcome.err_ort_plain, tol=outcome.tol, floor=outcome.floor, n=v.n, ratio=v.ratio,
            ratio_lo=v.lo, ratio_hi=v.hi, mean_log=v.mean_log, sd_log=v.sd_log, ci_method=v.method,
            verdict=v.verdict, verdict_note=v.note, flops=derived["flops"], bytes_moved=derived["bytes"],
            bound=derived["bound"], level=derived["level"], peak=derived["peak"], peak_unit=derived["peak_unit"],
            K=outcome.K, ours_iters=outcome.ours_iters, ort_runs=outcome.ort_runs, isa=outcome.isa,
            wall_s=outcome.wall_s, design={"process": list(outcome.process), "order": list(outcome.order)},
            measured_at=repo.now(),
        )
        for impl in ("ours", "ort"):
            sd = derived["sides"][impl]
            row.measurements.append(m.Measurement(
                impl=impl,
                status=getattr(outcome, f"{impl}_status"),
                message=getattr(outcome, f"{impl}_message"),
                dtype=cell.dtype if impl == "ours" else ort_dtype,
                path="" if impl == "ours" else outcome.ort_path,
                detail=[] if impl == "ours" else list(outcome.ort_ops),
                median_ns=sd["median_ns"],
                replicates_ns=list(getattr(outcome, f"{impl}_ns")),
                blocks_ns=list(getattr(outcome, f"{impl}_blocks")),
                floor_ns=getattr(outcome, f"{impl}_floor_ns"),
                throughput=sd["throughput"], throughput_unit=derived["unit"], peak_share=sd["share"],
            ))
        s.add(row)


def new_run(suite, settings: dict, partial: bool, quick: bool, flts: list, host_id: int, hc_id: int, build_pk: int,
            versions: dict, git: dict, facts, runner_label: str | None, tuning: list, cells_planned: int,
            origin: str = "run") -> m.Run:
    """A Run row in state `running` (the caller adds it to a session)."""
    return m.Run(suite=suite.name, suite_hash=suite.text_hash, status="running", partial=partial, quick=quick,
                 filters=[f.text for f in flts], settings=settings, host_id=host_id, host_class_id=hc_id,
                 build_id=build_pk, ort_version=versions["onnxruntime"], protocol_version=PROTOCOL_VERSION,
                 schema_version=SCHEMA_VERSION, versions=versions, git_sha=git["sha"], branch=git["branch"],
                 dirty=git["dirty"], hostname=facts.hostname, runner_label=runner_label,
                 load_avg=hostinfo.load_average(), tuning=tuning, cells_planned=cells_planned, origin=origin,
                 started_at=repo.now())


def suite_settings(suite, quick: bool, replicates: int | None, processes: int | None = None) -> dict:
    """The suite's measurement settings with --quick / --replicates / --processes applied, each
    within its bound (suites.LIMITS: the CLI, the suite loader and `perfbench import` share them)."""
    settings = dict(suite.settings)
    if processes is not None:
        suites.check_limit("processes", processes, "--processes")
        settings["processes"] = processes
    if quick:
        settings["replicates"] = settings["quick_replicates"]
    if replicates is not None:
        suites.check_limit("replicates", replicates, "--replicates")
        settings["replicates"] = replicates
    suites.check_settings(settings, f"{suite.path}: [suite]")
    return settings


def expand_cells(suite, opts, flts: list, facts, settings: dict) -> tuple[list, list]:
    """The cells to measure and the notes on what was skipped (an error when none match); records
    the axis overrides and the eviction buffer size in `settings`. `opts`: quick, threads, dtypes,
    cache, spin, devices."""
    cells, notes = suite.expand(quick=opts.quick, dtypes_=opts.dtypes, threads=opts.threads, cache=opts.cache,
                                spin=opts.spin, devices=opts.devices, filters=flts, max_threads=facts.cores)
    if not cells:
        raise UsageError(f"no cells match: suite {suite.name!r} with filters {[f.text for f in flts]}"
                         " (perfbench list --suite NAME shows the cells)")
    settings["axes_overrides"] = {"threads": opts.threads, "dtypes": opts.dtypes, "cache": opts.cache,
                                  "spin": opts.spin, "devices": opts.devices}
    settings["evict_bytes"] = default_evict_bytes()
    return cells, notes


def cell_spec(cell, settings: dict, facts, replicates: int | None = None, process: int = 0, rep_offset: int = 0,
              timing_only: bool = False) -> CellSpec:
    """What a worker needs to measure one cell, or one worker process's share of its replicates
    (replicates: the settings' unless given)."""
    return CellSpec(op=cell.case.op, params=[list(p) for p in cell.case.params], dtype=cell.dtype,
                    threads=cell.threads, cache=cell.cache, spin=cell.spin, device=cell.device,
                    seed=settings["seed"], replicates=replicates or settings["replicates"],
                    rounds=settings["rounds"], block_ms=settings["block_ms"], numerics_only=cell.numerics_only,
                    evict_bytes=settings["evict_bytes"], evict_threads=facts.cores, process=process,
                    rep_offset=rep_offset, timing_only=timing_only)


def measure_spread(workers: list, cell, settings: dict, facts, timeout_s: float, on_phase=None):
    """One cell with its replicates spread over the worker processes `workers` (CONTRACTS §4:
    a fresh process samples what one process cannot -- thread placement, library mappings, ORT's
    pools), one share after another; the first share also judges numerics, the others only time.
    A worker with several builds answers label -> CellOutcome; so does this then. Each share
    has its own timeout_s. Returns the merged outcome (or dict of them)."""
    if cell.numerics_only:
        return workers[0].measure(cell_spec(cell, settings, facts), timeout_s, on_phase=on_phase)
    parts = []
    for p, (off, n) in enumerate(slices(settings["replicates"], min(len(workers), settings.get("processes", 1)))):
        spec = cell_spec(cell, settings, facts, n, process=p, rep_offset=off, timing_only=p > 0)
        got = workers[p].measure(spec, timeout_s, on_phase=on_phase)
        parts.append(got)
        views = list(got.values()) if isinstance(got, dict) else [got]
        if any(o.ours_status not in ("ok", "below-resolution") or not o.ours_ns for o in views):
            break  # not timed (numerics failed, a side failed or crashed): no more shares
    if isinstance(parts[0], dict):
        return {label: merge_outcomes([x[label] for x in parts]) for label in parts[0]}
    return merge_outcomes(parts)


def finish_runs(store: Store, run_ids, status: str, message: str, stop, ui, partial: bool | None = None) -> None:
    """Stop the workers (`stop()`) and record how the runs ended. Signals are ignored meanwhile:
    a second Ctrl-C must not stop the runs' status from being recorded."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop()
        with store.session() as s:
            for rid in run_ids:
                r = s.get(m.Run, rid)
                r.status, r.finished_at, r.message = status, repo.now(), message
                if partial is not None:
                    r.partial = partial
        ui.done()
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


RESUME_CONFLICTS = ("filters", "quick", "threads", "dtypes", "cache", "spin", "replicates", "processes")


def run(opts: RunOptions, ui=None) -> int:
    """Measure a suite; returns the run id. Every input error surfaces before the host lock,
    the native build and any measuring."""
    ui = ui or NullUI()
    store = Store(opts.db)
    suite = suites.load(opts.suite)
    flts = [filt.parse(f) for f in opts.filters]
    facts = hostinfo.host_facts()
    versions = hostinfo.versions()
    settings = suite_settings(suite, opts.quick, opts.replicates, opts.processes)

    resume_done: set = set()
    old_build = None
    if opts.resume is not None:
        given = [k for k in RESUME_CONFLICTS if getattr(opts, k)]
        if given:
            raise UsageError(f"--resume continues run {opts.resume} with its own settings; drop "
                             + ", ".join("--" + ("filter" if k == "filters" else "dtype" if k == "dtypes" else k)
                                         for k in given))
        with store.session() as s:
            old = repo.load_run(s, opts.resume)
            if old.suite != suite.name:
                raise UsageError(f"run {old.id} is of suite {old.suite!r}, not {suite.name!r}")
            if old.suite_hash != suite.text_hash:
                raise UsageError(f"{suite.path} changed since run {old.id} was started; resuming would mix two "
                                 "suite definitions in one run: start a new run instead.")
            if old.host_class.key != facts.class_key:
                raise UsageError(f"run {old.id} was measured on another host class ({old.host_class.key})")
            if old.protocol_version != PROTOCOL_VERSION:
                raise UsageError(f"run {old.id} was measured with protocol version {old.protocol_version}; this "
                                 f"perfbench measures with {PROTOCOL_VERSION} (docs/protocol.md): start a new run "
                                 "instead.")
            if old.ort_version != versions["onnxruntime"]:
                raise UsageError(f"run {old.id} was measured with ORT {old.ort_version}; this is "
                                 f"{versions['onnxruntime']}: start a new run instead.")
            old_build = old.build.build_id
            flts = [filt.parse(f) for f in old.filters]
            opts.quick = old.quick
            settings = dict(old.settings)
            # stored by an older perfbench (or imported): resumed only within today's bounds
            suites.check_settings(settings, f"run {old.id}'s settings:",
                                  f"run {old.id} cannot be resumed with it: start a new run instead")
            resume_done = {(c.case.case_id, c.dtype, c.threads, c.device, c.cache, c.spin) for c in old.cells}
            axes = old.settings.get("axes_overrides", {})
            opts.threads, opts.dtypes = axes.get("threads"), axes.get("dtypes")
            opts.cache, opts.spin = axes.get("cache"), axes.get("spin")
            opts.devices = axes.get("devices")

    cells, notes = expand_cells(suite, opts, flts, facts, settings)
    todo = [c for c in cells if c.key not in resume_done]
    # partial: not the whole suite at its own settings (a --max-time stop adds to this below)
    overridden = bool(opts.threads or opts.dtypes or opts.cache or opts.spin or opts.devices)
    partial = opts.quick or bool(flts) or overridden

    # one measuring perfbench per host from here on: building (parallel compiles) and timing
    # would disturb a run in progress
    with host_lock(ui), signals_as_exceptions():
        info = builder.build(log=ui.info)
        if old_build is not None and old_build != info.build_id:
            raise UsageError(
                f"run {opts.resume} was measured with native build {old_build}; the sources now build "
                f"{info.build_id}. Resuming would mix two builds in one run: start a new run instead.")
        lib = load(info)
        git = hostinfo.git_info()
        with store.session() as s:
            host = repo.ensure_host(s, facts)
            build = repo.ensure_build(s, info)
            host_id, hc_id, build_pk = host.id, host.host_class_id, build.id
        peaks = ensure_peaks(store, host_id, build_pk, lib, facts, ui)
        tuning = hostinfo.tuning_advice()
        if tuning:
            ui.warn("host not tuned for benchmarking (pyperf system show): " + "; ".join(tuning[:3])
                    + ("; ..." if len(tuning) > 3 else "") + " -- `python -m pyperf system tune` fixes what it can")
        with store.session() as s:
            if opts.resume is not None:
                r = s.get(m.Run, opts.resume)
                r.status, r.finished_at = "running", None
            else:
                r = new_run(suite, settings, partial, opts.quick, flts, host_id, hc_id, build_pk, versions, git,
                            facts, opts.runner_label, tuning, len(cells))
                s.add(r)
            s.flush()
            run_id = r.id
        history = _history(store, hc_id)
        with store.session() as s:
            lookup, _ = sigma_lookup(s, s.get(m.Run, run_id), None)  # the verdicts' sigma_b
        est = [estimate_cell_s(ops.get(c.case.op), c, settings, peaks, facts, history) for c in todo]
        ui.plan(len(todo), sum(est), notes)
        workers = [Worker(info.to_dict()) for _ in range(max(1, int(settings.get("processes", 1))))]
        status, message = "failed", ""
        t0 = time.monotonic()
        spent_est = 0.0
        learned_ort_dtype: dict = {}
        try:
            for i, (cell, e) in enumerate(zip(todo, est), 1):
                elapsed = time.monotonic() - t0
                if opts.max_time and elapsed > opts.max_time:
                    message = (f"stopped by --max-time {opts.max_time:g}s after {i - 1}/{len(todo)} cells; "
                               f"`perfbench run --suite {suite.name} --resume {run_id}` measures the rest")
                    ui.warn(message)
                    partial = True
                    break
                scale = elapsed / spent_est if spent_est > 0 else 1.0
                ui.start_cell(i, len(todo), cell, sum(est[i - 1:]) * scale)
                op = ops.get(cell.case.op)
                outcome = measure_spread(workers, cell, settings, facts, float(settings["timeout_s"]),
                                         on_phase=ui.phase)
                # a worker that died before ORT's dtype was known: use what this op/dtype had
                if outcome.ort_dtype:
                    learned_ort_dtype[(op.name, cell.dtype)] = outcome.ort_dtype
                else:
                    outcome.ort_dtype = learned_ort_dtype.get((op.name, cell.dtype), "")
                derived = derive(op, cell, outcome, peaks, facts, lookup)
                record_cell(store, run_id, cell, outcome, derived, op, settings["seed"])
                spent_est += e
                ui.end_cell(i, len(todo), cell, (outcome, derived))
            status = "complete"  # the sweep ended (numerics failures do not change this)
        except Interrupted as e:
            status, message = "interrupted", f"interrupted by {signal.Signals(e.signum).name}; --resume {run_id} continues"
            raise
        except BaseException as e:
            status, message = "failed", f"{e.__class__.__name__}: {e}"
            raise
        finally:
            # a resumed run that measured everything is whole again
            finish_runs(store, [run_id], status, message, lambda: [w.stop() for w in workers], ui, partial=partial)
        return run_id
