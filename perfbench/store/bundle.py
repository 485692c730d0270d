"""Moving a run between databases: `perfbench export` writes one run, with its host class, host,
build, the host's peaks and the cases it measured, as a versioned JSON bundle; `perfbench
import` writes a bundle into another database (SQLite or PostgreSQL) in one transaction.

Rows are written column by column from the models, without database ids (rows point at each
other by their natural keys). JSON has no NaN or infinity: a non-finite value of a Float column
is written as the string "inf", "-inf" or "nan" (as `show --format json` does), and one inside a
JSON column as {"$float": "inf"}; both are read back to the same float.

On import, host classes, hosts, builds and cases already in the database are reused by their
natural keys (host class key; hostname + host class; build id; case id + timing hash) and left
as they are; peak batches already there are skipped. A run already there (same suite, start
time, host and build) is refused, naming its id.

A bundle is input from outside: before anything is written, every value is checked against its
column (type, range, finite where required, enumerated values) and every case is made again by
its op, which must give the same case id (bundle_check.py). A refusal is a BundleError (exit 2)
naming where, e.g. `cells[3].threads: expected an integer in 1..256, got 'abc'`. A bundle file
larger than MAX_BUNDLE_BYTES is refused before it is read.
"""

from __future__ import annotations

import math

from sqlalchemy import JSON, DateTime, Float, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from perfbench import SCHEMA_VERSION
from perfbench.store import bundle_check, repo
from perfbench.store import models as m
from perfbench.store.bundle_check import BundleError, show

BUNDLE_VERSION = 1
# the largest bundle file `perfbench import` reads: the largest shipped suite (attention, 588
# cells at 8 replicates x 3 rounds) exports about 3 MB, a run at MAX_SUITE_CELLS (20,000) cells
# about 100 MB; a larger file is refused before it is read (parsed, it takes ~10x its size)
MAX_BUNDLE_BYTES = 512 * 1024**2
KEYS = ("perfbench_bundle", "schema_version", "run", "host_class", "host", "build", "peaks", "cases", "cells")

# columns that are database ids or links by id: never exported, rebuilt on import
_SKIP = {
    m.HostClass: {"id"},
    m.Host: {"id", "host_class_id"},
    m.Build: {"id"},
    m.Peak: {"id", "host_id", "build_id"},
    m.Run: {"id", "host_id", "host_class_id", "build_id"},
    m.Case: {"id"},
    m.Cell: {"id", "run_id", "case_pk"},
    m.Measurement: {"id", "cell_id"},
}


