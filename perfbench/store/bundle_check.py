"""What `perfbench import` accepts: every value of a bundle checked against its column before
anything is written (a bundle is input from outside: a CI artifact, a file from another team).

* by the column's SQLAlchemy type (models.py): Integer columns take ints (not bools, floats or
  strings) within the column's range; String/Text columns strings (String(n) at most n
  characters, no NUL); Boolean columns bools; Float columns numbers, finite except in the
  columns where a non-finite value is a legitimate measurement (written "inf"/"-inf"/"nan", see
  bundle.py); DateTime columns ISO strings without a UTC offset (stored naive, in UTC); JSON
  columns plain JSON at most MAX_JSON_DEPTH deep (strings at most MAX_JSON_STRING), of the shape
  the code reading them expects;
* by meaning: ranges (threads 1..MAX_THREADS, counts >= 0, ...) and the enumerated values the
  code defines (dtypes, devices, cache and spin modes, verdicts, statuses, ORT paths, ...);
* cases: rebuilt with their op's make_case(params) (bundle.py), which must give the same id.

Each refusal is a BundleError naming where: `cells[3].threads: expected an integer in 1..256,
got 'abc'`.

The domains are the runner's (runner.derive/record_cell, compare/verdicts.decide, stats.ratio_ci,
numerics, timing/protocol), so that no value that imports can later break a reader (show, compare,
dashboard, tickets, repro, run --resume):

* the ours/ORT ratio and its interval: all three or none, finite, 0 < lo <= ratio <= hi (exp of
  finite logs), present exactly for the win/loss/undecided verdicts, from n >= 2 replicates;
  sd_log >= 0 finite; mean_log finite;
* numerics errors (cells.err_*): >= 0, +inf (a non-finite value where the oracle was finite) or
  nan (never hidden, numerics.max_error): the only Float columns with non-finite values (and
  pyperf's host metadata the only JSON column); tol and floor finite >= 0;
* times in ns: finite, at most MAX_NS in size (a replicate can be negative or zero on a
  below-resolution side: ours minus its floor, ORT's differential); a timed side (ok,
  ort-discrepancy) has every replicate and its median at least MIN_TIMED_NS (check_resolution);
* peaks: finite, > 0 but for ORT's per-node dispatch (a difference of two times: within
  DISPATCH_NS);
* run settings: the suite loader's bounds (suites.LIMITS, suites.MAX_THREADS, the dtypes,
  cache, spin and device modes), and the lists a run stores no longer than those settings make
  them (replicates, rounds x sides);
* every string (every String/Text column, free text included, and every string or key inside a
  JSON column): no lone surrogate (Unicode Cs: JSON's "\\ud800" escape reads as one; no database
  or terminal can encode it);
* short identifiers (every String/Text column but FREE_TEXT, and identifier lists in JSON
  columns): no control or format characters (Unicode Cc, Cf, Zl, Zp, Cs); hashes hexadecimal.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text

from perfbench import SCHEMA_VERSION, suites
from perfbench.compare.escape import UNSAFE_CATEGORIES
from perfbench.errors import UsageError


class BundleError(UsageError):
    """A bundle that cannot be imported (exit status 2)."""


INT64 = (-(2**63), 2**63 - 1)
# threads of a cell: suites.MAX_THREADS (the kernels' thread pool runs at most 256); peaks are
# probed at the host's core count too, so theirs may be larger
MAX_THREADS = suites.MAX_THREADS
MAX_PEAK_THREADS = 4096
MAX_JSON_DEPTH = 32
MAX_TEXT = 1_000_000  # characters in a Text column
MAX_JSON_STRING = 64 * 1024  # characters in a string (or key) inside a JSON column
HEX = re.compile(r"[0-9a-f]{1,64}")
GIT_SHA = re.compile(r"[0-9a-f]{4,64}")  # SHA-1 (40) or SHA-256 (64), or an abbreviation
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_$-]{1,40}")  # a JSON key shown as is in a refusal's where
NONNEG = (0, INT64[1])

# run settings (runs.settings; `run --resume` measures with them): the bounds the suite loader,
# the CLI options and the runner enforce (suites.LIMITS), so that whatever `run` stores imports
MAX_PROCESSES = suites.MAX_PROCESSES  # worker processes a cell's replicates are spread over
MAX_REPLICATES = suites.MAX_REPLICATES  # replicates per cell (the length of replicates_ns, blocks_ns, design)
# ... at least 1 here: a run stored before the suite loader bounded replicates (>= 2) may have 1
MIN_STORED_REPLICATES = 1
MAX_ROUNDS = suites.MAX_ROUNDS  # blocks of each side per replicate (the length of one replicate's blocks_ns)
# sides timed in each round: ours and ORT (run), base, head and ORT (ab, calibrate): a replicate's
# design.order holds rounds x sides entries (protocol.Harness._rotation)
MAX_SIDES = 3
MAX_BLOCK_MS = suites.MAX_BLOCK_MS  # one timed block: a minute at most
MAX_TIMEOUT_S = suites.MAX_TIMEOUT_S  # one worker share of a cell: a day at most
MAX_EVICT_BYTES = 1 << 40  # the cold-cache eviction buffer (twice the last-level cache)
# ORT's per-node dispatch (runner.ensure_peaks: selfcheck.ort_node_dispatch_ns, (median t(64
# Identity nodes) - median t(1)) / 63, a few hundred ns to a few us): a difference of two medians,
# so slightly negative by noise on a fast host; -10 us per node is far below any noise (it would
# take a 64-node chain 0.6 ms faster than one node), 1 ms per Identity node far above any host.
# Unbounded, kernel_only took -1.7e308 x nodes out of ORT's time: ratio 0.0, dispatch -inf.
DISPATCH_NS = (-10_000.0, 1_000_000.0)

# times in ns: a per-call time within a share's timeout; a timed side's replicates are above the
# timer's resolution, at least 1 ns (protocol.check_resolution)
MAX_NS = MAX_TIMEOUT_S * 1e9
MIN_TIMED_NS = 1.0
TIMED = ("ok", "ort-discrepancy")  # a side with timings (check_resolution; verdicts.decide)

# CONTRACTS §3 (measurements.status; the failures are verdicts.FAIL_STATUSES) and runs.status
STATUSES = ("ok", "mismatch", "no-kernel", "ort-discrepancy", "below-resolution", "error", "crashed", "timeout")
RUN_STATUSES = ("running", "complete", "interrupted", "failed")
ORIGINS = ("run", "ab-base", "ab-head", "calibrate")  # models.Run.origin
LEVELS = ("L1", "L2", "L3", "DRAM")  # verdicts.cache_level
# peaks.py probes (copy: also stored between 713ef0c and ac70fee) and runner.ensure_peaks
PEAK_UNIT_OF = {"fma_f32": "GFLOP/s", "bf16_dot": "GFLOP/s", "read": "GB/s", "copy": "GB/s",
                "ort_node_dispatch": "ns"}
PEAK_KINDS = tuple(PEAK_UNIT_OF)
PEAK_UNITS = ("GFLOP/s", "GB/s", "ns")
CI_METHODS = ("t", "t-between", "bootstrap")  # stats.ratio_ci
RATIO_VERDICTS = ("win", "loss", "undecided")  # verdicts.decide: the verdicts with a ratio

INT_RANGES = {
    "host_classes.cores": (1, 1 << 16),
    "hosts.l2_bytes": NONNEG, "hosts.l3_bytes": NONNEG,
    "peaks.threads": (1, MAX_PEAK_THREADS),
    "runs.protocol_version": (1, 2**31 - 1), "runs.schema_version": (1, SCHEMA_VERSION),
    "runs.cells_planned": NONNEG,
    "cells.threads": (1, MAX_THREADS), "cells.seed": NONNEG, "cells.n": (0, MAX_REPLICATES), "cells.K": NONNEG,
    "cells.ours_iters": NONNEG, "cells.ort_runs": NONNEG,
}


class Rule(NamedTuple):
    """A Float column's domain: finite values in [lo, hi] (lo excluded if strict; None: no
    bound); the non-finite values a run can store there ("inf", "-inf", "nan")."""

    lo: float | None = None
    strict: bool = False
    hi: float | None = None
    non_finite: tuple = ()


POSITIVE = Rule(0, strict=True)
NONNEG_F = Rule(0)
ERROR = Rule(0, non_finite=("inf", "nan"))  # numerics.error: >= 0, inf on a non-finite mismatch; nan kept

# Float columns (every one of the bundle's tables); not listed: any finite number
FLOAT_RULES = {
    "hosts.memory_bytes": NONNEG_F,  # sysconf pages x page size
    "peaks.working_set_bytes": NONNEG_F,  # a read or copy probe's bytes
    "peaks.value": Rule(),  # > 0 but for the ORT dispatch (check_peak)
    # numerics.gate; the only non-finite values a run stores
    "cells.err_ours": ERROR, "cells.err_ort": ERROR, "cells.err_ours_vs_ort": ERROR,
    "cells.err_ours_plain": ERROR, "cells.err_ort_plain": ERROR,
    "cells.tol": NONNEG_F, "cells.floor": NONNEG_F,  # tolerance(): clamp(2 err(ORT), floor, 10 floor)
    # stats.ratio_ci: exp of finite logs (0 < lo <= ratio <= hi, check_cell); sd >= 0
    "cells.ratio": POSITIVE, "cells.ratio_lo": POSITIVE, "cells.ratio_hi": POSITIVE,
    "cells.mean_log": Rule(), "cells.sd_log": NONNEG_F,
    "cells.flops": NONNEG_F, "cells.bytes_moved": NONNEG_F,  # op.flops / op.bytes_moved
    "cells.peak": POSITIVE, "cells.wall_s": NONNEG_F,  # a peak's value; seconds
    "measurements.median_ns": Rule(-MAX_NS, hi=MAX_NS),  # below-resolution sides: <= 0 possible
    "measurements.floor_ns": Rule(0, hi=MAX_NS),
    "measurements.throughput": NONNEG_F, "measurements.peak_share": NONNEG_F,  # work / median, over a peak
}

# text columns that are free text (messages, reasons): any character but NUL and a lone
# surrogate (the terminal escaper shows the rest); every other text column is an identifier
# (no_control)
FREE_TEXT = {"runs.invalidated_why", "runs.message", "cells.verdict_note", "measurements.message"}
_CONTROL = UNSAFE_CATEGORIES + ("Cs",)  # what the terminal escaper neutralises, and lone surrogates
# a lone surrogate (category Cs): json.loads reads the escape "\ud800" (or "\udc00", unpaired) as
# one; no UTF-8 text holds it, so a database refuses it on flush (SQLite: UnicodeEncodeError) or
# stores it in a JSON column (escaped) for a reader to crash on when it prints it
_SURROGATE = re.compile("[\ud800-\udfff]")


@functools.cache
def _choices() -> dict:
    """Enumerated text columns -> their allowed values (None allowed where the column is nullable)."""
    from perfbench import dtypes
    from perfbench.compare import verdicts, views

    assert set(verdicts.FAIL_STATUSES) <= set(STATUSES)
    names = tuple(d.name for d in dtypes.ALL)
    return {
        "peaks.kind": PEAK_KINDS, "peaks.level": LEVELS, "peaks.unit": PEAK_UNITS,
        "runs.status": RUN_STATUSES, "runs.origin": ORIGINS,
        "cells.dtype": names, "cells.device": suites.DEVICES, "cells.cache": suites.CACHE_MODES,
        "cells.spin": suites.SPIN_MODES, "cells.verdict": verdicts.VERDICTS, "cells.ci_method": CI_METHODS,
        "cells.bound": ("memory", "compute"), "cells.level": LEVELS, "cells.peak_unit": PEAK_UNITS,
        "measurements.impl": ("ours", "ort"), "measurements.status": STATUSES, "measurements.dtype": names,
        "measurements.path": ("",) + views.ORT_PATHS, "measurements.throughput_unit": PEAK_UNITS,
    }


PATTERNS = {"cases.timing_hash": HEX, "cells.timing_hash": HEX, "cells.numerics_hash": HEX,
            "builds.build_id": HEX, "builds.source_hash": HEX, "runs.suite_hash": HEX, "peaks.batch": HEX,
            "runs.git_sha": GIT_SHA}
# git check-ref-format: no space, ~ ^ : ? * [ \\, "..", "@{", "//", a leading "-" or "/", ".lock"
_BAD_REF = re.compile(r"[\s~^:?*\[\\]|\.\.|@\{|//|^[-/]|/$|\.$|\.lock$")


def show(v) -> str:
    """A refused value, short (a refusal message is one line)."""
    r = repr(v) if not isinstance(v, (dict, list)) else type(v).__name__
    return r if len(r) <= 60 else r[:57] + "..."


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _float(v, where: str, rule: Rule | None) -> float:
    rule = rule or Rule()
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        v = float(v)
    elif not _is_num(v):
        raise BundleError(f"{where}: expected a number, got {show(v)}")
    else:
        try:
            v = float(v)
        except OverflowError:
            raise BundleError(f"{where}: number out of range: {show(v)}") from None
    if not math.isfinite(v):
        token = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if token not in rule.non_finite:
            allowed = f" or {', '.join(rule.non_finite)}" if rule.non_finite else ""
            raise BundleError(f"{where}: expected a finite number{allowed}, got {token}")
        return v
    if rule.lo is not None and (v <= rule.lo if rule.strict else v < rule.lo):
        raise BundleError(f"{where}: expected a number {'>' if rule.strict else '>='} {rule.lo:g}, got {show(v)}")
    if rule.hi is not None and v > rule.hi:
        raise BundleError(f"{where}: expected a number <= {rule.hi:g}, got {show(v)}")
    return v


def _short(where: str) -> str:
    """A where inside a JSON column, cut to fit a one-line message."""
    return where if len(where) <= 160 else where[:100] + "..." + where[-50:]


def no_surrogate(v: str, where: str) -> None:
    """Any string: no lone surrogate (not Unicode text; see _SURROGATE)."""
    m = _SURROGATE.search(v)
    if m is not None:
        raise BundleError(f"{_short(where)}: a lone surrogate {m.group()!r} at {m.start()} (half a UTF-16 pair, "
                          "not text a database can store)")


def plain_json(v, where: str, depth: int = 0):
    """v as stored: plain JSON data (no deeper than MAX_JSON_DEPTH, integers within 64 bits,
    strings and keys of at most MAX_JSON_STRING characters), {"$float": "inf"|"-inf"|"nan"}
    decoded to floats (the JSON shapes say where a non-finite number may stay)."""
    if depth > MAX_JSON_DEPTH:
        raise BundleError(f"{where.split('[')[0][:120]}: nested deeper than {MAX_JSON_DEPTH} levels")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        if len(v) > MAX_JSON_STRING:
            raise BundleError(f"{_short(where)}: a string longer than {MAX_JSON_STRING} characters")
        if "\x00" in v:
            raise BundleError(f"{_short(where)}: contains a NUL character")
        no_surrogate(v, where)
        return v
    if isinstance(v, int):
        if not INT64[0] <= v <= INT64[1]:
            raise BundleError(f"{_short(where)}: integer out of the 64-bit range: {show(v)}")
        return v
    if isinstance(v, float):
        if not math.isfinite(v):  # NaN/Infinity tokens: JSON has none (bundles write {"$float": ...})
            raise BundleError(f"{_short(where)}: non-finite number {show(v)} (write {{\"$float\": \"inf\"}})")
        return v
    if isinstance(v, dict):
        if set(v) == {"$float"} and v["$float"] in ("inf", "-inf", "nan"):
            return float(v["$float"])
        for k in v:
            if len(k) > MAX_JSON_STRING or "\x00" in k:
                raise BundleError(f"{_short(where)}: a key longer than {MAX_JSON_STRING} characters or with a NUL")
            no_surrogate(k, f"{where} (a key)")
        return {k: plain_json(x, f"{where}.{k}" if _PLAIN_KEY.fullmatch(k) else f"{where}[{show(k)}]", depth + 1)
                for k, x in v.items()}
    if isinstance(v, list):
        return [plain_json(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
    raise BundleError(f"{_short(where)}: not JSON data: {show(v)}")


def no_control(v: str, where: str) -> None:
    """An identifier: no control or format characters (Unicode Cc, Cf, Zl, Zp) a terminal or a
    page would act on (escape sequences, bidirectional overrides, line breaks), no lone
    surrogate (Cs)."""
    for i, ch in enumerate(v):
        if unicodedata.category(ch) in _CONTROL:
            raise BundleError(f"{_short(where)}: a control or format character {ch!r} at {i} (an identifier "
                              "has none)")


def _list_of(check, most: int | None = None):
    def f(v, where):
        if not isinstance(v, list):
            raise BundleError(f"{_short(where)}: expected a list, got {show(v)}")
        if most is not None and len(v) > most:
            raise BundleError(f"{_short(where)}: more than {most} entries ({len(v)})")
        for i, x in enumerate(v):
            check(x, f"{where}[{i}]")
    return f


def _str(v, where):
    if not isinstance(v, str):
        raise BundleError(f"{_short(where)}: expected a string, got {show(v)}")


def _ident(v, where):
    _str(v, where)
    no_control(v, where)


def _num(v, where):
    if not _is_num(v):
        raise BundleError(f"{_short(where)}: expected a number, got {show(v)}")


def _finite(lo=None, hi=None):
    """A finite number in [lo, hi] (None: unbounded)."""
    def f(v, where):
        _num(v, where)
        if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = ("" if lo is None and hi is None else f" >= {lo:g}" if hi is None else f" in {lo:g}..{hi:g}"
                   if lo is not None else f" <= {hi:g}")
            raise BundleError(f"{_short(where)}: expected a finite number{rng}, got {show(v)}")
    return f


def _dict(v, where):
    if not isinstance(v, dict):
        raise BundleError(f"{_short(where)}: expected an object, got {show(v)}")


def _index(v, where):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise BundleError(f"{_short(where)}: expected an integer >= 0, got {show(v)}")


def _int_in(lo, hi):
    def f(v, where):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise BundleError(f"{_short(where)}: expected an integer in {lo}..{hi}, got {show(v)}")
    return f


def _num_in(lo_excluded, hi):
    def f(v, where):
        if not _is_num(v) or not math.isfinite(v) or not lo_excluded < v <= hi:
            raise BundleError(f"{_short(where)}: expected a finite number > {lo_excluded:g} and <= {hi:g}, got "
                              f"{show(v)}")
    return f


def _one_of(allowed):
    def f(v, where):
        if not isinstance(v, str) or v not in allowed:
            raise BundleError(f"{_short(where)}: expected one of {', '.join(allowed)}, got {show(v)}")
    return f


def _dtype_name(v, where):
    from perfbench import dtypes

    _str(v, where)
    try:
        dtypes.get(v)
    except UsageError:
        names = ", ".join(d.name for d in dtypes.ALL)
        raise BundleError(f"{_short(where)}: expected a dtype ({names}), got {show(v)}") from None


@functools.cache
def _axis_lists() -> dict:
    """The cell axes a suite (suites.load) and `run` (--threads, --dtype, ...) may set: key -> the
    check of its list (a run's settings and their axes_overrides)."""
    most = suites.MAX_AXIS_VALUES  # what the suite loader and suites.expand take
    return {"dtypes": _list_of(_dtype_name, most), "threads": _list_of(_int_in(1, suites.MAX_THREADS), most),
            "cache": _list_of(_one_of(suites.CACHE_MODES), most), "spin": _list_of(_one_of(suites.SPIN_MODES), most),
            "devices": _list_of(_one_of(suites.DEVICES), most)}


# suite settings a run keeps (suites.DEFAULTS, runner.suite_settings/expand_cells; ab adds "ab");
# `run --resume` measures with them (runner.run): what it reads is required
_SETTINGS = {
    "replicates": _int_in(MIN_STORED_REPLICATES, MAX_REPLICATES),
    "quick_replicates": _int_in(MIN_STORED_REPLICATES, MAX_REPLICATES),
    "rounds": _int_in(1, MAX_ROUNDS), "processes": _int_in(1, MAX_PROCESSES), "seed": _index,
    "evict_bytes": _int_in(0, MAX_EVICT_BYTES), "block_ms": _num_in(0, MAX_BLOCK_MS),
    "timeout_s": _num_in(0, MAX_TIMEOUT_S),
}
_SETTINGS_REQUIRED = ("replicates", "rounds", "block_ms", "timeout_s", "seed")


def _settings(v, where):
    _dict(v, where)
    for k in _SETTINGS_REQUIRED:
        if k not in v:
            raise BundleError(f"{where}: missing key {k!r} (`run --resume` measures with it)")
    for k, check in _SETTINGS.items():
        if k in v:
            check(v[k], f"{where}.{k}")
    lists = _axis_lists()
    for k, check in lists.items():
        if k in v:
            check(v[k], f"{where}.{k}")
    if "axes_overrides" in v:
        ov = v["axes_overrides"]
        _dict(ov, f"{where}.axes_overrides")
        for k, check in lists.items():
            if ov.get(k) is not None:
                check(ov[k], f"{where}.axes_overrides.{k}")
    if "ab" in v:  # ab.py: which side of `perfbench ab` the run was
        _dict(v["ab"], f"{where}.ab")
        for k, x in v["ab"].items():
            _ident(x, f"{where}.ab.{k}")


def _design(v, where):
    _dict(v, where)
    if "process" in v:
        _list_of(_int_in(0, MAX_PROCESSES - 1), MAX_REPLICATES)(v["process"], f"{where}.process")
    if "order" in v:  # per replicate: the side of each block, rounds x sides of them
        _list_of(_list_of(_ident, MAX_ROUNDS * MAX_SIDES), MAX_REPLICATES)(v["order"], f"{where}.order")


def _meta(v, where):
    """pyperf's host metadata: names to scalars (provenance: shown, never computed with); ab
    reads "platform" as text."""
    _dict(v, where)
    for k, x in v.items():
        if isinstance(x, (dict, list)):
            raise BundleError(f"{_short(where)}[{show(k)}]: expected a string or a number, got {show(x)}")
    if "platform" in v:
        _ident(v["platform"], f"{where}.platform")


def _names(v, where):
    """A mapping of names to versions (hostinfo.versions)."""
    _dict(v, where)
    for k, x in v.items():
        no_control(k, where)
        _ident(x, f"{where}[{show(k)}]")


_NS = _finite(-MAX_NS, MAX_NS)

# JSON columns: the shape the code reading them expects (after plain_json); numbers finite
# everywhere but in hosts.meta (provenance, never computed with)
JSON_SHAPES = {
    "hosts.meta": _meta,
    "builds.flags": _list_of(_ident), "builds.isa_compiled": _list_of(_ident),
    "peaks.samples": _list_of(_finite(), 1000),  # > 0 but for the ORT dispatch (check_peak)
    "runs.filters": _list_of(_ident), "runs.settings": _settings, "runs.versions": _names,
    "runs.load_avg": _list_of(_finite(0), 3), "runs.tuning": _list_of(_str),  # os.getloadavg(); pyperf's advice
    "cases.params": _dict,
    "cells.design": _design,
    "measurements.detail": _list_of(_ident), "measurements.replicates_ns": _list_of(_NS, MAX_REPLICATES),
    "measurements.blocks_ns": _list_of(_list_of(_NS, MAX_ROUNDS), MAX_REPLICATES),  # per replicate, per round
}


def value(col, v, where: str):
    """The value to store in column `col` from bundle value `v` (not None), or a BundleError."""
    name = f"{col.table.name}.{col.key}"
    t = col.type
    if isinstance(t, DateTime):
        if not isinstance(v, str):
            raise BundleError(f"{where}: expected an ISO date and time, got {show(v)}")
        try:
            d = datetime.fromisoformat(v)
        except (ValueError, OverflowError):
            raise BundleError(f"{where}: not an ISO date and time: {show(v)}") from None
        if d.tzinfo is not None:  # stored naive, in UTC (repo.now), and exported so
            raise BundleError(f"{where}: expected a date and time without a UTC offset (UTC, as `perfbench export` "
                              f"writes it), got {show(v)}")
        return d
    if isinstance(t, Float):
        return _float(v, where, FLOAT_RULES.get(name))
    if isinstance(t, Boolean):
        if not isinstance(v, bool):
            raise BundleError(f"{where}: expected true or false, got {show(v)}")
        return v
    if isinstance(t, Integer):
        lo, hi = INT_RANGES.get(name, INT64)
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            what = f"an integer >= {lo}" if hi == INT64[1] else f"an integer in {lo}..{hi}"
            raise BundleError(f"{where}: expected {what}, got {show(v)}")
        return v
    if isinstance(t, (String, Text)):
        if not isinstance(v, str):
            raise BundleError(f"{where}: expected a string, got {show(v)}")
        limit = getattr(t, "length", None) or MAX_TEXT
        if len(v) > limit:
            raise BundleError(f"{where}: longer than {limit} characters")
        if "\x00" in v:
            raise BundleError(f"{where}: contains a NUL character")
        no_surrogate(v, where)
        allowed = _choices().get(name)
        if allowed is not None and v not in allowed:
            raise BundleError(f"{where}: expected one of {', '.join(allowed)}, got {show(v)}")
        pattern = PATTERNS.get(name)
        if pattern is not None and not pattern.fullmatch(v):
            raise BundleError(f"{where}: expected a hexadecimal hash, got {show(v)}")
        if name not in FREE_TEXT:
            no_control(v, where)
        if name == "runs.branch" and _BAD_REF.search(v):
            raise BundleError(f"{where}: not a git branch name: {show(v)}")
        return v
    if isinstance(t, JSON):
        v = plain_json(v, where)
        shape = JSON_SHAPES.get(name)
        if shape is not None:
            shape(v, where)
        return v
    raise BundleError(f"{where}: column type {t!r} is not importable")  # a new column type: teach this module


def rebuild_case(vals: dict, where: str):
    """The case of a bundle's case row, made again by its op (the parameters checked as a suite's
    are); its id must be the bundle's. Returns (op name, canonical parameters)."""
    from perfbench import ops

    op = ops.REGISTRY.get(vals["op"])
    if op is None:
        raise BundleError(f"{where}: unknown op {show(vals['op'])} (not one of this perfbench's {len(ops.REGISTRY)} ops)")
    try:
        case = op.make_case(vals["params"], where=op.name)
    except UsageError as e:
        raise BundleError(f"{where}: {_line(e, 300)}") from None
    # a validate() or graph() meeting values it never expected (nesting: RecursionError, a
    # RuntimeError; a huge size: MemoryError, OverflowError, an ArithmeticError)
    except (ValueError, ArithmeticError, TypeError, LookupError, AttributeError, RuntimeError, MemoryError) as e:
        raise BundleError(f"{where}: {op.name} refuses these parameters ({type(e).__name__}: {_line(e, 200)})") \
            from None
    if case.case_id != vals["case_id"]:
        raise BundleError(f"{where}: case id {show(vals['case_id'])} is not the id its op and parameters give "
                          f"({case.case_id})")
    return op.name, dict(case.params)


def _line(e: BaseException, most: int) -> str:
    """An exception's message as one line of at most `most` characters."""
    text = " ".join(str(e).split())
    return text if len(text) <= most else text[:most - 3] + "..."


# ---- across the columns of a row (bundle.read calls these after each row's values)

def check_peak(vals: dict, where: str) -> None:
    """A probe's unit is its kind's; a rate (GFLOP/s, GB/s) is > 0 (derive and the dashboard
    divide by it) and within its samples' range; ORT's dispatch (runner.ensure_peaks: t(64 nodes) - t(1), over 63) and its
    samples within DISPATCH_NS (kernel_only takes nodes x it out of ORT's time)."""
    kind = vals["kind"]
    if vals["unit"] != PEAK_UNIT_OF[kind]:
        raise BundleError(f"{where}.unit: a {kind} probe is in {PEAK_UNIT_OF[kind]}, got {show(vals['unit'])}")
    if kind == "ort_node_dispatch":
        lo, hi = DISPATCH_NS
        for w, x in [("value", vals["value"])] + [(f"samples[{i}]", x) for i, x in enumerate(vals.get("samples") or [])]:
            if not lo <= x <= hi:
                raise BundleError(f"{where}.{w}: expected ORT's per-node dispatch in {lo:g}..{hi:g} ns, got {show(x)}")
        return
    if not vals["value"] > 0:
        raise BundleError(f"{where}.value: expected a number > 0 (a {kind} rate), got {show(vals['value'])}")
    samples = vals.get("samples") or []
    for i, x in enumerate(samples):
        if not x > 0:
            raise BundleError(f"{where}.samples[{i}]: expected a number > 0 (a {kind} rate), got {show(x)}")
    # a cell's ceiling is read from the samples (verdicts.best), the set's order from the value
    if samples and not min(samples) * (1 - 1e-9) <= vals["value"] <= max(samples) * (1 + 1e-9):
        raise BundleError(f"{where}.value: {show(vals['value'])} is outside its samples' range [{min(samples):g}, "
                          f"{max(samples):g}] (the value is the samples' median, so inside it)")


def check_measurement(mv: dict, where: str) -> None:
    """One side's times: the median is the replicates' (stats.median; None without any); a timed
    side's replicates are above the timer's resolution (protocol.check_resolution)."""
    reps = mv.get("replicates_ns") or []
    med = mv.get("median_ns")
    if (med is None) != (not reps):
        raise BundleError(f"{where}.median_ns: {show(med)} with {len(reps)} replicates (the median of the replicates, "
                          "null without any)")
    if reps and not min(reps) <= med <= max(reps):
        raise BundleError(f"{where}.median_ns: {show(med)} is outside its replicates' range [{min(reps):g}, "
                          f"{max(reps):g}]")
    if mv["status"] in TIMED and reps and min(reps) < MIN_TIMED_NS:
        raise BundleError(f"{where}.replicates_ns: {min(reps):g} ns on a timed side (status {mv['status']}): a timed "
                          f"side's replicates are at least {MIN_TIMED_NS:g} ns (else it is below-resolution)")


def check_cell(vals: dict, mvals: list, where: str) -> None:
    """The ratio and its interval (verdicts.decide, stats.ratio_ci): all or none, lo <= ratio <=
    hi, present exactly for the verdicts with a ratio, from n >= 2 paired replicates."""
    r, lo, hi = vals.get("ratio"), vals.get("ratio_lo"), vals.get("ratio_hi")
    if (r is None, lo is None, hi is None) not in ((True, True, True), (False, False, False)):
        raise BundleError(f"{where}: ratio, ratio_lo and ratio_hi are all null or all numbers, got {show(r)}, "
                          f"{show(lo)}, {show(hi)}")
    verdict = vals["verdict"]
    if (r is not None) != (verdict in RATIO_VERDICTS):
        raise BundleError(f"{where}: verdict {verdict!r} " + ("has no ratio (a win, loss or undecided has one)"
                                                             if r is None else f"with a ratio ({r:g})"))
    if r is None:
        return
    # lo = exp(m - h) <= exp(m) <= exp(m + h) (a bootstrap's quantiles within rounding)
    slack = 1e-9
    if not lo <= r * (1 + slack) or not r <= hi * (1 + slack):
        raise BundleError(f"{where}: expected ratio_lo <= ratio <= ratio_hi, got {lo:g}, {r:g}, {hi:g}")
    if vals.get("n", 0) < 2:
        raise BundleError(f"{where}.n: a ratio comes from at least 2 replicates, got {show(vals.get('n', 0))}")
    sides = {mv["impl"]: mv for mv in mvals}
    ours, ort = sides.get("ours"), sides.get("ort")
    if ours is None or ort is None or ours["status"] != "ok" or ort["status"] not in TIMED:
        raise BundleError(f"{where}: a ratio needs ours ok and ORT ok or ort-discrepancy, got "
                          f"{ours['status'] if ours else None}, {ort['status'] if ort else None}")
