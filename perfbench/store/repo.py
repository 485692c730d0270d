"""Reading and writing the store: hosts, builds, peaks, runs, cells; run references (CONTRACTS §5)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from perfbench.errors import UsageError
from perfbench.store import models as m


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def ensure_host(s: Session, facts) -> m.Host:
    hc = s.scalar(select(m.HostClass).where(m.HostClass.key == facts.class_key))
    if hc is None:
        hc = m.HostClass(key=facts.class_key, cpu_model=facts.cpu_model, cores=facts.cores, os_family=facts.os_family,
                         created_at=now())
        s.add(hc)
        s.flush()
    host = s.scalar(select(m.Host).where(m.Host.hostname == facts.hostname, m.Host.host_class_id == hc.id))
    if host is None:
        host = m.Host(hostname=facts.hostname, host_class_id=hc.id, first_seen=now(), last_seen=now())
        s.add(host)
    host.cpu_flags = " ".join(facts.cpu_flags)
    host.l2_bytes, host.l3_bytes, host.memory_bytes = facts.l2_bytes, facts.l3_bytes, facts.memory_bytes
    host.meta = facts.meta
    host.last_seen = now()
    s.flush()
    return host


def ensure_build(s: Session, info) -> m.Build:
    b = s.scalar(select(m.Build).where(m.Build.build_id == info.build_id))
    if b is None:
        isa_flags = [f"{isa}: {' '.join(fl)}" for isa, fl in sorted(info.isa_flags.items())]
        b = m.Build(build_id=info.build_id, source_hash=info.source_hash, compiler=info.compiler,
                    compiler_version=info.compiler_version, flags=list(info.flags) + isa_flags,
                    isa_compiled=list(info.isa_compiled), created_at=now())
        s.add(b)
        s.flush()
    return b


def store_peaks(s: Session, host: m.Host, build: m.Build, rows: list[dict]) -> str:
    batch = uuid.uuid4().hex[:12]
    t = now()
    for r in rows:
        s.add(m.Peak(host_id=host.id, build_id=build.id, batch=batch, measured_at=t, **r))
    s.flush()
    return batch


def latest_peaks(s: Session, host: m.Host) -> list[dict]:
    """The newest `perfbench peaks` batch of this host (empty if never measured)."""
    last = s.scalar(select(m.Peak).where(m.Peak.host_id == host.id).order_by(m.Peak.measured_at.desc(),
                                                                              m.Peak.id.desc()).limit(1))
    if last is None:
        return []
    rows = s.scalars(select(m.Peak).where(m.Peak.batch == last.batch)).all()
    return [{"kind": p.kind, "threads": p.threads, "level": p.level, "working_set_bytes": p.working_set_bytes,
             "value": p.value, "samples": p.samples, "unit": p.unit, "method": p.method, "isa": p.isa, "measured_at": p.measured_at}
            for p in rows]


def ensure_case(s: Session, case_id: str, op: str, params: dict, timing_hash: str) -> m.Case:
    c = s.scalar(select(m.Case).where(m.Case.case_id == case_id, m.Case.timing_hash == timing_hash))
    if c is None:
        c = m.Case(case_id=case_id, op=op, params=params, timing_hash=timing_hash)
        s.add(c)
        s.flush()
    return c


def load_run(s: Session, run_id: int) -> m.Run:
    run = s.scalar(
        select(m.Run).where(m.Run.id == run_id).options(
            selectinload(m.Run.cells).selectinload(m.Cell.measurements),
            selectinload(m.Run.cells).selectinload(m.Cell.case),
        )
    )
    if run is None:
        raise UsageError(f"no run {run_id} in this database (perfbench show lists runs with `perfbench runs`)")
    return run


def _latest_query(suite: str | None, host_class_id: int | None):
    q = select(m.Run).where(m.Run.status == "complete", m.Run.partial.is_(False), m.Run.invalidated.is_(False),
                            m.Run.origin == "run")
    if suite:
        q = q.where(m.Run.suite == suite)
    if host_class_id is not None:
        q = q.where(m.Run.host_class_id == host_class_id)
    return q.order_by(m.Run.started_at.desc(), m.Run.id.desc())


MAX_ID = 2**63 - 1


def resolve_ref(s: Session, ref: str, *, suite: str | None = None, host_class_id: int | None = None) -> int:
    """A run reference -> run id.  ID | latest | latest@BRANCH | sha:PREFIX.
    `latest` forms pick the newest complete, non-partial, non-invalidated run of the suite on
    the host class; a partial run is used only when named by ID."""
    ref = ref.strip()
    if re.fullmatch(r"\d+", ref):
        rid = int(ref)
        if rid > MAX_ID or s.get(m.Run, rid) is None:  # a database id is a signed 64-bit integer
            raise UsageError(f"no run {rid} in this database")
        return rid
    if ref == "latest" or ref.startswith("latest@"):
        q = _latest_query(suite, host_class_id)
        if ref.startswith("latest@"):
            q = q.where(m.Run.branch == ref.split("@", 1)[1])
        run = s.scalar(q.limit(1))
        if run is None:
            where = f" of suite {suite!r}" if suite else ""
            raise UsageError(f"{ref}: no complete, non-partial run{where} on this host class"
                             + (" on that branch" if "@" in ref else "") + " (name a partial run by its ID)")
        return run.id
    if ref.startswith("sha:"):
        prefix = ref[4:].lower()
        if not re.fullmatch(r"[0-9a-f]{4,40}", prefix):
            raise UsageError(f"{ref}: sha:PREFIX needs 4 to 40 hex digits")
        runs = s.scalars(_latest_query(suite, host_class_id).where(m.Run.git_sha.like(prefix + "%"))).all()
        shas = sorted({r.git_sha for r in runs})
        if not runs:
            raise UsageError(f"{ref}: no complete, non-partial run at a commit starting with {prefix}")
        if len(shas) > 1:
            raise UsageError(f"{ref}: prefix matches several commits: {', '.join(x[:12] for x in shas)}")
        return runs[0].id
    raise UsageError(f"{ref!r} is not a run reference: use an ID, latest, latest@BRANCH or sha:PREFIX "
                     "(git revisions are not run references)")


def list_runs(s: Session, limit: int = 20) -> list[m.Run]:
    return list(s.scalars(select(m.Run).order_by(m.Run.id.desc()).limit(limit)).all())
