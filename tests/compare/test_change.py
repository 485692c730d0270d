"""perfbench.compare.change: the decision table of base-vs-head verdicts, on cell views built
by hand (the same plain data views.cell_view makes of stored cells)."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.compare import change

ORT = [1000.0, 1004.0, 996.0, 1002.0, 998.0, 1001.0, 999.0, 1000.0]


def cell(case="Softmax.keys=128", ours=None, ort=None, status="ok", ort_status="ok", th="t1", dtype="f32",
         numerics_only=False, message=""):
    ours = list(ours if ours is not None else [800.0, 803.0, 797.0, 801.0, 799.0, 800.0, 802.0, 798.0])
    return {"case_id": case, "op": case.split(".")[0], "params": {"keys": 128}, "dtype": dtype, "threads": 1,
            "device": "cpu", "cache": "warm", "spin": "off", "numerics_only": numerics_only, "verdict": "win",
            "verdict_note": "", "timing_hash": th,
            "ours": {"status": status, "message": message, "replicates_ns": ours if status == "ok" else []},
            "ort": {"status": ort_status, "replicates_ns": list(ort or ORT) if status == "ok" else []},
            "numerics": {"err_ours": 1e-7, "tol": 1e-5}}


def scaled(c, factor, jitter=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = dict(c)
    out["ours"] = dict(c["ours"], replicates_ns=[x * factor * (1 + jitter * rng.standard_normal())
                                                 for x in c["ours"]["replicates_ns"]])
    return out


def one(base, head, **kw):
    rows = change.compare_cells([base], [head], **kw)
    assert len(rows) == 1
    return rows[0]


def test_numerics_broke_is_top_severity_and_fails_the_exit_code():
    r = one(cell(), cell(status="mismatch", message="numerics: err 3e-2 > tol 1e-5"), mode="interleaved")
    assert r["verdict"] == "numerics-broke" and "mismatch" in r["why"] and r["abs"] is None
    assert change.exit_code([r]) == 1
    lost = one(cell(), cell(status="no-kernel"), mode="interleaved")
    assert lost["verdict"] == "numerics-broke"  # head can no longer run what base ran


def test_failing_in_both_is_not_comparable_and_fixed_is_an_improvement():
    assert one(cell(status="mismatch"), cell(status="mismatch"))["verdict"] == "not-comparable"
    fixed = one(cell(status="crashed"), cell())
    assert fixed["verdict"] == "improvement" and "crashed" in fixed["why"]


def test_a_clear_slowdown_is_a_regression_a_small_one_possible_a_speedup_an_improvement():
    base = cell()
    reg = one(base, scaled(base, 1.10), mode="interleaved")
    assert reg["verdict"] == "regression" and reg["abs"]["verdict"] == "regression"
    assert reg["abs"]["change"] == pytest.approx(0.10)
    assert reg["abs"]["ci_low"] < 0.10 < reg["abs"]["ci_high"]
    assert reg["abs"]["sigma_source"] == "default" and reg["abs"]["sigma_b"] == change.DEFAULT_SIGMA["ab"]
    # +2%, calibrated spread tiny: confidently worse, not confidently by more than m = 3%
    pos = one(base, scaled(base, 1.02), mode="interleaved",
              sigma_for=lambda row, th: {"ab": 0.001, "ours": 0.001, "ort": 0.001, "ratio": 0.001})
    assert pos["verdict"] == "possible" and pos["abs"]["sigma_source"] == "calibrated"
    imp = one(base, scaled(base, 0.85), mode="interleaved")
    assert imp["verdict"] == "improvement"
    same = one(base, scaled(base, 1.0, jitter=0.003), mode="interleaved")
    assert same["verdict"] == "unchanged"
    assert change.exit_code([pos, imp, same]) == 0 and change.exit_code([reg]) == 1


def test_the_default_sigma_keeps_a_within_noise_change_unflagged():
    base = cell()
    # +3.5% with a near-zero within-run spread: flagged only because sigma_b is ignored
    tight = one(base, scaled(base, 1.035), mode="interleaved",
                sigma_for=lambda row, th: {"ab": 0.0, "ours": 0.0, "ort": 0.0, "ratio": 0.0})
    assert tight["verdict"] == "regression"
    # the default sigma_b (2%) counts the between-run noise: 3.5% is not confidently a change
    assert one(base, scaled(base, 1.035), mode="interleaved")["verdict"] == "unchanged"
    assert one(base, scaled(base, 1.08), mode="interleaved")["verdict"] in ("possible", "regression")
    noisy = one(base, scaled(base, 1.035), mode="interleaved",
                sigma_for=lambda row, th: {"ab": 0.05, "ours": 0.05, "ort": 0.05, "ratio": 0.05})
    assert noisy["verdict"] == "unchanged"


def test_stored_runs_losing_ground_to_ort_is_flagged_even_when_the_machine_moved():
    base = cell()
    # the machine got 10% slower for both ours and ORT: our time regressed, the ratio did not
    slow_machine = scaled(base, 1.10)
    slow_machine["ort"] = dict(base["ort"], replicates_ns=[x * 1.10 for x in ORT])
    r = one(base, slow_machine, mode="stored-runs",
            sigma_for=lambda row, th: {"ab": 0.005, "ours": 0.01, "ort": 0.01, "ratio": 0.005})
    assert r["abs"]["verdict"] == "regression" and r["ratio"]["verdict"] == "unchanged"
    assert r["verdict"] == "regression"  # either 🔴 fails the comparison; both are shown
    # ORT got 10% faster, our time did not move: we lost ground
    lost = dict(base, ort=dict(base["ort"], replicates_ns=[x / 1.10 for x in ORT]))
    r2 = one(base, lost, mode="stored-runs",
             sigma_for=lambda row, th: {"ab": 0.005, "ours": 0.01, "ort": 0.01, "ratio": 0.005})
    assert r2["abs"]["verdict"] == "unchanged" and r2["ratio"]["verdict"] == "regression"
    assert change.exit_code([r2]) == 1
    # two runs count the between-run spread twice
    assert r2["ratio"]["sigma_b"] == pytest.approx(0.005 * 2**0.5)


def test_stored_runs_count_each_runs_processes_not_its_replicates_as_independent():
    """Two stored runs whose replicates came from two worker processes that disagree by 20%:
    each run's mean is as uncertain as its processes say (a run verdict's grouped SE), wider
    than the same replicates taken as one process's -- Welch over replicates would treat the
    process gap as noise that averages away over 8 replicates."""
    b_ours = [800.0, 802.0, 798.0, 801.0, 960.0, 962.0, 958.0, 961.0]
    h_ours = [x * 1.15 for x in [960.0, 962.0, 958.0, 961.0, 800.0, 802.0, 798.0, 801.0]]
    cal = lambda row, th: {"ab": 0.005, "ours": 0.005, "ort": 0.005, "ratio": 0.005}  # noqa: E731
    flat = one(cell(ours=b_ours), cell(ours=h_ours), mode="stored-runs", sigma_for=cal)
    b, h = cell(ours=b_ours), cell(ours=h_ours)
    for c in (b, h):
        c["protocol"] = {"process": [0, 0, 0, 0, 1, 1, 1, 1]}
    grouped = one(b, h, mode="stored-runs", sigma_for=cal)
    assert grouped["abs"]["change"] == pytest.approx(flat["abs"]["change"])
    assert grouped["abs"]["se"] > 1.05 * flat["abs"]["se"]
    assert grouped["abs"]["ci_low"] < flat["abs"]["ci_low"]


def test_stored_runs_count_one_calibrations_degrees_of_freedom_once():
    """Where sigma_b dominates, the change's dof are the calibration's (rounds - 1 + 4 = 5 here):
    both runs' between-run parts come from one calibrated sigma_b, not two independent ones
    (counted as independent, Welch-Satterthwaite would give about 10 and a narrower interval)."""
    base = cell()
    head = scaled(base, 1.02, jitter=0.0005, seed=1)
    cal = lambda row, th: {"ab": 0.05, "ours": 0.05, "ort": 0.05, "ratio": 0.05, "rounds": 2}  # noqa: E731
    r = one(base, head, mode="stored-runs", sigma_for=cal)
    assert r["abs"]["dof"] == pytest.approx(5.0, rel=0.05)
    assert r["abs"]["se"] == pytest.approx(0.05 * 2 ** 0.5, rel=0.05)  # one run's sigma_b on each side
    # a paired sitting whose lengths differ falls back to the two-run estimate without counting
    # the sitting's spread twice over: sigma_ab / sqrt(2) a side
    short = dict(head, ours=dict(head["ours"], replicates_ns=head["ours"]["replicates_ns"][:6]),
                 ort=dict(head["ort"], replicates_ns=head["ort"]["replicates_ns"][:6]))
    r2 = one(base, short, mode="interleaved", sigma_for=cal)
    assert r2["abs"]["se"] == pytest.approx(0.05, rel=0.05)


def test_not_comparable_rows_are_listed_never_compared():
    base = cell()
    assert one(base, dict(scaled(base, 1.5), timing_hash="t2"))["verdict"] == "not-comparable"
    rows = change.compare_cells([base], [cell(case="Softmax.keys=256")])
    assert [r["verdict"] for r in rows] == ["not-comparable", "not-comparable"]
    assert "only in base" in rows[0]["why"] and "only in head" in rows[1]["why"]
    r = one(base, scaled(base, 2.0), incomparable=["ORT version differs (1.30.0 vs 1.31.1)"])
    assert r["verdict"] == "not-comparable" and "ORT version" in r["why"]
    below = one(base, cell(ort_status="below-resolution"))
    assert below["verdict"] == "not-comparable" and below["abs"] is None
    assert change.run_incomparable({"host_class": "a", "ort_version": "1", "protocol_version": 1},
                                   {"host_class": "a", "ort_version": "2", "protocol_version": 1}) == [
        "ORT version differs (1 vs 2)"]


def test_numerics_only_cells_are_checked_not_timed():
    r = one(cell(numerics_only=True), cell(numerics_only=True))
    assert r["verdict"] == "unchanged" and "numerics-only" in r["why"]
    assert one(cell(numerics_only=True), cell(numerics_only=True, status="mismatch"))["verdict"] == "numerics-broke"


def test_benjamini_hochberg_keeps_500_unchanged_cells_quiet_where_per_cell_tests_cry_wolf():
    rng = np.random.default_rng(1)
    bases, heads = [], []
    for i in range(500):
        b = cell(case=f"Softmax.keys={i}", ours=list(800 * np.exp(0.01 * rng.standard_normal(8))))
        h = dict(b, ours=dict(b["ours"], replicates_ns=list(800 * np.exp(0.01 * rng.standard_normal(8)))))
        bases.append(b)
        heads.append(h)
    zero = {"ab": 0.0, "ours": 0.0, "ort": 0.0, "ratio": 0.0}
    rows = change.compare_cells(bases, heads, mode="interleaved", sigma_for=lambda row, th: zero)
    raw = sum(1 for r in rows if r["abs"]["p_worse"] < 0.05)
    assert raw > 10  # cell by cell at p < 0.05: ~25 false alarms
    flagged = [r for r in rows if r["verdict"] in ("regression", "possible")]
    assert len(flagged) <= 1
    s = change.summary(rows)
    assert sum(s.values()) == 500


def test_calibration_info_says_where_sigma_came_from():
    base = cell()
    rows = change.compare_cells([base, cell(case="Softmax.keys=9")], [scaled(base, 1.0),
                                                                      cell(case="Softmax.keys=9")],
                                sigma_for=lambda row, th: ({"ab": 0.01, "ours": 0.01, "ort": 0.01, "ratio": 0.01}
                                                           if row["case_id"] == "Softmax.keys=128" else None))
    info = change.calibration_info({"id": 3, "created_at": "2026-11-29T20:00:00", "rounds": 3,
                                    "host_class": "hc"}, rows, 3600.0)
    assert info["source"] == "mixed" and info["cells_calibrated"] == 1 and info["cells_default"] == 1
    assert info["age_s"] == 3600.0 and info["calibration_id"] == 3
    assert change.calibration_info(None, rows[:0], None)["source"] == "default"


def test_alternating_workers_are_judged_by_the_stated_default_not_a_calibration():
    # a calibration holds the spread of runs over several worker processes; alternating workers
    # measure each side in one process, so a tiny calibrated sigma must not judge them
    base = cell()
    tiny = lambda row, th: {"ab": 0.001, "ours": 0.001, "ort": 0.001, "ratio": 0.001}  # noqa: E731
    alt = one(base, scaled(base, 1.10), mode="interleaved", op_modes={"Softmax": "alternating-workers"},
              sigma_for=tiny)
    assert alt["abs"]["sigma_source"] == "default"
    assert alt["abs"]["sigma_b"] == pytest.approx(2 ** 0.5 * change.DEFAULT_SIGMA["ours"])
    assert alt["ratio"]["sigma_b"] == pytest.approx(2 ** 0.5 * change.DEFAULT_SIGMA["ratio"])
    assert alt["abs"]["verdict"] == "unchanged"  # +10% is within one process's default spread
    same = one(base, scaled(base, 1.10), mode="interleaved", sigma_for=tiny)
    assert same["abs"]["sigma_source"] == "calibrated" and same["abs"]["verdict"] == "regression"
