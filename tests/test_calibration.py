"""perfbench.ab's calibration arithmetic (spreads from A/A rounds) and the merge of alternating turns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench import ab
from perfbench.timing.protocol import CellOutcome, Harness


def outcome(ours, ort, status="ok"):
    return CellOutcome(ours_status=status, ours_ns=list(ours), ort_ns=list(ort))


def test_round_stats_of_an_aa_round():
    b = outcome([100.0, 102.0, 98.0, 100.0], [200.0, 201.0, 199.0, 200.0])
    h = outcome([101.0, 103.0, 99.0, 101.0], [200.0, 201.0, 199.0, 200.0])
    st = ab._round_stats(b, h)
    d = np.log(np.array(h.ours_ns) / np.array(b.ours_ns))
    assert st["ab"][0] == pytest.approx(d.mean()) and st["ab"][1] == pytest.approx(d.var(ddof=1) / 4)
    assert st["ratio"][0] == pytest.approx(np.mean(np.log(np.array(b.ours_ns) / np.array(b.ort_ns))))
    assert ab._round_stats(outcome([1.0, 1.0], [1.0, 1.0], status="mismatch"), h) is None


def test_spreads_known_mean_zero_for_ab_and_shrinkage_toward_the_group():
    # three cells of one group (Softmax, 1 thread, warm) with an A/A bias of +-2% per round
    per_round = {}
    for i, bias in enumerate((0.02, 0.01, 0.03)):
        key = (f"Softmax.keys={i}", "f32", 1, "cpu", "warm", "off")
        per_round[key] = [{"ab": (s * bias, 0.0), "ours": (5.0 + s * bias, 0.0), "ort": (5.0, 0.0),
                           "ratio": (s * bias, 0.0)} for s in (1, -1, 1)]
    out = ab.spreads(per_round)
    raw = out["cells"][("Softmax.keys=0", "f32", 1, "cpu", "warm", "off")]["raw"]["unshrunk"]
    assert raw["ab"] == pytest.approx(0.02)  # sqrt(mean d^2) with d = +-2%
    assert raw["ours"] == pytest.approx(np.std([0.02, -0.02, 0.02], ddof=1))
    pooled = 0.02  # the group's median unshrunk sigma_ab
    assert out["cells"][("Softmax.keys=2", "f32", 1, "cpu", "warm", "off")]["ab"] == pytest.approx(
        math.sqrt((3 * 0.03**2 + 4 * pooled**2) / 7))
    assert out["pooled"]["ab"] == pytest.approx(0.02)
    # a group with no detectable between-run spread is shrunk toward half the overall median, not 0
    quiet = {(f"MultiHeadAttention.p={i}", "f32", 1, "cpu", "warm", "off"): [
        {"ab": (0.0, 0.0), "ours": (5.0, 0.0), "ort": (5.0, 0.0), "ratio": (0.0, 0.0)}] * 3 for i in range(3)}
    both = ab.spreads({**per_round, **quiet})
    q = both["cells"][("MultiHeadAttention.p=0", "f32", 1, "cpu", "warm", "off")]
    assert q["ab"] == pytest.approx(math.sqrt(4 * (0.5 * both["pooled"]["ab"]) ** 2 / 7)) and q["ab"] > 0
    # a cell with one usable round gets no spread
    assert ab.spreads({("x", "f32", 1, "cpu", "warm", "off"): per_round[next(iter(per_round))][:1]})["cells"] == {}


def test_merge_of_alternating_turns_keeps_replicates_in_turn_order_and_the_first_failure():
    a = outcome([1.0, 2.0], [3.0, 4.0])
    b = outcome([5.0, 6.0], [7.0, 8.0])
    m = ab._merge([a, b])
    assert m.ours_ns == [1.0, 2.0, 5.0, 6.0] and m.ort_ns == [3.0, 4.0, 7.0, 8.0]
    bad = ab._merge([outcome([1.0, 2.0], [3.0, 4.0]), outcome([], [], status="crashed")])
    assert bad.ours_status == "crashed" and bad.ours_ns == []


def test_rotation_is_fixed_for_one_build_and_rotates_for_two():
    assert [Harness._rotation(["ours"], r) for r in range(3)] == [["ours", "ort"]] * 3
    orders = [Harness._rotation(["base", "head"], r) for r in range(3)]
    assert orders == [["base", "head", "ort"], ["head", "ort", "base"], ["ort", "base", "head"]]
    assert {o[0] for o in orders} == {"base", "head", "ort"}  # no side always first
