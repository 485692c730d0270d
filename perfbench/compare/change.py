"""Verdicts of change, base vs head (data, not rendering; docs/compare.md has the decision table).

Per cell, two changes are tested (CONTRACTS §4): our absolute time head/base, and the ours/ORT
ratio head/base. Each is a one-sided t-test on the log scale with SE = sqrt(within^2 + v), v
the between-run variance of the mean: this cell's own spread between the worker processes that
measured its replicates, pooled with sigma_b^2 from A/A calibration of that cell on this host
class (a stated default when there is none), on Welch-Satterthwaite degrees of freedom
(stats.grouped_mean_se), and Benjamini-Hochberg at q across all cells of the comparison, each
hypothesis a family of its own:

* numerics-broke (❌): head fails the gate (mismatch / error / crashed / timeout / no-kernel)
  where base passed. Top severity, always shown, exit 1.
* regression (🔴): confidently worse by more than m (rejects H0: change <= log(1+m)).
* possible (⚠️): confidently worse (rejects H0: change <= 0), not confidently by more than m.
* improvement (🟢): confidently better by more than m (mirror), or head passes where base failed.
* unchanged (✅): everything else.
* not-comparable (➖): comparability keys differ, the cell is on one side only, or a side has no
  timing (below resolution, ORT failed, both builds failing).

A row's verdict is the more severe of its two; both are kept. Modes: "interleaved" (`ab`: base,
head and ORT in one rotation, replicates paired, sigma_b of an A/A `ab`), "alternating-workers"
(`ab` on ops whose native interface changed: each side in its own worker, replicates paired by
turn, each side's replicates in a worker of its own checkout: judged with 2 sigma_b^2 of the
stated default, as no calibration measures this mode) and "stored-runs"
(`compare`: two independent runs, each run's mean with a run verdict's grouped standard error
-- its processes' spread pooled with sigma_b of one run -- the two added).
"""

from __future__ import annotations

import math

from perfbench import stats

VERDICTS = ("numerics-broke", "regression", "possible", "improvement", "unchanged", "not-comparable")
SEVERITY = {"numerics-broke": 0, "regression": 1, "possible": 2, "improvement": 3, "not-comparable": 4,
            "unchanged": 5}
SUMMARY_KEYS = {"numerics-broke": "numerics_broke", "regression": "regression", "possible": "possible",
                "improvement": "improvement", "unchanged": "unchanged", "not-comparable": "not_comparable"}
FAILING = ("mismatch", "error", "crashed", "timeout", "no-kernel")
MIN_EFFECT = 0.03
Q = 0.05
# between-run spreads (log scale) assumed for a cell with no calibration on this host class:
# "ab" for base and head measured in one sitting; "ours"/"ratio" for one run's mean log time /
# mean log ours/ORT (two stored runs). From `perfbench calibrate` on 71 cells of this project's
# 2-core development host (docs/compare.md, "Measured"): medians ab 0.84%, ours 10.8%, ORT 12.8%,
# ours/ORT 5.0%; the defaults sit at or above them.
DEFAULT_SIGMA = {"ab": 0.02, "ours": 0.12, "ort": 0.15, "ratio": 0.05}
CANNOT_CATCH = [
    "Cells outside the suite and filter this comparison ran; shapes, thread counts and dtypes it did not sweep.",
    "Changes smaller than the minimum effect, or within the calibrated between-run noise of a cell.",
    "Other hosts: a regression that shows only on another CPU, cache size or core count.",
    "End-to-end effects: model-level fusion, memory use, allocation, session start-up.",
    "Numerical drift that stays inside the tolerance (err ≤ tol) of the numerics gate.",
]


def sigma_prior(cal: dict | None, key: str) -> tuple[float, float, str]:
    """(sigma_b, its degrees of freedom, source) of statistic `key` ("ab", "ours", "ort", "ratio")
    for one cell: from its calibration (a sigma_lookup answer; rounds - 1 + 4 dof), else the
    stated default (stats.PRIOR_DOF)."""
    if cal and cal.get(key) is not None:
        return float(cal[key]), stats.calibration_dof(cal.get("rounds")), "calibrated"
    return DEFAULT_SIGMA[key], stats.PRIOR_DOF, "default"


