"""Tickets in a real database (SQLite and PostgreSQL): opening, one ticket per range across runs,
grow/shrink/split/merge, closing only by a run that measured the whole range, reopening, order."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from perfbench.compare import verdicts
from perfbench.errors import UsageError
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.tickets import lifecycle, render
from tests.store.test_store import T0, add_run, env, store  # noqa: F401  (fixtures)

KEYS = (128, 512, 1024, 4096)
HEADS = (14, 32)


def add_cells(s, rid, slow: dict, heads=HEADS, keys=KEYS, mismatch=(), ort_status="ok", th="t0", threads=1):
    """One Softmax cell per (heads, keys); `slow[(heads, keys)]` = ours/ORT ratio (default 0.8);
    cells in `mismatch` fail the numerics gate."""
    for h in heads:
        for k in keys:
            params = {"batch": 1, "heads": h, "queries": 1, "keys": k}
            cid = "Softmax" + "".join(f".{a}={v}" for a, v in params.items())
            case = repo.ensure_case(s, cid, "Softmax", params, th)
            ratio = slow.get((h, k), 0.8)
            ort = [1000.0 + 10 * i for i in range(8)]
            ours = [o * ratio * (1 + 0.002 * ((-1) ** i)) for i, o in enumerate(ort)]
            st = "mismatch" if (h, k) in mismatch else "ok"
            v = verdicts.decide(st, ort_status, ours, ort)
            c = m.Cell(run_id=rid, case_pk=case.id, dtype="f32", threads=threads, device="cpu", cache="warm", spin="off",
                       timing_hash=th, numerics_hash="n", seed=1, numerics_only=False, n=v.n, ratio=v.ratio,
                       ratio_lo=v.lo, ratio_hi=v.hi, mean_log=v.mean_log, sd_log=v.sd_log, ci_method=v.method,
                       verdict=v.verdict, verdict_note=v.note, measured_at=T0)
            c.measurements.append(m.Measurement(impl="ours", status=st, message="err 1 > tol" if st != "ok" else "",
                                                dtype="f32", median_ns=sorted(ours)[4], replicates_ns=ours,
                                                throughput=10.0, throughput_unit="GB/s", peak_share=0.1))
            c.measurements.append(m.Measurement(impl="ort", status=ort_status, dtype="f32", path="kernel",
                                                median_ns=sorted(ort)[4], replicates_ns=ort))
            s.add(c)
    s.flush()


class Runs:
    def __init__(self, store, env):  # noqa: F811
        self.store, self.env, self.minutes = store, env, 0

    def take(self, slow, **kw):
        """A new complete run with these slow cells, taken into the tickets; returns its summary."""
        partial, quick = kw.pop("partial", False), kw.pop("quick", False)
        with self.store.session() as s:
            self.minutes += 10
            rid = add_run(s, self.env, minutes=self.minutes, partial=partial, quick=quick, sha=f"{self.minutes:040d}")
            add_cells(s, rid, slow, **kw)
            return lifecycle.update(s, rid)

    def tickets(self):
        with self.store.session() as s:
            out = []
            for t in s.query(m.Ticket).order_by(m.Ticket.id):
                out.append({"id": t.id, "state": t.state, "reason": t.closed_reason, "kind": t.kind,
                            "cells": sorted(c["params"]["keys"] * 100 + c["params"]["heads"] for c in t.cells),
                            "title": t.title, "reopened": t.reopened, "split_from": t.split_from_id,
                            "merged_into": t.merged_into_id, "closed_run": t.closed_run_id,
                            "events": [e.event for e in t.events], "filters": t.filters})
            return out


@pytest.fixture()
def runs(store, env):  # noqa: F811
    return Runs(store, env)


def cells_of(*pairs):
    return sorted(k * 100 + h for h, k in pairs)


def test_a_losing_range_opens_one_ticket_and_the_same_range_never_twice(runs):
    slow = {(32, 1024): 1.6, (32, 4096): 2.4}
    s1 = runs.take(slow)
    assert len(s1["opened"]) == 1
    [t] = runs.tickets()
    assert t["title"] == ("Softmax f32, 1 thread: losing 2/2 cells, 1.60–2.40× slower "
                          "(keys 1024–4096; batch 1, heads 32, queries 1)")
    assert t["filters"] == ["op=Softmax batch=1 heads=32 keys=1024..4096 queries=1"]
    for _ in range(2):
        s = runs.take(slow)
        assert s["opened"] == [] and s["unchanged"] == [t["id"]]
    assert len(runs.tickets()) == 1


def test_grow_and_shrink_keep_the_ticket(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    s = runs.take({(32, 512): 1.3, (32, 1024): 1.6, (32, 4096): 2.4, (14, 4096): 1.9})
    [t] = runs.tickets()
    assert s["updated"] == [t["id"]] and t["cells"] == cells_of((32, 512), (32, 1024), (32, 4096), (14, 4096))
    runs.take({(32, 4096): 2.4})
    [t] = runs.tickets()
    assert t["state"] == "open" and t["cells"] == cells_of((32, 4096))


def test_closes_only_when_a_run_measured_every_cell_and_reopens(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    # a filtered run that measured one of the two cells, not losing: not closed
    s = runs.take({}, heads=(32,), keys=(4096,), partial=True)
    [t] = runs.tickets()
    assert s["closed"] == [] and t["state"] == "open" and t["cells"] == cells_of((32, 1024))
    # a run on which the other cell is not a loss either: closed as fixed, recording the run
    s = runs.take({})
    [t] = runs.tickets()
    assert s["closed"] == [t["id"]] and (t["state"], t["reason"]) == ("closed", "fixed") and t["closed_run"]
    # the kernel regresses: the same ticket reopens
    s = runs.take({(32, 1024): 1.7})
    [t] = runs.tickets()
    assert s["reopened"] == [t["id"]] and t["state"] == "open" and t["reopened"] == 1
    assert t["events"] == ["opened", "updated", "closed", "reopened"]


def test_a_partial_run_never_closes_what_it_did_not_measure(runs):
    runs.take({(32, 4096): 2.4})
    runs.take({}, heads=(14,), partial=True)
    assert runs.tickets()[0]["state"] == "open"
    # a new timing definition, measured for other cases only: the ticket's case not measured
    runs.take({}, heads=(14,), th="t1", partial=True)
    assert runs.tickets()[0]["state"] == "open"
    # the ticket's case measured under its new definition, not losing: its twin replaces it, fixed
    runs.take({}, th="t1")
    [t] = runs.tickets()
    assert (t["state"], t["reason"]) == ("closed", "fixed")


def test_a_quick_run_never_shrinks_or_closes(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    s = runs.take({}, quick=True, partial=True)  # every cell measured, none losing, but few replicates
    [t] = runs.tickets()
    assert s["closed"] == [] and t["state"] == "open" and t["cells"] == cells_of((32, 1024), (32, 4096))
    runs.take({})
    assert runs.tickets()[0]["state"] == "closed"


def test_a_filtered_run_sees_the_cells_it_skipped_between(runs):
    runs.take({(32, 128): 2.0})
    # measures only keys 4096, which loses: 512 and 1024 (known from the full run) lie between
    s = runs.take({(32, 4096): 2.0}, keys=(4096,), partial=True)
    t1, t2 = runs.tickets()
    assert t1["cells"] == cells_of((32, 128)) and t2["cells"] == cells_of((32, 4096)) and s["opened"] == [t2["id"]]
    assert t2["filters"] == ["op=Softmax batch=1 heads=32 keys=4096 queries=1"]


def test_a_split_part_without_new_evidence_stays_with_its_ticket(runs):
    runs.take({(32, k): 2.0 for k in KEYS})
    # a filtered run measures only keys 512, now fast: the rest is unmeasured, no new ticket
    s = runs.take({}, keys=(512,), partial=True)
    [t] = runs.tickets()
    assert s["opened"] == [] and s["split"] == [] and t["cells"] == cells_of((32, 128), (32, 1024), (32, 4096))


def test_a_run_resumed_after_max_time_is_taken_in_again(runs, store, env):  # noqa: F811
    with store.session() as s:
        rid = add_run(s, env, minutes=5, partial=True)
        add_cells(s, rid, {(32, 128): 2.0}, keys=(128,))
        assert lifecycle.update(s, rid)["opened"]
        add_cells(s, rid, {(32, 512): 2.0}, keys=(512,))  # --resume measured the rest
        again = lifecycle.update(s, rid)
        assert not again.get("already") and again["updated"]
        [t] = s.query(m.Ticket).all()
        assert len(t.cells) == 2


def test_hysteresis_a_loss_under_the_threshold_stays_in_its_range(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    runs.take({(32, 1024): 1.02, (32, 4096): 2.4})  # still `loss` (CI above 1), no longer by > 3%
    [t] = runs.tickets()
    assert t["cells"] == cells_of((32, 1024), (32, 4096))


def test_split_and_merge(runs):
    runs.take({(32, k): 1.8 for k in KEYS})
    s = runs.take({(32, 128): 1.8, (32, 1024): 1.8, (32, 4096): 1.8})  # 512 recovered: split
    t1, t2 = runs.tickets()
    assert t1["cells"] == cells_of((32, 1024), (32, 4096)) and t2["cells"] == cells_of((32, 128))
    assert t2["split_from"] == t1["id"] and s["split"] == [t2["id"]]
    s = runs.take({(32, k): 1.8 for k in KEYS})  # 512 loses again: one range, the oldest ticket survives
    t1, t2 = runs.tickets()
    assert t1["state"] == "open" and t1["cells"] == cells_of(*[(32, k) for k in KEYS])
    assert (t2["state"], t2["reason"], t2["merged_into"]) == ("closed", "merged", t1["id"])
    assert s["merged"] == [t2["id"]]


def test_wrong_answers_are_their_own_kind_first_in_priority(runs):
    runs.take({(32, 4096): 2.4})
    runs.take({(32, 4096): 2.4}, mismatch={(14, 128)})
    with runs.store.session() as s:
        ts = sorted(s.query(m.Ticket).all(), key=lifecycle.sort_key)
        assert [t.kind for t in ts] == ["wrong-answer", "loss"]
        assert "wrong answer in 1/1 cells" in ts[0].title
        body = render.body(ts[0], "hc")
        assert "err 1 \\> tol" in body


def test_run_order_origin_and_status_are_checked(runs, store, env):  # noqa: F811
    runs.take({(32, 4096): 2.4})
    with store.session() as s:
        old = add_run(s, env, minutes=-5)
        add_cells(s, old, {})
        with pytest.raises(UsageError, match="finished before run"):
            lifecycle.update(s, old)
        ab = add_run(s, env, minutes=100, origin="ab-head")
        with pytest.raises(UsageError, match="not a `perfbench run`"):
            lifecycle.update(s, ab)
        inter = add_run(s, env, minutes=101, status="interrupted")
        with pytest.raises(UsageError, match="complete runs only"):
            lifecycle.update(s, inter)
    with store.session() as s:
        rid = add_run(s, env, minutes=200)
        add_cells(s, rid, {(32, 4096): 2.4})
        first = lifecycle.update(s, rid)
    with store.session() as s:
        again = lifecycle.update(s, rid)
    assert again["already"] and again["unchanged"] == first["unchanged"]


def test_body_has_the_table_reproduce_command_and_history(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    runs.take({(32, 512): 1.3, (32, 1024): 1.6, (32, 4096): 2.4})
    with runs.store.session() as s:
        t = s.query(m.Ticket).one()
        events = [{"event": e.event, "run_id": e.run_id, "detail": e.detail} for e in t.events]
        body = render.body(t, "AMD EPYC | 2 cores | Linux", events)
    assert "| Case | Ours | ORT | ours/ORT [95% CI] | Ours throughput | Share of peak | ORT path |" in body
    assert "1.60 [" in body and "10 GB\\/s" in body and "| 10% |" in body and "kernel" in body
    assert ("perfbench run --suite attention --threads 1 --dtype f32 --cache warm --spin off --device cpu "
            "--filter 'op=Softmax batch=1 heads=32 keys=512..4096 queries=1'") in body
    assert "opened by run" in body and "updated by run" in body
    assert "First seen:** run" in body and str(t.first_sha[:12]) in body


def test_order_is_by_finish_time(store, env):  # noqa: F811
    with store.session() as s:
        # a long run started first and finished after a short one: both are taken in
        short = add_run(s, env, minutes=10, finished_at=T0 + timedelta(minutes=12))
        add_cells(s, short, {(32, 4096): 2.4})
        lifecycle.update(s, short)
        long = add_run(s, env, minutes=5, finished_at=T0 + timedelta(minutes=30))
        add_cells(s, long, {})
        assert lifecycle.update(s, long)["closed"]


def test_every_string_from_the_data_is_escaped_in_the_body(runs):
    runs.take({(32, 4096): 2.4}, mismatch={(32, 4096)})
    with runs.store.session() as s:
        t = s.query(m.Ticket).one()
        t.cells = [dict(t.cells[0], message="<img src=x onerror=alert(1)> @admin fixes #12 see http://evil.example |x|")]
        body = render.body(t, "host <b>class</b> @someone")
    for raw in ("<img", "<b>", "|x|", "@admin", "@someone", "http://evil", "#12"):
        assert raw not in body.replace("\\", "").replace("\u200b", "") or not re.search(
            r"(?<!\\)" + re.escape(raw), body), raw
    assert "\\<img" in body and "\\|x\\|" in body and "\\@\u200badmin" in body


def test_losses_below_the_bar_are_on_the_watch_list(runs, store, cli_env):  # noqa: F811
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    s = runs.take({(32, 1024): 1.02, (32, 4096): 2.4, (14, 128): 1.02})
    watch = {(w["case"], w["ticket"]) for w in s["watch"]}
    t = runs.tickets()[0]["id"]
    # 14x128 loses by 2%: not ticket-worthy, on the watch list; 32x1024 is held by the ticket
    assert watch == {("heads=14 queries=1 keys=128", None), ("heads=32 queries=1 keys=1024", t)}
    from perfbench.cli.tickets_cmds import summary_line
    assert "1 more cell(s) slower than ORT but not ticket-worthy" in summary_line(s)
    import subprocess

    from tests.conftest import perfbench_cmd
    r = subprocess.run(perfbench_cmd() + ["tickets", "--watch"], env={**cli_env, "PERFBENCH_DB": store.url},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2 cell(s) slower than ORT" in r.stdout and "heads=14 queries=1 keys=128" in r.stdout and f"#{t}" in r.stdout


def test_a_group_dropped_from_the_suite_closes_obsolete(runs):
    runs.take({(32, 4096): 2.4})
    runs.take({}, partial=True, threads=2)  # a filtered run of other cells: nothing happens
    assert runs.tickets()[0]["state"] == "open"
    s = runs.take({}, threads=2)  # the suite now has threads=2 only
    [t] = runs.tickets()
    assert (t["state"], t["reason"]) == ("closed", "obsolete") and s["closed"] == [t["id"]]


def test_a_ticket_partly_gone_closes_as_fixed_when_the_rest_is_measured(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})
    runs.take({}, keys=(128, 512, 1024))  # a full run without keys 4096 (dropped), 1024 fixed
    [t] = runs.tickets()
    assert (t["state"], t["reason"]) == ("closed", "fixed")


def test_a_quick_run_grows_a_ticket(runs):
    runs.take({(32, 4096): 2.4})
    s = runs.take({(32, 1024): 2.0, (32, 4096): 2.4}, quick=True, partial=True)
    [t] = runs.tickets()
    assert s["updated"] == [t["id"]] and t["cells"] == cells_of((32, 1024), (32, 4096))


def test_a_resumed_run_is_not_taken_in_again_after_a_later_run(runs, store, env):  # noqa: F811
    with store.session() as s:
        rid = add_run(s, env, minutes=5, partial=True, finished_at=T0 + timedelta(minutes=6))
        add_cells(s, rid, {(32, 128): 2.0}, keys=(128,))
        lifecycle.update(s, rid)
    runs.take({})  # a later full run: 128 is fine now, the ticket closes
    with store.session() as s:
        add_cells(s, rid, {}, keys=(512,))  # the first run is resumed
        with pytest.raises(UsageError, match="was resumed after run"):
            lifecycle.update(s, rid)


def test_a_new_timing_definition_does_not_split_ranges_on_old_twins(runs):
    runs.take({})  # full run, definition t0
    s = runs.take({(32, 512): 2.0, (32, 1024): 2.0}, heads=(32,), th="t1", partial=True)
    [t] = runs.tickets()
    assert s["opened"] == [t["id"]] and t["cells"] == cells_of((32, 512), (32, 1024))
    assert "losing 2/2 cells" in t["title"]


def test_the_same_case_in_another_group_is_another_cell(store, env):  # noqa: F811
    with store.session() as s:
        rid = add_run(s, env, minutes=5)
        add_cells(s, rid, {(32, 4096): 2.4}, threads=1)
        add_cells(s, rid, {}, threads=2)  # same cases and timing definition, 2 threads: ours wins
        summary = lifecycle.update(s, rid)
        [t] = s.query(m.Ticket).all()
        assert t.threads == 1 and len(summary["opened"]) == 1 and len(t.cells) == 1


def test_a_group_only_a_partial_run_measured_is_not_obsolete(runs):
    runs.take({})  # a full run: threads 1 only
    runs.take({(32, 4096): 2.4}, threads=2, partial=True)  # `--threads 2`: opens a ticket at 2 threads
    s = runs.take({})  # the next full run has no 2-thread group: it never had one
    [t] = runs.tickets()
    assert t["state"] == "open" and s["closed"] == []


def test_an_open_tickets_old_definition_twins_are_replaced(runs):
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4})  # definition t0
    runs.take({(32, 1024): 1.6, (32, 4096): 2.4}, heads=(32,), th="t1", partial=True)
    [t] = runs.tickets()
    assert t["cells"] == cells_of((32, 1024), (32, 4096))  # the t1 twins, not both generations
    assert "losing 2/2 cells" in t["title"]


def test_a_shape_only_a_partial_run_measured_is_not_gone(runs):
    runs.take({})  # a full run: keys 128..4096
    runs.take({(32, 8192): 2.0}, keys=(8192,), partial=True)  # a quick shape, outside the full axes
    s = runs.take({})
    [t] = runs.tickets()
    assert t["state"] == "open" and s["closed"] == []
