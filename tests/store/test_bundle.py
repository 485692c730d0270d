"""`perfbench export` / `perfbench import` (a run as a versioned JSON bundle), `perfbench runs
invalidate`, and migration 0002 -- through the CLI in subprocesses, as a user runs them. One
stored run per module (a quick run of tests/fixtures/tiny.toml)."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_environ, perfbench_cmd

TINY = str(ROOT / "tests" / "fixtures" / "tiny.toml")
TABLES = ("host_classes", "hosts", "builds", "peaks", "runs", "cases", "cells", "measurements")


def pb(env, *args, db=None, timeout=300):
    e = dict(env)
    if db:
        e["PERFBENCH_DB"] = db
    return subprocess.run(perfbench_cmd() + list(args), env=e, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def sql(path, query, *params):
    con = sqlite3.connect(path)
    try:
        rows = con.execute(query, params).fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def counts(path) -> dict:
    return {t: sql(path, f"select count(*) from {t}")[0][0] for t in TABLES}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A SQLite database with one stored quick run, some of its values made non-finite."""
    d = tmp_path_factory.mktemp("bundle")
    env = cli_environ(d)
    path = d / "source.db"
    env["PERFBENCH_DB"] = f"sqlite:///{path}"
    r = pb(env, "run", "--suite", TINY, "--quick")
    assert r.returncode == 0, r.stderr
    (rid,) = sql(path, "select max(id) from runs")[0]
    # non-finite values must travel exactly, where a run can store them: the numerics errors
    # (inf on a non-finite mismatch; SQLite stores a nan as NULL) and pyperf's host metadata (a
    # JSON column never computed with)
    cell_id = sql(path, "select min(id) from cells where run_id = ?", rid)[0][0]
    sql(path, "update cells set err_ort = ?, err_ours_vs_ort = ? where id = ?", float("inf"), float("inf"), cell_id)
    (host_id,) = sql(path, "select host_id from runs where id = ?", rid)[0]
    meta = {**json.loads(sql(path, "select meta from hosts where id = ?", host_id)[0][0]),
            "x_inf": float("inf"), "x_nan": float("nan")}
    sql(path, "update hosts set meta = ? where id = ?", json.dumps(meta), host_id)
    return {"env": env, "path": path, "url": env["PERFBENCH_DB"], "run": rid, "dir": d}


@pytest.fixture(scope="module")
def bundle_file(src):
    out = src["dir"] / "run.json"
    r = pb(src["env"], "export", str(src["run"]), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _doc(env, db, rid) -> dict:
    r = pb(env, "show", str(rid), "--format", "json", db=db)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    doc["run"].pop("id")
    return doc


def _table(env, db, rid) -> str:
    r = pb(env, "show", str(rid), db=db)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _round_trip(src, bundle_file, dest_url):
    r = pb(src["env"], "import", str(bundle_file), db=dest_url)
    assert r.returncode == 0, r.stderr
    new_id = int(r.stdout.split(" as run ")[1].split()[0])
    assert _doc(src["env"], dest_url, new_id) == _doc(src["env"], src["url"], src["run"])
    assert _table(src["env"], dest_url, new_id) == _table(src["env"], src["url"], src["run"])
    return new_id


def test_bundle_format(src, bundle_file):
    data = json.loads(bundle_file.read_text())
    for k in ("perfbench_bundle", "schema_version", "exported_at", "run", "host_class", "host", "build", "peaks",
              "cases", "cells"):
        assert k in data
    assert data["perfbench_bundle"] == 1 and data["schema_version"] == 1
    assert data["peaks"] and data["cells"][0]["measurements"]
    assert data["cells"][0]["err_ort"] == "inf" and data["cells"][0]["err_ours_vs_ort"] == "inf"
    assert data["host"]["meta"]["x_inf"] == {"$float": "inf"} and data["host"]["meta"]["x_nan"] == {"$float": "nan"}

    def no_constants(c):
        raise AssertionError(f"non-JSON constant {c} in the bundle")

    json.loads(bundle_file.read_text(), parse_constant=no_constants)


def test_round_trip_sqlite(src, bundle_file, tmp_path):
    dest = tmp_path / "dest.db"
    # ids differ in the destination: it already holds an unrelated host class
    url = f"sqlite:///{dest}"
    assert pb(src["env"], "runs", db=url).returncode == 0  # creates the schema
    sql(dest, "insert into host_classes (key, cpu_model, cores, os_family, created_at) "
              "values ('other', 'x', 1, 'Linux', '2020-01-01 00:00:00')")
    new_id = _round_trip(src, bundle_file, url)
    # exactly the stored non-finite values
    cell_id = sql(dest, "select min(id) from cells where run_id = ?", new_id)[0][0]
    assert sql(dest, "select err_ort, err_ours_vs_ort from cells where id = ?", cell_id)[0] == (float("inf"),) * 2
    (meta,) = sql(dest, "select meta from hosts where id = (select host_id from runs where id = ?)", new_id)[0]
    meta = json.loads(meta)
    assert meta["x_inf"] == float("inf") and math.isnan(meta["x_nan"])
    # peaks travel too (the table's ORT dispatch note reads them)
    assert counts(dest)["peaks"] == counts(src["path"])["peaks"]


def _finite_json(data: dict) -> dict:
    """The bundle without the non-finite numbers of its JSON columns (the host metadata's)."""
    data["host"]["meta"] = {k: v for k, v in data["host"]["meta"].items() if not isinstance(v, dict)}
    return data


def test_round_trip_postgresql(src, bundle_file, pg_url, tmp_path):
    # PostgreSQL's JSON type has no infinity: finite host metadata here (Float columns keep theirs)
    data = _finite_json(json.loads(bundle_file.read_text()))
    finite = tmp_path / "finite.json"
    finite.write_text(json.dumps(data))
    lite = f"sqlite:///{tmp_path / 'lite.db'}"
    env = src["env"]
    ids = []
    for url in (lite, pg_url):
        r = pb(env, "import", str(finite), db=url)
        assert r.returncode == 0, r.stderr
        ids.append(int(r.stdout.split(" as run ")[1].split()[0]))
    assert _doc(env, pg_url, ids[1]) == _doc(env, lite, ids[0])
    assert _table(env, pg_url, ids[1]) == _table(env, src["url"], src["run"])
    r = pb(env, "import", str(finite), db=pg_url)
    assert r.returncode == 2 and "already in the database as run" in r.stderr


def test_duplicate_import_refused(src, bundle_file, tmp_path):
    dest = tmp_path / "dest.db"
    url = f"sqlite:///{dest}"
    r = pb(src["env"], "import", str(bundle_file), db=url)
    assert r.returncode == 0, r.stderr
    before = counts(dest)
    r = pb(src["env"], "import", str(bundle_file), db=url)
    assert r.returncode == 2
    assert "already in the database as run 1" in r.stderr and str(bundle_file) in r.stderr
    assert counts(dest) == before
    # the same run with another start time is a different run: host, build, cases and peaks reused
    data = json.loads(bundle_file.read_text())
    data["run"]["started_at"] = "2000-01-01T00:00:00"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    r = pb(src["env"], "import", str(other), db=url)
    assert r.returncode == 0, r.stderr
    after = counts(dest)
    for t in ("host_classes", "hosts", "builds", "peaks", "cases"):
        assert after[t] == before[t], t
    assert after["runs"] == before["runs"] + 1 and after["cells"] == 2 * before["cells"]


def _bad(bundle_file, tmp_path, change) -> str:
    data = json.loads(bundle_file.read_text())
    change(data)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data))
    return str(p)