def cell_key(c: dict) -> tuple:
    return (c["case_id"], c["dtype"], c["threads"], c["device"], c["cache"], c["spin"])


def _status(c: dict | None) -> str | None:
    return (c.get("ours") or {}).get("status") if c else None


def _timed(c: dict) -> bool:
    ours, ort = c.get("ours") or {}, c.get("ort") or {}
    return (ours.get("status") == "ok" and ort.get("status") in ("ok", "ort-discrepancy")
            and len(ours.get("replicates_ns") or []) >= 2
            and len(ours["replicates_ns"]) == len(ort.get("replicates_ns") or [])
            and min(ours["replicates_ns"]) > 0 and min(ort["replicates_ns"]) > 0)


def _base_row(c: dict) -> dict:
    return {"case_id": c["case_id"], "op": c["op"], "params": c["params"], "dtype": c["dtype"],
            "threads": c["threads"], "device": c["device"], "cache": c["cache"], "spin": c["spin"]}


def _numerics(b: dict | None, h: dict | None) -> dict:
    return {"base_status": _status(b), "head_status": _status(h),
            "base_err": (b or {}).get("numerics", {}).get("err_ours"),
            "head_err": (h or {}).get("numerics", {}).get("err_ours"),
            "tol": ((h or b) or {}).get("numerics", {}).get("tol")}


def _estimate(base: list, head: list, paired: bool, groups_b: list, groups_h: list, sigma: float,
              sigma_dof: float):
    """(d, SE, dof) of the log change with the between-run spread folded in (CONTRACTS §4);
    sigma: the between-run spread of the change (of a paired sitting; sqrt(2) x one run's for
    two runs). Paired (one sitting): the per-replicate changes over the worker processes that
    measured them (stats.grouped_mean_se: this cell's own between-process spread pooled with
    sigma). Unpaired (two runs): each run's mean gets a run verdict's own SE (grouped_mean_se
    over its processes, at least sigma/sqrt(2) between runs), the two add; the dof are
    Welch-Satterthwaite over three parts -- each run's within-process part and the two
    between-run parts taken together, as fully dependent (both come from one calibration: they
    are not two independent estimates, and counting them so would double the dof)."""
    if paired and len(base) == len(head):
        d = [math.log(h) - math.log(b) for b, h in zip(base, head)]
        g = stats.grouped_mean_se(d, groups_h, sigma, sigma_dof)
        return g.mean, g.se, g.dof
    one = sigma / math.sqrt(2)
    gb = stats.grouped_mean_se([math.log(x) for x in base], groups_b, one, sigma_dof)
    gh = stats.grouped_mean_se([math.log(x) for x in head], groups_h, one, sigma_dof)
    wb, wh = gb.se_within ** 2, gh.se_within ** 2
    vb, vh = gb.between ** 2, gh.between ** 2
    se2 = wb + wh + vb + vh
    # var(v_b + v_h) for fully dependent estimates: (sd(v_b) + sd(v_h))^2, sd(v) = v sqrt(2/dof)
    v_dof = (vb + vh) ** 2 / (vb / math.sqrt(gb.between_dof) + vh / math.sqrt(gh.between_dof)) ** 2 if vb + vh else 1.0
    parts = [(wb, gb.within_dof), (wh, gh.within_dof), (vb + vh, v_dof)]
    denom = sum(x ** 2 / max(dof, 1.0) for x, dof in parts if x)
    dof = se2 ** 2 / denom if denom else gb.within_dof + gh.within_dof
    return gh.mean - gb.mean, math.sqrt(se2), max(1.0, dof)


def run_incomparable(base_run: dict, head_run: dict) -> list[str]:
    """Why two runs cannot be compared at all (their comparability keys differ), or []."""
    why = []
    for key, label in (("host_class", "host class"), ("ort_version", "ORT version"),
                       ("protocol_version", "protocol version")):
        if base_run.get(key) != head_run.get(key):
            why.append(f"{label} differs ({base_run.get(key)} vs {head_run.get(key)})")
    return why


