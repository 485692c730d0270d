"""perfbench.tickets.ranges: kinds, neighbourhoods, matching of ranges to tickets, reproduce filters."""

from __future__ import annotations

import math

from perfbench import filters as filt
from perfbench.tickets import ranges


def cell(keys, heads=32, verdict="loss", ratio=1.5, sd=0.01, n=8, ours="ok", ort="ok", queries=1, th="t0",
         numerics_only=False):
    params = {"batch": 1, "heads": heads, "queries": queries, "keys": keys}
    cid = "Softmax" + "".join(f".{k}={v}" for k, v in params.items())
    return {"case_id": cid, "op": "Softmax", "params": params, "dtype": "f32", "threads": 1, "device": "cpu",
            "cache": "warm", "spin": "off", "verdict": verdict, "ratio": ratio, "sd_log": sd, "n": n,
            "numerics_only": numerics_only, "ours": {"status": ours}, "ort": {"status": ort}, "timing_hash": th}


def lattice_of(cells):
    return {ranges.cell_id(c): ranges.axes_of(c) for c in cells}


def test_judge_kinds_and_bh():
    cells = [cell(128, ratio=1.5), cell(512, ratio=1.02, verdict="loss"), cell(1024, verdict="win", ratio=0.7),
             cell(4096, ours="mismatch", verdict="fail"), cell(64, ours="crashed", verdict="fail"),
             cell(256, ort="no-kernel", verdict="n/a", ratio=None)]
    kinds, p = ranges.judge(cells, lambda c: None, 0.05)
    ids = [ranges.cell_id(c) for c in cells]
    assert kinds[ids[0]] == "loss"
    assert ids[1] not in kinds  # a loss by 2% is not beyond m = 3%: not ticket-worthy
    assert ids[2] not in kinds and kinds[ids[3]] == "wrong-answer" and kinds[ids[4]] == "broken"
    assert kinds[ids[5]] == "coverage"
    assert p[ids[0]][0] < 0.01 < p[ids[1]][0] and p[ids[0]][1] == 0.05


def test_judge_uses_the_calibrated_sigma_and_bh_across_the_sweep():
    c = cell(128, ratio=1.10, sd=0.0)
    # sigma_b 5%: 10% slower is beyond 3% with z = (log 1.1 - log 1.03) / 0.05 ~ 1.3: not confident
    assert ranges.judge([c], lambda c: None, 0.05)[0] == {}
    assert ranges.judge([c], lambda c: 0.01, 0.05)[0] == {ranges.cell_id(c): "loss"}
    # the same p alone is rejected, among many null cells BH does not reject it
    one = cell(128, ratio=1.07, sd=0.0)
    alone = ranges.judge([one], lambda c: 0.017, 0.05)[0]
    crowd = ranges.judge([one] + [cell(k, ratio=1.0, verdict="undecided") for k in range(1, 40)],
                         lambda c: 0.017, 0.05)[0]
    assert alone and not crowd


def test_components_follow_neighbours_along_axes_only():
    grid = [cell(k, heads=h) for h in (14, 32) for k in (128, 512, 1024, 4096)]
    lat = lattice_of(grid)
    pick = lambda *pairs: {ranges.cell_id(cell(k, heads=h)) for h, k in pairs}  # noqa: E731
    # an L: heads 32 keys 1024..4096 plus heads 14 keys 4096 -> one range
    comps = ranges.components(lat, pick((32, 1024), (32, 4096), (14, 4096)))
    assert len(comps) == 1 and len(comps[0]) == 3
    # a gap (512 not losing) splits
    assert len(ranges.components(lat, pick((32, 128), (32, 1024)))) == 2
    # diagonal cells (differ in two axes) are not neighbours
    assert len(ranges.components(lat, pick((32, 128), (14, 512)))) == 2
    # adjacency is among the lattice's cells: without 512 measured, 128 and 1024 are neighbours
    lat2 = {k: v for k, v in lat.items() if v["keys"] != 512}
    assert len(ranges.components(lat2, pick((32, 128), (32, 1024)))) == 1