@pytest.mark.parametrize("what,change,message", [
    ("version", lambda d: d.update(perfbench_bundle=99), "bundle format version 99 is not supported"),
    ("schema", lambda d: d.update(schema_version=99), "schema version 99 is newer"),
    ("missing key", lambda d: d.pop("cells"), "missing key(s): cells"),
    ("not a bundle", lambda d: d.pop("perfbench_bundle"), "not a perfbench bundle"),
    # found only after the host, build, peaks and run were written: all rolled back
    ("missing cell key", lambda d: d["cells"][-1].pop("verdict"), "cells[3]: missing key 'verdict'"),
    ("unknown case", lambda d: d["cells"][-1].update(case=["nope", "x"]), "is not among the bundle's cases"),
])
def test_bad_bundles_refused(src, bundle_file, tmp_path, what, change, message):
    dest = tmp_path / "dest.db"
    url = f"sqlite:///{dest}"
    path = _bad(bundle_file, tmp_path, change)
    r = pb(src["env"], "import", path, db=url)
    assert r.returncode == 2, (what, r.stdout, r.stderr)
    assert message in r.stderr and path in r.stderr, r.stderr
    assert not dest.exists() or set(counts(dest).values()) == {0}


def test_not_json_refused(src, tmp_path):
    dest = tmp_path / "dest.db"
    p = tmp_path / "junk.json"
    p.write_text("{ this is not json")
    r = pb(src["env"], "import", str(p), db=f"sqlite:///{dest}")
    assert r.returncode == 2 and f"{p}: not JSON" in r.stderr
    assert not dest.exists() or set(counts(dest).values()) == {0}
    r = pb(src["env"], "import", str(tmp_path / "missing.json"), db=f"sqlite:///{dest}")
    assert r.returncode == 2 and "missing.json: cannot read" in r.stderr


# ---- hostile bundles (issue 25, defect 4): each refused with exit 2 and one line naming where,
# the destination database unchanged (it already holds the run, so `cells[3]` etc. are reached
# only through the value checks, which come before anything is written)

@pytest.fixture(scope="module")
def filled(src, bundle_file, tmp_path_factory):
    """A SQLite database holding the bundle's run (the destination of the hostile bundles)."""
    path = tmp_path_factory.mktemp("filled") / "dest.db"
    r = pb(src["env"], "import", str(bundle_file), db=f"sqlite:///{path}")
    assert r.returncode == 0, r.stderr
    return path


def _dump_db(path) -> list:
    con = sqlite3.connect(path)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def _peak(data, **kw) -> dict:
    return {"batch": "b1", "kind": "read", "threads": 1, "level": "L1", "working_set_bytes": 16384.0, "value": 100.0,
            "samples": [100.0], "unit": "GB/s", "method": "streaming read", "isa": "avx2",
            "measured_at": "2026-01-01T00:00:00", "build": data["build"]["build_id"], **kw}


def _new_case(data, params: dict, case_id: str | None = None):
    """Point cells[0] at a case with these Softmax parameters (id as given, else as the op makes it)."""
    cid = case_id or "Softmax" + "".join(f".{k}={v}" for k, v in params.items())
    case = {**data["cases"][0], "case_id": cid, "params": params, "timing_hash": "0123456789abcdef"}
    data["cases"].append(case)
    data["cells"][0].update(case=[cid, case["timing_hash"]], timing_hash=case["timing_hash"])


def _nest(d, n):
    for _ in range(n):
        d = [d]
    return d


SOFTMAX = {"batch": 1, "heads": 2, "queries": 1, "keys": 64}


def _timed(data) -> dict:
    """The first cell with a ratio (the run's cells are timed; a noisy host can leave one n/a)."""
    return next(c for c in data["cells"] if c["ratio"] is not None)


def _side(data, impl: str = "ours") -> dict:
    return next(mm for mm in _timed(data)["measurements"] if mm["impl"] == impl)


def _settings(**kw):
    return lambda d: d["run"]["settings"].update(kw)


def _axes(**kw):
    return lambda d: d["run"]["settings"]["axes_overrides"].update(kw)