def compare_cells(base_cells: list[dict], head_cells: list[dict], *, mode: str = "stored-runs",
                  op_modes: dict | None = None, sigma_for=None, incomparable: list[str] | None = None,
                  min_effect: float = MIN_EFFECT, q: float = Q) -> list[dict]:
    """Rows (one per cell key on either side) with their verdicts; see the module docstring.

    sigma_for(row, timing_hash) -> dict of calibrated spreads ("ab", "ours", "ratio") or None.
    op_modes: op name -> mode, overriding `mode` (ab measures changed ops apart)."""
    bmap = {cell_key(c): c for c in base_cells}
    hmap = {cell_key(c): c for c in head_cells}
    keys = list(bmap) + [k for k in hmap if k not in bmap]
    rows, tests = [], {}
    for k in keys:
        b, h = bmap.get(k), hmap.get(k)
        row = {**_base_row(h or b), "verdict": "unchanged", "why": "", "abs": None, "ratio": None,
               "numerics": _numerics(b, h)}
        rows.append(row)
        bs, hs = _status(b), _status(h)
        if incomparable:
            row["verdict"], row["why"] = "not-comparable", "; ".join(incomparable)
            continue
        if b is None or h is None:
            row["verdict"] = "not-comparable"
            row["why"] = "only in head (new cell)" if b is None else "only in base (cell removed)"
            continue
        if hs in FAILING and bs not in FAILING:
            msg = (h.get("ours") or {}).get("message") or ""
            row["verdict"], row["why"] = "numerics-broke", f"head {hs} where base passed: {msg}".strip()
            continue
        if hs in FAILING and bs in FAILING:
            row["verdict"], row["why"] = "not-comparable", f"fails in base ({bs}) and head ({hs})"
            continue
        if bs in FAILING:
            row["verdict"], row["why"] = "improvement", f"head passes where base had {bs}"
            continue
        if b.get("timing_hash") != h.get("timing_hash"):
            row["verdict"], row["why"] = "not-comparable", "timing definition differs (op, shapes, inputs or ORT dtype)"
            continue
        if b.get("numerics_only") or h.get("numerics_only"):
            row["why"] = "numerics-only cell: the gate passed in base and head (not timed)"
            continue
        if not (_timed(b) and _timed(h)):
            row["verdict"] = "not-comparable"
            row["why"] = "no timing on " + ("both sides" if not (_timed(b) or _timed(h))
                                            else "base" if not _timed(b) else "head") + (
                f" ({b.get('verdict_note') or h.get('verdict_note') or 'below resolution or ORT failed'})")
            continue
        cell_mode = (op_modes or {}).get(row["op"], mode)
        paired = cell_mode != "stored-runs"
        # only base and head interleaved in one worker share the A/A spread "ab"; stored runs are
        # judged with one run's spread per side, i.e. sqrt(2) sigma of "ours" / "ratio". Alternating
        # workers measure each side's replicates in turns in a worker of its own checkout: a
        # calibration holds the spread of interleaved runs (over --processes workers, usually
        # several), so nothing calibrates this mode and the stated default judges it (sqrt(2) of
        # it, one per side), as ab's stored run verdicts of such cells
        interleaved = cell_mode == "interleaved"
        cal = sigma_for(row, h.get("timing_hash")) if sigma_for and cell_mode != "alternating-workers" else None
        bo, ho = b["ours"]["replicates_ns"], h["ours"]["replicates_ns"]
        bt, ht = b["ort"]["replicates_ns"], h["ort"]["replicates_ns"]
        for metric, base_v, head_v, skey in (
                ("abs", bo, ho, "ab" if interleaved else "ours"),
                ("ratio", [x / y for x, y in zip(bo, bt)], [x / y for x, y in zip(ho, ht)],
                 "ab" if interleaved else "ratio")):
            sigma, sigma_dof, source = sigma_prior(cal, skey)
            # one run's spread enters once per run: one interleaved sitting is one, two runs are two
            sigma_used = sigma if interleaved else math.sqrt(2) * sigma
            d, se, dof = _estimate(base_v, head_v, paired, (b.get("protocol") or {}).get("process") or [],
                                   (h.get("protocol") or {}).get("process") or [], sigma_used, sigma_dof)
            t = stats.change_test(d, se, dof, 0.0, min_effect)
            bv = stats.median(base_v) if metric == "abs" else math.exp(float(_mean_log(base_v)))
            hv = stats.median(head_v) if metric == "abs" else math.exp(float(_mean_log(head_v)))
            row[metric] = {"verdict": "unchanged", "base": bv, "head": hv, "change": math.expm1(d),
                           "ci_low": math.expm1(t.lo), "ci_high": math.expm1(t.hi), "sigma_b": sigma_used,
                           "sigma_source": source, "se": t.se, "dof": t.dof, "n": min(len(base_v), len(head_v)), "p_worse": t.p_worse,
                           "p_worse_m": t.p_worse_m, "p_better": t.p_better, "p_better_m": t.p_better_m}
            tests.setdefault(metric, []).append(row[metric])
    for family in tests.values():  # each change (absolute, ratio) and each hypothesis a family
        _bh_verdicts(family, q)
    for row in rows:
        if row["abs"] or row["ratio"]:
            row["verdict"] = min((row[m]["verdict"] for m in ("abs", "ratio") if row[m]), key=SEVERITY.get)
    return rows


