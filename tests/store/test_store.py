"""perfbench.store: opening (Alembic migrations), URLs, run references (CONTRACTS §5), host classes,
peaks, and a full run round trip -- on SQLite and on a throwaway PostgreSQL (store_url)."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import delete, func, inspect, select, text

from perfbench.errors import DatabaseError, UsageError
from perfbench.store import db, repo
from perfbench.store import models as m
from perfbench.store.db import Store
from perfbench.store.hostinfo import HostFacts

TABLES = {"alembic_version", "host_classes", "hosts", "builds", "peaks", "runs", "cases", "cells", "measurements"}
T0 = datetime(2026, 11, 1, 12, 0, 0)


def _head() -> str:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(db.MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def facts(hostname="host-a", cpu="Test CPU X (family 6 model 85)", cores=2, os_family="Linux", **kw):
    return HostFacts(hostname=hostname, cpu_model=cpu, cores=cores, os_family=os_family,
                     cpu_flags=["avx2", "fma"], l2_bytes=1 << 20, l3_bytes=32 << 20, memory_bytes=8 << 30,
                     meta={"python_version": "3.11"}, **kw)


BUILD = SimpleNamespace(build_id="build-1", source_hash="src1", compiler="gcc", compiler_version="gcc 13.2",
                        flags=["-O3", "-march=x86-64-v3"], isa_compiled=["avx2", "avx512"],
                        isa_flags={"avx2": ["-mavx2", "-mfma"], "avx512": ["-mavx512f"]})


@pytest.fixture()
def store(store_url):
    st = Store(store_url)
    yield st
    st.dispose()


@pytest.fixture()
def env(store):
    """A host and a build in the store: (host_id, host_class_id, build_pk)."""
    with store.session() as s:
        h = repo.ensure_host(s, facts())
        b = repo.ensure_build(s, BUILD)
        return SimpleNamespace(host_id=h.id, hc_id=h.host_class_id, build_pk=b.id)


def add_run(s, env, *, minutes=0, suite="attention", status="complete", partial=False, invalidated=False,
            quick=False, sha="a" * 40, branch="main", hc_id=None, **kw) -> int:
    fields = dict(suite=suite, suite_hash="sh", status=status, partial=partial, invalidated=invalidated, quick=quick,
                  filters=[], settings={"replicates": 8}, host_id=env.host_id, host_class_id=hc_id or env.hc_id,
                  build_id=env.build_pk, ort_version="1.31.1", protocol_version=1, schema_version=1,
                  versions={"python": "3.11"}, git_sha=sha, branch=branch, dirty=False, hostname="host-a",
                  started_at=T0 + timedelta(minutes=minutes))
    fields.update(kw)
    r = m.Run(**fields)
    s.add(r)
    s.flush()
    return r.id


# ---- opening ----

def test_fresh_database_is_migrated_to_head(store):
    insp = inspect(store.engine)
    assert TABLES <= set(insp.get_table_names())
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [_head()]
        assert MigrationContext.configure(conn).get_current_revision() == _head()


def test_migrations_match_the_models(store):
    """The schema Alembic builds is the one the models describe (no drift)."""
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), m.Base.metadata)
    assert diff == []


def test_reopening_is_a_no_op(store_url, monkeypatch):
    st = Store(store_url)
    with st.session() as s:
        repo.ensure_host(s, facts())
    st.dispose()
    calls = []
    real_upgrade = db.command.upgrade
    monkeypatch.setattr(db.command, "upgrade", lambda *a, **k: (calls.append(a), real_upgrade(*a, **k)))
    st2 = Store(store_url)
    assert calls == []  # already at head: no migration runs
    with st2.session() as s:
        assert s.scalar(select(func.count()).select_from(m.HostClass)) == 1
    with st2.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [_head()]
    st2.dispose()


def test_fresh_open_runs_the_upgrade(tmp_path, monkeypatch):
    calls = []
    real_upgrade = db.command.upgrade
    monkeypatch.setattr(db.command, "upgrade", lambda *a, **k: (calls.append(a), real_upgrade(*a, **k)))
    Store(f"sqlite:///{tmp_path / 'fresh.db'}").dispose()
    assert len(calls) == 1


# ---- URLs and errors ----

def test_resolve_url(monkeypatch, tmp_path):
    monkeypatch.delenv("PERFBENCH_DB", raising=False)
    assert db.resolve_url(None) == "sqlite:///results.db"
    assert db.resolve_url("results/x.db") == "sqlite:///results/x.db"
    assert db.resolve_url("/abs/path/x.db") == "sqlite:////abs/path/x.db"
    assert db.resolve_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    monkeypatch.setenv("PERFBENCH_DB", str(tmp_path / "env.db"))
    assert db.resolve_url(None) == f"sqlite:///{tmp_path / 'env.db'}"
    assert db.resolve_url("explicit.db") == "sqlite:///explicit.db"  # --db beats the environment
    monkeypatch.setenv("PERFBENCH_DB", "postgresql+psycopg://u@h/db")
    assert db.resolve_url(None) == "postgresql+psycopg://u@h/db"


def test_store_honours_perfbench_db(monkeypatch, tmp_path):
    path = tmp_path / "from_env.db"
    monkeypatch.setenv("PERFBENCH_DB", str(path))
    st = Store()
    assert st.url == f"sqlite:///{path}"
    st.dispose()
    assert path.is_file()


def test_unreachable_database_is_a_database_error_naming_db():
    with pytest.raises(DatabaseError) as ei:
        Store("postgresql+psycopg://nobody:s3cret@127.0.0.1:1/x")
    msg = str(ei.value)
    assert "--db" in msg and "PERFBENCH_DB" in msg
    assert "127.0.0.1:1" in msg
    assert "s3cret" not in msg  # the password is redacted
    assert ei.value.exit_code == 2


def test_unopenable_sqlite_file_is_a_database_error(tmp_path):
    with pytest.raises(DatabaseError, match="--db"):
        Store(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'x.db'}")


# ---- run references ----

def test_resolve_numeric_id(store, env):
    with store.session() as s:
        rid = add_run(s, env)
        partial = add_run(s, env, minutes=5, partial=True, quick=True)
    with store.session() as s:
        assert repo.resolve_ref(s, str(rid)) == rid
        assert repo.resolve_ref(s, f" {partial} ") == partial  # a partial run is used when named by ID
        with pytest.raises(UsageError, match="no run 999"):
            repo.resolve_ref(s, "999")


def test_resolve_latest_skips_partial_interrupted_invalidated_and_others(store, env):
    with store.session() as s:
        other_hc = repo.ensure_host(s, facts(hostname="big", cores=64)).host_class_id
        good_old = add_run(s, env, minutes=0)
        good = add_run(s, env, minutes=10)
        add_run(s, env, minutes=20, partial=True)
        add_run(s, env, minutes=21, quick=True, partial=True)
        add_run(s, env, minutes=30, status="interrupted")
        add_run(s, env, minutes=31, status="failed")
        add_run(s, env, minutes=32, status="running")
        add_run(s, env, minutes=40, invalidated=True)
        add_run(s, env, minutes=50, suite="other")
        other_class = add_run(s, env, minutes=60, hc_id=other_hc)
    with store.session() as s:
        assert repo.resolve_ref(s, "latest", suite="attention", host_class_id=env.hc_id) == good
        assert repo.resolve_ref(s, "latest", suite="attention", host_class_id=other_hc) == other_class
        assert good_old != good
        with pytest.raises(UsageError) as ei:
            repo.resolve_ref(s, "latest", suite="nosuch", host_class_id=env.hc_id)
        assert "nosuch" in str(ei.value) and "ID" in str(ei.value)


def test_resolve_latest_at_branch(store, env):
    with store.session() as s:
        main_run = add_run(s, env, minutes=0, branch="main")
        feat_old = add_run(s, env, minutes=5, branch="feature/x")
        feat = add_run(s, env, minutes=10, branch="feature/x")
        add_run(s, env, minutes=15, branch="feature/x", partial=True)
        add_run(s, env, minutes=20, branch="other")
    with store.session() as s:
        kw = {"suite": "attention", "host_class_id": env.hc_id}
        assert repo.resolve_ref(s, "latest@main", **kw) == main_run
        assert repo.resolve_ref(s, "latest@feature/x", **kw) == feat != feat_old
        with pytest.raises(UsageError, match="branch"):
            repo.resolve_ref(s, "latest@nosuch", **kw)


def test_resolve_sha_prefix(store, env):
    sha1 = "abcd1234" + "0" * 32
    sha2 = "abcd5678" + "1" * 32
    sha3 = "ffff0000" + "2" * 32
    with store.session() as s:
        add_run(s, env, minutes=0, sha=sha1)
        newest1 = add_run(s, env, minutes=5, sha=sha1)
        add_run(s, env, minutes=10, sha=sha1, partial=True)
        only2 = add_run(s, env, minutes=1, sha=sha2)
        add_run(s, env, minutes=2, sha=sha3, partial=True)
    with store.session() as s:
        kw = {"suite": "attention", "host_class_id": env.hc_id}
        assert repo.resolve_ref(s, "sha:abcd1", **kw) == newest1  # the newest complete run at that commit
        assert repo.resolve_ref(s, "sha:ABCD1234", **kw) == newest1
        assert repo.resolve_ref(s, f"sha:{sha2}", **kw) == only2
        with pytest.raises(UsageError) as ei:
            repo.resolve_ref(s, "sha:abcd", **kw)
        msg = str(ei.value)
        assert "several" in msg and sha1[:12] in msg and sha2[:12] in msg
        with pytest.raises(UsageError, match="no complete"):
            repo.resolve_ref(s, "sha:0000", **kw)
        with pytest.raises(UsageError, match="no complete"):
            repo.resolve_ref(s, "sha:ffff", **kw)  # only a partial run there
        with pytest.raises(UsageError, match="hex"):
            repo.resolve_ref(s, "sha:xyz1", **kw)


def test_git_revisions_are_not_run_references(store, env):
    with store.session() as s:
        add_run(s, env, sha="abc1234" + "0" * 33, branch="main")
    with store.session() as s:
        # a run exists at commit abc1234 on branch main: still, none of these may resolve to it
        for ref in ("HEAD~1", "HEAD", "main", "origin/main", "v1.0", "abc1234", "latest~1"):
            with pytest.raises(UsageError) as ei:
                repo.resolve_ref(s, ref, suite="attention", host_class_id=env.hc_id)
            msg = str(ei.value)
            assert repr(ref) in msg and "not a run reference" in msg, msg
            assert "git revisions" in msg and "sha:PREFIX" in msg, msg


# ---- hosts, builds, peaks ----

def test_ensure_host_is_keyed_by_host_class(store):
    with store.session() as s:
        a = repo.ensure_host(s, facts(hostname="runner-1"))
        b = repo.ensure_host(s, facts(hostname="runner-2"))
        a_again = repo.ensure_host(s, facts(hostname="runner-1"))
        other = repo.ensure_host(s, facts(hostname="runner-1", cores=4))
        ids = (a.id, b.id, a_again.id, other.id)
        classes = (a.host_class_id, b.host_class_id, other.host_class_id)
    assert classes[0] == classes[1] != classes[2]
    assert ids[0] == ids[2] and len({ids[0], ids[1], ids[3]}) == 3
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(m.HostClass)) == 2
        assert s.scalar(select(func.count()).select_from(m.Host)) == 3
        hc = s.get(m.HostClass, classes[0])
        assert hc.key == facts().class_key and "runner" not in hc.key
        assert (hc.cpu_model, hc.cores, hc.os_family) == ("Test CPU X (family 6 model 85)", 2, "Linux")


def test_ensure_build_is_idempotent(store):
    with store.session() as s:
        b1 = repo.ensure_build(s, BUILD).id
        b2 = repo.ensure_build(s, BUILD).id
        assert b1 == b2
        # the flags of every ISA path are recorded with the build
        assert s.get(m.Build, b1).flags == ["-O3", "-march=x86-64-v3", "avx2: -mavx2 -mfma", "avx512: -mavx512f"]


PEAKS_1 = [
    {"kind": "fma_f32", "threads": 1, "level": None, "working_set_bytes": None, "value": 50.0, "unit": "GFLOP/s",
     "method": "fma chains", "isa": "avx2", "samples": [49.0, 50.0, 52.5]},
    {"kind": "read", "threads": 1, "level": "L2", "working_set_bytes": 262144.0, "value": 200.0, "unit": "GB/s",
     "method": "sum", "isa": "avx2", "samples": None},
]
PEAKS_2 = [
    {"kind": "fma_f32", "threads": 2, "level": None, "working_set_bytes": None, "value": 99.5, "unit": "GFLOP/s",
     "method": "fma chains", "isa": "avx2"},
    {"kind": "read", "threads": 2, "level": "DRAM", "working_set_bytes": 1.5e9, "value": 18.25, "unit": "GB/s",
     "method": "sum", "isa": "avx2"},
    {"kind": "read", "threads": 2, "level": "L3", "working_set_bytes": 8e6, "value": 80.0, "unit": "GB/s",
     "method": "sum", "isa": "avx2"},
]


def _strip(rows):
    return sorted(({"samples": None, **{k: v for k, v in r.items() if k != "measured_at"}} for r in rows),
                  key=lambda r: (r["kind"], r["threads"], r["level"] or ""))


def test_peaks_round_trip_newest_batch_only(store, env):
    with store.session() as s:
        host = s.get(m.Host, env.host_id)
        assert repo.latest_peaks(s, host) == []
        build = s.get(m.Build, env.build_pk)
        b1 = repo.store_peaks(s, host, build, PEAKS_1)
    with store.session() as s:
        host = s.get(m.Host, env.host_id)
        assert _strip(repo.latest_peaks(s, host)) == _strip(PEAKS_1)
        b2 = repo.store_peaks(s, host, s.get(m.Build, env.build_pk), PEAKS_2)
        assert b1 != b2
        # another host's newer peaks never leak into this host's
        other = repo.ensure_host(s, facts(hostname="host-b"))
        repo.store_peaks(s, other, s.get(m.Build, env.build_pk), PEAKS_1[:1])
    with store.session() as s:
        host = s.get(m.Host, env.host_id)
        latest = repo.latest_peaks(s, host)
        assert _strip(latest) == _strip(PEAKS_2)
        assert all(isinstance(r["measured_at"], datetime) for r in latest)


# ---- a full run round trip ----

def test_run_round_trip_with_cells_and_measurements(store, env):
    blocks = [[801.5, 799.25, 803.0], [790.0, 810.0, 805.5]]
    with store.session() as s:
        rid = add_run(s, env, minutes=3, settings={"replicates": 2, "axes_overrides": {"threads": None}},
                      filters=["op=Softmax keys=..512"], load_avg=[0.5, 0.25, 0.125], tuning=["CPU scaling"],
                      cells_planned=2, message="done", runner_label="lab-1",
                      finished_at=T0 + timedelta(minutes=9, microseconds=123456))
        case = repo.ensure_case(s, "Softmax.batch=1.heads=2.queries=1.keys=64", "Softmax",
                                {"batch": 1, "heads": 2, "queries": 1, "keys": 64}, "tdef0123456789ab")
        assert repo.ensure_case(s, case.case_id, "Softmax", {}, "tdef0123456789ab").id == case.id
        cell = m.Cell(run_id=rid, case_pk=case.id, dtype="bf16", threads=2, device="cpu", cache="cold", spin="on",
                      timing_hash=case.timing_hash, numerics_hash="ndef", seed=20261129, numerics_only=False,
                      err_ours=1.25e-3, err_ort=2.5e-3, err_ours_vs_ort=3e-3, tol=5e-3, floor=1.6e-2, n=2,
                      ratio=0.8, ratio_lo=0.7, ratio_hi=0.9, mean_log=-0.223, sd_log=0.01, ci_method="t",
                      verdict="win", verdict_note="", flops=1e6, bytes_moved=2.5e5, bound="memory", level="L2",
                      peak=200.0, peak_unit="GB/s", K=8, ours_iters=1000, ort_runs=100, isa="avx2", wall_s=3.5,
                      measured_at=T0 + timedelta(minutes=4))
        cell.measurements.append(m.Measurement(
            impl="ours", status="ok", message="", dtype="bf16", path="", detail=[], median_ns=800.0,
            replicates_ns=[801.0, 799.0], blocks_ns=blocks, floor_ns=25.0, throughput=312.5, throughput_unit="GB/s",
            peak_share=0.5))
        cell.measurements.append(m.Measurement(
            impl="ort", status="ort-discrepancy", message="ORT err 1e-1 > 10 x floor", dtype="f32",
            path="substituted", detail=["Cast", "Softmax", "Cast"], median_ns=1000.0, replicates_ns=[1000.0, 1001.0],
            blocks_ns=[[1000.0], [1001.0]], floor_ns=30.0, throughput=250.0, throughput_unit="GB/s", peak_share=None))
        num = m.Cell(run_id=rid, case_pk=case.id, dtype="f32", threads=1, device="cpu", cache="warm", spin="off",
                     timing_hash=case.timing_hash, numerics_hash="ndef", seed=1, numerics_only=True, verdict="n/a",
                     verdict_note="numerics-only shape", measured_at=T0)
        num.measurements.append(m.Measurement(impl="ours", status="mismatch", message="err 1 > tol", dtype="f32"))
        s.add_all([cell, num])
    store.dispose()

    again = Store(store.url)
    with again.session() as s:
        run = repo.load_run(s, rid)
        assert (run.suite, run.status, run.partial, run.quick, run.invalidated) == ("attention", "complete", False,
                                                                                     False, False)
        assert run.settings == {"replicates": 2, "axes_overrides": {"threads": None}}
        assert run.filters == ["op=Softmax keys=..512"]
        assert run.load_avg == [0.5, 0.25, 0.125] and run.tuning == ["CPU scaling"]
        assert run.started_at == T0 + timedelta(minutes=3)
        assert run.finished_at == T0 + timedelta(minutes=9, microseconds=123456)
        assert (run.git_sha, run.branch, run.dirty, run.runner_label) == ("a" * 40, "main", False, "lab-1")
        assert run.host.hostname == "host-a" and run.host_class.key == facts().class_key
        assert run.build.build_id == "build-1" and run.build.isa_compiled == ["avx2", "avx512"]
        assert len(run.cells) == 2
        c = next(x for x in run.cells if not x.numerics_only)
        assert c.case.case_id == "Softmax.batch=1.heads=2.queries=1.keys=64"
        assert c.case.params == {"batch": 1, "heads": 2, "queries": 1, "keys": 64}
        assert (c.dtype, c.threads, c.device, c.cache, c.spin) == ("bf16", 2, "cpu", "cold", "on")
        assert (c.ratio, c.ratio_lo, c.ratio_hi, c.n, c.verdict, c.ci_method) == (0.8, 0.7, 0.9, 2, "win", "t")
        assert (c.err_ours, c.tol, c.floor, c.seed, c.K) == (1.25e-3, 5e-3, 1.6e-2, 20261129, 8)
        ours, ort = c.side("ours"), c.side("ort")
        assert ours.replicates_ns == [801.0, 799.0] and ours.blocks_ns == blocks
        assert (ours.median_ns, ours.throughput, ours.peak_share) == (800.0, 312.5, 0.5)
        assert (ort.status, ort.dtype, ort.path, ort.detail) == ("ort-discrepancy", "f32", "substituted",
                                                                 ["Cast", "Softmax", "Cast"])
        assert ort.peak_share is None and ort.message == "ORT err 1e-1 > 10 x floor"
        n = next(x for x in run.cells if x.numerics_only)
        assert n.verdict == "n/a" and n.ratio is None and n.side("ort") is None
        assert n.side("ours").status == "mismatch" and n.side("ours").replicates_ns == []
        assert [r.id for r in repo.list_runs(s)] == [rid]
    again.dispose()


def test_deleting_a_run_cascades_in_the_database(store, env):
    """ON DELETE CASCADE from the migration (and SQLite's foreign_keys pragma): a plain SQL delete of a
    run removes its cells and measurements, never the shared cases."""
    with store.session() as s:
        rid = add_run(s, env)
        case = repo.ensure_case(s, "Softmax.k=1", "Softmax", {}, "t1")
        cell = m.Cell(run_id=rid, case_pk=case.id, dtype="f32", threads=1, device="cpu", cache="warm", spin="off",
                      timing_hash="t1", numerics_hash="n", seed=1, verdict="n/a", measured_at=T0)
        cell.measurements.append(m.Measurement(impl="ours", status="ok", dtype="f32"))
        s.add(cell)
    with store.engine.begin() as conn:
        conn.execute(delete(m.Run.__table__).where(m.Run.__table__.c.id == rid))
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(m.Cell)) == 0
        assert s.scalar(select(func.count()).select_from(m.Measurement)) == 0
        assert s.scalar(select(func.count()).select_from(m.Case)) == 1  # cases are shared history