def _dispatch(data, **kw) -> dict:
    return _peak(data, **{"kind": "ort_node_dispatch", "level": None, "working_set_bytes": None, "unit": "ns",
                          "value": -3.0, "samples": [-3.0, 2.0], "method": "Identity chain", "isa": "", **kw})


@pytest.mark.parametrize("what,change,message", [
    # before: exit 0, then dashboard, compare and `tickets update` crashed on the database
    ("threads string", lambda d: d["cells"][3].update(threads="abc"),
     "cells[3].threads: expected an integer in 1..256, got 'abc'"),
    ("threads bool", lambda d: d["cells"][3].update(threads=True), "cells[3].threads: expected an integer"),
    # before: OverflowError traceback (exit 1)
    ("threads 10**30", lambda d: d["cells"][3].update(threads=10**30),
     "cells[3].threads: expected an integer in 1..256, got 1000000000000000000000000000000"),
    ("threads 0", lambda d: d["cells"][0].update(threads=0), "cells[0].threads: expected an integer in 1..256"),
    # before: stored; the kernels' thread pool runs at most 256 (suites.MAX_THREADS)
    ("threads 257", lambda d: d["cells"][0].update(threads=257), "cells[0].threads: expected an integer in 1..256"),
    # before: TypeError tracebacks (a list where a key or a list was expected)
    ("case key of lists", lambda d: d["cells"][0].update(case=[["x"], "y"]), "cells[0]: case list is not among"),
    ("builds not a list", lambda d: d.update(builds=5), "key 'builds' must be a list"),
    ("peak build a list", lambda d: d.update(peaks=[_peak(d, build=["x"])]), "peaks[0]: build list is not in"),
    # before: stored (NaN, true and strings in float columns)
    ("nan ratio", lambda d: d["cells"][0].update(ratio="nan"), "cells[0].ratio: expected a finite number, got nan"),
    ("true ratio", lambda d: d["cells"][0].update(ratio=True), "cells[0].ratio: expected a number, got True"),
    ("negative flops", lambda d: d["cells"][0].update(flops=-1.0), "cells[0].flops: expected a number >= 0"),
    ("string replicate", lambda d: d["cells"][0]["measurements"][0].update(replicates_ns=[1.0, "x"]),
     "cells[0].measurements[0].replicates_ns[1]: expected a number, got 'x'"),
    ("inf peak value", lambda d: d.update(peaks=[_peak(d, value="inf")]), "peaks[0].value: expected a finite number"),
    # before: stored (enumerated columns, strings in bool columns, JSON of the wrong shape or depth)
    ("verdict", lambda d: d["cells"][0].update(verdict="<b>win</b>"), "cells[0].verdict: expected one of win, loss"),
    ("dtype", lambda d: d["cells"][0].update(dtype="f64"), "cells[0].dtype: expected one of f32, f16, bf16"),
    ("status", lambda d: d["cells"][0]["measurements"][1].update(status="fine"),
     "cells[0].measurements[1].status: expected one of ok, mismatch"),
    ("run status", lambda d: d["run"].update(status="done"), "run.status: expected one of running, complete"),
    ("partial string", lambda d: d["run"].update(partial="no"), "run.partial: expected true or false, got 'no'"),
    ("long string", lambda d: d["build"].update(build_id="x" * 65), "build.build_id: longer than 64 characters"),
    ("meta a list", lambda d: d["host"].update(meta=[1, 2]), "host.meta: expected an object, got list"),
    ("deep JSON column", lambda d: d["host"].update(meta={"x": _nest(1, 500)}), "nested deeper than 32 levels"),
    ("bad date", lambda d: d["run"].update(started_at=5), "run.started_at: expected an ISO date and time, got 5"),
    ("bad hash", lambda d: d["cells"][0].update(timing_hash="../x"), "cells[0].timing_hash: expected a hexadecimal"),
    # before: stored; cases are rebuilt by their op, which must give the same id
    ("case id ../<b>", lambda d: _new_case(d, SOFTMAX, "Softmax../<b>x"),
     "is not the id its op and parameters give (Softmax.batch=1.heads=2.queries=1.keys=64)"),
    ("params refused", lambda d: _new_case(d, {**SOFTMAX, "keys": 0}), "Softmax: keys must be >= 1, got 0"),
    ("params unknown", lambda d: _new_case(d, {**SOFTMAX, "evil": 1}, "Softmax.x"), "Softmax has no parameter 'evil'"),
    ("unknown op", lambda d: d["cases"][0].update(op="Nope"), "cases[0]: unknown op 'Nope'"),
    # before: stored, and `repro` then tried to allocate 32 TiB (refused by make_case's bounds)
    ("softmax 4096x4096x262144", lambda d: _new_case(d, {"batch": 1, "heads": 4096, "queries": 4096, "keys": 262144}),
     "cases[4]: Softmax: "),
    ("softmax 1024x4096x262144", lambda d: _new_case(d, {"batch": 1, "heads": 1024, "queries": 4096, "keys": 262144}),
     "more than the 4 GiB a case"),
    # before: exit 2 with ~1 KB of SQL statement and parameters (IntegrityError on flush)
    ("duplicate cell", lambda d: d["cells"].append(json.loads(json.dumps(d["cells"][0]))),
     "cells[4]: the same cell as cells[0] (Softmax.batch=1.heads=2.queries=1.keys=64 f32 threads=1 cpu warm spin=off)"),
    ("duplicate side", lambda d: d["cells"][0]["measurements"].append(d["cells"][0]["measurements"][0]),
     "cells[0]: more than one measurement of the same side (ours, ort, ours)"),
    # ---- review of issue 25 (1): values outside what a run stores imported with exit 0, then
    # crashed a reader: `show` (TypeError formatting a "nan" bound), `dashboard` (log2 of 0)
    ("ratio_hi nan", lambda d: _timed(d).update(ratio_hi="nan"), "].ratio_hi: expected a finite number, got nan"),
    ("ratio 0", lambda d: _timed(d).update(ratio=0.0), "].ratio: expected a number > 0, got 0.0"),
    ("ratio_lo inf", lambda d: _timed(d).update(ratio_lo="inf"), "].ratio_lo: expected a finite number, got inf"),
    ("ratio_hi inf", lambda d: _timed(d).update(ratio_hi="inf"), "].ratio_hi: expected a finite number, got inf"),
    ("ratio_lo above the ratio", lambda d: _timed(d).update(ratio_lo=_timed(d)["ratio"] * 2),
     "]: expected ratio_lo <= ratio <= ratio_hi"),
    ("ratio_hi below the ratio", lambda d: _timed(d).update(ratio_hi=_timed(d)["ratio"] / 2),
     "]: expected ratio_lo <= ratio <= ratio_hi"),
    ("ratio without interval", lambda d: _timed(d).update(ratio_lo=None),
     "]: ratio, ratio_lo and ratio_hi are all null or all numbers"),
    ("win without ratio", lambda d: _timed(d).update(verdict="win", ratio=None, ratio_lo=None, ratio_hi=None),
     "]: verdict 'win' has no ratio"),
    ("n/a with a ratio", lambda d: _timed(d).update(verdict="n/a"), "]: verdict 'n/a' with a ratio"),
    ("ratio of one replicate", lambda d: _timed(d).update(n=1), "].n: a ratio comes from at least 2 replicates"),
    ("ratio with ours failed", lambda d: _side(d).update(status="error", replicates_ns=[], blocks_ns=[],
                                                         median_ns=None),
     "]: a ratio needs ours ok and ORT ok or ort-discrepancy, got error, "),
    ("sd_log -inf", lambda d: _timed(d).update(sd_log="-inf"), "].sd_log: expected a finite number, got -inf"),
    ("err -inf", lambda d: d["cells"][0].update(err_ours="-inf"),
     "cells[0].err_ours: expected a finite number or inf, nan, got -inf"),
    ("cell peak 0", lambda d: d["cells"][0].update(peak=0.0), "cells[0].peak: expected a number > 0, got 0.0"),
    ("negative median_ns", lambda d: _side(d).update(median_ns=-5.0), "].median_ns: -5.0 is outside its replicates'"),
    ("median_ns 1e300", lambda d: _side(d).update(median_ns=1e300), "].median_ns: expected a number <= 8.64e+13"),
    ("median_ns without replicates", lambda d: _side(d, "ort").update(replicates_ns=[]),
     "].median_ns: "),
    ("negative floor_ns", lambda d: _side(d).update(floor_ns=-1.0), "].floor_ns: expected a number >= 0, got -1.0"),
    ("inf replicate", lambda d: _side(d).update(replicates_ns=[{"$float": "inf"}] + _side(d)["replicates_ns"][1:]),
     "].replicates_ns[0]: expected a finite number in -8.64e+13..8.64e+13, got inf"),
    ("nan block", lambda d: _side(d).update(blocks_ns=[[{"$float": "nan"}]]),
     "].blocks_ns[0][0]: expected a finite number in -8.64e+13..8.64e+13, got nan"),
    ("timed replicate 1e-300", lambda d: _side(d).update(replicates_ns=[1e-300] + _side(d)["replicates_ns"][1:],
                                                         median_ns=1e-300),
     "].replicates_ns: 1e-300 ns on a timed side (status ok)"),
    ("too many replicates", lambda d: _side(d).update(replicates_ns=[50.0] * 1001, median_ns=50.0),
     "].replicates_ns: more than 1000 entries (1001)"),
    ("peak value 0", lambda d: d.update(peaks=[_peak(d, value=0.0)]), "peaks[0].value: expected a number > 0"),
    ("peak sample -1", lambda d: d.update(peaks=[_peak(d, samples=[100.0, -1.0])]),
     "peaks[0].samples[1]: expected a number > 0"),
    ("peak sample inf", lambda d: d.update(peaks=[_peak(d, samples=[{"$float": "inf"}])]),
     "peaks[0].samples[0]: expected a finite number, got inf"),
    ("peak value outside its samples", lambda d: d.update(peaks=[_peak(d, samples=[1e6, 2e6])]),
     "peaks[0].value: 100.0 is outside its samples' range [1e+06, 2e+06]"),
    ("peak value above its samples", lambda d: d.update(peaks=[_peak(d, samples=[10.0, 20.0])]),
     "peaks[0].value: 100.0 is outside its samples' range [10, 20]"),
    ("peak unit", lambda d: d.update(peaks=[_peak(d, unit="ns")]), "peaks[0].unit: a read probe is in GB/s, got 'ns'"),
    ("load_avg inf", lambda d: d["run"].update(load_avg=[{"$float": "inf"}]),
     "run.load_avg[0]: expected a finite number >= 0, got inf"),
    ("load_avg of 4", lambda d: d["run"].update(load_avg=[1.0] * 4), "run.load_avg: more than 3 entries (4)"),
    ("meta nested", lambda d: d["host"].update(meta={"platform": ["x"]}),
     "host.meta['platform']: expected a string or a number, got list"),
    ("versions not text", lambda d: d["run"].update(versions={"python": 3}),
     "run.versions['python']: expected a string, got 3"),
    ("design process 10**6", lambda d: d["cells"][0].update(design={"process": [10**6], "order": []}),
     "cells[0].design.process[0]: expected an integer in 0..63, got 1000000"),
    # ---- (2): a date at the calendar's edge with an offset: OverflowError traceback (exit 1)
    ("date 0001 +01:00", lambda d: d["run"].update(started_at="0001-01-01T00:00:00+01:00"),
     "run.started_at: expected a date and time without a UTC offset"),
    ("date 9999 -01:00", lambda d: d["run"].update(finished_at="9999-12-31T23:59:59-01:00"),
     "run.finished_at: expected a date and time without a UTC offset"),
    ("date +00:00", lambda d: d["cells"][0].update(measured_at="2026-01-01T00:00:00+00:00"),
     "cells[0].measured_at: expected a date and time without a UTC offset"),
    # ---- (3): run settings `run --resume` measures with, unbounded or unchecked
    ("processes 10**6", _settings(processes=10**6), "run.settings.processes: expected an integer in 1..64, got 1000000"),
    ("replicates 10**6", _settings(replicates=10**6), "run.settings.replicates: expected an integer in 1..1000"),
    ("rounds 10**6", _settings(rounds=10**6), "run.settings.rounds: expected an integer in 1..100"),
    ("rounds 0", _settings(rounds=0), "run.settings.rounds: expected an integer in 1..100, got 0"),
    ("timeout_s 1e12", _settings(timeout_s=1e12), "run.settings.timeout_s: expected a finite number > 0 and <= 86400"),
    ("timeout_s inf", _settings(timeout_s={"$float": "inf"}), "run.settings.timeout_s: expected a finite number > 0"),
    ("block_ms 0", _settings(block_ms=0), "run.settings.block_ms: expected a finite number > 0 and <= 60000"),
    ("evict_bytes 2**62", _settings(evict_bytes=2**62), "run.settings.evict_bytes: expected an integer in 0.."),
    ("settings dtypes f64", _settings(dtypes=["f64"]), "run.settings.dtypes[0]: expected a dtype (f32, f16, bf16)"),
    ("settings threads 10**6", _settings(threads=[10**6]), "run.settings.threads[0]: expected an integer in 1..256"),
    ("settings cache", _settings(cache=["hot"]), "run.settings.cache[0]: expected one of warm, cold, got 'hot'"),
    ("axes threads 10**6", _axes(threads=[10**6]),
     "run.settings.axes_overrides.threads[0]: expected an integer in 1..256, got 1000000"),
    ("axes dtypes f64", _axes(dtypes=["f64"]), "run.settings.axes_overrides.dtypes[0]: expected a dtype"),
    ("axes spin", _axes(spin=["maybe"]), "run.settings.axes_overrides.spin[0]: expected one of off, on"),
    ("axes devices", _axes(devices=["tpu"]), "run.settings.axes_overrides.devices[0]: expected one of cpu, cuda"),
    ("axes a list", _settings(axes_overrides=[1]), "run.settings.axes_overrides: expected an object, got list"),
    ("settings without seed", lambda d: d["run"]["settings"].pop("seed"), "run.settings: missing key 'seed'"),
    ("string of 70k in JSON", lambda d: d["run"].update(tuning=["x" * 70_000]),
     "run.tuning[0]: a string longer than 65536 characters"),
    # ---- (4): identifiers with terminal escapes (`perfbench score` printed git_sha as is)
    ("git_sha escape", lambda d: d["run"].update(git_sha="\x1b]0;PWNED\x07"),
     "run.git_sha: expected a hexadecimal hash, got '\\x1b]0;PWNED\\x07'"),
    ("git_sha short", lambda d: d["run"].update(git_sha="abc"), "run.git_sha: expected a hexadecimal hash"),
    ("branch escape", lambda d: d["run"].update(branch="main\x1b[2J"),
     "run.branch: a control or format character '\\x1b' at 4"),
    ("branch ..", lambda d: d["run"].update(branch="a..b"), "run.branch: not a git branch name: 'a..b'"),
    ("hostname bidi", lambda d: d["run"].update(hostname="vm\u202egpj.exe"),
     "run.hostname: a control or format character '\\u202e' at 2"),
    ("suite newline", lambda d: d["run"].update(suite="tiny\nfake line"), "run.suite: a control or format character"),
    ("runner_label escape", lambda d: d["run"].update(runner_label="\x1b[31mred"),
     "run.runner_label: a control or format character"),
    ("host class key", lambda d: d["host_class"].update(key="k\x07"), "host_class.key: a control or format character"),
    ("cpu_model", lambda d: d["host_class"].update(cpu_model="cpu\u2028x"),
     "host_class.cpu_model: a control or format character"),
    ("compiler_version", lambda d: d["build"].update(compiler_version="gcc\x1b[2J"),
     "build.compiler_version: a control or format character"),
    ("build flag escape", lambda d: d["build"].update(flags=["-O2\x1b[2J"]), "build.flags[0]: a control or format"),
    ("ort detail escape", lambda d: _side(d, "ort").update(detail=["Softmax\x1b[2J"]),
     "].detail[0]: a control or format character"),
    ("ort_version escape", lambda d: d["run"].update(ort_version="1.0\x1b"), "run.ort_version: a control or format"),
    ("build_id not hex", lambda d: d["build"].update(build_id="../../x"), "build.build_id: expected a hexadecimal hash"),
    ("suite_hash not hex", lambda d: d["run"].update(suite_hash="zz"), "run.suite_hash: expected a hexadecimal hash"),
    # ---- review of the limits (1): lone surrogates (JSON's "\ud800" escape reads as one) passed
    # every check. Before: the branch failed on flush with a UnicodeEncodeError traceback (exit
    # 1); the platform imported (exit 0), then `perfbench compare` crashed printing it
    ("branch lone surrogate", lambda d: d["run"].update(branch="main\ud800x"),
     "run.branch: a lone surrogate '\\ud800' at 4"),
    ("platform lone surrogate", lambda d: d["host"]["meta"].update(platform="L\ud800"),
     "host.meta.platform: a lone surrogate '\\ud800' at 1"),
    ("free text lone surrogate", lambda d: d["run"].update(message="stopped \udc00"),
     "run.message: a lone surrogate '\\udc00' at 8"),
    ("JSON key lone surrogate", lambda d: d["host"]["meta"].update({"k\udfff": 1}), "host.meta (a key): a lone surrogate"),
    ("JSON list lone surrogate", lambda d: d["run"].update(tuning=["ok", "\ud800"]), "run.tuning[1]: a lone surrogate"),
    ("version lone surrogate", lambda d: d["run"]["versions"].update(python="3\ud800"),
     "run.versions.python: a lone surrogate"),
    # ---- (4): ORT's per-node dispatch unbounded. Before: -1.7e308 imported, then kernel_only
    # gave a ratio of 0.0 with a dispatch of -inf
    ("dispatch -1.7e308", lambda d: d.update(peaks=[_dispatch(d, value=-1.7e308, samples=[-1.7e308])]),
     "peaks[0].value: expected ORT's per-node dispatch in -10000..1e+06 ns, got -1.7e+308"),
    ("dispatch sample 1e9", lambda d: d.update(peaks=[_dispatch(d, samples=[-3.0, 1e9])]),
     "peaks[0].samples[1]: expected ORT's per-node dispatch in -10000..1e+06 ns, got 1000000000.0"),
    # ---- (2): the lists' caps are what the settings make them. Before: an order of 64 blocks,
    # blocks per replicate unbounded, 16 dtypes (the suite loader takes more)
    ("order of 301 blocks", lambda d: d["cells"][0].update(design={"process": [0], "order": [["ours"] * 301]}),
     "cells[0].design.order[0]: more than 300 entries (301)"),
    ("101 blocks per replicate", lambda d: _side(d).update(blocks_ns=[[50.0] * 101]),
     "].blocks_ns[0]: more than 100 entries (101)"),
    ("20,001 dtypes", _settings(dtypes=["f32"] * 20_001), "run.settings.dtypes: more than 20000 entries (20001)"),
])
def test_hostile_bundles_refused(src, bundle_file, filled, tmp_path, what, change, message):
    dest = tmp_path / "dest.db"
    shutil.copy(filled, dest)
    before = _dump_db(dest)
    # another run of the same host (the run itself is in `filled`): only the change is wrong
    path = _bad(bundle_file, tmp_path, lambda d: (d["run"].update(started_at="2001-01-01T00:00:00"), change(d)))
    r = pb(src["env"], "import", path, db=f"sqlite:///{dest}")
    assert r.returncode == 2, (what, r.stdout, r.stderr[-2000:])
    assert message in r.stderr and path in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 400, r.stderr[-2000:]
    assert _dump_db(dest) == before


