"""What the dashboard draws, read from the store as plain data (no plotly here).

Per host class: its complete, non-invalidated `perfbench run` runs (oldest first), the cells of
each, this host class's measured peaks, the open tickets, and the regression flags of stored
comparisons (`perfbench ab` / `compare`) keyed by their head run."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import defer, selectinload

from perfbench.compare import verdicts, views
from perfbench.store import models as m
from perfbench.store import repo

FLAGGED = ("regression", "possible", "numerics-broke")


def _cell(c: m.Cell, dispatch: dict | None = None) -> dict:
    ours, ort = c.side("ours"), c.side("ort")
    return {
        "case_id": c.case.case_id, "op": c.case.op, "params": c.case.params, "dtype": c.dtype, "threads": c.threads,
        "device": c.device, "cache": c.cache, "spin": c.spin, "numerics_only": c.numerics_only,
        "verdict": c.verdict, "note": c.verdict_note, "ratio": c.ratio, "lo": c.ratio_lo, "hi": c.ratio_hi,
        "flops": c.flops, "bytes": c.bytes_moved, "bound": c.bound, "level": c.level,
        "ours_status": ours.status if ours else None, "ours_ns": ours.median_ns if ours else None,
        "ours_tp": ours.throughput if ours else None, "unit": ours.throughput_unit if ours else None,
        "ours_share": ours.peak_share if ours else None,
        "ort_status": ort.status if ort else None, "ort_ns": ort.median_ns if ort else None,
        "ort_tp": ort.throughput if ort else None, "ort_path": (ort.path or None) if ort else None,
        "ort_dtype": ort.dtype if ort else None, "ort_share": ort.peak_share if ort else None,
        "kernel_only": verdicts.kernel_only_of(c, dispatch),
    }


def load(s, host_class: str | None = None, suite: str | None = None, max_runs: int = 30) -> list[dict]:
    """One entry per host class: {"key", "runs": [...], "peaks", "tickets", "flags"}. Runs are the
    newest `max_runs` complete, non-invalidated `perfbench run` runs (per suite), oldest first;
    flags are stored comparisons' flagged rows keyed by their head's commit."""
    q = select(m.HostClass).order_by(m.HostClass.id)
    if host_class:
        q = q.where(m.HostClass.key == host_class)
    out = []
    for hc in s.scalars(q):
        host = s.scalar(select(m.Host).where(m.Host.host_class_id == hc.id).order_by(m.Host.last_seen.desc())
                        .limit(1))
        peaks = repo.latest_peaks(s, host) if host is not None else []
        dispatch = next(({"value": p["value"], "samples": p["samples"]} for p in peaks
                         if p["kind"] == "ort_node_dispatch"), None)
        base = (select(m.Run).where(m.Run.host_class_id == hc.id, m.Run.status == "complete",
                                    m.Run.invalidated.is_(False), m.Run.origin == "run"))
        suites = [suite] if suite else sorted(set(s.scalars(base.with_only_columns(m.Run.suite).distinct())))
        runs = []
        for sname in suites:  # the newest max_runs of each suite, read with their cells in a few queries
            rs = s.scalars(base.where(m.Run.suite == sname)
                           .options(selectinload(m.Run.cells).selectinload(m.Cell.measurements),
                                    selectinload(m.Run.cells).selectinload(m.Cell.case))
                           .order_by(m.Run.started_at.desc(), m.Run.id.desc()).limit(max_runs)).all()
            for r in rs:
                runs.append({"id": r.id, "suite": sname, "partial": r.partial, "quick": r.quick,
                             "started_at": r.started_at, "git_sha": r.git_sha, "branch": r.branch,
                             "hostname": r.hostname, "ort_version": r.ort_version, "filters": r.filters or [],
                             "cells": [_cell(c, dispatch) for c in r.cells]})
        runs.sort(key=lambda r: (r["started_at"], r["id"]))
        tickets = [{"id": t.id, "kind": t.kind, "title": t.title, "op": t.op, "dtype": t.dtype,
                    "threads": t.threads, "priority": t.priority, "worst_ratio": t.worst_ratio,
                    "cells": len(t.cells or []), "last_run": t.last_run_id}
                   for t in s.scalars(select(m.Ticket).where(m.Ticket.host_class_id == hc.id,
                                                             m.Ticket.state == "open"))]
        flags: dict = defaultdict(list)  # head commit -> flagged rows (an `ab` head is not a history run)
        cmps = s.scalars(select(m.Comparison).where(m.Comparison.host_class_id == hc.id)
                         .options(selectinload(m.Comparison.rows), defer(m.Comparison.document))).all()
        # a dirty head (an `ab` of the working tree) is not the code of any commit: not matched
        heads = {r.id: r.git_sha for r in s.scalars(select(m.Run).where(
            m.Run.id.in_([c.head_run_id for c in cmps if c.head_run_id is not None]))) if not r.dirty}
        for cmp_ in cmps:
            sha = heads.get(cmp_.head_run_id)
            for row in cmp_.rows:
                if sha and row.verdict in FLAGGED:
                    flags[sha].append({"case_id": row.case_id, "dtype": row.dtype, "threads": row.threads,
                                       "cache": row.cache, "spin": row.spin, "device": row.device,
                                       "verdict": row.verdict, "comparison": cmp_.id})
        out.append({"key": hc.key, "cpu_model": hc.cpu_model, "cores": hc.cores, "runs": runs, "peaks": peaks,
                    "tickets": tickets, "flags": dict(flags)})
    return out


def latest_full(runs: list[dict]) -> dict:
    """suite -> its newest run, preferring full (non-partial) runs."""
    out: dict = {}
    for r in runs:  # oldest first: later ones overwrite
        cur = out.get(r["suite"])
        if cur is None or not r["partial"] or cur["partial"]:
            out[r["suite"]] = r
    return out


def short(c: dict) -> str:
    return views.short_case(c["case_id"], c["op"], c["params"])