def _mean_log(values: list) -> float:
    return sum(math.log(v) for v in values) / len(values)


def _bh_verdicts(tests: list[dict], q: float) -> None:
    """Benjamini-Hochberg at q over all tests of one hypothesis (each hypothesis a family),
    then the verdict of each test from what was rejected."""
    if not tests:
        return
    rej = {h: stats.benjamini_hochberg([t[h] for t in tests], q) for h in ("p_worse", "p_worse_m", "p_better_m")}
    for i, t in enumerate(tests):
        if rej["p_worse_m"][i]:
            t["verdict"] = "regression"
        elif rej["p_worse"][i]:
            t["verdict"] = "possible"
        elif rej["p_better_m"][i]:
            t["verdict"] = "improvement"


def summary(rows: list[dict]) -> dict:
    out = {v: 0 for v in SUMMARY_KEYS.values()}
    for r in rows:
        out[SUMMARY_KEYS[r["verdict"]]] += 1
    return out


def exit_code(rows: list[dict]) -> int:
    """1 on any ❌, or 🔴 on either the absolute or the ours/ORT verdict (CONTRACTS §6)."""
    for r in rows:
        if r["verdict"] in ("numerics-broke", "regression"):
            return 1
        if any(r[m] and r[m]["verdict"] == "regression" for m in ("abs", "ratio")):
            return 1
    return 0


def calibration_info(cal_meta: dict | None, rows: list[dict], age_s: float | None,
                     mode: str = "interleaved") -> dict:
    """Where the sigma_b of this comparison came from (shown wherever it is used); default_sigma is
    what an uncalibrated cell's absolute change is judged with in this mode."""
    used = [r[m] for r in rows for m in ("abs", "ratio") if r[m]]
    n_cal = sum(1 for r in rows if r["abs"] and r["abs"]["sigma_source"] == "calibrated")
    n_def = sum(1 for r in rows if r["abs"] and r["abs"]["sigma_source"] == "default")
    source = "default" if not n_cal else "calibrated" if not n_def else "mixed"
    if not used:
        source = "calibrated" if cal_meta else "default"
    meta = cal_meta or {}
    return {"source": source, "calibration_id": meta.get("id"), "measured_at": meta.get("created_at"),
            "age_s": age_s, "host_class": meta.get("host_class"), "rounds": meta.get("rounds"),
            "default_sigma": DEFAULT_SIGMA["ab"] if mode == "interleaved" else math.sqrt(2) * DEFAULT_SIGMA["ours"],
            "cells_calibrated": n_cal, "cells_default": n_def}
