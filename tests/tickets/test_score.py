"""`perfbench score`'s history: fast_1 per op / dtype / threads split by the ORT path the cells
were against (issue 17, finding 2), on a real database."""

from __future__ import annotations

from perfbench.store import models as m
from perfbench.tickets import score
from tests.store.test_store import add_run, env, store  # noqa: F401  (fixtures)
from tests.tickets.test_lifecycle import add_cells


def test_score_splits_fast_1_by_ort_path(store, env):  # noqa: F811
    with store.session() as s:
        r1 = add_run(s, env, minutes=1)
        add_cells(s, r1, {(14, 128): 1.2})  # 8 cells against ORT's kernel, one slower
        r2 = add_run(s, env, minutes=2)
        add_cells(s, r2, {(14, 128): 1.2, (32, 4096): 1.3})
        # in run 2, ORT ran two cells with Casts inserted (one of them the slower one)
        for c in s.query(m.Cell).filter(m.Cell.run_id == r2).all():
            if (c.case.params["heads"], c.case.params["keys"]) in ((32, 4096), (32, 1024)):
                c.side("ort").path = "casts"
        s.flush()
        doc = score.history(s, "attention", env.hc_id, 8)
    rows = {(g["op"], g["ort_path"]): g for g in doc["regions"]}
    assert set(rows) == {("Softmax", "all"), ("Softmax", "kernel"), ("Softmax", "casts")}
    assert rows[("Softmax", "all")]["fast_1"] == [7 / 8, 6 / 8]  # the region's total is kept
    assert rows[("Softmax", "kernel")]["fast_1"] == [7 / 8, 5 / 6]
    assert rows[("Softmax", "kernel")]["cells"] == [8, 6]
    assert rows[("Softmax", "casts")]["fast_1"] == [None, 1 / 2]  # not measured against casts in run 1
    out = score.table(doc)
    assert "ORT path" in out.splitlines()[0]
    lines = [line.split() for line in out.splitlines()]
    assert ["Softmax", "f32", "1", "all:", "casts,", "kernel", "88%", "75%"] in lines
    assert ["Softmax", "f32", "1", "casts", "-", "50%"] in lines


def test_score_keeps_one_row_for_a_region_against_one_path(store, env):  # noqa: F811
    with store.session() as s:
        add_cells(s, add_run(s, env, minutes=1), {(14, 128): 1.2})
        doc = score.history(s, "attention", env.hc_id, 8)
    assert [(g["ort_path"], g["ort_paths"]) for g in doc["regions"]] == [("all", ["kernel"])]
    assert score.table(doc).splitlines()[2].split()[:5] == ["Softmax", "f32", "1", "kernel", "88%"]