@pytest.mark.parametrize("what,edit,message", [
    # before: RecursionError / ValueError tracebacks (exit 1)
    ("100k-deep nesting", lambda t: t.rstrip()[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "not a bundle: JSON nested too deeply to read"),
    ("5001-digit number", lambda t: t.replace(b'"n": ', b'"n": ' + b"9" * 5001 + b', "m": ', 1),
     "not a bundle: a number with too many digits"),
    # before: exit 2 with ~1 KB of SQL (NaN became NULL in a NOT NULL column)
    ("NaN token", lambda t: t.replace(b'"flops": ', b'"flops": NaN, "f": ', 1), "not a bundle: NaN is not JSON"),
    # before: stored
    ("Infinity token", lambda t: t.replace(b'"ratio": ', b'"ratio": Infinity, "r": ', 1), "Infinity is not JSON"),
    ("not UTF-8", lambda t: t.replace(b'"message": ""', b'"message": "\xff"', 1), "not JSON: not UTF-8 text"),
])
def test_unreadable_bundles_refused(src, bundle_file, filled, tmp_path, what, edit, message):
    dest = tmp_path / "dest.db"
    shutil.copy(filled, dest)
    before = _dump_db(dest)
    data = json.loads(bundle_file.read_text())
    data["run"]["started_at"] = "2001-01-01T00:00:00"  # another run: only the edit is wrong
    path = tmp_path / "bad.json"
    path.write_bytes(edit(json.dumps(data).encode()))
    r = pb(src["env"], "import", str(path), db=f"sqlite:///{dest}")
    assert r.returncode == 2, (what, r.stdout, r.stderr[-2000:])
    assert message in r.stderr and str(path) in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 400, r.stderr[-2000:]
    assert _dump_db(dest) == before


def test_oversized_bundle_refused(src, filled, tmp_path):
    """A file larger than any bundle (the largest suite's run exports ~3 MB) is refused before it
    is read (a sparse file: no disk used). Before: read whole, then refused as not JSON."""
    dest = tmp_path / "dest.db"
    shutil.copy(filled, dest)
    before = _dump_db(dest)
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.write(b"{")
        f.truncate(512 * 1024**2 + 1)
    r = pb(src["env"], "import", str(path), db=f"sqlite:///{dest}")
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    assert f"{path}: larger than 512 MiB, the most a bundle may be" in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert _dump_db(dest) == before
    from perfbench.store.bundle import MAX_BUNDLE_BYTES

    assert MAX_BUNDLE_BYTES == 512 * 1024**2


@pytest.mark.parametrize("error", ["ValueError", "OverflowError", "TypeError", "RecursionError"])
def test_unforeseen_read_error_is_one_line(src, bundle_file, tmp_path, error):
    """Safety net: an error escaping the checks (one they do not foresee) is one line, exit 2,
    nothing written -- not a traceback."""
    dest = tmp_path / "dest.db"
    code = (f"import sys; from perfbench.store import bundle\n"
            f"def read(data): raise {error}('unforeseen\\nsecond line')\n"
            f"bundle.read = read\n"
            f"from perfbench.cli import main; sys.argv = ['perfbench', 'import', {str(bundle_file)!r}]; main()")
    e = {**src["env"], "PERFBENCH_DB": f"sqlite:///{dest}"}
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    assert f"{bundle_file}: not a bundle this perfbench can import ({error}: unforeseen second line)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert not dest.exists() or set(counts(dest).values()) == {0}


@pytest.mark.parametrize("error", [RecursionError, MemoryError, KeyError, IndexError, AttributeError, RuntimeError])
def test_rebuild_case_refuses_what_make_case_raises(monkeypatch, error):
    """An op's make_case meeting hostile parameters it never expected: a refusal of the case
    (exit 2, one line), whatever it raises."""
    from perfbench import ops
    from perfbench.store import bundle_check

    class Op:
        name = "Hostile"

        def make_case(self, params, where=""):
            raise error("deep\ninside")

    monkeypatch.setitem(ops.REGISTRY, "Hostile", Op())
    with pytest.raises(bundle_check.BundleError) as e:
        bundle_check.rebuild_case({"op": "Hostile", "params": {}, "case_id": "Hostile"}, "cases[0]")
    assert str(e.value).startswith(f"cases[0]: Hostile refuses these parameters ({error.__name__}: ")
    assert "\n" not in str(e.value)


def test_legit_edges_import_and_read(src, bundle_file, tmp_path):
    """What a run can store imports, and the readers take it: free text with escapes (the
    terminal escaper shows them), ORT's dispatch below zero (a difference of two times), dtypes
    by their long names in the suite settings, numerics errors inf and nan."""
    url = f"sqlite:///{tmp_path / 'dest.db'}"

    def change(d):
        d["run"]["message"] = "stopped: \x1b[31mred\x1b[0m"
        d["run"]["settings"]["dtypes"] = ["float32", "bf16"]
        d["peaks"] = [_peak(d, batch="00aa11bb22cc"), _dispatch(d, batch="00aa11bb22cc")]
        d["cells"][0].update(err_ours="nan", err_ort="inf", err_ours_vs_ort="inf")
        _side(d, "ort")["message"] = "ORT said \x07"
    path = _bad(bundle_file, tmp_path, change)
    r = pb(src["env"], "import", path, db=url)
    assert r.returncode == 0, r.stderr[-2000:]
    for args in (["show", "1", "--format", "json"], ["show", "1"], ["runs"],
                 ["dashboard", "-o", str(tmp_path / "site")]):
        r = pb(src["env"], *args, db=url)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


def test_unencodable_text_on_flush_is_one_line(bundle_file, tmp_path):
    """Safety net: text the database driver cannot encode (a lone surrogate past the checks, as
    one this perfbench does not foresee would be) is a one-line BundleError, nothing written.
    Before: a UnicodeEncodeError traceback (exit 1)."""
    from perfbench.store import bundle
    from perfbench.store.db import Store

    data = json.loads(bundle_file.read_text())
    rows = bundle.read(data)
    rows["run"]["branch"] = "main\ud800x"
    dest = tmp_path / "dest.db"
    store = Store(f"sqlite:///{dest}")
    try:
        with pytest.raises(bundle.BundleError) as e:
            with store.session() as s:
                bundle.import_bundle(s, data, rows)
    finally:
        store.dispose()
    assert str(e.value).startswith("the database refused the bundle (UnicodeEncodeError: surrogates not allowed at 4)")
    assert "\n" not in str(e.value) and e.value.exit_code == 2
    assert set(counts(dest).values()) == {0}


def test_import_takes_every_setting_run_may_store():
    """One set of bounds (suites.LIMITS): every value the suite loader, the CLI and the runner
    accept imports; one past the top is refused."""
    from perfbench import suites
    from perfbench.store import bundle_check as bc

    assert (bc.MAX_REPLICATES, bc.MAX_ROUNDS, bc.MAX_PROCESSES, bc.MAX_BLOCK_MS, bc.MAX_TIMEOUT_S, bc.MAX_THREADS) == (
        suites.MAX_REPLICATES, suites.MAX_ROUNDS, suites.MAX_PROCESSES, suites.MAX_BLOCK_MS, suites.MAX_TIMEOUT_S,
        suites.MAX_THREADS)
    for key, lim in suites.LIMITS.items():
        check = bc._SETTINGS[key]
        low = lim.lo + (1e-9 if lim.lo_open else 0)
        for v in (low, lim.hi, suites.DEFAULTS[key]):
            check(int(v) if lim.integer else v, key)
        if key != "seed":  # any seed >= 0 imports (cells.seed: the database's range)
            with pytest.raises(bc.BundleError):
                check(lim.hi + 1, key)


def test_legit_lengths_import(src, bundle_file, tmp_path):
    """What a run at the settings' bounds stores imports: rounds x 3 sides blocks in a replicate's
    order (ab and calibrate time base, head and ORT), a block per round per replicate, 17 dtypes
    in the settings (the loader takes repeats), ORT's dispatch at its bounds. Before: an order of
    more than 64 blocks was refused (a run of 33 rounds could not be imported)."""
    url = f"sqlite:///{tmp_path / 'dest.db'}"

    def change(d):
        d["run"]["settings"].update(replicates=1000, rounds=100, processes=64, block_ms=60_000.0,
                                    timeout_s=86_400.0, dtypes=["f32"] * 17)
        cell = _timed(d)
        n = len(cell["design"]["order"])
        cell["design"]["order"] = [["base", "head", "ort"] * 100] * n
        for mm in cell["measurements"]:
            mm["blocks_ns"] = [[x] * 100 for x in mm["replicates_ns"]]
        d["peaks"] = [_dispatch(d, batch="00aa11bb22cd", value=-10_000.0, samples=[-10_000.0, 1_000_000.0])]
    path = _bad(bundle_file, tmp_path, change)
    r = pb(src["env"], "import", path, db=url)
    assert r.returncode == 0, r.stderr[-2000:]
    r = pb(src["env"], "show", "1", "--format", "json", db=url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_a_run_of_33_rounds_round_trips(src, tmp_path):
    """A run `perfbench run` makes imports (export -> import): before, one with rounds = 33 ran
    (exit 0) and its bundle was refused: `cells[0].design.order[0]: more than 64 entries (66)`
    (33 rounds x ours and ORT)."""
    suite = tmp_path / "rounds33.toml"
    suite.write_text('[suite]\nname = "rounds33"\ndtypes = ["f32"]\nthreads = [1]\nreplicates = 2\nrounds = 33\n'
                     'block_ms = 0.2\ntimeout_s = 120\nprocesses = 1\n'
                     '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = 64 }\n')
    path = tmp_path / "source.db"
    shutil.copy(src["path"], path)  # this host's peaks are there: measured once per module
    url = f"sqlite:///{path}"
    env = src["env"]
    r = pb(env, "run", "--suite", str(suite), db=url)
    assert r.returncode == 0, r.stderr[-2000:]
    (rid,) = sql(path, "select max(id) from runs")[0]
    out = tmp_path / "run33.json"
    r = pb(env, "export", str(rid), "-o", str(out), db=url)
    assert r.returncode == 0, r.stderr
    (cell,) = json.loads(out.read_text())["cells"]
    assert [len(o) for o in cell["design"]["order"]] == [66, 66]
    dest = f"sqlite:///{tmp_path / 'dest.db'}"
    r = pb(env, "import", str(out), db=dest)
    assert r.returncode == 0, r.stderr[-2000:]
    new_id = int(r.stdout.split(" as run ")[1].split()[0])
    assert _doc(env, dest, new_id) == _doc(env, url, rid)


def test_database_refusal_is_one_line(src, bundle_file, pg_url, tmp_path):
    """What the checks let through but the database refuses (PostgreSQL's 32-bit INTEGER): one
    line naming the refusal, not the SQL and its parameters; nothing written."""
    data = _finite_json(json.loads(bundle_file.read_text()))  # PostgreSQL JSON: finite
    data["cells"][3]["seed"] = 2**40
    path = tmp_path / "big_seed.json"
    path.write_text(json.dumps(data))
    r = pb(src["env"], "import", str(path), db=pg_url)
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    assert "the database refused the bundle (DataError: integer out of range" in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and "parameters" not in r.stderr, r.stderr[-2000:]
    import psycopg

    with psycopg.connect(pg_url.replace("+psycopg", "")) as con:
        assert {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES} == dict.fromkeys(TABLES, 0)


def test_invalidate(src, tmp_path):
    path = tmp_path / "copy.db"
    shutil.copy(src["path"], path)
    url = f"sqlite:///{path}"
    rid = src["run"]
    sql(path, "update runs set partial = 0 where id = ?", rid)  # a full run: `latest` may pick it
    env = src["env"]
    assert json.loads(pb(env, "show", "latest", "--format", "json", db=url).stdout)["run"]["id"] == rid

    from perfbench import runner
    from perfbench.store.db import Store

    (hc_id,) = sql(path, "select host_class_id from runs where id = ?", rid)[0]
    store = Store(url)
    assert runner._history(store, hc_id)  # its cells' wall times feed the estimates
    store.dispose()

    r = pb(env, "runs", "invalidate", str(rid), db=url)
    assert r.returncode == 2 and "--why" in r.stderr
    r = pb(env, "runs", "invalidate", str(rid), "--why", "noisy neighbour", db=url)
    assert r.returncode == 0, r.stderr
    assert sql(path, "select invalidated, invalidated_why from runs where id = ?", rid)[0] == (1, "noisy neighbour")
    assert counts(path)["runs"] == 1  # kept

    r = pb(env, "show", "latest", db=url)
    assert r.returncode == 2 and "no complete, non-partial run" in r.stderr
    assert pb(env, "show", str(rid), db=url).returncode == 0  # by ID it still shows
    listing = pb(env, "runs", db=url)
    assert listing.returncode == 0 and "INVALIDATED: noisy neighbour" in listing.stdout
    store = Store(url)
    assert runner._history(store, hc_id) == {}
    store.dispose()

    # again: the reason is replaced
    r = pb(env, "runs", "invalidate", str(rid), "--why", "thermal throttling", db=url)
    assert r.returncode == 0 and "reason updated" in r.stdout
    assert "INVALIDATED: thermal throttling" in pb(env, "runs", db=url).stdout


def test_migrations_upgrade_a_0001_database_to_head(tmp_path):
    from alembic import command
    from sqlalchemy import create_engine, inspect

    from perfbench.store import db as dbmod

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(dbmod._alembic_config(conn), "0001")
        conn.exec_driver_sql("insert into host_classes (id, key, cpu_model, cores, os_family, created_at) "
                             "values (1, 'k', 'cpu', 2, 'Linux', '2020-01-01 00:00:00')")
    with engine.connect() as conn:
        cols = {c["name"] for c in inspect(conn).get_columns("runs")}
        assert "invalidated_why" not in cols
        assert conn.exec_driver_sql("select version_num from alembic_version").scalar() == "0001"
    engine.dispose()

    store = dbmod.Store(url)  # migrates on open
    with store.engine.connect() as conn:
        cols = {c["name"] for c in inspect(conn).get_columns("runs")}
        assert {"invalidated_at", "invalidated_why", "origin"} <= cols
        assert {"calibrations", "calibration_cells", "comparisons", "comparison_rows", "tickets", "ticket_events",
                "ticket_runs"} <= set(inspect(conn).get_table_names())
        assert conn.exec_driver_sql("select version_num from alembic_version").scalar() == "0008"
        assert "design" in {c["name"] for c in inspect(conn).get_columns("cells")}
        assert "samples" in {c["name"] for c in inspect(conn).get_columns("peaks")}
        assert "processes" in {c["name"] for c in inspect(conn).get_columns("calibrations")}
        assert conn.exec_driver_sql("select key from host_classes").scalar() == "k"
    store.dispose()