def test_groups_split_on_modes_and_cell_key():
    a = cell(128)
    b = dict(cell(128), threads=2)
    assert ranges.group_key(ranges.group_of(a)) != ranges.group_key(ranges.group_of(b))
    g = {"case_id": "GroupQueryAttention.x", "op": "GroupQueryAttention", "dtype": "f32", "threads": 1,
         "device": "cpu", "cache": "warm", "spin": "off",
         "params": {"batch": 1, "seq": 1, "heads": 32, "kv_heads": 8, "head_size": 128, "past": 128, "kv": "copy",
                    "rotary": 0, "interleaved": 0, "ragged": 0}}
    grp = ranges.group_of(g)
    assert grp["modes"] == {"kv": "copy", "rotary": 0, "interleaved": 0, "ragged": 0}
    assert set(ranges.axes_of(g)) == {"batch", "seq", "heads", "kv_heads", "head_size", "past"}
    assert "kv=copy" in ranges.group_key(grp)


def test_match_grow_shrink_split_merge():
    A, B = {"a", "b"}, {"d", "e"}
    # grow and shift keep the ticket
    keep, split, merged = ranges.match({1: A}, [{"b", "c"}])
    assert keep == {0: 1} and not split and not merged
    # split: the largest part keeps the ticket, the other is new and names it
    keep, split, merged = ranges.match({1: {"a", "b", "c", "d"}}, [{"a"}, {"c", "d"}])
    assert keep == {1: 1} and split == {0: 1} and not merged
    # merge: the oldest ticket survives, the other closes as merged into it
    keep, split, merged = ranges.match({1: A, 2: B}, [A | B | {"c"}])
    assert keep == {0: 1} and merged == {2: 1}
    # a range overlapping nothing is neither
    keep, split, merged = ranges.match({1: A}, [{"z"}])
    assert keep == {} and split == {} and merged == {}


def _selected_by(flts, cells):
    parsed = [filt.parse(f) for f in flts]
    out = set()
    for c in cells:
        fields = {**c["params"], "op": c["op"], "dtype": c["dtype"], "threads": c["threads"], "cache": c["cache"],
                  "spin": c["spin"], "device": c["device"]}
        if any(all(t.field in fields and t.match_value(fields[t.field]) for t in f.terms) for f in parsed):
            out.add(ranges.cell_id(c))
    return out


def test_box_filter_selects_exactly_the_range():
    grid = [cell(k, heads=h) for h in (14, 32) for k in (128, 512, 1024, 4096)]
    lat = lattice_of(grid)
    group = ranges.group_of(grid[0])
    box = [cell(k, heads=32) for k in (512, 1024, 4096)]
    flts = ranges.box_filter(group, box, lat)
    assert flts == ["op=Softmax batch=1 heads=32 keys=512..4096 queries=1"]
    assert _selected_by(flts, grid) == {ranges.cell_id(c) for c in box}
    ell = [cell(1024, heads=32), cell(4096, heads=32), cell(4096, heads=14)]
    flts = ranges.box_filter(group, ell, lat)
    assert len(flts) == 2 and _selected_by(flts, grid) == {ranges.cell_id(c) for c in ell}
    gap = [cell(128), cell(1024)]  # not neighbours, but a filter list still selects exactly them
    assert _selected_by(ranges.box_filter(group, gap, lat), grid) == {ranges.cell_id(c) for c in gap}


def test_reproduce_gives_the_cell_key_as_flags_and_quotes():
    group = ranges.group_of(cell(128))
    cmd = ranges.reproduce("my suite", group, ["op=Softmax keys=128"])
    assert cmd == ("perfbench run --suite 'my suite' --threads 1 --dtype f32 --cache warm --spin off --device cpu "
                   "--filter 'op=Softmax keys=128'")


def test_cell_identity_includes_the_timing_definition():
    assert ranges.cell_id(cell(128, th="a")) != ranges.cell_id(cell(128, th="b"))
    assert math.isinf(ranges.numeric("bsnh"))
