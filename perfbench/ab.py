"""`perfbench ab` and `perfbench calibrate`: two builds of our library measured side by side.

ab: base and head (git revisions; head defaults to the working tree) are built into their own
paths and loaded in one worker with their own header declarations; every cell is measured with
base, head and ORT in one rotation (blocks base, head, ORT, the order rotating every round), so
machine drift cancels. Each side is stored as a run (origin ab-base / ab-head, never history),
and the comparison with its verdicts (compare.change) is stored and returned as a document.
An op whose native interface differs between the two headers is measured with each side's own
checkout in alternating worker processes instead, and the document says so.

calibrate: the same build against itself (two loaded copies, interleaved like ab), in several
rounds over the cells; per cell key the between-run spreads sigma_b of the ab change, of our
time, of ORT's and of the ours/ORT ratio are stored for the host class (stats.between_run_sigma,
shrunk toward the pooled spread of all cells: stats.shrink_sigma).
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
from sqlalchemy import select

from perfbench import PROTOCOL_VERSION, ops, revisions, stats, suites
from perfbench import filters as filt
from perfbench.compare import change, views
from perfbench.errors import BuildError, Interrupted, UsageError
from perfbench.kernels_ffi import builder, load
from perfbench.runner import (
    NullUI,
    cell_spec,
    derive,
    ensure_peaks,
    estimate_cell_s,
    expand_cells,
    finish_runs,
    host_lock,
    measure_spread,
    new_run,
    record_cell,
    signals_as_exceptions,
    suite_settings,
)
from perfbench.store import hostinfo, repo
from perfbench.store import models as m
from perfbench.store.calibration import file_unfit, processes_of, sigma_lookup
from perfbench.store.db import Store
from perfbench.timing.protocol import CellOutcome, merge_outcomes
from perfbench.timing.worker import Worker

CALIBRATION_FORMAT = 1
LABELS = ("base", "head")
NOT_MEASURED = "not measured"  # the message prefix of a build that did not fail but was not measured
MAX_PROCESSES = suites.AB_MAX_PROCESSES


@dataclass
class ABOptions:
    suite: str
    base_rev: str | None = None
    head_rev: str | None = None
    filters: list = field(default_factory=list)
    quick: bool = False
    threads: list | None = None
    dtypes: list | None = None
    cache: list | None = None
    spin: list | None = None
    devices: list | None = None
    replicates: int | None = None
    processes: int | None = None
    db: str | None = None
    calibration_file: str | None = None
    min_effect: float = change.MIN_EFFECT
    q: float = change.Q
    rounds: int = 3  # calibrate only


def _plan(opts: ABOptions):
    store = Store(opts.db)
    suite = suites.load(opts.suite)
    flts = [filt.parse(f) for f in opts.filters]
    facts = hostinfo.host_facts()
    settings = suite_settings(suite, opts.quick, opts.replicates, opts.processes)
    cells, notes = expand_cells(suite, opts, flts, facts, settings)
    note = cap_processes(settings)
    return store, suite, flts, facts, settings, cells, notes + ([note] if note else [])


def cap_processes(settings: dict) -> str | None:
    """Cap settings["processes"] at MAX_PROCESSES in place; the note to print where that changes
    the spread (8 replicates over 10 processes are 8 shares either way). The settings stored are
    what was used: a calibration keyed by the asked-for count would judge runs spread over more
    processes than it measured."""
    if settings.get("processes", 1) <= MAX_PROCESSES:
        return None
    asked = processes_of(settings)
    settings["processes"] = MAX_PROCESSES
    if processes_of(settings) == asked:
        return None
    return (f"--processes: ab and calibrate spread replicates over at most {MAX_PROCESSES} worker processes; "
            f"each cell's {settings.get('replicates', 8)} replicates go to {processes_of(settings)} of them, not {asked}")


def _eta(i: int, n: int, est_s: float, t0: float) -> float:
    """Seconds left before cell i of n: the estimate at first, then the pace so far."""
    done = time.monotonic() - t0
    return est_s - done if i == 1 else done / (i - 1) * (n - i + 1)


class _Sides:
    """Workers for both sides: one with both builds (interleaved); one per build of this
    checkout (to measure a side again on its own when the other crashed the shared worker); and
    per-side workers of each side's own checkout, for ops whose interface changed (alternating)."""

    def __init__(self, base: revisions.Side, head: revisions.Side):
        self.sides = {"base": base, "head": head}
        # both builds in one worker, one such worker per process a cell's replicates spread over
        self.together = [Worker(base.build.to_dict(), sides={s.label: s.build.to_dict() for s in (base, head)})
                         for _ in range(MAX_PROCESSES)]
        self.solo = {s.label: Worker(s.build.to_dict()) for s in (base, head)}
        self.apart = {s.label: Worker(s.build.to_dict(), checkout=str(s.checkout)) for s in (base, head)}

    def _run(self, worker, label, spec, timeout_s, on_phase):
        try:
            return worker.measure(spec, timeout_s, on_phase=on_phase)
        except (RuntimeError, TypeError) as e:
            side = self.sides.get(label)
            where = f"{label} ({side.ref})" if side else label
            raise BuildError(f"a measuring worker for {where} could not run: {e}. The alternating fallback runs "
                             "each side's own perfbench: a revision whose harness predates this one's worker "
                             "protocol cannot be measured that way.") from e

    def measure(self, cell, settings, facts, timeout_s, interleaved: bool, on_phase=None, only=None) -> dict:
        """label -> CellOutcome. `only`: measure that side alone (the other has no such kernel)."""
        if interleaved and only is None:
            try:
                outs = measure_spread(self.together, cell, settings, facts, timeout_s, on_phase)
            except (RuntimeError, TypeError) as e:
                raise BuildError(f"a measuring worker for both builds could not run: {e}") from e
            for label, out in outs.items():
                other = outs["head" if label == "base" else "base"]
                if (out.ours_message.startswith(NOT_MEASURED) and not other.ours_message.startswith(NOT_MEASURED)
                        and other.ours_status in ("error", "crashed", "timeout")):
                    # the other build crashed, hung or failed in the shared worker: this one still
                    # gets its own verdict, measured alone with the same harness
                    solo = self._run(self.solo[label], label, cell_spec(cell, settings, facts), timeout_s, on_phase)
                    solo.ours_message = (solo.ours_message + " " if solo.ours_message else "") + (
                        f"(measured alone: the {'head' if label == 'base' else 'base'} build failed in the shared "
                        "worker)")
                    outs[label] = solo
            return outs
        labels = (only,) if only else LABELS
        reps = settings["replicates"]
        turns = 1 if cell.numerics_only else max(1, reps // 2)
        parts = {label: [] for label in labels}
        for t in range(turns):
            n = 2 if t < turns - 1 else reps - 2 * (turns - 1)
            for label in (labels if t % 2 == 0 else labels[::-1]):
                # the turn's replicates continue the cell's clock (the rotation and ORT's K/1 order
                # balance over the cell, not restart each turn); all in the side's one worker process
                spec = cell_spec(cell, settings, facts, n, rep_offset=2 * t)
                parts[label].append(self._run(self.apart[label], label, spec, timeout_s, on_phase))
            # every side measured in this turn; stop when one of them cannot be timed
            if any(p[-1].ours_status != "ok" or not p[-1].ours_ns for p in parts.values()):
                break
        return {label: merge_outcomes(p) for label, p in parts.items()}

    def stop(self):
        for w in (*self.together, *self.solo.values(), *self.apart.values()):
            w.stop()


def _prepare_sides(opts: ABOptions, ui, same_build: bool = False):
    root = revisions.repo_root()
    build_root = builder.default_build_root().parent / "ab"
    if same_build:
        base = revisions.side("base", None, root, build_root)
        head = revisions.side("head", None, root, build_root)
    else:
        base = revisions.side("base", opts.base_rev, root, build_root)
        head = revisions.side("head", opts.head_rev, root, build_root)
    for s in (base, head):
        ui.info(f"{s.label}: {s.ref}" + (f" ({s.sha[:12]})" if s.sha else " (working tree"
                                         + (", uncommitted changes" if s.dirty else "") + ")"))
        revisions.build_side(s, build_root, log=ui.info)
    return base, head


def _git_of(s: revisions.Side) -> dict:
    if s.sha:
        return {"sha": s.sha, "branch": None, "dirty": False}
    return {**hostinfo.git_info(s.checkout), "dirty": s.dirty}  # untracked native/ sources count too


def ab(opts: ABOptions, ui=None) -> dict:
    """Measure base and head side by side; returns the comparison document (also stored)."""
    ui = ui or NullUI()
    if not opts.base_rev:
        raise UsageError("--base-rev is required (e.g. --base-rev origin/main or --base-rev HEAD)")
    store, suite, flts, facts, settings, cells, notes = _plan(opts)
    cal = load_calibration_file(opts.calibration_file) if opts.calibration_file else None
    versions = hostinfo.versions()
    with host_lock(ui), signals_as_exceptions():
        base, head = _prepare_sides(opts, ui)
        op_names = sorted({c.case.op for c in cells})
        compat = revisions.compatibility(base.header, head.header, op_names)
        lacking = revisions.lacking(base.header, head.header, op_names)  # op -> the side without its kernel
        doc_notes = list(notes)
        for op, why in compat.items():
            if why is None:
                continue
            if op in lacking:
                doc_notes.append(f"{op}: {why}; its cells are measured on the other side only (not comparable)")
            else:
                doc_notes.append(f"{op}: {why}; measured with each side's own checkout in alternating worker "
                                 "processes (base and head in turns; ORT measured in each turn)")
        why = file_unfit(cal, facts.class_key, PROTOCOL_VERSION, versions["onnxruntime"], processes_of(settings))
        if why:
            doc_notes.append(f"the calibration file {why}: not used (the stated default sigma_b judges; with a file "
                             "given, the database's calibrations are not consulted)")
        for n in doc_notes:
            ui.info(n)
        lib = load(head.build)
        with store.session() as s:
            host = repo.ensure_host(s, facts)
            host_id, hc_id = host.id, host.host_class_id
            builds = {x.label: repo.ensure_build(s, x.build).id for x in (base, head)}
        peaks = ensure_peaks(store, host_id, builds["head"], lib, facts, ui)
        tuning = hostinfo.tuning_advice()
        partial = True  # a comparison's runs are never history (origin ab-*)
        run_ids = {}
        with store.session() as s:
            for x in (base, head):
                r = new_run(suite, {**settings, "ab": {"side": x.label, "ref": x.ref}}, partial, opts.quick, flts,
                            host_id, hc_id, builds[x.label], versions, _git_of(x), facts, None, tuning, len(cells),
                            origin=f"ab-{x.label}")
                s.add(r)
                s.flush()
                run_ids[x.label] = r.id
            # each side's stored run verdict folds in the calibrated sigma_b (the comparison's
            # calibration file, else the database's), as `perfbench run` stores its own
            lookup, _ = sigma_lookup(s, s.get(m.Run, run_ids["head"]), cal)
        est = sum(estimate_cell_s(ops.get(c.case.op), c, settings, peaks, facts, {}) for c in cells) * 1.5
        ui.plan(len(cells), est, [])
        workers = _Sides(base, head)
        status, message = "failed", ""
        t0 = time.monotonic()
        try:
            for i, cell in enumerate(cells, 1):
                ui.start_cell(i, len(cells), cell, _eta(i, len(cells), est, t0))
                op = ops.get(cell.case.op)
                interleaved = compat.get(op.name) is None
                only = {"base": "head", "head": "base"}.get(lacking.get(op.name))
                outs = workers.measure(cell, settings, facts, float(settings["timeout_s"]), interleaved,
                                       on_phase=ui.phase, only=only)
                derived = {}
                for label, out in outs.items():
                    # a calibrated sigma_b holds the spread of interleaved runs over
                    # processes_of(settings) worker processes; a cell measured otherwise
                    # (alternating turns, as change.py judges them too; a build measured alone in
                    # fewer processes) is not what it measured: the default judges it
                    fits = interleaved and len(set(out.process)) == processes_of(settings)
                    derived[label] = derive(op, cell, out, peaks, facts, lookup if fits else None)
                    record_cell(store, run_ids[label], cell, out, derived[label], op, settings["seed"])
                shown = "head" if "head" in outs else "base"
                ui.end_cell(i, len(cells), cell, (outs[shown], derived[shown]))
            status = "complete"
        except Interrupted as e:
            status, message = "interrupted", f"interrupted by {signal.Signals(e.signum).name}"
            raise
        except BaseException as e:
            status, message = "failed", f"{e.__class__.__name__}: {e}"
            raise
        finally:
            finish_runs(store, run_ids.values(), status, message, workers.stop, ui)
    op_modes = {op: "alternating-workers" for op, why in compat.items() if why is not None}
    with store.session() as s:
        doc = build_document(s, "ab", run_ids["base"], run_ids["head"], _ref_label(base), _ref_label(head), opts,
                             cal, mode="interleaved", op_modes=op_modes, notes=doc_notes)
        doc["comparison_id"] = save_comparison(s, doc, run_ids["base"], run_ids["head"], hc_id)
    return doc


# ---- the comparison document ----

def _side_info(run: m.Run, label: str, ref: str) -> dict:
    return {"label": label, "ref": ref, "git_sha": run.git_sha, "run_id": run.id, "build_id": run.build.build_id,
            "source_hash": run.build.source_hash, "dirty": bool(run.dirty)}


def _ref_label(side: revisions.Side) -> str:
    return side.ref + (" (uncommitted changes)" if side.sha is None and side.dirty else "")


def build_document(s, kind: str, base_id: int, head_id: int, base_ref: str, head_ref: str, opts: ABOptions,
                   cal_file: dict | None, mode: str, op_modes: dict | None = None, notes: list | None = None) -> dict:
    """The comparison document of two stored runs (schema: compare.render_change)."""
    b, h = repo.load_run(s, base_id), repo.load_run(s, head_id)
    bcells = [views.cell_view(c) for c in sorted(b.cells, key=lambda c: c.id)]
    hcells = [views.cell_view(c) for c in sorted(h.cells, key=lambda c: c.id)]
    bview, hview = views.run_view(b), views.run_view(h)
    incomparable = change.run_incomparable(bview, hview)
    lookup, used = sigma_lookup(s, h, cal_file, other=b)
    rows = change.compare_cells(bcells, hcells, mode=mode, op_modes=op_modes, sigma_for=lookup,
                                incomparable=incomparable, min_effect=opts.min_effect, q=opts.q)
    # the oldest calibration a row was judged with is the one whose age matters
    meta = min(used.values(), key=lambda c: c["created_at"]) if used else None
    age = None
    if meta:
        age = (datetime.now(timezone.utc) - datetime.fromisoformat(meta["created_at"]).replace(
            tzinfo=timezone.utc)).total_seconds()
    calib = change.calibration_info(meta, rows, age, mode)
    host = h.host
    load_avg = [float(x) for x in (h.load_avg or [])][:3]
    doc = {
        "perfbench_comparison": 1, "schema_version": 1, "kind": kind,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "suite": h.suite, "filters": list(h.filters or []),
        "base": _side_info(b, "base", base_ref),
        "head": _side_info(h, "head", head_ref),
        "host": {"hostname": h.hostname, "host_class": h.host_class.key, "cpu_model": h.host_class.cpu_model,
                 "cores": h.host_class.cores, "load_avg": load_avg + [0.0] * (3 - len(load_avg)),
                 "ort_version": h.ort_version, "compiler": h.build.compiler_version,
                 "flags": list(h.build.flags), "isa": _isa(hcells), "os": host.meta.get("platform", "")
                 if host and host.meta else ""},
        "settings": {"min_effect": opts.min_effect, "q": opts.q,
                     "replicates": int((h.settings or {}).get("replicates", 0)), "mode": mode},
        "calibration": calib,
        "summary": change.summary(rows),
        "exit_code": change.exit_code(rows),
        "rows": rows,
        "notes": list(notes or []) + [f"not comparable: {w}" for w in incomparable],
        "cannot_catch": list(change.CANNOT_CATCH),
    }
    return views.finite(doc)


def _isa(cells: list[dict]) -> str:
    isas = sorted({c["protocol"]["isa"] for c in cells if c["protocol"]["isa"]})
    return ",".join(isas)


def save_comparison(s, doc: dict, base_id: int | None, head_id: int | None, hc_id: int | None) -> int:
    c = m.Comparison(kind=doc["kind"], base_run_id=base_id, head_run_id=head_id, host_class_id=hc_id,
                     base_ref=str(doc["base"]["ref"])[:255], head_ref=str(doc["head"]["ref"])[:255],
                     summary=doc["summary"], exit_code=doc["exit_code"], document=doc, created_at=repo.now())
    for r in doc["rows"]:
        c.rows.append(m.ComparisonRow(
            case_id=r["case_id"], op=r["op"], dtype=r["dtype"], threads=r["threads"], device=r["device"],
            cache=r["cache"], spin=r["spin"], verdict=r["verdict"],
            abs_verdict=r["abs"]["verdict"] if r["abs"] else None,
            ratio_verdict=r["ratio"]["verdict"] if r["ratio"] else None,
            abs_change=r["abs"]["change"] if r["abs"] else None,
            ratio_change=r["ratio"]["change"] if r["ratio"] else None,
            sigma_b=r["abs"]["sigma_b"] if r["abs"] else None, why=r["why"]))
    s.add(c)
    s.flush()
    return c.id


def compare_runs(s, base_id: int, head_id: int, base_ref: str, head_ref: str, opts: ABOptions) -> dict:
    """`perfbench compare`: two stored runs (independent: each run's mean with its grouped SE, at
    least sigma_b of one run between runs; change._estimate)."""
    cal = load_calibration_file(opts.calibration_file) if opts.calibration_file else None
    for rid, ref in ((base_id, base_ref), (head_id, head_ref)):
        r = repo.load_run(s, rid)
        if r.invalidated:
            raise UsageError(f"run {rid} ({ref}) was invalidated ({r.invalidated_why or 'no reason given'}): "
                             "invalidated runs are excluded from comparisons")
    b, h = repo.load_run(s, base_id), repo.load_run(s, head_id)
    notes = []
    pb, ph = processes_of(b.settings), processes_of(h.settings)
    if pb != ph:
        notes.append(f"the base run spread replicates over {pb} worker process(es), the head run over {ph}: no "
                     "calibration fits both, the stated default sigma_b judges every row")
    else:
        why = file_unfit(cal, h.host_class.key, h.protocol_version, h.ort_version, ph)
        if why:
            notes.append(f"the calibration file {why}: not used (the stated default sigma_b judges; with a file "
                         "given, the database's calibrations are not consulted)")
    doc = build_document(s, "compare", base_id, head_id, base_ref, head_ref, opts, cal, mode="stored-runs",
                         notes=notes)
    doc["comparison_id"] = save_comparison(s, doc, base_id, head_id, h.host_class_id)
    return doc


# ---- calibration ----

def calibrate(opts: ABOptions, ui=None) -> dict:
    """A/A: the working tree's build against itself, `rounds` interleaved passes over the
    cells; stores and returns the calibration (metadata and per-cell spreads)."""
    ui = ui or NullUI()
    if opts.rounds < 2:
        raise UsageError("--rounds must be >= 2 (a spread needs at least two runs)")
    store, suite, flts, facts, settings, cells, notes = _plan(opts)
    cells = [c for c in cells if not c.numerics_only]
    if not cells:
        raise UsageError("no timed cells match (numerics-only cells are not calibrated)")
    versions = hostinfo.versions()
    per_round: dict = {c.key: [] for c in cells}
    hashes: dict = {}
    with host_lock(ui), signals_as_exceptions():
        base, head = _prepare_sides(opts, ui, same_build=True)
        lib = load(head.build)
        with store.session() as s:
            host = repo.ensure_host(s, facts)
            host_id, hc_id = host.id, host.host_class_id
            build_pk = repo.ensure_build(s, head.build).id
        peaks = ensure_peaks(store, host_id, build_pk, lib, facts, ui)
        est = sum(estimate_cell_s(ops.get(c.case.op), c, settings, peaks, facts, {}) for c in cells) * 1.5
        ui.plan(len(cells) * opts.rounds, est * opts.rounds, notes)
        workers = None
        t0 = time.monotonic()
        try:
            n_total = len(cells) * opts.rounds
            for rnd in range(opts.rounds):
                # fresh worker processes (fresh library mappings, fresh ORT) every round, as
                # separate `ab` runs have: what differs between processes is between-run noise
                if workers is not None:
                    workers.stop()
                workers = _Sides(base, head)
                for j, cell in enumerate(cells):
                    i = rnd * len(cells) + j + 1
                    ui.start_cell(i, n_total, cell, _eta(i, n_total, est * opts.rounds, t0))
                    outs = workers.measure(cell, settings, facts, float(settings["timeout_s"]), True,
                                           on_phase=ui.phase)
                    op = ops.get(cell.case.op)
                    hashes[cell.key] = op.timing_definition(cell.case, cell.dtype, outs["base"].ort_dtype or cell.dtype)
                    st = _round_stats(outs["base"], outs["head"])
                    if st:
                        per_round[cell.key].append(st)
                    ui.end_cell(i, n_total, cell, (outs["head"], derive(op, cell, outs["head"], peaks, facts)))
        finally:
            if workers is not None:
                workers.stop()
            ui.done()
    sigmas = spreads(per_round)
    with store.session() as s:
        cal = m.Calibration(host_class_id=hc_id, suite=suite.name, filters=[f.text for f in flts],
                            rounds=opts.rounds, build_id=head.build.build_id, hostname=facts.hostname,
                            ort_version=versions["onnxruntime"], protocol_version=PROTOCOL_VERSION,
                            processes=processes_of(settings), method=SPREAD_METHOD, pooled=sigmas["pooled"], created_at=repo.now())
        for key, sg in sigmas["cells"].items():
            case_id, dtype, threads, device, cache, spin = key
            cal.cells.append(m.CalibrationCell(
                case_id=case_id, timing_hash=hashes[key], dtype=dtype, threads=threads,
                device=device, cache=cache, spin=spin, rounds=sg["rounds"], sigma_ab=sg["ab"],
                sigma_ours=sg["ours"], sigma_ort=sg["ort"], sigma_ratio=sg["ratio"], raw=sg["raw"]))
        s.add(cal)
        s.flush()
        return export_calibration(s, cal.id)


SPREAD_METHOD = (
    "A/A: the same build loaded twice (base, head) and ORT, interleaved as `perfbench ab`, in R rounds over the "
    "cells. Per cell and round: d = mean log(head/base) (paired replicates), mean log time of ours (base) and of "
    "ORT, mean log ours/ORT; each with its within-round variance s_w^2/n (s_w^2 pooled within the worker "
    "processes that shared the round's replicates). sigma_b(ab) = sqrt(max(0, mean d^2 - "
    "mean s_w^2/n)) (d has mean 0 in A/A; R degrees of freedom); the others: sqrt(max(0, var of round means - mean "
    "s_w^2/n)) (R-1 degrees of freedom). Each is shrunk toward the median of its group (op, threads, cache; all "
    "cells when the group has < 3; at least half the median of all cells): sqrt((dof*s^2 + 4*pooled^2) / (dof + 4)). "
    "Worker processes restart every "
    "round (fresh library mappings and ORT, as separate ab runs have).")


def _round_stats(b: CellOutcome, h: CellOutcome) -> dict | None:
    ok = all(o.ours_status == "ok" and o.ort_status in ("ok", "ort-discrepancy") and len(o.ours_ns) >= 2
             and min(o.ours_ns) > 0 and min(o.ort_ns) > 0 for o in (b, h))
    if not ok:
        return None
    # a round's replicates are spread over worker processes as a run's are: the within-round
    # variance of its mean is the pooled within-process part s_w^2/n (stats.grouped_mean_se), so
    # that sigma_b = var(round means) - s_w^2/n is the whole between-run variance of a run's mean,
    # process-level part included -- the v that a verdict's SE adds to its own s_w^2/n
    groups = b.process if len(b.process) == len(b.ours_ns) else None
    lb, hb, lt = np.log(b.ours_ns), np.log(h.ours_ns), np.log(b.ort_ns)

    def mean_var(x):
        g = stats.grouped_mean_se(x, groups)
        return float(np.mean(x)), g.se_within ** 2

    return {"ab": mean_var(hb - lb), "ours": mean_var(lb), "ort": mean_var(lt), "ratio": mean_var(lb - lt)}


def spreads(per_round: dict) -> dict:
    """Per cell key: sigma_b of each statistic (see SPREAD_METHOD) and the pooled values."""
    raw = {}
    for key, rounds in per_round.items():
        if len(rounds) < 2:
            continue
        r = {}
        ab_d = [x["ab"][0] for x in rounds]
        ab_w = [x["ab"][1] for x in rounds]
        r["ab"] = (math.sqrt(max(0.0, float(np.mean(np.square(ab_d))) - float(np.mean(ab_w)))), len(rounds))
        for k in ("ours", "ort", "ratio"):
            r[k] = (stats.between_run_sigma([x[k][0] for x in rounds], [x[k][1] for x in rounds]), len(rounds) - 1)
        raw[key] = (r, rounds)
    stats_ = ("ab", "ours", "ort", "ratio")
    pooled = {k: float(np.median([r[k][0] for r, _ in raw.values()])) if raw else None for k in stats_}
    # cells are shrunk toward their group's median (same op, threads and cache mode: alike in
    # noise), or the median of all cells when the group has fewer than 3
    groups: dict = {}
    for key in raw:
        groups.setdefault(_group(key), []).append(key)
    group_pooled = {g: {k: float(np.median([raw[key][0][k][0] for key in keys])) for k in stats_}
                    for g, keys in groups.items() if len(keys) >= 3}
    cells = {}
    for key, (r, rounds) in raw.items():
        group = group_pooled.get(_group(key), pooled)
        # a group whose rounds never differed beyond their within-round noise has a median of 0:
        # no evidence of zero between-run noise, so the target is at least half the overall median
        target = {k: max(group[k], 0.5 * pooled[k]) for k in stats_}
        cells[key] = {k: stats.shrink_sigma(r[k][0], r[k][1], target[k]) for k in stats_}
        cells[key]["rounds"] = len(rounds)
        cells[key]["raw"] = {"unshrunk": {k: r[k][0] for k in r},
                             "round_means": {k: [x[k][0] for x in rounds] for k in ("ab", "ours", "ort", "ratio")}}
    return {"cells": cells, "pooled": pooled}


def _group(key: tuple) -> tuple:
    """(op, threads, cache) of a cell key (case_id, dtype, threads, device, cache, spin)."""
    return (key[0].split(".", 1)[0], key[2], key[4])


def export_calibration(s, cal_id: int | None = None, host_class_key: str | None = None) -> dict:
    """A calibration as a JSON-able document (`perfbench calibration export`; `ab --calibration`)."""
    q = select(m.Calibration)
    if cal_id is not None:
        q = q.where(m.Calibration.id == cal_id)
    elif host_class_key is not None:
        q = q.join(m.HostClass).where(m.HostClass.key == host_class_key)
    cal = s.scalars(q.order_by(m.Calibration.id.desc())).first()
    if cal is None:
        raise UsageError("no calibration stored" + (f" for host class {host_class_key!r}" if host_class_key else "")
                         + ": run `perfbench calibrate --suite S` first")
    return {
        "perfbench_calibration": CALIBRATION_FORMAT,
        "host_class": cal.host_class.key,
        "calibration": {"id": cal.id, "suite": cal.suite, "filters": cal.filters, "rounds": cal.rounds,
                        "build_id": cal.build_id, "hostname": cal.hostname, "ort_version": cal.ort_version,
                        "protocol_version": cal.protocol_version, "processes": cal.processes,
                        "method": cal.method, "pooled": cal.pooled,
                        "created_at": cal.created_at.isoformat()},
        "cells": [{"case_id": c.case_id, "timing_hash": c.timing_hash, "dtype": c.dtype, "threads": c.threads,
                   "device": c.device, "cache": c.cache, "spin": c.spin, "rounds": c.rounds, "sigma_ab": c.sigma_ab,
                   "sigma_ours": c.sigma_ours, "sigma_ort": c.sigma_ort, "sigma_ratio": c.sigma_ratio}
                  for c in sorted(cal.cells, key=lambda c: c.id)],
    }


def load_calibration_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read the calibration file {path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("perfbench_calibration") != CALIBRATION_FORMAT:
        raise UsageError(f"{path} is not a perfbench calibration (format {CALIBRATION_FORMAT}); "
                         "write one with `perfbench calibration export -o FILE`")
    try:
        for c in data["cells"]:
            for k in ("sigma_ab", "sigma_ours", "sigma_ort", "sigma_ratio"):
                if not (isinstance(c[k], (int, float)) and math.isfinite(c[k]) and c[k] >= 0):
                    raise UsageError(f"{path}: a cell's {k} is not a non-negative number")
        str(data["host_class"])
        data["calibration"]["created_at"]
        meta = data["calibration"]
    except (KeyError, TypeError):
        raise UsageError(f"{path}: malformed calibration (missing keys)") from None
    # what decides whether the file may judge a run (file_unfit): a file without them would
    # judge every protocol and ORT version alike
    missing = [k for k in ("protocol_version", "ort_version") if k not in meta]
    if missing:
        raise UsageError(f"{path}: malformed calibration (calibration.{' and calibration.'.join(missing)} missing); "
                         "export it again with `perfbench calibration export -o FILE`")
    return data
