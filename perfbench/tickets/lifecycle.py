"""Tickets in the database: one per range, with a stable identity and a history (CONTRACTS §7).

`update(s, run_id)` takes one complete run in (automatically after `perfbench run`; by hand with
`perfbench tickets update RUN`), group by group:

1. The run's ticket-worthy cells (ranges.judge) are selected, plus, for each open ticket of the
   group, its cells this run did not measure (a run never removes what it did not see) and its
   `loss` cells that are still `loss` even if no longer ticket-worthy (hysteresis: a range at the
   threshold does not flap).
2. Ranges = connected sets of selected cells (ranges.components), per kind.
3. Ranges are matched to open tickets by shared cells (ranges.match: grow/shrink/shift keep the
   ticket; a split gives the largest part the ticket and new tickets to the others, naming it;
   a merge keeps the oldest ticket and closes the others as merged). A range that overlaps no
   open ticket reopens a ticket it overlaps that was closed as fixed, else opens a new one.
4. An open ticket no range took has had every cell measured by this run and none is a loss (or
   fails, for the other kinds): it closes as fixed, recording the run.

Runs are taken in once each and in order per host class (an older run than one already taken in
is refused); only complete, non-invalidated `perfbench run` runs count.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select

from perfbench.compare import views
from perfbench.compare.change import DEFAULT_SIGMA
from perfbench.errors import UsageError
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.store.calibration import sigma_lookup
from perfbench.tickets import ranges, render


def _cell_entry(c: dict, run: m.Run) -> dict:
    ours, ort = c.get("ours") or {}, c.get("ort") or {}
    num = c.get("numerics") or {}
    return {
        "id": ranges.cell_id(c), "case_id": c["case_id"], "timing_hash": c["timing_hash"], "params": c["params"],
        "axes": ranges.axes_of(c), "case": views.short_case(c["case_id"], c["op"], ranges.axes_of(c)),
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


def _fill(t: m.Ticket, cells: list[dict], lattice: dict, run: m.Run) -> None:
    cells = sorted(cells, key=lambda c: ([ranges._num(v) for v in c["axes"].values()], c["case_id"]))
    t.cells = cells
    t.filters = ranges.box_filter(_group_of_ticket(t), cells, lattice)
    t.priority = _excess_ns(cells) if t.kind == "loss" else float(len(cells))
    t.worst_ratio = _worst(cells)
    t.suite = run.suite
    t.title = render.title(t, lattice)
    t.updated_at = repo.now()


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
    if s.get(m.TicketRun, run.id) is not None:
        return {"run": run.id, "already": True, **s.get(m.TicketRun, run.id).summary}
    newer = s.execute(select(m.TicketRun.run_id, m.Run.started_at).join(m.Run, m.Run.id == m.TicketRun.run_id).where(
        m.TicketRun.host_class_id == run.host_class_id, m.Run.started_at > run.started_at)).first()
    if newer is not None:
        raise UsageError(f"run {run.id} is older than run {newer[0]}, which the tickets already took in: "
                         "taking an older run in now would reopen or close tickets out of order")

    cells = [views.cell_view(c) for c in sorted(run.cells, key=lambda c: c.id)]
    lookup, _ = sigma_lookup(s, run, cal_file)

    def sigma_for(c):
        got = lookup(c, c["timing_hash"])
        return got["ratio"] if got else None

    kinds, _ = ranges.judge(cells, sigma_for, DEFAULT_SIGMA["ratio"], min_effect, q)
    by_group: dict = {}
    for c in cells:
        g = ranges.group_of(c)
        by_group.setdefault(ranges.group_key(g), (g, []))[1].append(c)
    existing = s.scalars(select(m.Ticket).where(m.Ticket.host_class_id == run.host_class_id)
                         .order_by(m.Ticket.id)).all()
    summary: dict = {"run": run.id, "opened": [], "updated": [], "reopened": [], "closed": [], "merged": [],
                     "split": [], "unchanged": []}
    for gkey, (g, gcells) in sorted(by_group.items()):
        _update_group(s, run, gkey, g, gcells, kinds, [t for t in existing if t.group_key == gkey], summary)
    s.add(m.TicketRun(run_id=run.id, host_class_id=run.host_class_id, summary=summary, applied_at=repo.now()))
    s.flush()
    return summary


def _group_of_ticket(t: m.Ticket) -> dict:
    return {"op": t.op, "dtype": t.dtype, "device": t.device, "threads": t.threads, "cache": t.cache,
            "spin": t.spin, "modes": dict(t.modes or {})}


def _update_group(s, run: m.Run, gkey: str, g: dict, gcells: list[dict], kinds: dict, tickets: list,
                  summary: dict) -> None:
    if not gcells:  # this run measured nothing of the group: its tickets stay exactly as they are
        return
    measured = {ranges.cell_id(c): c for c in gcells}
    entries = {cid: _cell_entry(c, run) for cid, c in measured.items()}
    open_t = [t for t in tickets if t.state == "open"]
    for t in open_t:  # cells this run did not measure stay as they were last seen
        for e in t.cells:
            if e["id"] not in measured:
                entries.setdefault(e["id"], e)
    for kind in ranges.KINDS:
        # timing ranges run over timed cells only: a numerics-only shape never sits between two
        lattice = {cid: e["axes"] for cid, e in entries.items()
                   if kind in ("wrong-answer", "broken") or not e.get("numerics_only")}
        selected = {cid for cid, k in kinds.items() if k == kind and cid in measured}
        mine = [t for t in open_t if t.kind == kind]
        for t in mine:
            for e in t.cells:
                cid = e["id"]
                if cid not in measured:
                    selected.add(cid)
                elif kind == "loss" and measured[cid]["verdict"] == "loss":
                    selected.add(cid)  # still losing, no longer ticket-worthy: stays (no flapping)
        found = ranges.components(lattice, selected)
        keep, split, merged = ranges.match({t.id: {e["id"] for e in t.cells} for t in mine}, found)
        by_id = {t.id: t for t in tickets}
        for i, rng in enumerate(found):
            cells = [entries[cid] for cid in rng]
            if i in keep:
                t = by_id[keep[i]]
                before = {e["id"] for e in t.cells}
                if before == rng and not rng & measured.keys():  # nothing of it measured: as it was
                    summary["unchanged"].append(t.id)
                    continue
                old_title = t.title
                _fill(t, cells, lattice, run)
                t.last_run_id, t.last_sha = run.id, run.git_sha
                if before != rng:
                    _event(t, run.id, "updated", cells=len(rng), added=len(rng - before), removed=len(before - rng),
                           title=t.title)
                    summary["updated"].append(t.id)
                elif old_title != t.title:
                    summary["updated"].append(t.id)
                else:
                    summary["unchanged"].append(t.id)
                continue
            # not an open ticket's: reopen one closed as fixed that shares cells, or open a new one
            closed = [t for t in tickets if t.state == "closed" and t.closed_reason == "fixed" and t.kind == kind
                      and {e["id"] for e in t.cells} & rng]
            if i not in split and closed:
                t = max(closed, key=lambda t: (len({e["id"] for e in t.cells} & rng), -t.id))
                t.state, t.closed_reason, t.closed_at, t.reopened = "open", None, None, (t.reopened or 0) + 1
                t.closed_run_id = None
                _fill(t, cells, lattice, run)
                t.last_run_id, t.last_sha = run.id, run.git_sha
                _event(t, run.id, "reopened", cells=len(rng), title=t.title)
                summary["reopened"].append(t.id)
                open_t.append(t)
                continue
            t = m.Ticket(uid=secrets.token_hex(8), host_class_id=run.host_class_id, kind=kind, group_key=gkey,
                         op=g["op"], dtype=g["dtype"], device=g["device"], threads=g["threads"], cache=g["cache"],
                         spin=g["spin"], modes=g["modes"], state="open", title="", suite=run.suite,
                         first_run_id=run.id, first_sha=run.git_sha, last_run_id=run.id, last_sha=run.git_sha,
                         reopened=0, github={}, filters=[], opened_at=repo.now(), updated_at=repo.now(), cells=[])
            t.events = []
            if i in split:
                t.split_from_id = split[i]
            s.add(t)
            s.flush()
            _fill(t, cells, lattice, run)
            _event(t, run.id, "opened", cells=len(rng), title=t.title,
                   **({"split_from": split[i]} if i in split else {}))
            summary["split" if i in split else "opened"].append(t.id)
            tickets.append(t)
        taken = set(keep.values())
        for t in mine:
            if t.id in taken:
                continue
            t.state, t.closed_at, t.closed_run_id = "closed", repo.now(), run.id
            if merged.get(t.id) is not None:
                t.closed_reason, t.merged_into_id = "merged", merged[t.id]
                _event(t, run.id, "merged", into=merged[t.id])
                summary["merged"].append(t.id)
            else:
                # every cell measured by this run (else it would be selected) and none still failing
                t.closed_reason = "fixed"
                t.cells = [entries.get(e["id"], e) for e in t.cells]  # the figures that closed it
                _event(t, run.id, "closed", why="fixed", worst_ratio_now=_worst(
                    [entries[e["id"]] for e in t.cells if e["id"] in entries]))
                summary["closed"].append(t.id)
            t.updated_at = repo.now()