def _enc_float(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _enc_json(v):
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": _enc_float(v)}
    if isinstance(v, dict):
        return {k: _enc_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_enc_json(x) for x in v]
    return v


def _dump(obj) -> dict:
    out = {}
    for col in obj.__table__.columns:
        if col.key in _SKIP[type(obj)]:
            continue
        v = getattr(obj, col.key)
        if v is None:
            out[col.key] = None
        elif isinstance(col.type, DateTime):
            out[col.key] = v.isoformat()
        elif isinstance(col.type, Float):
            out[col.key] = _enc_float(float(v))
        elif isinstance(col.type, JSON):
            out[col.key] = _enc_json(v)
        else:
            out[col.key] = v
    return out


def _load(model, data, where: str) -> dict:
    """Column values for `model` from a bundle row (ids and links left out)."""
    if not isinstance(data, dict):
        raise BundleError(f"{where}: expected an object, got {type(data).__name__}")
    out = {}
    for col in model.__table__.columns:
        if col.key in _SKIP[model]:
            continue
        if col.key not in data:
            if col.nullable or col.default is not None:
                continue  # left to the column's default
            raise BundleError(f"{where}: missing key {col.key!r}")
        v = data[col.key]
        if v is None:
            if not col.nullable:
                raise BundleError(f"{where}: {col.key!r} must not be null")
            out[col.key] = None
        else:
            out[col.key] = bundle_check.value(col, v, f"{where}.{col.key}")
    return out


def export_run(s: Session, run_id: int) -> dict:
    """The bundle of one stored run (plain JSON-safe data)."""
    run = repo.load_run(s, run_id)
    peaks = s.scalars(select(m.Peak).where(m.Peak.host_id == run.host_id).order_by(m.Peak.id)).all()
    build_ids = {p.build_id for p in peaks} | {run.build_id}
    builds = {b.id: b for b in s.scalars(select(m.Build).where(m.Build.id.in_(build_ids)))}
    cases: dict[int, m.Case] = {}
    cells = []
    for c in sorted(run.cells, key=lambda c: c.id):
        cases.setdefault(c.case_pk, c.case)
        cells.append({**_dump(c), "case": [c.case.case_id, c.case.timing_hash],
                      "measurements": [_dump(mm) for mm in sorted(c.measurements, key=lambda mm: mm.id)]})
    return {
        "perfbench_bundle": BUNDLE_VERSION,
        "schema_version": SCHEMA_VERSION,
        "exported_at": repo.now().isoformat(),
        "source_run_id": run.id,
        "run": _dump(run),
        "host_class": _dump(run.host_class),
        "host": _dump(run.host),
        "build": _dump(run.build),
        "builds": [_dump(b) for bid, b in sorted(builds.items()) if bid != run.build_id],
        "peaks": [{**_dump(p), "build": builds[p.build_id].build_id} for p in peaks],
        "cases": [_dump(c) for _, c in sorted(cases.items())],
        "cells": cells,
    }


def check(bundle) -> None:
    """Refuse what is not a bundle this perfbench can read."""
    if not isinstance(bundle, dict) or "perfbench_bundle" not in bundle:
        raise BundleError("not a perfbench bundle (no 'perfbench_bundle' key); write one with `perfbench export`")
    if bundle["perfbench_bundle"] != BUNDLE_VERSION:
        raise BundleError(f"bundle format version {show(bundle['perfbench_bundle'])} is not supported "
                          f"(this perfbench reads version {BUNDLE_VERSION})")
    sv = bundle.get("schema_version")
    if not isinstance(sv, int) or isinstance(sv, bool):
        raise BundleError(f"missing or bad key 'schema_version': {show(sv)}")
    if sv > SCHEMA_VERSION:
        raise BundleError(f"bundle schema version {sv} is newer than this perfbench's ({SCHEMA_VERSION}); "
                          "upgrade perfbench to import it")
    missing = [k for k in KEYS if k not in bundle]
    if missing:
        raise BundleError(f"missing key(s): {', '.join(missing)}")
    for k in ("peaks", "cases", "cells", "builds"):
        if not isinstance(bundle[k] if bundle.get(k) is not None else [], list):
            raise BundleError(f"key {k!r} must be a list")


def read(bundle) -> dict:
    """Every row of the bundle checked and converted (bundle_check), before anything is written:
    what import_bundle writes. Raises BundleError naming the first bad value."""
    check(bundle)
    out = {"host_class": _load(m.HostClass, bundle["host_class"], "host_class"),
           "host": _load(m.Host, bundle["host"], "host"),
           "builds": [_load(m.Build, bundle["build"], "build")]
           + [_load(m.Build, row, f"builds[{i}]") for i, row in enumerate(bundle.get("builds") or [])],
           "run": _load(m.Run, bundle["run"], "run"), "peaks": [], "cases": [], "cells": []}
    build_ids = {b["build_id"] for b in out["builds"]}
    for i, row in enumerate(bundle["peaks"]):
        vals = _load(m.Peak, row, f"peaks[{i}]")
        bundle_check.check_peak(vals, f"peaks[{i}]")
        if not isinstance(row.get("build"), str) or row["build"] not in build_ids:
            raise BundleError(f"peaks[{i}]: build {show(row.get('build'))} is not in the bundle")
        out["peaks"].append((vals, row["build"]))
    case_keys = set()
    for i, row in enumerate(bundle["cases"]):
        vals = _load(m.Case, row, f"cases[{i}]")
        vals["op"], vals["params"] = bundle_check.rebuild_case(vals, f"cases[{i}]")
        out["cases"].append(vals)
        case_keys.add((vals["case_id"], vals["timing_hash"]))
    cell_keys: dict[tuple, int] = {}
    for i, row in enumerate(bundle["cells"]):
        where = f"cells[{i}]"
        vals = _load(m.Cell, row, where)
        key = row.get("case")
        key = tuple(key) if isinstance(key, list) and len(key) == 2 and all(isinstance(x, str) for x in key) else None
        if key not in case_keys:
            raise BundleError(f"{where}: case {show(row.get('case'))} is not among the bundle's cases")
        if vals["timing_hash"] != key[1]:
            raise BundleError(f"{where}: timing_hash {vals['timing_hash']} is not its case's ({key[1]})")
        ck = (key, vals["dtype"], vals["threads"], vals["device"], vals["cache"], vals["spin"])
        if ck in cell_keys:
            raise BundleError(f"{where}: the same cell as cells[{cell_keys[ck]}] ({key[0]} {vals['dtype']} "
                              f"threads={vals['threads']} {vals['device']} {vals['cache']} spin={vals['spin']})")
        cell_keys[ck] = i
        ms = row.get("measurements")
        if not isinstance(ms, list):
            raise BundleError(f"{where}: missing key 'measurements'")
        mvals = [_load(m.Measurement, mr, f"{where}.measurements[{j}]") for j, mr in enumerate(ms)]
        impls = [mv["impl"] for mv in mvals]
        if len(set(impls)) != len(impls):
            raise BundleError(f"{where}: more than one measurement of the same side ({', '.join(impls)})")
        for j, mv in enumerate(mvals):
            bundle_check.check_measurement(mv, f"{where}.measurements[{j}]")
        bundle_check.check_cell(vals, mvals, where)
        out["cells"].append((vals, key, mvals))
    return out


def _ensure_build(s: Session, vals: dict) -> m.Build:
    b = s.scalar(select(m.Build).where(m.Build.build_id == vals["build_id"]))
    if b is None:
        b = m.Build(**vals)
        s.add(b)
        s.flush()
    return b


def import_bundle(s: Session, bundle: dict, rows: dict | None = None) -> int:
    """Write a bundle into the database of session `s`; the new run's id. Every value is checked
    first (`rows`: read(bundle) when the caller has it); the caller commits (or rolls back on any
    error: nothing is written partially)."""
    data = read(bundle) if rows is None else rows
    try:
        return _write(s, data)
    except DBAPIError as e:  # a constraint the checks above did not foresee: what collided, not the SQL
        why = str(e.orig).strip().splitlines()[0] if e.orig is not None else type(e).__name__
        raise BundleError(f"the database refused the bundle ({type(e).__name__}: {why[:200]}); nothing "
                          "imported") from None
    except UnicodeError as e:  # text the driver cannot encode (a lone surrogate the checks did not foresee)
        why = f"{e.reason} at {e.start}" if isinstance(e, (UnicodeEncodeError, UnicodeDecodeError)) else "text"
        raise BundleError(f"the database refused the bundle ({type(e).__name__}: {why[:200]}); nothing "
                          "imported") from None


def _write(s: Session, data: dict) -> int:
    hc_vals = data["host_class"]
    hc = s.scalar(select(m.HostClass).where(m.HostClass.key == hc_vals["key"]))
    if hc is None:
        hc = m.HostClass(**hc_vals)
        s.add(hc)
        s.flush()
    host_vals = data["host"]
    host = s.scalar(select(m.Host).where(m.Host.hostname == host_vals["hostname"], m.Host.host_class_id == hc.id))
    if host is None:
        host = m.Host(host_class_id=hc.id, **host_vals)
        s.add(host)
        s.flush()
    builds = {}
    for vals in data["builds"]:
        b = _ensure_build(s, vals)
        builds.setdefault(b.build_id, b)
    build = builds[data["builds"][0]["build_id"]]

    run_vals = data["run"]
    dup = s.scalar(select(m.Run).where(m.Run.suite == run_vals["suite"], m.Run.started_at == run_vals["started_at"],
                                       m.Run.host_id == host.id, m.Run.build_id == build.id))
    if dup is not None:
        raise BundleError(f"this run is already in the database as run {dup.id} (same suite, start time, host "
                          "and build); nothing imported")

    seen_batches: dict[str, bool] = {}
    for vals, build_key in data["peaks"]:
        batch = vals["batch"]
        if batch not in seen_batches:
            seen_batches[batch] = s.scalar(select(m.Peak.id).where(m.Peak.host_id == host.id, m.Peak.batch == batch)
                                           .limit(1)) is not None
        if not seen_batches[batch]:
            s.add(m.Peak(host_id=host.id, build_id=builds[build_key].id, **vals))

    cases = {}
    for vals in data["cases"]:
        c = repo.ensure_case(s, vals["case_id"], vals["op"], vals["params"], vals["timing_hash"])
        cases[(c.case_id, c.timing_hash)] = c

    run = m.Run(host_id=host.id, host_class_id=hc.id, build_id=build.id, **run_vals)
    s.add(run)
    s.flush()
    for vals, key, mvals in data["cells"]:
        cell = m.Cell(run_id=run.id, case_pk=cases[key].id, **vals)
        cell.measurements = [m.Measurement(**mv) for mv in mvals]
        s.add(cell)
    s.flush()
    return run.id
