"""`perfbench export` / `perfbench import` (a run as a versioned JSON bundle), `perfbench runs
invalidate`, and migration 0002 -- through the CLI in subprocesses, as a user runs them. One
stored run per module (a quick run of tests/fixtures/tiny.toml)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess

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
    # non-finite values must travel exactly: a Float column and a JSON column
    cell_id = sql(path, "select min(id) from cells where run_id = ?", rid)[0][0]
    sql(path, "update cells set err_ort = ?, sd_log = ? where id = ?", float("inf"), float("-inf"), cell_id)
    sql(path, "update measurements set replicates_ns = '[Infinity, -Infinity, 5.5]' where cell_id = ? "
              "and impl = 'ours'", cell_id)
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
    assert data["cells"][0]["err_ort"] == "inf" and data["cells"][0]["sd_log"] == "-inf"
    assert data["cells"][0]["measurements"][0]["replicates_ns"][:2] == [{"$float": "inf"}, {"$float": "-inf"}]

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
    assert sql(dest, "select err_ort, sd_log from cells where id = ?", cell_id)[0] == (float("inf"), float("-inf"))
    (reps,) = sql(dest, "select replicates_ns from measurements where cell_id = ? and impl = 'ours'", cell_id)[0]
    assert json.loads(reps) == [float("inf"), float("-inf"), 5.5]
    # peaks travel too (the table's ORT dispatch note reads them)
    assert counts(dest)["peaks"] == counts(src["path"])["peaks"]


def test_round_trip_postgresql(src, bundle_file, pg_url, tmp_path):
    # PostgreSQL's JSON type has no infinity: finite replicates here (Float columns keep theirs)
    data = json.loads(bundle_file.read_text())
    ms = data["cells"][0]["measurements"][0]
    ms["replicates_ns"] = [x for x in ms["replicates_ns"] if not isinstance(x, dict)]
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
        assert conn.exec_driver_sql("select version_num from alembic_version").scalar() == "0006"
        assert "design" in {c["name"] for c in inspect(conn).get_columns("cells")}
        assert "samples" in {c["name"] for c in inspect(conn).get_columns("peaks")}
        assert conn.exec_driver_sql("select key from host_classes").scalar() == "k"
    store.dispose()
