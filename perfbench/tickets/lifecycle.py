"""Tickets in the database: one per range, with a stable identity and a history (CONTRACTS §7).

`update(s, run_id)` takes one complete run in (automatically after `perfbench run`; by hand with
`perfbench tickets update RUN`), group by group; docs/tickets.md states the rules in full:

1. Selected cells: the run's ticket-worthy cells (ranges.judge), plus, of each open ticket of the
   group, the cells this run did not measure (unless a full run of the ticket's suite lacks them:
   gone), every cell a `--quick` run measured, and `loss` cells still `loss` though no longer
   ticket-worthy (hysteresis).
2. Ranges = connected sets of selected cells over the group's lattice (ranges.components), per kind.
3. Ranges are matched to open tickets by shared cells (ranges.match): grow/shrink/shift keep the
   ticket, a split gives the largest part the ticket and new tickets to the other parts that hold
   new evidence, a merge keeps the oldest ticket. A range with new evidence that overlaps no open
   ticket reopens a ticket closed as fixed that shares cells with it, else opens a new one.
4. An open ticket no range took closes: merged, obsolete (a full run of its suite has none of its
   cells, or not its group at all), or fixed (measured, none still slower -- a loss, or undecided
   with ratio > 1 -- or failing).

Runs are taken in in order of finish time per host class; a run resumed after `--max-time` is taken
in again unless a later run was taken in meanwhile. Only complete, non-invalidated `perfbench run`
runs count.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select

from perfbench.compare import views
from perfbench.compare.change import DEFAULT_SIGMA, sigma_prior
from perfbench.errors import UsageError
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.store.calibration import sigma_lookup
from perfbench.tickets import ranges, render


def _still_slower(c: dict) -> bool:
    """A loss ticket's cell that holds the ticket open: a `loss`, or `undecided` with ours still
    slower at the point (ratio > 1). Since protocol 2 the interval holds between-run variation
    (about +/-10% at the default sigma_b): "no longer a loss" alone would close a ticket whose
    cells lose by 5% as fixed, without a line of code changed."""
    return c["verdict"] == "loss" or (c["verdict"] == "undecided" and (c.get("ratio") or 0) > 1.0)


def _cell_entry(c: dict, run: m.Run) -> dict:
    ours, ort = c.get("ours") or {}, c.get("ort") or {}
    num = c.get("numerics") or {}
    axes = ranges.axes_of(c)
    return {
        "id": ranges.cell_id(c), "case_id": c["case_id"], "timing_hash": c["timing_hash"], "params": c["params"],
        "axes": axes, "case": views.short_case(c["case_id"], c["op"], axes),
        "verdict": c["verdict"], "ratio": c.get("ratio"), "lo": c.get("ci_low"), "hi": c.get("ci_high"),
        "ours_ns": ours.get("median_ns"), "ort_ns": ort.get("median_ns"),
        "ours_status": ours.get("status"), "ort_status": ort.get("status"),
        "message": ours.get("message") or "", "ort_path": ort.get("path"), "ort_dtype": ort.get("dtype"),
        "throughput": ours.get("throughput"), "unit": ours.get("unit"), "peak_share": ours.get("peak_share"),
        "ort_throughput": ort.get("throughput"), "ort_peak_share": ort.get("peak_share"),
        "err_ours": num.get("err_ours"), "tol": num.get("tol"), "run_id": run.id, "git_sha": run.git_sha,
        "numerics_only": bool(c.get("numerics_only")),
    }


def _excess_ns(cells: list[dict]) -> float:
    return sum(max((c.get("ours_ns") or 0.0) - (c.get("ort_ns") or 0.0), 0.0) for c in cells
               if c.get("ours_ns") is not None and c.get("ort_ns") is not None)


def _worst(cells: list[dict]) -> float | None:
    r = [c["ratio"] for c in cells if c.get("ratio")]
    return max(r) if r else None


def sort_key(t: m.Ticket) -> tuple:
    """Priority (documented): kind (wrong answer, broken, loss, coverage), then the excess time per
    call summed over the range (ours - ORT), then the worst ratio, then age."""
    return (ranges.KIND_RANK.get(t.kind, 9), -(t.priority or 0.0), -(t.worst_ratio or 0.0), t.id)


def _event(t: m.Ticket, run_id: int | None, event: str, **detail) -> None:
    t.events.append(m.TicketEvent(run_id=run_id, event=event, detail=detail, at=repo.now()))


def _fill(t: m.Ticket, cells: list[dict], lattice: dict, every: dict, run: m.Run) -> None:
    """The ticket's range, figures, title and reproduce filters from `cells`. `lattice`: the group's
    cells this kind of range runs over (the n of "k/n"); `every`: every case of the group known
    (what a filter must not also select)."""
    cells = sorted(cells, key=lambda c: ([ranges.numeric(v) for v in c["axes"].values()], c["case_id"]))
    t.cells = cells
    t.filters = ranges.box_filter(_group_of_ticket(t), cells, every)
    t.priority = _excess_ns(cells) if t.kind == "loss" else float(len(cells))
    t.worst_ratio = _worst(cells)
    t.title = render.title(t, lattice)
    t.updated_at = repo.now()


def _when(r: m.Run):
    return r.finished_at or r.started_at


def update(s, run_id: int, *, min_effect: float = 0.03, q: float = 0.05, cal_file: dict | None = None) -> dict:
    """Take run `run_id` into the tickets; returns a summary (counts and ticket ids per event)."""
    run = repo.load_run(s, run_id)
    if run.origin != "run":
        raise UsageError(f"run {run.id} is one side of `perfbench {run.origin.split('-')[0]}`, not a "
                         "`perfbench run`: tickets come from runs only")
    if run.status != "complete":
        raise UsageError(f"run {run.id} is {run.status}: tickets take complete runs only "
                         f"(`perfbench run --resume {run.id}` finishes it)")
    if run.invalidated:
        raise UsageError(f"run {run.id} is invalidated ({run.invalidated_why}): not taken into tickets")
    # one update per host class at a time on PostgreSQL (a row lock until commit); on SQLite two
    # concurrent updates can race, and TicketRun's primary key stops the second first take
    s.execute(select(m.HostClass.id).where(m.HostClass.id == run.host_class_id).with_for_update()).all()
    taken = s.get(m.TicketRun, run.id)
    if taken is not None and taken.summary.get("cells") in (None, len(run.cells)):
        return {**taken.summary, "already": True}
    if taken is not None:
        after = s.scalar(select(m.TicketRun.run_id).join(m.Run, m.Run.id == m.TicketRun.run_id).where(
            m.TicketRun.host_class_id == run.host_class_id, m.Run.suite == run.suite,
            m.TicketRun.applied_at > taken.applied_at).limit(1))
        if after is not None:
            raise UsageError(f"run {run.id} was resumed after run {after} of its suite was taken into the tickets: "
                             "its older cells would undo what that run found, so the tickets keep what they have; "
                             "the resumed cells are stored and the next run measures them again")
    newer = s.execute(select(m.Run.id, m.Run.finished_at, m.Run.started_at).join(
        m.TicketRun, m.TicketRun.run_id == m.Run.id).where(
        m.TicketRun.host_class_id == run.host_class_id, m.Run.id != run.id)).all()
    later = [rid for rid, fin, start in newer if (fin or start) > _when(run)]
    if later:
        raise UsageError(f"run {run.id} finished before run {min(later)}, which the tickets already took in: "
                         "taking an older run in now would reopen or close tickets out of order")

    cells = [views.cell_view(c) for c in sorted(run.cells, key=lambda c: c.id)]
    lookup, _ = sigma_lookup(s, run, cal_file)

    def sigma_for(c):
        sigma, dof, _ = sigma_prior(lookup(c, c["timing_hash"]), "ratio")
        return sigma, dof

    kinds, p_of = ranges.judge(cells, sigma_for, DEFAULT_SIGMA["ratio"], min_effect, q)
    by_group: dict = {}
    for c in cells:
        g = ranges.group_of(c)
        by_group.setdefault(ranges.group_key(g), (g, []))[1].append(c)
    prev = _known_cells(s, run)  # the previous full run of the suite: what the suite had
    known = prev if run.partial else {}  # a full run is its own lattice
    existing = s.scalars(select(m.Ticket).where(m.Ticket.host_class_id == run.host_class_id)
                         .order_by(m.Ticket.id)).all()
    summary: dict = {"run": run.id, "cells": len(run.cells), "min_effect": min_effect, "opened": [],
                     "updated": [], "reopened": [], "closed": [], "merged": [], "split": [], "unchanged": []}
    for gkey, (g, gcells) in sorted(by_group.items()):
        _update_group(s, run, gkey, g, gcells, kinds, [t for t in existing if t.group_key == gkey],
                      known.get(gkey, {}), prev.get(gkey, {}), summary)
    if not run.partial:  # a group the previous full run of the suite had and this one lacks: dropped
        for t in existing:
            if (t.state == "open" and t.suite == run.suite and t.group_key not in by_group
                    and t.group_key in prev):
                _close_obsolete(t, run, summary)
    summary["watch"] = _watch(s, run, cells, kinds, p_of)
    if taken is not None:  # a run resumed after `--max-time`: taken in again with all its cells
        taken.summary, taken.applied_at = summary, repo.now()
    else:
        s.add(m.TicketRun(run_id=run.id, host_class_id=run.host_class_id, summary=summary, applied_at=repo.now()))
    s.flush()
    return summary


def _watch(s, run: m.Run, cells: list[dict], kinds: dict, p_of: dict) -> list[dict]:
    """The run's `loss` cells that are not ticket-worthy (slower than ORT by a whole CI, but not
    confidently by more than m after BH with sigma_b): shown by `perfbench tickets --watch`, so a
    loss below the bar is never out of sight. `ticket`: the open ticket holding it (hysteresis)."""
    held = {}
    for t in s.scalars(select(m.Ticket).where(m.Ticket.host_class_id == run.host_class_id,
                                              m.Ticket.state == "open", m.Ticket.kind == "loss")):
        for e in t.cells:
            held[(t.group_key, e["id"])] = t.id
    out = []
    for c in cells:
        cid = ranges.cell_id(c)
        if c["verdict"] != "loss" or kinds.get(cid) == "loss":
            continue
        p, sigma = p_of.get(cid, (None, None))
        out.append({"case_id": c["case_id"], "op": c["op"], "case": views.short_case(c["case_id"], c["op"], c["params"]),
                    "dtype": c["dtype"], "threads": c["threads"], "device": c["device"], "cache": c["cache"],
                    "spin": c["spin"], "ratio": c["ratio"], "lo": c["ci_low"], "hi": c["ci_high"], "p": p,
                    "sigma_b": sigma, "ticket": held.get((ranges.group_key(ranges.group_of(c)), cid))})
    return sorted(out, key=lambda w: -(w["ratio"] or 0))


def _close_obsolete(t: m.Ticket, run: m.Run, summary: dict) -> None:
    t.state, t.closed_at, t.closed_run_id, t.closed_reason = "closed", repo.now(), run.id, "obsolete"
    t.updated_at = repo.now()
    _event(t, run.id, "closed", why="obsolete: a full run of the suite no longer has these cells")
    summary["closed"].append(t.id)


def _known_cells(s, run: m.Run) -> dict:
    """group key -> {cell id: (axes, numerics_only)} of the newest full run of the run's suite on its
    host class: the lattice a filtered run's cells sit in (cells it skipped still lie between)."""
    ref = s.scalar(select(m.Run.id).where(
        m.Run.suite == run.suite, m.Run.host_class_id == run.host_class_id, m.Run.status == "complete",
        m.Run.partial.is_(False), m.Run.invalidated.is_(False), m.Run.origin == "run", m.Run.id != run.id)
        .order_by(m.Run.finished_at.desc(), m.Run.id.desc()).limit(1))
    out: dict = {}
    if ref is None:
        return out
    rows = s.execute(select(m.Cell.dtype, m.Cell.threads, m.Cell.device, m.Cell.cache, m.Cell.spin, m.Cell.timing_hash,
                            m.Cell.numerics_only, m.Case.case_id, m.Case.op, m.Case.params)
                     .join(m.Case, m.Case.id == m.Cell.case_pk).where(m.Cell.run_id == ref))
    for dtype, threads, device, cache, spin, th, numerics_only, case_id, op, params in rows:
        d = {"case_id": case_id, "op": op, "params": params, "dtype": dtype, "threads": threads, "device": device,
             "cache": cache, "spin": spin, "timing_hash": th}
        out.setdefault(ranges.group_key(ranges.group_of(d)), {})[ranges.cell_id(d)] = (ranges.axes_of(d),
                                                                                      bool(numerics_only))
    return out


