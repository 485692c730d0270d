"""perfbench.compare.render: a run stored in a throwaway SQLite database (written the way
runner.record_cell writes cells), turned into a document by views.document, rendered as a terminal
table, markdown, CSV, JSON and pyperf JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from datetime import datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from perfbench import SCHEMA_VERSION, ops
from perfbench.compare import render, verdicts, views
from perfbench.store import models as m
from perfbench.store import repo
from perfbench.store.db import Store
from perfbench.store.hostinfo import HostFacts

ORT = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1000.0, 1002.0, 998.0]
FASTER = [800.0, 812.0, 790.0, 805.0, 797.0, 801.0, 799.0, 803.0]
SLOWER = [1250.0, 1262.0, 1240.0, 1255.0, 1247.0, 1251.0, 1249.0, 1253.0]
EVIL_ID = "Softmax.keys=1|2*x*<script>alert(1)</script>_[a](b)"
EVIL_SUITE = "att|ention *bold* <script>x</script> @octocat http://evil.example #12"


def _cell(s, run_id, case_id, params, *, dtype="f32", threads=1, ours_status="ok", ort_status="ok", ours=FASTER,
          ort=ORT, numerics_only=False, op="Softmax", ort_path="kernel", ort_dtype=None, err_ours=1e-7):
    """A cell row as runner.record_cell writes it (verdict from verdicts.decide)."""
    case = repo.ensure_case(s, case_id, op, params, "tdef0123456789ab")
    v = verdicts.decide(ours_status, ort_status, list(ours), list(ort), numerics_only)
    row = m.Cell(run_id=run_id, case_pk=case.id, dtype=dtype, threads=threads, device="cpu", cache="warm",
                 spin="off", timing_hash=case.timing_hash, numerics_hash="nh", seed=7, numerics_only=numerics_only,
                 err_ours=err_ours, err_ort=2e-7, err_ours_vs_ort=1.5e-7, tol=1e-5, floor=1e-5, n=v.n, ratio=v.ratio,
                 ratio_lo=v.lo, ratio_hi=v.hi, mean_log=v.mean_log, sd_log=v.sd_log, ci_method=v.method,
                 verdict=v.verdict, verdict_note=v.note, flops=1e6, bytes_moved=2e6, bound="memory", level="L2",
                 peak=100.0, peak_unit="GB/s", K=4, ours_iters=100, ort_runs=50, isa="avx2", wall_s=1.5,
                 measured_at=repo.now())
    for impl, ns, status in (("ours", ours, ours_status), ("ort", ort, ort_status)):
        row.measurements.append(m.Measurement(
            impl=impl, status=status, message="" if status == "ok" else f"{impl} {status}",
            dtype=dtype if impl == "ours" else (ort_dtype or dtype), path="" if impl == "ours" else ort_path,
            detail=[] if impl == "ours" else ["Softmax"], median_ns=float(sorted(ns)[len(ns) // 2]) if ns else None,
            replicates_ns=list(ns), blocks_ns=[[x, x * 1.01, x * 0.99] for x in ns], floor_ns=20.0,
            throughput=2e6 / ns[0] if ns else None, throughput_unit="GB/s", peak_share=0.5 if ns else None))
    s.add(row)
    return row


def _store_run(url, suite="attention", case_id_override=None, dispatch=None, ort_share=None, f16=False):
    """dispatch: ORT per-node dispatch samples (ns) stored as the host's peak; ort_share: the
    share of peak of ORT's side in the first cell; f16: add f16 cells (ORT with Casts) of the
    keys=1024 case (its f32 twin timed) and of keys=2048 (no twin)."""
    store = Store(url)
    facts = HostFacts(hostname="host-a", cpu_model="Test CPU", cores=2, os_family="Linux")
    info = SimpleNamespace(build_id="b1", source_hash="src", compiler="cc", compiler_version="cc 1", flags=["-O2"],
                           isa_compiled=["avx2"], isa_flags={"avx2": ["-mavx2"]})
    sm = ops.get("Softmax")
    with store.session() as s:
        host = repo.ensure_host(s, facts)
        build = repo.ensure_build(s, info)
        run = m.Run(suite=suite, suite_hash="h", status="complete", partial=False, quick=False, filters=[],
                    settings={"replicates": 8}, host_id=host.id, host_class_id=host.host_class_id,
                    build_id=build.id, ort_version="1.31.1", protocol_version=1, schema_version=SCHEMA_VERSION,
                    versions={}, git_sha="0123456789abcdef0123", branch="main", dirty=False, hostname="host-a",
                    started_at=datetime(2026, 11, 29, 12, 0, 0), finished_at=datetime(2026, 11, 29, 12, 30, 0))
        s.add(run)
        s.flush()
        specs = [
            ({"heads": 32, "queries": 1, "keys": 128}, {}),
            ({"heads": 32, "queries": 1, "keys": 1024}, {"ours": SLOWER}),
            ({"heads": 32, "queries": 1, "keys": 4096}, {"ours_status": "mismatch", "err_ours": 3e-4}),
            ({"heads": 3, "queries": 1, "keys": 4097}, {"numerics_only": True}),
            ({"heads": 32, "queries": 1, "keys": 512}, {"dtype": "bf16", "ort_path": "substituted",
                                                        "ort_dtype": "f32"}),
        ]
        for params, kw in specs:
            case = sm.make_case(params)
            _cell(s, run.id, case.case_id, dict(case.params), **kw)
        if case_id_override:
            _cell(s, run.id, case_id_override, {"heads": 1, "queries": 1, "keys": 3})
        if f16:
            for keys in (1024, 2048):
                case = sm.make_case({"heads": 32, "queries": 1, "keys": keys})
                _cell(s, run.id, case.case_id, dict(case.params), dtype="f16", ort_path="casts",
                      ort=[2 * x for x in ORT])
        if dispatch:
            repo.store_peaks(s, host, build, [{"kind": "ort_node_dispatch", "threads": 1, "level": None,
                                               "working_set_bytes": None, "value": sorted(dispatch)[len(dispatch) // 2],
                                               "samples": dispatch, "unit": "ns", "method": "test", "isa": ""}])
        if ort_share is not None:
            s.flush()
            first = s.scalars(select(m.Measurement).where(m.Measurement.impl == "ort").order_by(m.Measurement.id)).first()
            first.peak_share = ort_share
        run_id = run.id
    with store.session() as s:
        doc = views.document(repo.load_run(s, run_id))
    store.dispose()
    return doc


@pytest.fixture()
def doc(tmp_path):
    return _store_run(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.fixture()
def evil_doc(tmp_path):
    return _store_run(f"sqlite:///{tmp_path / 'e.db'}", suite=EVIL_SUITE, case_id_override=EVIL_ID)


def test_document_shape(doc):
    assert doc["schema_version"] == SCHEMA_VERSION
    assert len(doc["cells"]) == 5
    assert [c["verdict"] for c in doc["cells"]] == ["win", "loss", "fail", "n/a", "win"]
    assert doc["cells"][4]["ort"]["path"] == "substituted" and doc["cells"][4]["ort"]["dtype"] == "f32"
    assert doc["run"]["host_class"] == "Test CPU | 2 cores | Linux"


def test_table_has_a_row_per_cell_with_ratio_ci_and_legend(doc):
    out = render.table(doc)
    for c in doc["cells"]:
        short = views.short_case(c["case_id"], c["op"], c["params"])
        rows = [line for line in out.splitlines() if line.startswith(short + " ") and f" {c['dtype']} " in line]
        assert len(rows) == 1, (short, out)
        row = rows[0]
        if c["ratio"] is not None:
            assert f"{c['ratio']:.3f} [{c['ci_low']:.3f}–{c['ci_high']:.3f}]" in row
        assert render.status_of(c) in row
    win = doc["cells"][0]
    assert win["ratio"] < 1 and f"{win['ratio']:.3f}" in out
    assert "FAIL:mismatch" in out and "MISMATCH 3.0e-04>1.0e-05" in out
    assert "numerics" in out  # the numerics-only cell's verdict column
    assert "substituted→f32" in out
    assert "ours/ORT [95% CI]" in out
    flat = " ".join(out.split())
    assert " ".join(render.LEGEND.split()) in flat
    # summary: 4 bf16/f32 cells of Softmax f32: win, loss, fail, n/a -> fast_1 = 1/3
    assert "33%" in out


def test_table_of_an_empty_run():
    assert render.table({"cells": [], "summary": [], "run": {}}) == "(no cells)"


def _md_split(line: str) -> list[str]:
    """Cells of a markdown table row, honouring backslash-escaped pipes."""
    assert line.startswith("|") and line.endswith("|"), line
    return re.split(r"(?<!\\)\|", line[1:-1])


def test_markdown_table_well_formed(doc):
    md = render.markdown(doc)
    lines = md.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(("| case", "| op"))]
    cell_rows = rows[: len(doc["cells"])]
    assert len(cell_rows) == len(doc["cells"])
    for line in cell_rows:
        assert len(_md_split(line)) == 12
    assert "### perfbench run" in md and "suite attention" in md
    # the host class contains '|' itself: escaped in the heading line
    assert "Test CPU \\| 2 cores \\| Linux" in md


def test_markdown_escapes_case_ids_and_suite_names(evil_doc):
    md = render.markdown(evil_doc)
    assert "<script>" not in md
    assert "*bold*" not in md and "*x*" not in md
    lines = md.splitlines()
    evil_rows = [line for line in lines if "alert" in line]
    assert len(evil_rows) == 1
    cols = _md_split(evil_rows[0])
    assert len(cols) == 12, evil_rows[0]
    # unescaping gives back the exact id
    assert re.sub(r"\\(.)", r"\1", cols[0].strip()) == EVIL_ID
    header = [line for line in lines if line.startswith("### ")][0]
    assert "att\\|ention" in header and "\\<script\\>" in header
    assert re.sub(r"\\(.)", r"\1", header).replace("\u200b", "").count(EVIL_SUITE) == 1
    assert "@octocat" not in md and "http://" not in md and " #12" not in md  # no mention, link, issue ref
    # every row of both tables keeps its column count (cells 12, summary 11)
    table_rows = [line for line in lines if line.startswith("|")]
    split = next(i for i, line in enumerate(table_rows) if line.startswith("| op "))
    for i, line in enumerate(table_rows):
        assert len(_md_split(line)) == (12 if i < split else 11), line


def test_csv_header_and_one_row_per_cell(doc):
    text = render.to_csv(doc)
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    assert header == render.CSV_FIELDS
    for f in ("run_id", "case_id", "op", "dtype", "threads", "verdict", "ratio", "ci_low", "ci_high", "n",
              "ours_status", "ort_status", "ours_median_ns", "ort_median_ns", "timing_hash"):
        assert f in header
    assert len(rows) == len(doc["cells"])
    for r, c in zip(rows, doc["cells"]):
        assert r["case_id"] == c["case_id"] and r["verdict"] == c["verdict"] and r["dtype"] == c["dtype"]
        assert r["run_id"] == str(doc["run"]["id"])
        if c["ratio"] is None:
            assert r["ratio"] == ""
        else:
            assert float(r["ratio"]) == pytest.approx(c["ratio"], rel=1e-12)
            assert float(r["ci_low"]) == pytest.approx(c["ci_low"], rel=1e-12)
    assert rows[2]["ours_status"] == "mismatch"
    assert rows[4]["ort_path"] == "substituted" and rows[4]["ort_dtype"] == "f32"


def test_csv_quotes_awkward_ids(evil_doc):
    rows = list(csv.DictReader(io.StringIO(render.to_csv(evil_doc))))
    assert rows[-1]["case_id"] == EVIL_ID


def test_json_round_trips(doc):
    text = render.to_json(doc)
    back = json.loads(text)
    assert back["schema_version"] == SCHEMA_VERSION
    assert back["run"]["id"] == doc["run"]["id"]
    assert back["run"]["started_at"] == "2026-11-29T12:00:00"
    assert len(back["cells"]) == len(doc["cells"])
    assert back == json.loads(json.dumps(doc))  # nothing lost or stringified on the way
    assert back["cells"][0]["ours"]["replicates_ns"] == FASTER
    assert back["cells"][0]["params"] == {"batch": 1, "heads": 32, "queries": 1, "keys": 128}


def _pyperf(*args):
    return subprocess.run([sys.executable, "-m", "pyperf", *args], capture_output=True, text=True, timeout=60)


def test_to_pyperf_is_readable_by_pyperf(doc, tmp_path):
    path = tmp_path / "run.json"
    n = render.to_pyperf(doc, str(path))
    # every side with replicates: win, loss, fail (ours mismatch still has times), numerics (ours, ort), bf16
    timed = sum(1 for c in doc["cells"] for side in ("ours", "ort") if c[side]["replicates_ns"])
    assert n == timed
    for args in (("stats", str(path)), ("dump", str(path))):
        r = _pyperf(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    r = _pyperf("dump", str(path))
    first = doc["cells"][0]
    name = f"{first['case_id']}/f32/t1/warm/spin-off/ours"
    assert name in r.stdout
    # values are in seconds: ours ~800 ns
    import pyperf

    suite = pyperf.BenchmarkSuite.load(str(path))
    bench = suite.get_benchmark(name)
    assert bench.get_nrun() == len(FASTER)
    assert bench.median() == pytest.approx(800e-9, rel=0.05)


def test_to_pyperf_refuses_a_run_without_times(doc, tmp_path):
    for c in doc["cells"]:
        for side in ("ours", "ort"):
            c[side]["replicates_ns"] = []
    with pytest.raises(ValueError):
        render.to_pyperf(doc, str(tmp_path / "none.json"))


# ---- kernel-only ratio and the dispatch mark (issue 17, finding 1) ----

def test_kernel_only_ratio_takes_dispatch_out_of_ort_time(tmp_path):
    # ORT 1000 ns, dispatch 600 [550, 650]: kernel-only = 0.801 x 1000/400, CI shifted at the extremes
    doc = _store_run(f"sqlite:///{tmp_path / 'k.db'}", dispatch=[550.0, 600.0, 650.0])
    assert doc["dispatch"] == {"value": 600.0, "samples": [550.0, 600.0, 650.0]}
    c = doc["cells"][0]
    k = c["kernel_only"]

    def shift(d):  # mean over ORT's replicates of log(t / (t - d))
        return math.exp(sum(math.log(t / (t - d)) for t in ORT) / len(ORT))

    assert k["ratio"] == pytest.approx(c["ratio"] * shift(600.0))
    assert k["ci_low"] == pytest.approx(c["ci_low"] * shift(550.0))
    assert k["ci_high"] == pytest.approx(c["ci_high"] * shift(650.0))
    assert k["ci_low"] < k["ratio"] < k["ci_high"] and k["nodes"] == 1
    assert c["verdict"] == "win"  # the verdict stays on the as-run ratio
    out = render.table(doc)
    assert re.search(r"1\.0 µs†\s+0\.801 \[0\.799–0\.803\]\s+2\.\d+ \[", out)
    note = re.sub(r"\s+", " ", out[out.index("† ORT's per-node dispatch"):])
    assert "0.60 µs [0.55, 0.65] here" in note and "more than half of ORT's time in 3 cell(s)" in note
    md = render.markdown(doc)
    assert "1\\.0 µs†" in md and "† ORT's per-node dispatch" in md
    row = next(csv.DictReader(io.StringIO(render.to_csv(doc))))
    assert float(row["kernel_ratio"]) == pytest.approx(k["ratio"]) and float(row["ort_dispatch_share"]) == 0.6


def test_kernel_only_is_na_when_ort_minus_dispatch_is_below_resolution(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 'n.db'}", dispatch=[960.0, 990.0, 1000.0])
    k = doc["cells"][0]["kernel_only"]
    assert k["ratio"] is None and "at or below resolution" in k["note"]
    assert re.search(r"0\.801 \[0\.799–0\.803\]\s+n/a\s+-\s+win", render.table(doc))


def test_kernel_only_counts_every_node_ort_ran_and_skips_cold_cells():
    one = verdicts.kernel_only(0.5, 0.45, 0.55, [1000.0, 1000.0], {"value": 100.0, "samples": [100.0]})
    three = verdicts.kernel_only(0.5, 0.45, 0.55, [1000.0, 1000.0], {"value": 100.0, "samples": [100.0]}, nodes=3)
    assert one["ratio"] == pytest.approx(0.5 * 1000 / 900) and three["ratio"] == pytest.approx(0.5 * 1000 / 700)
    assert three["dispatch_share"] == pytest.approx(0.3)
    # a cold cell's ORT time is already net of its cold floor's run and node
    assert verdicts.kernel_only(0.5, 0.45, 0.55, [1000.0], {"value": 100.0}, cold=True) is None
    # the fastest replicate decides resolvability
    assert verdicts.kernel_only(0.5, 0.45, 0.55, [2000.0, 120.0], {"value": 100.0, "samples": [90.0, 110.0]})["ratio"] is None


def test_small_dispatch_marks_nothing(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 's.db'}", dispatch=[150.0, 160.0, 170.0])
    assert doc["cells"][0]["kernel_only"]["ratio"] == pytest.approx(
        doc["cells"][0]["ratio"] * math.exp(sum(math.log(t / (t - 160.0)) for t in ORT) / len(ORT)))
    out = render.table(doc)
    assert "†" not in out and "per-node dispatch (" not in out


def test_without_a_dispatch_measured_kernel_only_is_blank(doc):
    assert doc["dispatch"] is None and all(c["kernel_only"] is None for c in doc["cells"])


# ---- shares over 100% are a mark on the ceiling (issue 17, finding 5) ----

def test_share_over_one_is_marked_and_counted_never_a_status(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 'o.db'}", ort_share=1.4)
    assert [c["verdict"] for c in doc["cells"]] == ["win", "loss", "fail", "n/a", "win"]
    assert render.over_shares(doc) == [1.4]
    out = re.sub(r"\s+", " ", render.table(doc))
    assert "↑ 1 measurement(s) (ours or ORT's) exceed 100% of their ceiling, up to 140%" in out
    row = next(csv.DictReader(io.StringIO(render.to_csv(doc))))
    assert float(row["ort_peak_share"]) == 1.4


def test_ours_share_over_one_carries_the_mark_in_its_column(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 'u.db'}")
    doc["cells"][0]["ours"]["peak_share"] = 2.62
    assert "262%↑" in render.fmt_tp(doc["cells"][0])
    assert "50%↑" not in render.fmt_tp(doc["cells"][1])


# ---- which ORT path a win is against (issue 17, finding 2) ----

def test_vs_ort_f32_from_the_twin_cell_or_the_substituted_ratio(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 'f.db'}", f16=True)
    by = {(c["params"]["keys"], c["dtype"]): c for c in doc["cells"]}
    f16 = by[(1024, "f16")]
    assert f16["ratio"] == pytest.approx(0.4, rel=0.01)  # against ORT's Cast-wrapped f16 (twice f32's time)
    v = f16["vs_ort_f32"]
    assert v["ratio"] == pytest.approx(0.8, rel=0.01) and v["ort_path"] == "kernel"  # against ORT f32's 1000 ns
    assert v["ci_low"] < 0.8 < v["ci_high"] and v["ci_high"] / v["ci_low"] > 1.2  # between-cell spreads folded in
    assert by[(2048, "f16")]["vs_ort_f32"]["ratio"] is None
    sub = by[(512, "bf16")]["vs_ort_f32"]
    assert sub["ratio"] == by[(512, "bf16")]["ratio"] and "as-run" in sub["method"]
    assert by[(128, "f32")]["vs_ort_f32"] is None
    out = render.table(doc)
    assert re.search(r"0\.4\d\d \[[\d.]+–[\d.]+\]\s+-\s+0\.8\d\d \[", out)
    row = [r for r in csv.DictReader(io.StringIO(render.to_csv(doc))) if r["dtype"] == "f16"][0]
    assert float(row["vs_ort_f32_ratio"]) == pytest.approx(v["ratio"])


def test_fast_1_split_by_ort_path(tmp_path):
    doc = _store_run(f"sqlite:///{tmp_path / 'p.db'}", f16=True)
    f32 = next(s for s in doc["summary"] if s["dtype"] == "f32")
    assert f32["fast_1_by_path"] == {"kernel": 1 / 3}  # win, loss, fail against ORT's kernel
    f16 = next(s for s in doc["summary"] if s["dtype"] == "f16")
    assert f16["fast_1_by_path"] == {"casts": 1.0}
    assert doc["overall"]["fast_1_by_path"] == {"kernel": 1 / 3, "casts": 1.0, "substituted": 1.0}
    out = render.table(doc)
    assert re.search(r"f16\s+1\s+2\s+100%\s+casts 100%", out)
    assert "(kernel 33% casts 100% substituted 100%)" in out
    assert "| casts 100% |" in render.markdown(doc)
