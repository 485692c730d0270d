"""perfbench.ab's calibration arithmetic (spreads from A/A rounds) and the merge of alternating turns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbench import ab
from perfbench.timing.protocol import CellOutcome, Harness, merge_outcomes, slices


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


def test_round_stats_take_the_within_process_variance_when_replicates_are_spread():
    """A round's replicates from two processes that disagree: the within-round variance of the
    mean is s_w^2/n pooled within each process (the process-level part belongs to sigma_b, as a
    verdict's grouped SE counts it), not the plain s^2/n over all replicates."""
    b = outcome([100.0, 102.0, 150.0, 152.0], [200.0, 200.0, 200.0, 200.0])
    b.process = [0, 0, 1, 1]
    h = outcome([100.0, 102.0, 150.0, 152.0], [200.0, 200.0, 200.0, 200.0])
    h.process = [0, 0, 1, 1]
    st = ab._round_stats(b, h)
    lb = np.log(np.array(b.ours_ns))
    s_w2 = (np.var(lb[:2], ddof=1) + np.var(lb[2:], ddof=1)) / 2
    assert st["ours"][1] == pytest.approx(s_w2 / 4)
    assert st["ours"][1] < lb.var(ddof=1) / 4 / 50  # the plain variance holds the processes' gap


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
    a.process, a.order = [0, 0], [["ours", "ort"], ["ort", "ours"]]
    b = outcome([5.0, 6.0], [7.0, 8.0])
    b.process, b.order = [1, 1], [["ours", "ort"], ["ort", "ours"]]
    m = merge_outcomes([a, b])
    assert m.ours_ns == [1.0, 2.0, 5.0, 6.0] and m.ort_ns == [3.0, 4.0, 7.0, 8.0]
    assert m.process == [0, 0, 1, 1] and len(m.order) == 4
    bad = merge_outcomes([outcome([1.0, 2.0], [3.0, 4.0]), outcome([], [], status="crashed")])
    assert bad.ours_status == "crashed" and bad.ours_ns == []


def test_slices_share_replicates_as_equally_as_they_divide_two_at_least():
    assert slices(8, 3) == [(0, 3), (3, 3), (6, 2)]
    assert slices(5, 3) == [(0, 3), (3, 2)]  # at least two replicates a process
    assert slices(3, 3) == [(0, 3)]
    assert slices(2, 3) == [(0, 2)]
    assert slices(8, 1) == [(0, 8)]


def test_rotation_balances_what_precedes_what():
    # one build: ours and ORT alternate who goes first
    assert [Harness._rotation(["ours"], r) for r in range(4)] == [["ours", "ort"], ["ort", "ours"]] * 2
    # three sides: a Williams design -- in 6 rounds every side is first twice and every ordered
    # pair of sides is adjacent exactly twice (the old rotation had base after ORT, head after base
    # in every round)
    orders = [Harness._rotation(["base", "head"], r) for r in range(6)]
    assert len({tuple(o) for o in orders}) == 6
    pairs: dict = {}
    for o in orders:
        for x, y in zip(o, o[1:]):
            pairs[(x, y)] = pairs.get((x, y), 0) + 1
    assert len(pairs) == 6 and set(pairs.values()) == {2}
    assert {o[0] for o in orders} == {"base", "head", "ort"}
    swapped = {"base": "head", "head": "base", "ort": "ort"}
    assert Harness._rotation(["base", "head"], 6) == [swapped[x] for x in orders[0]]  # roles swap every cycle
    assert Harness._rotation(["base", "head"], 12) == orders[0]  # and the pair of cycles repeats


def test_ab_caps_processes_and_says_so_only_where_the_spread_changes():
    st = {"replicates": 32, "processes": 12}
    note = ab.cap_processes(st)
    assert st["processes"] == ab.MAX_PROCESSES == 8
    assert note and "go to 8 of them, not 12" in note, note
    st = {"replicates": 8, "processes": 10}  # 8 shares of one replicate either way
    assert ab.cap_processes(st) is None and st["processes"] == 8
    st = {"replicates": 8, "processes": 3}
    assert ab.cap_processes(st) is None and st == {"replicates": 8, "processes": 3}
