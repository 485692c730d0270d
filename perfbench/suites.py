"""Suite files (suites/*.toml): parse, validate, expand sweeps into cells with stable ids.

    [suite]
    name = "attention"          # required
    description = "..."
    dtypes = ["f32", "f16", "bf16"]
    threads = [1, 2]            # capped at this host's cores; skipped ones are listed
    cache = ["warm"]            # warm | cold
    spin = ["off"]              # off | on
    devices = ["cpu"]           # cpu | cuda (cuda cells need our CUDA kernels: a later issue)
    replicates = 8              # measurement settings (see docs/protocol.md; bounds: LIMITS below)
    processes = 3               # worker processes a cell's replicates are spread over
    timeout_s = 300

    [[ops]]
    op = "Softmax"
    axes = { heads = [14, 32], queries = [1], keys = [128, 1024, 4096] }   # the product is swept
    quick = { keys = [1024] }   # --quick: these axes replaced; a block without `quick` is skipped
    numerics = [ { heads = 3, queries = 1, keys = 4097 } ]   # numerics-only odd shapes
    # optional per-block dtypes / threads / cache / spin / devices override the [suite] lists

Unknown keys and bad values are errors naming the file, the key and a fix.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import tomllib

from perfbench import dtypes, ops
from perfbench import filters as filt
from perfbench.errors import UsageError
from perfbench.ops.base import Case

SUITE_KEYS = {
    "name": str, "description": str, "dtypes": list, "threads": list, "cache": list, "spin": list, "devices": list,
    "replicates": int, "rounds": int, "block_ms": (int, float), "timeout_s": (int, float), "seed": int,
    "quick_replicates": int, "processes": int,
}
BLOCK_KEYS = {"op": str, "axes": dict, "quick": (dict, bool), "numerics": list, "dtypes": list, "threads": list,
              "cache": list, "spin": list, "devices": list}
CACHE_MODES = ("warm", "cold")
SPIN_MODES = ("off", "on")
DEVICES = ("cpu", "cuda")
# The most cells one expansion (a `list` or a `run`, after --quick, overrides and --filter) may
# have. The largest shipped suite has 588 (attention); 20,000 is 34 times that, far more than a
# run measures in a day, and small enough to hold and list at once. Counted from the axis lengths
# before any cell is made, so a suite of 10**9 cells is refused at once.
MAX_SUITE_CELLS = 20_000
# threads per cell: the kernels' thread pool runs at most this many (PB_MAX_THREADS in
# native/cpu/common/pool.c; a call asking for more is refused)
MAX_THREADS = 256
# a cell-axis list (dtypes, threads, cache, spin, devices: in [suite], a block or a command-line
# override) of more values than a run may have cells (they multiply into the cells)
MAX_AXIS_VALUES = MAX_SUITE_CELLS

# The measurement settings' bounds: ONE set, shared by the suite loader ([suite] keys), the
# command-line options (`run`, `ab`, `calibrate`: --replicates, --processes; calibrate's
# --rounds), the runner (runner.suite_settings, and a resumed run's stored settings) and
# `perfbench import` (store/bundle_check.py: a bundle's run settings and the lengths of the lists
# a run stores: replicates_ns, blocks_ns, design). Each is far above the shipped defaults
# (DEFAULTS: 8 replicates, 5 quick, 3 rounds, 3 processes, 3 ms blocks, a 300 s timeout; the
# shipped suites keep them) and bounds what one cell can cost: a list of `processes` workers, a
# timeout per share, replicates x rounds x sides blocks.
MIN_REPLICATES = 2  # a CI needs at least two replicates
MAX_REPLICATES = 1000
MAX_ROUNDS = 100  # blocks of each side per replicate
MAX_PROCESSES = 64  # worker processes per cell
AB_MAX_PROCESSES = 8  # ab and calibrate cap --processes here (each is a worker with both builds loaded)
MAX_BLOCK_MS = 60_000.0  # one timed block: a minute at most
MAX_TIMEOUT_S = 86_400.0  # one worker share of a cell: a day at most
MAX_SEED = 2**31 - 1  # numpy's default_rng takes any integer >= 0; cells.seed is an INTEGER (PostgreSQL: 32 bits)


class Limit(NamedTuple):
    """A setting's domain: lo..hi (lo excluded if lo_open), integers only if integer."""

    lo: float
    hi: float
    what: str
    integer: bool = True
    lo_open: bool = False

    def describe(self) -> str:
        if self.integer:
            return f"an integer in {self.lo}..{self.hi}"
        return f"a number > {self.lo:g} and <= {self.hi:g}" if self.lo_open else f"a number in {self.lo:g}..{self.hi:g}"

    def holds(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (self.integer and not isinstance(v, int)):
            return False
        return (self.lo < v if self.lo_open else self.lo <= v) and v <= self.hi  # NaN: False


LIMITS = {
    "replicates": Limit(MIN_REPLICATES, MAX_REPLICATES, "replicates per cell; a CI needs at least 2"),
    "quick_replicates": Limit(MIN_REPLICATES, MAX_REPLICATES, "replicates per cell under --quick"),
    "rounds": Limit(1, MAX_ROUNDS, "blocks of each side per replicate"),
    "processes": Limit(1, MAX_PROCESSES, "worker processes a cell's replicates are spread over"),
    "block_ms": Limit(0, MAX_BLOCK_MS, "milliseconds of one timed block", integer=False, lo_open=True),
    "timeout_s": Limit(0, MAX_TIMEOUT_S, "seconds one worker share of a cell may take", integer=False,
                       lo_open=True),
    "seed": Limit(0, MAX_SEED, "the inputs' random seed"),
}
# calibrate --rounds: A/A passes over the cells (a spread needs two; each costs a whole ab)
CALIBRATE_ROUNDS = Limit(2, MAX_ROUNDS, "A/A passes over the cells; a spread needs at least 2, the default is 3")
DEFAULTS = {"dtypes": ["f32"], "threads": [1], "cache": ["warm"], "spin": ["off"], "devices": ["cpu"],
            "replicates": 8, "rounds": 3,
            "block_ms": 3.0, "timeout_s": 300.0, "seed": 20261129, "quick_replicates": 5,
            "processes": 3}


def check_limit(key: str, value, where: str, fix: str | None = None, limit: Limit | None = None) -> None:
    """Refuse a measurement setting outside its bound (LIMITS[key], or `limit`): a UsageError
    (exit 2) naming `where` (the option, or the file and key), the value, the bound and a fix."""
    lim = limit or LIMITS[key]
    if lim.holds(value):
        return
    if fix is None:
        default = DEFAULTS.get(key)
        fix = "give one in that range" + (f" (the default is {default})" if default is not None else "")
    raise UsageError(f"{where}: {value!r} is not {lim.describe()} ({lim.what}); {fix}")


def check_settings(settings: dict, where: str, fix: str | None = None) -> None:
    """Every bounded setting in `settings` (a suite's, or a stored run's) within LIMITS."""
    for key in LIMITS:
        if key in settings:
            check_limit(key, settings[key], f"{where} {key}", fix)


def _check_axis_len(values: list, where: str) -> None:
    if len(values) > MAX_AXIS_VALUES:
        raise UsageError(f"{where}: {len(values):,} values, more than the {MAX_AXIS_VALUES:,} cells a run may have: "
                         "give each value once")


def suites_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "suites"


@dataclass(frozen=True)
class Cell:
    """What was measured: a row of every table."""

    case: Case
    dtype: str
    threads: int
    cache: str = "warm"
    spin: str = "off"
    device: str = "cpu"
    numerics_only: bool = False

    @property
    def key(self) -> tuple:
        return (self.case.case_id, self.dtype, self.threads, self.device, self.cache, self.spin)

    def label(self) -> str:
        return f"{self.case.case_id} {self.dtype} t={self.threads}" + (
            f" {self.cache}" if self.cache != "warm" else "") + (" spin" if self.spin == "on" else "")


@dataclass
class Block:
    op: str
    axes: dict
    quick: dict | None
    numerics: list
    overrides: dict
    where: str


@dataclass
class Suite:
    name: str
    path: Path
    text_hash: str
    settings: dict
    blocks: list = field(default_factory=list)

    def axes(self) -> set:
        out = set()
        for b in self.blocks:
            out |= set(ops.get(b.op).param_names())
        return out

    def expand(self, *, quick: bool = False, dtypes_: list | None = None, threads: list | None = None,
               cache: list | None = None, spin: list | None = None, devices: list | None = None,
               filters: list | None = None, max_threads: int | None = None) -> tuple[list[Cell], list[str]]:
        """The cells to measure, in suite order, and notes on what was skipped and why."""
        filters = filters or []
        filt.check_names(filters, self.axes())
        for key, override in (("--dtype", dtypes_), ("--threads", threads), ("--cache", cache), ("--spin", spin),
                              ("--device", devices)):
            _check_axis_len(override or [], key)
        for t in threads or []:
            if int(t) > MAX_THREADS:
                raise UsageError(f"threads={t}: more than the {MAX_THREADS} the kernels' thread pool runs: give at "
                                 f"most {MAX_THREADS}")
        notes, cells, seen = [], [], set()
        skipped_threads = set()
        plans, total = [], 0
        # first the plan of every block and its cell count (the product of its value counts,
        # each list cut to the values some filter can match): nothing is made before the count
        # is known to be within MAX_SUITE_CELLS
        for b in self.blocks:
            op = ops.get(b.op)
            lists = {k: _norm_list(v) for k, v in b.axes.items()}
            if quick:
                if b.quick is None or b.quick is False:
                    continue
                if isinstance(b.quick, dict):
                    lists.update({k: _norm_list(v) for k, v in b.quick.items()})
            dts = [dtypes.get(d).name for d in (dtypes_ or b.overrides.get("dtypes") or self.settings["dtypes"])]
            ths = [int(t) for t in (threads or b.overrides.get("threads") or self.settings["threads"])]
            cms = cache or b.overrides.get("cache") or self.settings["cache"]
            sps = spin or b.overrides.get("spin") or self.settings["spin"]
            dvs = devices or b.overrides.get("devices") or self.settings["devices"]
            _check_list(dvs, DEVICES, "devices", "devices")
            for t in ths:
                if max_threads and t > max_threads:
                    skipped_threads.add(t)
            ths = [t for t in ths if not max_threads or t <= max_threads]
            cell_lists = {"device": dvs, "dtype": dts, "threads": ths, "cache": cms, "spin": sps}
            params = set(op.param_names())
            sweep = _prune(filters, op.name, params, {**lists, **cell_lists})
            # numerics-only shapes are listed, not swept: only their cell fields are cut
            num = _prune(filters, op.name, params, {k: cell_lists[k] for k in ("device", "dtype", "threads")})
            n_sweep = math.prod(len(v) for v in sweep.values()) if sweep else 0
            n_num = len(b.numerics) * math.prod(len(v) for v in num.values()) if num else 0
            plans.append((b, op, lists, sweep, num, cms[0], sps[0], n_sweep + n_num))
            total += n_sweep + n_num
        if total > MAX_SUITE_CELLS:
            big = max(plans, key=lambda x: x[-1])
            block, op, sweep, count = big[0], big[1], big[3], big[-1]
            axis, values = max(((k, v) for k, v in (sweep or {}).items() if k in op.param_names()),
                               key=lambda kv: len(kv[1]), default=("dtype", ["f32"]))
            raise UsageError(
                f"{self.path}: suite {self.name!r} would expand to {total:,} cells"
                + (" (after the filters)" if filters else "") + f", more than the {MAX_SUITE_CELLS:,} one list or "
                f"run may have (its largest block, {block.where.removeprefix(str(self.path) + ': ')} ({op.name}), "
                f"gives {count:,}: its axis value counts x dtypes x threads x cache x spin x devices): "
                f"narrow it with --filter (e.g. --filter 'op={op.name} {axis}={values[0]}'), --quick, or give fewer "
                "axis values in the file")
        for b, op, lists, sweep, num, cache0, spin0, _ in plans:
            names = list(lists)
            cases = [op.make_case(dict(zip(names, combo)), f"{b.where}.{'quick' if quick else 'axes'}")
                     for combo in itertools.product(*(sweep[n] for n in names))] if sweep else []
            numerics = [op.make_case(dict(v), f"{b.where}.numerics[{i}]")
                        for i, v in enumerate(b.numerics)] if num else []
            for case_list, numerics_only, fields in ((cases, False, sweep), (numerics, True, num)):
                if not fields:
                    continue
                # numerics do not depend on cache or spin: they run in the block's first modes
                cms, sps = ([cache0], [spin0]) if numerics_only else (fields["cache"], fields["spin"])
                for case in case_list:
                    for dv, dt, t, c, s in itertools.product(fields["device"], fields["dtype"], fields["threads"],
                                                              cms, sps):
                        cell = Cell(case, dt, t, c, s, dv, numerics_only)
                        if cell.key in seen or not filt.matches(filters, cell):
                            continue
                        seen.add(cell.key)
                        cells.append(cell)
        for t in sorted(skipped_threads):
            notes.append(f"threads={t} skipped: this host has {max_threads} usable cores")
        return cells, notes


def _norm_list(v) -> list:
    return v if isinstance(v, list) else [v]


def _prune(filters: list, op_name: str, params: set, fields: dict) -> dict | None:
    """Each field's values (an axis of the sweep, or a cell field: device, dtype, threads, cache,
    spin) that some filter can still match, in their order: a superset of what filt.matches keeps
    (terms on other fields and `id` are left to it). None when no filter can match at all."""
    if not filters:
        return fields
    keep = {k: set() for k in fields}
    live = False
    for f in filters:
        if any(t.field not in params and t.field not in filt.CELL_FIELDS for t in f.terms):
            continue  # a term on an axis the op does not have never matches
        if any(t.field == "op" and not t.match_value(op_name) for t in f.terms):
            continue
        mine = {k: {i for i, v in enumerate(vals) if all(t.match_value(v) for t in f.terms if t.field == k)}
                for k, vals in fields.items()}
        if all(mine.values()):
            live = True
            for k, idx in mine.items():
                keep[k] |= idx
    if not live:
        return None
    return {k: [v for i, v in enumerate(vals) if i in keep[k]] for k, vals in fields.items()}


def _check_axes(axes: dict, where: str) -> None:
    for k, v in axes.items():
        if isinstance(v, list) and not v:
            raise UsageError(f"{where}: {k} is an empty list; give at least one value, e.g. {k} = [128], "
                             f"or remove {k} to use the op's default")


def _sweep_size(axes: dict) -> int:
    return math.prod(len(_norm_list(v)) for v in axes.values())


def _validate_sweep(op, axes: dict, where: str, budget: int) -> int:
    """Check every case of the sweep (names, types, ranges, choices, cross-parameter rules, the
    bytes cap) when it has at most `budget` cases; a larger one (a suite past MAX_SUITE_CELLS,
    which expand refuses unless --filter narrows it) has its first case and each value checked,
    the rest when expand makes them. Returns the cases checked."""
    lists = {k: _norm_list(v) for k, v in axes.items()}
    n = _sweep_size(axes)
    if n <= budget:
        for combo in itertools.product(*lists.values()):
            op.make_case(dict(zip(lists, combo)), where)
        return n
    op.make_case({k: v[0] for k, v in lists.items()}, where)
    for k, values in lists.items():
        for v in values:
            op.param(k).check(v, where)
    return 1


def _check_keys(table: dict, allowed: dict, where: str) -> None:
    for k, v in table.items():
        if k not in allowed:
            hint = difflib.get_close_matches(k, list(allowed), n=1)
            raise UsageError(f"{where}: unknown key {k!r}" + (f" (did you mean {hint[0]!r}?)" if hint else
                                                                f"; allowed: {', '.join(allowed)}"))
        want = allowed[k]
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            words = {"int": "an integer", "str": "a string", "list": "a list", "dict": "a table",
                     "float": "a number", "bool": "true or false"}
            wants = (want,) if isinstance(want, type) else want
            names = " or ".join(words.get(w.__name__, w.__name__) for w in wants)
            raise UsageError(f"{where}: {k} must be {names}, got {v!r}")


def _check_list(values: list, allowed: tuple, where: str, key: str) -> None:
    for v in values:
        if v not in allowed:
            hint = difflib.get_close_matches(str(v), allowed, n=1)
            raise UsageError(f"{where}: {key} value {v!r} is not one of {', '.join(allowed)}"
                             + (f" (did you mean {hint[0]!r}?)" if hint else ""))


def _check_common_lists(table: dict, where: str) -> None:
    for key in ("dtypes", "threads", "cache", "spin", "devices"):
        if key in table:
            _check_axis_len(table[key], f"{where} {key}")
    if "dtypes" in table:
        for d in table["dtypes"]:
            try:
                dtypes.get(d)
            except UsageError as e:
                raise UsageError(f"{where}: dtypes: {e}") from None
    if "threads" in table:
        for t in table["threads"]:
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise UsageError(f"{where}: threads must be positive integers, got {t!r}")
            if t > MAX_THREADS:
                raise UsageError(f"{where}: threads = {t} is more than the {MAX_THREADS} the kernels' thread pool "
                                 f"runs: give at most {MAX_THREADS}")
    if "cache" in table:
        _check_list(table["cache"], CACHE_MODES, where, "cache")
    if "spin" in table:
        _check_list(table["spin"], SPIN_MODES, where, "spin")
    if "devices" in table:
        _check_list(table["devices"], DEVICES, where, "devices")


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p
    cand = suites_dir() / f"{name_or_path}.toml"
    if cand.is_file():
        return cand
    known = sorted(x.stem for x in suites_dir().glob("*.toml"))
    hint = difflib.get_close_matches(name_or_path, known, n=1)
    raise UsageError(
        f"no suite {name_or_path!r}: not a .toml file and not one of {', '.join(known) or '(none)'} in {suites_dir()}"
        + (f" (did you mean {hint[0]!r}?)" if hint else "")
    )


def load(name_or_path: str) -> Suite:
    path = resolve_path(name_or_path)
    text = path.read_text()
    where = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not valid TOML: {e}") from None
    for k in data:
        if k not in ("suite", "ops"):
            hint = difflib.get_close_matches(k, ["suite", "ops"], n=1)
            raise UsageError(f"{where}: unknown top-level key {k!r}" + (f" (did you mean {hint[0]!r}?)" if hint
                                                                       else "; expected [suite] and [[ops]]"))
    head = data.get("suite")
    if not isinstance(head, dict) or "name" not in head:
        raise UsageError(f'{where}: needs a [suite] table with a name, e.g. `[suite]` then `name = "attention"`')
    _check_keys(head, SUITE_KEYS, f"{where}: [suite]")
    _check_common_lists(head, f"{where}: [suite]")
    settings = {**DEFAULTS, **{k: v for k, v in head.items() if k not in ("name", "description")}}
    check_settings(settings, f"{where}: [suite]")
    blocks_raw = data.get("ops")
    if not isinstance(blocks_raw, list) or not blocks_raw:
        raise UsageError(f"{where}: needs at least one [[ops]] block")
    suite = Suite(head["name"], path, hashlib.sha256(text.encode()).hexdigest()[:16], settings)
    budget = MAX_SUITE_CELLS  # cases checked here at most; expand counts and refuses a larger suite
    for i, b in enumerate(blocks_raw):
        bw = f"{where}: ops[{i}]"
        _check_keys(b, BLOCK_KEYS, bw)
        if "op" not in b:
            raise UsageError(f"{bw}: needs op = \"<name>\" (known: {', '.join(ops.REGISTRY)})")
        try:
            op = ops.get(b["op"])
        except UsageError as e:
            raise UsageError(f"{bw}: {e}") from None
        _check_common_lists(b, bw)
        axes = b.get("axes", {})
        _check_axes(axes, f"{bw}.axes")
        quick = b.get("quick")
        if quick is True:
            quick = {}
        if isinstance(quick, dict):
            _check_axes(quick, f"{bw}.quick")
        numerics = b.get("numerics", [])
        if not all(isinstance(x, dict) for x in numerics):
            raise UsageError(f"{bw}: numerics must be a list of tables like {{ heads = 3, keys = 4097 }}")
        block = Block(op.name, axes, quick, numerics,
                      {k: b[k] for k in ("dtypes", "threads", "cache", "spin", "devices") if k in b}, bw)
        # validate every case now (names, types, ranges, choices): errors surface before any
        # build or measurement, labelled with where they are
        budget -= _validate_sweep(op, axes, f"{bw}.axes", budget)
        if isinstance(quick, dict):
            budget -= _validate_sweep(op, {**axes, **quick}, f"{bw}.quick", budget)
        for j, shape in enumerate(numerics):
            op.make_case(dict(shape), f"{bw}.numerics[{j}]")
        suite.blocks.append(block)
    return suite
