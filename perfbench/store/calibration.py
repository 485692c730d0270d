"""Which calibration (A/A between-run spreads, `perfbench calibrate`) judges a stored run's cells."""

from __future__ import annotations

from sqlalchemy import select

from perfbench.store import models as m


def processes_of(settings: dict | None) -> int:
    """The worker processes a cell's replicates were spread over under these settings (the
    shares of timing.protocol.slices): what a calibrated sigma_b was measured at."""
    from perfbench.timing.protocol import slices

    st = settings or {}
    return len(slices(int(st.get("replicates", 8)), int(st.get("processes", 1))))


def file_unfit(cal_file: dict | None, host_class: str, protocol_version, ort_version, processes: int) -> str | None:
    """Why a calibration file cannot judge a run (None: it can). It must be of the run's host
    class, protocol and ORT version (as the database's calibrations are chosen) and have spread
    replicates over as many worker processes (a file from before migration 0007 does not say,
    and is used)."""
    if cal_file is None:
        return None
    c = cal_file["calibration"]
    if cal_file["host_class"] != host_class:
        return f"is for host class {cal_file['host_class']!r}, not {host_class!r}"
    if c.get("protocol_version") != protocol_version:
        return (f"was measured under protocol {c.get('protocol_version')}, the run under {protocol_version} "
                "(recalibrate with this checkout)")
    if c.get("ort_version") != ort_version:
        return f"was measured with onnxruntime {c.get('ort_version')}, the run with {ort_version}"
    if c.get("processes") not in (None, processes):
        return (f"spread replicates over {c.get('processes')} worker processes, the run over {processes} "
                "(recalibrate with the same --processes and replicates)")
    return None


def cal_key(case_id, timing_hash, dtype, threads, device, cache, spin) -> tuple:
    return (case_id, timing_hash, dtype, int(threads), device, cache, spin)


def sigma_lookup(s, run: m.Run, cal_file: dict | None, other: m.Run | None = None):
    """(lookup(row, timing_hash) -> spreads or None, calibrations used: id -> metadata). The
    spreads come from a calibration file when given (used only where file_unfit finds nothing),
    else from the newest calibration in the database, of the run's host class, ORT version and
    protocol version, that has the cell (cell key + timing hash). Either is used only when it
    spread replicates over as many worker processes as the run (processes_of): sigma_b holds
    the process-level spread divided by that count (a calibration from before migration 0007
    does not say, and is used). `other`: a second run the same spreads judge (compare's base):
    where its process count differs, no calibration fits both and none is used."""
    table: dict = {}
    procs = processes_of(run.settings)
    fits_both = other is None or processes_of(other.settings) == procs
    if cal_file is not None and fits_both:
        if not file_unfit(cal_file, run.host_class.key, run.protocol_version, run.ort_version, procs):
            meta = {**cal_file["calibration"], "host_class": cal_file["host_class"]}
            for c in cal_file["cells"]:
                table[cal_key(c["case_id"], c["timing_hash"], c["dtype"], c["threads"], c["device"], c["cache"],
                           c["spin"])] = {**c, "_meta": meta}
    elif fits_both:
        cals = s.scalars(select(m.Calibration).where(
            m.Calibration.host_class_id == run.host_class_id, m.Calibration.ort_version == run.ort_version,
            m.Calibration.protocol_version == run.protocol_version,
            (m.Calibration.processes.is_(None) | (m.Calibration.processes == procs))).order_by(m.Calibration.id)).all()
        for cal in cals:  # oldest first: newer calibrations overwrite
            meta = {"id": cal.id, "created_at": cal.created_at.isoformat(), "host_class": run.host_class.key,
                    "rounds": cal.rounds}
            for c in cal.cells:
                table[cal_key(c.case_id, c.timing_hash, c.dtype, c.threads, c.device, c.cache, c.spin)] = {
                    "sigma_ab": c.sigma_ab, "sigma_ours": c.sigma_ours, "sigma_ort": c.sigma_ort,
                    "sigma_ratio": c.sigma_ratio, "rounds": c.rounds, "_meta": meta}
    used: dict = {}

    def lookup(row, timing_hash):
        c = table.get(cal_key(row["case_id"], timing_hash, row["dtype"], row["threads"], row["device"], row["cache"],
                           row["spin"]))
        if not c:
            return None
        used[c["_meta"].get("id")] = c["_meta"]
        return {"ab": c["sigma_ab"], "ours": c["sigma_ours"], "ort": c["sigma_ort"], "ratio": c["sigma_ratio"],
                "rounds": c.get("rounds") or c["_meta"].get("rounds")}

    return lookup, used
