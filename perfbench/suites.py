"""Suite files (suites/*.toml): parse, validate, expand sweeps into cells with stable ids.

    [suite]
    name = "attention"          # required
    description = "..."
    dtypes = ["f32", "f16", "bf16"]
    threads = [1, 2]            # capped at this host's cores; skipped ones are listed
    cache = ["warm"]            # warm | cold
    spin = ["off"]              # off | on
    devices = ["cpu"]           # cpu | cuda (cuda cells need our CUDA kernels: a later issue)
    replicates = 8              # measurement settings (see docs/protocol.md)
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
from dataclasses import dataclass, field
from pathlib import Path

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
DEFAULTS = {"dtypes": ["f32"], "threads": [1], "cache": ["warm"], "spin": ["off"], "devices": ["cpu"],
            "replicates": 8, "rounds": 3,
            "block_ms": 3.0, "timeout_s": 300.0, "seed": 20261129, "quick_replicates": 5,
            "processes": 3}


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
        notes, cells, seen = [], [], set()
        skipped_threads = set()
        for b in self.blocks:
            op = ops.get(b.op)
            lists = {k: _norm_list(v) for k, v in b.axes.items()}
            if quick:
                if b.quick is None or b.quick is False:
                    continue
                if isinstance(b.quick, dict):
                    lists.update({k: _norm_list(v) for k, v in b.quick.items()})
            names = list(lists)
            cases = [op.make_case(dict(zip(names, combo)), f"{b.where}.{'quick' if quick else 'axes'}")
                     for combo in itertools.product(*(lists[n] for n in names))]
            numerics = [op.make_case(dict(v), f"{b.where}.numerics[{i}]") for i, v in enumerate(b.numerics)]
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
            for case_list, numerics_only in ((cases, False), (numerics, True)):
                for case in case_list:
                    for dv, dt, t, c, s in itertools.product(dvs, dts, ths, cms, sps):
                        if numerics_only and (c != cms[0] or s != sps[0]):
                            continue  # numerics do not depend on cache or spin
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


def _check_axes(axes: dict, where: str) -> None:
    for k, v in axes.items():
        if isinstance(v, list) and not v:
            raise UsageError(f"{where}: {k} is an empty list; give at least one value, e.g. {k} = [128], "
                             f"or remove {k} to use the op's default")


def _validate_sweep(op, axes: dict, where: str) -> None:
    lists = {k: _norm_list(v) for k, v in axes.items()}
    for combo in itertools.product(*lists.values()):
        op.make_case(dict(zip(lists, combo)), where)


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
    if settings["processes"] < 1:
        raise UsageError(f"{where}: [suite] processes = {settings['processes']}: must be >= 1 (the worker "
                         "processes a cell's replicates are spread over; 1 = all in one)")
    blocks_raw = data.get("ops")
    if not isinstance(blocks_raw, list) or not blocks_raw:
        raise UsageError(f"{where}: needs at least one [[ops]] block")
    suite = Suite(head["name"], path, hashlib.sha256(text.encode()).hexdigest()[:16], settings)
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
        _validate_sweep(op, axes, f"{bw}.axes")
        if isinstance(quick, dict):
            _validate_sweep(op, {**axes, **quick}, f"{bw}.quick")
        for j, shape in enumerate(numerics):
            op.make_case(dict(shape), f"{bw}.numerics[{j}]")
        suite.blocks.append(block)
    return suite
