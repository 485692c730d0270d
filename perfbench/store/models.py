"""SQLAlchemy 2 models of the results store. Every field has one home (CONTRACTS §1):

* cell key        -> Cell: case_id, dtype, threads, device, cache, spin
* comparability   -> Run.host_class, Run.ort_version, Cell.timing_hash, Run.protocol_version
* subject         -> Measurement.impl ("ours"/"ort") and, for ours, Run.build (our native build)
* recorded only   -> hostname, git sha/branch/dirty, numerics hash, K, block length, replicates,
                     --quick/--max-time, load average, timestamps, input seed

Schema changes go through Alembic migrations (perfbench/store/migrations).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class HostClass(Base):
    """CPU model + core count + OS family: fresh runners of one class share history."""

    __tablename__ = "host_classes"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    cpu_model: Mapped[str] = mapped_column(String(255))
    cores: Mapped[int] = mapped_column(Integer)
    os_family: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Host(Base):
    __tablename__ = "hosts"
    __table_args__ = (UniqueConstraint("hostname", "host_class_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    host_class_id: Mapped[int] = mapped_column(ForeignKey("host_classes.id"))
    cpu_flags: Mapped[str] = mapped_column(Text, default="")
    l2_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    l3_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory_bytes: Mapped[int | None] = mapped_column(Float, nullable=True)
    meta: Mapped[dict] = mapped_column(JSON, default=dict)  # pyperf's host metadata
    first_seen: Mapped[datetime] = mapped_column(DateTime)
    last_seen: Mapped[datetime] = mapped_column(DateTime)
    host_class: Mapped[HostClass] = relationship()


class Build(Base):
    """Our native build: the subject of every 'ours' measurement."""

    __tablename__ = "builds"
    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[str] = mapped_column(String(64), unique=True)
    source_hash: Mapped[str] = mapped_column(String(64))
    compiler: Mapped[str] = mapped_column(String(255))
    compiler_version: Mapped[str] = mapped_column(String(255))
    flags: Mapped[list] = mapped_column(JSON)
    isa_compiled: Mapped[list] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Peak(Base):
    """This host's measured limits (perfbench peaks)."""

    __tablename__ = "peaks"
    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"), index=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id"))
    batch: Mapped[str] = mapped_column(String(64), index=True)  # one `perfbench peaks` invocation
    kind: Mapped[str] = mapped_column(String(32))  # fma_f32 | bf16_dot | read | ort_node_dispatch
    threads: Mapped[int] = mapped_column(Integer)
    level: Mapped[str | None] = mapped_column(String(16), nullable=True)  # L1 | L2 | L3 | DRAM
    working_set_bytes: Mapped[int | None] = mapped_column(Float, nullable=True)
    value: Mapped[float] = mapped_column(Float)  # the median of samples (a peak batch since 0006)
    samples: Mapped[list | None] = mapped_column(JSON, nullable=True)  # every figure measured, in order
    unit: Mapped[str] = mapped_column(String(16))  # GFLOP/s | GB/s | ns
    method: Mapped[str] = mapped_column(String(255), default="")
    isa: Mapped[str] = mapped_column(String(32), default="")
    measured_at: Mapped[datetime] = mapped_column(DateTime)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    suite: Mapped[str] = mapped_column(String(255), index=True)
    suite_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # running | complete | interrupted | failed
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    invalidated: Mapped[bool] = mapped_column(Boolean, default=False)
    invalidated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)  # `perfbench runs invalidate`
    invalidated_why: Mapped[str | None] = mapped_column(Text, nullable=True)
    quick: Mapped[bool] = mapped_column(Boolean, default=False)
    # "run" (perfbench run), "ab-base"/"ab-head" (one side of perfbench ab), "calibrate": only
    # "run" runs are history (`latest`, ticket ranges); the others are found by ID or comparison
    origin: Mapped[str] = mapped_column(String(16), default="run", server_default="run")
    filters: Mapped[list] = mapped_column(JSON, default=list)
    settings: Mapped[dict] = mapped_column(JSON, default=dict)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    host_class_id: Mapped[int] = mapped_column(ForeignKey("host_classes.id"), index=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id"))
    ort_version: Mapped[str] = mapped_column(String(32))
    protocol_version: Mapped[int] = mapped_column(Integer)
    schema_version: Mapped[int] = mapped_column(Integer)
    versions: Mapped[dict] = mapped_column(JSON, default=dict)  # python, numpy, onnx, perfbench
    git_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    branch: Mapped[str | None] = mapped_column(String(255), nullable=True)
    dirty: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    hostname: Mapped[str] = mapped_column(String(255))
    runner_label: Mapped[str | None] = mapped_column(String(255), nullable=True)
    load_avg: Mapped[list] = mapped_column(JSON, default=list)
    tuning: Mapped[list] = mapped_column(JSON, default=list)  # pyperf system warnings
    cells_planned: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    host: Mapped[Host] = relationship()
    host_class: Mapped[HostClass] = relationship()
    build: Mapped[Build] = relationship()
    cells: Mapped[list[Cell]] = relationship(back_populates="run", cascade="all, delete-orphan")


class Case(Base):
    """An op + parameters; its timing definition hash says what work it measures."""

    __tablename__ = "cases"
    __table_args__ = (UniqueConstraint("case_id", "timing_hash"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[str] = mapped_column(String(512), index=True)
    op: Mapped[str] = mapped_column(String(128), index=True)
    params: Mapped[dict] = mapped_column(JSON)
    timing_hash: Mapped[str] = mapped_column(String(32))


class Cell(Base):
    """One measured cell of a run: the cell key, the numerics verdict, the ours/ORT ratio."""

    __tablename__ = "cells"
    __table_args__ = (UniqueConstraint("run_id", "case_pk", "dtype", "threads", "device", "cache", "spin"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    case_pk: Mapped[int] = mapped_column(ForeignKey("cases.id"))
    # cell key
    dtype: Mapped[str] = mapped_column(String(8))
    threads: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    cache: Mapped[str] = mapped_column(String(8))
    spin: Mapped[str] = mapped_column(String(8))
    # comparability / recorded
    timing_hash: Mapped[str] = mapped_column(String(32))
    numerics_hash: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int] = mapped_column(Integer)
    numerics_only: Mapped[bool] = mapped_column(Boolean, default=False)
    # numerics
    err_ours: Mapped[float | None] = mapped_column(Float, nullable=True)
    err_ort: Mapped[float | None] = mapped_column(Float, nullable=True)
    err_ours_vs_ort: Mapped[float | None] = mapped_column(Float, nullable=True)
    # against the op's stated semantics where the cell is judged against another reference
    # (Op.plain_oracle: MatMulNBits accuracy 4); NULL elsewhere
    err_ours_plain: Mapped[float | None] = mapped_column(Float, nullable=True)
    err_ort_plain: Mapped[float | None] = mapped_column(Float, nullable=True)
    tol: Mapped[float | None] = mapped_column(Float, nullable=True)
    floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the ratio and its verdict (CONTRACTS §2)
    n: Mapped[int] = mapped_column(Integer, default=0)
    ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    ratio_lo: Mapped[float | None] = mapped_column(Float, nullable=True)
    ratio_hi: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean_log: Mapped[float | None] = mapped_column(Float, nullable=True)
    sd_log: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    verdict: Mapped[str] = mapped_column(String(16))  # win | loss | undecided | fail | n/a
    verdict_note: Mapped[str] = mapped_column(Text, default="")
    # work model and where its working set lives
    flops: Mapped[float] = mapped_column(Float, default=0.0)
    bytes_moved: Mapped[float] = mapped_column(Float, default=0.0)
    bound: Mapped[str] = mapped_column(String(16), default="memory")
    level: Mapped[str | None] = mapped_column(String(16), nullable=True)
    peak: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_unit: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # protocol details (recorded only)
    K: Mapped[int] = mapped_column(Integer, default=0)
    ours_iters: Mapped[int] = mapped_column(Integer, default=0)
    ort_runs: Mapped[int] = mapped_column(Integer, default=0)
    isa: Mapped[str] = mapped_column(String(32), default="")
    wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    # {"process": [worker process of each replicate], "order": [[side of each block, in time
    # order] per replicate]}; None for cells stored before protocol 2 (one process)
    design: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    measured_at: Mapped[datetime] = mapped_column(DateTime)
    run: Mapped[Run] = relationship(back_populates="cells")
    case: Mapped[Case] = relationship()
    measurements: Mapped[list[Measurement]] = relationship(back_populates="cell", cascade="all, delete-orphan")

    def side(self, impl: str) -> Measurement | None:
        for m in self.measurements:
            if m.impl == impl:
                return m
        return None


class Measurement(Base):
    """One side of a cell (the subject: ours or ORT)."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("cell_id", "impl"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cells.id", ondelete="CASCADE"), index=True)
    impl: Mapped[str] = mapped_column(String(8))  # ours | ort
    status: Mapped[str] = mapped_column(String(24))
    message: Mapped[str] = mapped_column(Text, default="")
    dtype: Mapped[str] = mapped_column(String(8))  # ORT: the dtype it ran (substituted or not)
    path: Mapped[str] = mapped_column(String(32), default="")  # ORT: kernel|casts|function|substituted
    detail: Mapped[list] = mapped_column(JSON, default=list)  # ORT: node ops it executed
    median_ns: Mapped[float | None] = mapped_column(Float, nullable=True)
    replicates_ns: Mapped[list] = mapped_column(JSON, default=list)
    blocks_ns: Mapped[list] = mapped_column(JSON, default=list)
    floor_ns: Mapped[float] = mapped_column(Float, default=0.0)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_unit: Mapped[str | None] = mapped_column(String(16), nullable=True)
    peak_share: Mapped[float | None] = mapped_column(Float, nullable=True)
    cell: Mapped[Cell] = relationship(back_populates="measurements")


class Calibration(Base):
    """One `perfbench calibrate`: the same build measured against itself (A/A, interleaved as
    `perfbench ab`) in several rounds; per cell key, the between-run spreads found."""

    __tablename__ = "calibrations"
    id: Mapped[int] = mapped_column(primary_key=True)
    host_class_id: Mapped[int] = mapped_column(ForeignKey("host_classes.id"), index=True)
    suite: Mapped[str] = mapped_column(String(255))
    filters: Mapped[list] = mapped_column(JSON, default=list)
    rounds: Mapped[int] = mapped_column(Integer)
    build_id: Mapped[str] = mapped_column(String(64))
    hostname: Mapped[str] = mapped_column(String(255))
    ort_version: Mapped[str] = mapped_column(String(32))
    protocol_version: Mapped[int] = mapped_column(Integer)
    # worker processes per cell: a calibrated sigma_b holds the process-level spread divided by
    # it, so it describes runs with the same count only (None: calibrated before 0007)
    processes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    method: Mapped[str] = mapped_column(Text, default="")
    pooled: Mapped[dict] = mapped_column(JSON, default=dict)  # pooled spread per statistic
    status: Mapped[str] = mapped_column(String(16), default="complete")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    host_class: Mapped[HostClass] = relationship()
    cells: Mapped[list[CalibrationCell]] = relationship(back_populates="calibration", cascade="all, delete-orphan")


class CalibrationCell(Base):
    """sigma_b per cell key (log scale): ab = head/base in one interleaved sitting; ours, ort and
    ratio = a run's mean log time of ours, of ORT, and its mean log ours/ORT ratio."""

    __tablename__ = "calibration_cells"
    id: Mapped[int] = mapped_column(primary_key=True)
    calibration_id: Mapped[int] = mapped_column(ForeignKey("calibrations.id", ondelete="CASCADE"), index=True)
    case_id: Mapped[str] = mapped_column(String(512), index=True)
    timing_hash: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str] = mapped_column(String(8))
    threads: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    cache: Mapped[str] = mapped_column(String(8))
    spin: Mapped[str] = mapped_column(String(8))
    rounds: Mapped[int] = mapped_column(Integer)
    sigma_ab: Mapped[float] = mapped_column(Float)
    sigma_ours: Mapped[float] = mapped_column(Float)
    sigma_ort: Mapped[float] = mapped_column(Float)
    sigma_ratio: Mapped[float] = mapped_column(Float)
    raw: Mapped[dict] = mapped_column(JSON, default=dict)  # unshrunk estimates and per-round means
    calibration: Mapped[Calibration] = relationship(back_populates="cells")


class Comparison(Base):
    """A base-vs-head comparison (`perfbench ab` or `perfbench compare`) with its verdicts."""

    __tablename__ = "comparisons"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # ab | compare
    base_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    head_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    host_class_id: Mapped[int | None] = mapped_column(ForeignKey("host_classes.id"), nullable=True)
    base_ref: Mapped[str] = mapped_column(String(255))
    head_ref: Mapped[str] = mapped_column(String(255))
    summary: Mapped[dict] = mapped_column(JSON, default=dict)
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    document: Mapped[dict] = mapped_column(JSON, default=dict)  # the whole comparison document
    created_at: Mapped[datetime] = mapped_column(DateTime)
    rows: Mapped[list[ComparisonRow]] = relationship(back_populates="comparison", cascade="all, delete-orphan")


class ComparisonRow(Base):
    """One cell's verdict in a comparison (queryable by tickets and the dashboard)."""

    __tablename__ = "comparison_rows"
    id: Mapped[int] = mapped_column(primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)
    case_id: Mapped[str] = mapped_column(String(512), index=True)
    op: Mapped[str] = mapped_column(String(128))
    dtype: Mapped[str] = mapped_column(String(8))
    threads: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    cache: Mapped[str] = mapped_column(String(8))
    spin: Mapped[str] = mapped_column(String(8))
    verdict: Mapped[str] = mapped_column(String(24))
    abs_verdict: Mapped[str | None] = mapped_column(String(24), nullable=True)
    ratio_verdict: Mapped[str | None] = mapped_column(String(24), nullable=True)
    abs_change: Mapped[float | None] = mapped_column(Float, nullable=True)
    ratio_change: Mapped[float | None] = mapped_column(Float, nullable=True)
    sigma_b: Mapped[float | None] = mapped_column(Float, nullable=True)
    why: Mapped[str] = mapped_column(Text, default="")
    comparison: Mapped[Comparison] = relationship(back_populates="rows")


class Ticket(Base):
    """One losing range (or wrong-answer, broken or coverage range) of one group on one host class:
    the work queue (CONTRACTS §7). `cells` is the range as last seen: per cell its key, timing
    hash, parameters and the figures of the run that last measured it."""

    __tablename__ = "tickets"
    id: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str] = mapped_column(String(32), unique=True)  # stable across databases (sync marker)
    host_class_id: Mapped[int] = mapped_column(ForeignKey("host_classes.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # wrong-answer | broken | loss | coverage
    group_key: Mapped[str] = mapped_column(String(512), index=True)
    op: Mapped[str] = mapped_column(String(128))
    dtype: Mapped[str] = mapped_column(String(8))
    device: Mapped[str] = mapped_column(String(16))
    threads: Mapped[int] = mapped_column(Integer)
    cache: Mapped[str] = mapped_column(String(8))
    spin: Mapped[str] = mapped_column(String(8))
    modes: Mapped[dict] = mapped_column(JSON, default=dict)  # op-specific modes (kv, layout, ...)
    state: Mapped[str] = mapped_column(String(8))  # open | closed
    closed_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)  # fixed|merged|obsolete
    merged_into_id: Mapped[int | None] = mapped_column(ForeignKey("tickets.id"), nullable=True)
    split_from_id: Mapped[int | None] = mapped_column(ForeignKey("tickets.id"), nullable=True)
    title: Mapped[str] = mapped_column(Text)
    priority: Mapped[float] = mapped_column(Float, default=0.0)  # excess ns per call summed over the range
    worst_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    cells: Mapped[list] = mapped_column(JSON, default=list)
    filters: Mapped[list] = mapped_column(JSON, default=list)  # --filter texts selecting exactly the range
    suite: Mapped[str] = mapped_column(String(255))  # the suite that opened it (reproduce, obsolete)
    first_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    first_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    last_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    last_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    closed_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    reopened: Mapped[int] = mapped_column(Integer, default=0)
    github: Mapped[dict] = mapped_column(JSON, default=dict)  # repo -> issue number
    opened_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    host_class: Mapped[HostClass] = relationship()
    events: Mapped[list[TicketEvent]] = relationship(back_populates="ticket", cascade="all, delete-orphan",
                                                     order_by="TicketEvent.id")


class TicketEvent(Base):
    """A ticket's history: opened, updated, closed, reopened, merged, split (with the run)."""

    __tablename__ = "ticket_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    event: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict] = mapped_column(JSON, default=dict)
    at: Mapped[datetime] = mapped_column(DateTime)
    ticket: Mapped[Ticket] = relationship(back_populates="events")


class TicketRun(Base):
    """A run whose cells the tickets have taken in (once per run; in run order per host class)."""

    __tablename__ = "ticket_runs"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    host_class_id: Mapped[int] = mapped_column(ForeignKey("host_classes.id"), index=True)
    summary: Mapped[dict] = mapped_column(JSON, default=dict)
    applied_at: Mapped[datetime] = mapped_column(DateTime)
