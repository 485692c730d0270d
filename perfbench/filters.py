"""Filters (CONTRACTS §5): `--filter` is repeatable (filters OR together); within one filter,
space-separated terms AND together. A term names a cell-key field by its CLI flag name (op,
dtype, threads, device, cache, spin, id) or any axis of the sweep, with a value, a list
(`past=128,1024`) or an inclusive range (`past=128..4096`, open ends allowed: `..512`, `128..`).
A term on an axis a case does not have never matches. `id` accepts shell-style wildcards."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from perfbench import dtypes
from perfbench.errors import UsageError

CELL_FIELDS = ("op", "dtype", "threads", "device", "cache", "spin", "id")
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")


def _num(v: str):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


@dataclass(frozen=True)
class Term:
    field: str
    values: tuple = ()  # equality against any of these
    lo: object = None  # range bounds (inclusive); None = open
    hi: object = None
    is_range: bool = False

    def match_value(self, actual) -> bool:
        if self.field == "dtype":
            actual = dtypes.get(actual).name
        if self.is_range:
            a = _num(str(actual))
            if a is None:
                return False
            return (self.lo is None or a >= self.lo) and (self.hi is None or a <= self.hi)
        for v in self.values:
            if self.field == "id" and fnmatch.fnmatchcase(str(actual), v):
                return True
            if self.field == "op" and str(actual).lower() == v.lower():
                return True
            na, nv = _num(str(actual)), _num(v)
            if na is not None and nv is not None:
                if na == nv:
                    return True
            elif str(actual) == v:
                return True
        return False

    def __str__(self) -> str:
        if self.is_range:
            return f"{self.field}={'' if self.lo is None else self.lo}..{'' if self.hi is None else self.hi}"
        return f"{self.field}={','.join(self.values)}"


@dataclass(frozen=True)
class Filter:
    terms: tuple
    text: str

    def __str__(self) -> str:
        return self.text


def parse(text: str) -> Filter:
    terms = []
    for tok in text.split():
        m = _TERM.match(tok)
        if not m:
            raise UsageError(
                f"filter {text!r}: term {tok!r} is not NAME=VALUE (e.g. op=Softmax, keys=128,1024, keys=128..4096)"
            )
        name, val = m.group(1), m.group(2)
        if ".." in val and name != "id":
            lo, _, hi = val.partition("..")
            nlo, nhi = (_num(lo) if lo else None), (_num(hi) if hi else None)
            if (lo and nlo is None) or (hi and nhi is None) or (lo == "" and hi == ""):
                raise UsageError(f"filter {text!r}: range {tok!r} needs numbers, e.g. {name}=128..4096")
            terms.append(Term(name, lo=nlo, hi=nhi, is_range=True))
        else:
            vals = tuple(v for v in val.split(",") if v)
            if name == "dtype":
                vals = tuple(dtypes.get(v).name for v in vals)
            terms.append(Term(name, values=vals))
    if not terms:
        raise UsageError("empty filter: give terms like 'op=Softmax dtype=f16'")
    return Filter(tuple(terms), text)


def cell_fields(cell) -> dict:
    """The values a filter can name, for a suites.Cell-like object."""
    d = dict(cell.case.params)
    d.update(op=cell.case.op, dtype=cell.dtype, threads=cell.threads, device=cell.device, cache=cell.cache,
             spin=cell.spin, id=cell.case.case_id)
    return d


def matches(filters: list[Filter], cell) -> bool:
    if not filters:
        return True
    fields = cell_fields(cell)
    for f in filters:
        if all(t.field in fields and t.match_value(fields[t.field]) for t in f.terms):
            return True
    return False


def check_names(filters: list[Filter], known_axes: set) -> None:
    """Every term must name a cell field or an axis of the suite (a typo is an error)."""
    import difflib

    known = set(CELL_FIELDS) | set(known_axes)
    for f in filters:
        for t in f.terms:
            if t.field not in known:
                hint = difflib.get_close_matches(t.field, sorted(known), n=1)
                raise UsageError(
                    f"filter {f.text!r}: {t.field!r} is neither a cell field ({', '.join(CELL_FIELDS)}) nor an "
                    f"axis of this suite" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                )