def _group_of_ticket(t: m.Ticket) -> dict:
    return {"op": t.op, "dtype": t.dtype, "device": t.device, "threads": t.threads, "cache": t.cache,
            "spin": t.spin, "modes": dict(t.modes or {})}


def _update_group(s, run: m.Run, gkey: str, g: dict, gcells: list[dict], kinds: dict, tickets: list,
                  known: dict, prev: dict, summary: dict) -> None:
    if not gcells:  # this run measured nothing of the group: its tickets stay exactly as they are
        return
    measured = {ranges.cell_id(c): c for c in gcells}
    entries = {cid: _cell_entry(c, run) for cid, c in measured.items()}
    open_t = [t for t in tickets if t.state == "open"]
    full = not run.partial
    cases = {c["case_id"]: cid for cid, c in measured.items()}

    def cur(e) -> str:
        """A ticket cell's id now: a case this run measured under a new timing definition is its
        twin under the new one (the old definition is never measured again)."""
        return e["id"] if e["id"] in measured else cases.get(e["case_id"], e["id"])

    # gone: a cell the previous full run of the ticket's suite had and this full run lacks (the
    # suite dropped it); any other unmeasured cell stays as it was last seen
    gone = {cur(e) for t in open_t for e in t.cells
            if cur(e) not in measured and full and t.suite == run.suite and cur(e) in prev}
    for t in open_t:
        for e in t.cells:
            if cur(e) not in measured and cur(e) not in gone:
                entries.setdefault(e["id"], e)
    # the newest full run's cells, less the cases this run measured (under a new timing hash the
    # old twin would sit between every two neighbours)
    known = {cid: v for cid, v in known.items() if ranges.case_of(cid) not in cases}
    every = {cid: e["axes"] for cid, e in entries.items()}  # for reproduce filters: every case known
    for cid, (axes, _) in known.items():
        every.setdefault(cid, axes)
    for kind in ranges.KINDS:
        timing = kind in ("loss", "coverage")  # timing ranges run over timed cells only
        lattice = {cid: e["axes"] for cid, e in entries.items() if not (timing and e.get("numerics_only"))}
        for cid, (axes, numerics_only) in known.items():
            if cid not in gone and not (timing and numerics_only):
                lattice.setdefault(cid, axes)
        worthy = {cid for cid, k in kinds.items() if k == kind and cid in measured}
        selected = set(worthy)
        mine = [t for t in open_t if t.kind == kind]
        for t in mine:
            for e in t.cells:
                cid = cur(e)
                if cid in gone:
                    continue
                if cid not in measured or run.quick:
                    selected.add(cid)  # not measured, or measured by a --quick run: stays as it was
                elif kind == "loss" and _still_slower(measured[cid]):
                    selected.add(cid)  # still slower, no longer ticket-worthy: stays (no flapping)
        found = ranges.components(lattice, selected)
        keep, split, merged = ranges.match({t.id: {cur(e) for e in t.cells} for t in mine}, found)
        assign: dict = {}
        fresh = []  # (range, ticket id it split from or None)
        for i, rng in enumerate(found):
            if i in keep:
                assign.setdefault(keep[i], set()).update(rng)
            elif not rng & worthy:
                # no ticket-worthy cell in it: no new evidence, it stays with the ticket it came from
                if i in split:
                    assign.setdefault(split[i], set()).update(rng)
            else:
                fresh.append((rng, split.get(i)))
        by_id = {t.id: t for t in tickets}
        for tid, rng in sorted(assign.items()):
            t = by_id[tid]
            before = {e["id"] for e in t.cells}
            if before == rng and not rng & measured.keys():  # nothing of it measured: as it was
                summary["unchanged"].append(t.id)
                continue
            old_title = t.title
            _fill(t, [entries[c] for c in rng], lattice, every, run)
            t.last_run_id, t.last_sha = run.id, run.git_sha
            if before != rng:
                _event(t, run.id, "updated", cells=len(rng), added=len(rng - before), removed=len(before - rng),
                       title=t.title)
            (summary["updated"] if before != rng or old_title != t.title else summary["unchanged"]).append(t.id)
        for rng, parent in fresh:
            cells = [entries[c] for c in rng]
            # not an open ticket's: reopen one closed as fixed that shares cells, or open a new one
            closed = [t for t in tickets if t.state == "closed" and t.closed_reason in ("fixed", "obsolete")
                      and t.kind == kind and {cur(e) for e in t.cells} & rng]
            if parent is None and closed:
                t = max(closed, key=lambda t: (len({cur(e) for e in t.cells} & rng), -t.id))
                t.state, t.closed_reason, t.closed_at, t.reopened = "open", None, None, (t.reopened or 0) + 1
                t.closed_run_id = None
                _fill(t, cells, lattice, every, run)
                t.last_run_id, t.last_sha = run.id, run.git_sha
                _event(t, run.id, "reopened", cells=len(rng), title=t.title)
                summary["reopened"].append(t.id)
                continue
            t = m.Ticket(uid=secrets.token_hex(8), host_class_id=run.host_class_id, kind=kind, group_key=gkey,
                         op=g["op"], dtype=g["dtype"], device=g["device"], threads=g["threads"], cache=g["cache"],
                         spin=g["spin"], modes=g["modes"], state="open", title="", suite=run.suite,
                         first_run_id=run.id, first_sha=run.git_sha, last_run_id=run.id, last_sha=run.git_sha,
                         reopened=0, github={}, filters=[], opened_at=repo.now(), updated_at=repo.now(), cells=[],
                         split_from_id=parent)
            t.events = []
            s.add(t)
            s.flush()
            _fill(t, cells, lattice, every, run)
            _event(t, run.id, "opened", cells=len(rng), title=t.title,
                   **({"split_from": parent} if parent else {}))
            summary["split" if parent else "opened"].append(t.id)
            tickets.append(t)
        for t in mine:
            if t.id in assign:
                continue
            t.state, t.closed_at, t.closed_run_id = "closed", repo.now(), run.id
            if merged.get(t.id) is not None:
                t.closed_reason, t.merged_into_id = "merged", merged[t.id]
                _event(t, run.id, "merged", into=merged[t.id])
                summary["merged"].append(t.id)
            elif all(cur(e) in gone for e in t.cells):
                _close_obsolete(t, run, summary)
            else:
                # every cell measured by this run (else it would be selected) and none still failing
                t.closed_reason = "fixed"
                t.cells = [entries.get(cur(e), e) for e in t.cells]  # the figures that closed it
                _event(t, run.id, "closed", why="fixed", worst_ratio_now=_worst(
                    [entries[e["id"]] for e in t.cells if e["id"] in entries]))
                summary["closed"].append(t.id)
            t.updated_at = repo.now()
