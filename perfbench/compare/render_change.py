"""Rendering a comparison document (base vs head per benchmark cell, written by `perfbench ab` /
`perfbench compare`): strict validation (`load`), a terminal table and a PR-comment markdown.

The document may come from untrusted pull-request code, so `load` checks every field's type and
vocabulary (error messages name a JSON path built from schema keys and indices, never document
content), and every document string that reaches the markdown is escaped by `md_text`.
Verdicts are decided elsewhere; counts and the exit code here are recomputed from the rows.
"""

from __future__ import annotations

import json
import math
import unicodedata

from perfbench.compare import change
from perfbench.compare.escape import ZWSP, clean, md_ref, md_text  # noqa: F401  (re-exported for tests)
from perfbench.compare.render import fmt_ns
from perfbench.errors import UsageError

SCHEMA_VERSION = 1
SYMBOLS = {"numerics-broke": "❌", "regression": "🔴", "possible": "⚠️", "improvement": "🟢",
           "unchanged": "✅", "not-comparable": "➖"}
SEVERITY = sorted(change.SEVERITY, key=change.SEVERITY.get)  # most severe first
WORDS = {"numerics-broke": "numerics broke", "regression": "regression", "possible": "possible",
         "improvement": "improvement", "unchanged": "unchanged", "not-comparable": "not comparable"}
FLAGGED = ("numerics-broke", "regression", "possible", "improvement")
CHANGE_VERDICTS = ("regression", "possible", "improvement", "unchanged")
BAD_VERSION = "not a perfbench comparison document of schema_version 1 (this perfbench reads version 1 only)"
OMITTED = "**… {} rows omitted (size cap); the full comparison is in the JSON artifact**"
TRUNCATED = "… truncated (size cap); the full comparison is in the JSON artifact"

# ---------------------------------------------------------------------------------------------- load


def _fail(path: str, what: str):
    raise UsageError(f"invalid comparison document: {path}: {what}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _str(v, p):
    if not isinstance(v, str):
        _fail(p, "expected a string")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        _fail(p, "expected a string without lone surrogates")


def _int(v, p, lo=0):
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < 2**63:
        _fail(p, "expected a non-negative integer" if lo == 0 else "expected an integer")


def _num(v, p):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        _fail(p, "expected a finite number")
    try:
        ok = math.isfinite(float(v))
    except OverflowError:
        ok = False
    if not ok:
        _fail(p, "expected a finite number")


def _opt(check):
    return lambda v, p: None if v is None else check(v, p)


def _enum(*values):
    def check(v, p):
        if not isinstance(v, str) or v not in values:
            _fail(p, "expected one of " + ", ".join(values))
    return check


def _list(check, length=None):
    def run(v, p):
        if not isinstance(v, list) or (length is not None and len(v) != length):
            _fail(p, "expected a list" + (f" of {length}" if length is not None else ""))
        for i, x in enumerate(v):
            check(x, f"{p}[{i}]")
    return run


def _obj(spec):
    def run(v, p):
        if not isinstance(v, dict):
            _fail(p or "document", "expected an object")
        for key, check in spec.items():
            if key not in v:
                _fail(_join(p, key), "missing")
            check(v[key], _join(p, key))
    return run


def _params(v, p):
    if not isinstance(v, dict):
        _fail(p, "expected an object")
    for i, (k, x) in enumerate(v.items()):  # the path names the entry's index: keys are content
        if not isinstance(k, str):
            _fail(f"{p}[{i}]", "expected a string key")
        _str(k, f"{p}[{i}]")
        if isinstance(x, str):
            _str(x, f"{p}[{i}]")
        elif not isinstance(x, bool):
            _num(x, f"{p}[{i}]")


def _exit(v, p):
    if isinstance(v, bool) or not isinstance(v, int) or v not in (0, 1):
        _fail(p, "expected 0 or 1")


_SIDE = _obj({"label": _str, "ref": _str, "git_sha": _opt(_str), "run_id": _opt(_int), "build_id": _str,
              "source_hash": _str})
_CHANGE = _obj({"verdict": _enum(*CHANGE_VERDICTS), "base": _num, "head": _num, "change": _num, "ci_low": _num,
                "ci_high": _num, "sigma_b": _num, "sigma_source": _enum("calibrated", "default"), "n": _int,
                "p_worse": _num, "p_worse_m": _num, "p_better": _num, "p_better_m": _num})
_ROW = _obj({
    "case_id": _str, "op": _str, "params": _params, "dtype": _str, "threads": _int, "device": _str,
    "cache": _enum("warm", "cold"), "spin": _enum("off", "on"), "verdict": _enum(*SEVERITY), "why": _str,
    "abs": _opt(_CHANGE), "ratio": _opt(_CHANGE),
    "numerics": _obj({"base_status": _opt(_str), "head_status": _opt(_str), "base_err": _opt(_num),
                      "head_err": _opt(_num), "tol": _opt(_num)}),
})
_DOC = _obj({
    "kind": _enum("ab", "compare"), "created_at": _str, "suite": _str, "filters": _list(_str),
    "base": _SIDE, "head": _SIDE,
    "host": _obj({"hostname": _str, "host_class": _str, "cpu_model": _str, "cores": _int,
                  "load_avg": _list(_num, 3), "ort_version": _str, "compiler": _str, "flags": _list(_str),
                  "isa": _str, "os": _str}),
    "settings": _obj({"min_effect": _num, "q": _num, "replicates": _int,
                      "mode": _enum("interleaved", "alternating-workers", "stored-runs")}),
    "calibration": _obj({"source": _enum("calibrated", "default", "mixed"), "calibration_id": _opt(_int),
                         "measured_at": _opt(_str), "age_s": _opt(_num), "host_class": _opt(_str),
                         "rounds": _opt(_int), "default_sigma": _num, "cells_calibrated": _int,
                         "cells_default": _int}),
    "summary": _obj({k.replace("-", "_"): _int for k in SEVERITY}),
    "exit_code": _exit, "rows": _list(_ROW), "notes": _list(_str), "cannot_catch": _list(_str),
})


def load(data) -> dict:
    """Parse (if text) and validate a comparison document; UsageError (fixed message) if it is not one."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise UsageError(f"comparison document is not valid JSON (line {e.lineno}, column {e.colno})") from None
        except (ValueError, RecursionError):
            raise UsageError("comparison document is not valid JSON") from None
    if not isinstance(data, dict):
        raise UsageError(BAD_VERSION)
    for key in ("perfbench_comparison", "schema_version"):
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v != SCHEMA_VERSION:
            raise UsageError(BAD_VERSION)
    _DOC(data, "")
    return data

# ------------------------------------------------------------------------------------------ counting


def counts(doc: dict) -> dict:
    out = dict.fromkeys(SEVERITY, 0)
    for r in doc["rows"]:
        out[r["verdict"]] += 1
    return out


def summary_line(doc: dict) -> str:
    """All six categories (zeros included), counted from the rows, in reading order."""
    c = counts(doc)
    parts = []
    for v in ("numerics-broke", "regression", "possible", "improvement", "unchanged", "not-comparable"):
        word = WORDS[v] + ("s" if v in ("regression", "improvement") and c[v] != 1 else "")
        parts.append(f"{c[v]} {word}")
    return ", ".join(parts)


def exit_code(doc: dict) -> int:
    """From the rows, never the document's own exit_code (CONTRACTS §6)."""
    return change.exit_code(doc["rows"])


def _stored_disagrees(doc: dict) -> bool:
    c = counts(doc)
    return (any(doc["summary"][k.replace("-", "_")] != c[k] for k in SEVERITY)
            or doc["exit_code"] != exit_code(doc))


def _sorted(rows: list) -> list:
    def key(r):
        mag = max((abs(r[k]["change"]) for k in ("abs", "ratio") if r[k] is not None), default=0.0)
        return (SEVERITY.index(r["verdict"]), -mag, r["case_id"], r["dtype"], r["threads"])
    return sorted(rows, key=key)

# ------------------------------------------------------------------------------------------ cleaning


# ---------------------------------------------------------------------------------------- formatting


def _pct(x: float, sign: bool = True) -> str:
    v = 100 * x
    if abs(v) >= 1e5:
        return f"{v:+.2e}%" if sign else f"{v:.2e}%"
    s = f"{v:+.1f}" if sign else f"{v:.1f}"
    return ("+0.0" if s == "-0.0" else s) + "%"


def _ns(x: float) -> str:
    return f"{x / 1e9:.3g} s" if abs(x) >= 1e12 else fmt_ns(x)


def _num_g(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 1e6 else f"{x:.3g}"


def _err(x) -> str:
    return "-" if x is None else f"{x:.1e}"


def _case(r: dict) -> str:
    """op and the parameters that differ from the op's defaults (all of them for an unknown op)."""
    try:
        from perfbench import ops
        op = ops.REGISTRY.get(r["op"])
        defaults = {p.name: p.default for p in op.params} if op is not None else {}
    except Exception:  # noqa: BLE001 - rendering never depends on the op registry
        defaults = {}
    parts = [f"{k[:100]}={str(v)[:100]}" for k, v in r["params"].items() if k not in defaults or defaults[k] != v]
    extra = [x for x, on in ((r["device"], r["device"] != "cpu"), ("spin", r["spin"] == "on")) if on]
    return " ".join([r["op"][:200], *parts, *extra])


def _status(r: dict) -> str:
    a, q = r["abs"], r["ratio"]
    if r["verdict"] not in ("numerics-broke", "not-comparable") and a and q and a["verdict"] != q["verdict"]:
        return f"{SYMBOLS[a['verdict']]} abs / {SYMBOLS[q['verdict']]} vs ORT"
    return f"{SYMBOLS[r['verdict']]} {WORDS[r['verdict']]}"


def _cells(r: dict, text, star: str = "*") -> list:
    """Base, Head, Change, 95% CI, σ_b, vs ORT for one row; `text` renders document strings."""
    a, q, n = r["abs"], r["ratio"], r["numerics"]
    if a is not None:
        base, head, change = _ns(a["base"]), _ns(a["head"]), _pct(a["change"])
        ci = f"[{_pct(a['ci_low'])}, {_pct(a['ci_high'])}]"
    elif r["verdict"] == "numerics-broke":
        base = f"{text(n['base_status'] or '-', 24)} {_err(n['base_err'])}"
        head = f"{text(n['head_status'] or '-', 24)} {_err(n['head_err'])}"
        change, ci = f"tol {_err(n['tol'])}", "-"
    else:
        base = head = change = ci = "-"
    s = a or q
    sigma = "-" if s is None else _pct(s["sigma_b"], sign=False) + (star if s["sigma_source"] == "default" else "")
    vs = "-" if q is None else f"{_num_g(q['base'])}→{_num_g(q['head'])} ({_pct(q['change'])})"
    if q is not None and a is not None and q["verdict"] != a["verdict"]:
        # the ratio was judged on its own: show the interval and spread that decided it
        vs += (f" [{_pct(q['ci_low'])}, {_pct(q['ci_high'])}] σ {_pct(q['sigma_b'], sign=False)}"
               + (star if q["sigma_source"] == "default" else ""))
    return [base, head, change, ci, sigma, vs]


def _age(s) -> str:
    if s is None:
        return "at an unknown time"
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} d ago"


def calibration_line(doc: dict, text=clean, md: bool = False) -> str:
    c = doc["calibration"]
    sb, star = ("σ\\_b", "\\*") if md else ("σ_b", "*")
    default = f"{sb} = {_pct(c['default_sigma'], sign=False)} default"
    rounds = "" if c["rounds"] is None else f", {c['rounds']} round{'s' if c['rounds'] != 1 else ''}"
    where = f" on {text(c['host_class'], 100)}" if c["host_class"] else ""
    if c["source"] == "default":
        return f"not calibrated: {default} for every cell (`perfbench calibrate` measures it on this host class)"
    done = f"calibrated {_age(c['age_s'])}{where}{rounds}"
    if c["source"] == "calibrated":
        return done
    return (f"partly calibrated: {c['cells_calibrated']} cells {done}; {c['cells_default']} cells use the "
            f"{default} (marked {star})")


def _mode(doc: dict) -> str:
    mode = {"interleaved": "interleaved", "alternating-workers": "in alternating worker processes",
            "stored-runs": "from stored runs"}[doc["settings"]["mode"]]
    if doc["kind"] == "ab":
        return f"measured side by side, {mode}"
    b, h = doc["base"]["run_id"], doc["head"]["run_id"]
    runs = f" (run {b} vs run {h})" if b is not None and h is not None else ""
    return f"compared {mode}{runs}"


def _settings(doc: dict) -> str:
    s = doc["settings"]
    return (f"min effect {_pct(s['min_effect'], sign=False)}, q = {s['q']:g}, {s['replicates']} replicates, "
            f"mode {s['mode']}")


def _host(doc: dict, text) -> str:
    h = doc["host"]
    flags = " ".join(text(f, 60) for f in h["flags"][:40]) + (" …" if len(h["flags"]) > 40 else "")
    load = " ".join(f"{x:.2f}" for x in h["load_avg"])
    return (f"{text(h['cpu_model'], 100)}, {h['cores']} cores, host {text(h['hostname'], 64)} "
            f"(class {text(h['host_class'], 100)}), load average {load}; ORT {text(h['ort_version'], 40)}; "
            f"compiler {text(h['compiler'], 100)} {flags}; ISA {text(h['isa'], 40)}; OS {text(h['os'], 60)}")


def _items(items: list, text, limit: int = 20) -> list:
    out = [text(x, 300) for x in items[:limit]]
    return out + ([f"… and {len(items) - limit} more"] if len(items) > limit else [])

# ------------------------------------------------------------------------------------------ terminal


def _width(s: str) -> int:
    w = 0
    for ch in s:
        if ch == "\ufe0f":
            w += 1  # emoji presentation: the previous narrow symbol takes two columns
        elif not unicodedata.combining(ch) and unicodedata.category(ch) != "Cf":
            w += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return w


def terminal(doc: dict, color: bool = False) -> str:
    paint = {"numerics-broke": "31", "regression": "31", "possible": "33", "improvement": "32"}
    head = ["verdict", "case", "dtype", "thr", "cache", "base", "head", "change", "95% CI", "σ_b", "vs ORT", "why"]
    rows = []
    for r in _sorted(doc["rows"]):
        why = clean(r["why"], 80) if r["verdict"] in ("numerics-broke", "not-comparable") else ""
        rows.append((r["verdict"], [_status(r), clean(_case(r), 80), clean(r["dtype"], 16), str(r["threads"]),
                                    r["cache"], *_cells(r, clean), why]))
    widths = [max([_width(h)] + [_width(c[i]) for _, c in rows]) for i, h in enumerate(head)]

    def line(cells, verdict=None):
        padded = [c + " " * (w - _width(c)) for c, w in zip(cells, widths)]
        if color and verdict in paint:
            padded[0] = f"\x1b[{paint[verdict]}m{padded[0]}\x1b[0m"
        return "  ".join(padded).rstrip()

    out = [summary_line(doc) + f"  (exit {exit_code(doc)})",
           f"base {clean(doc['base']['ref'], 40)} vs head {clean(doc['head']['ref'], 40)}: suite "
           f"{clean(doc['suite'], 80)}, {_mode(doc)}"]
    if _stored_disagrees(doc):
        out.append("warning: the document's own summary or exit code disagrees with its rows (counted here)")
    out += ["", line(head), "  ".join("-" * w for w in widths)] + [line(c, v) for v, c in rows]
    out += ["", "calibration: " + calibration_line(doc).replace("`", ""), "settings: " + _settings(doc),
            "host: " + _host(doc, clean)]
    if doc["notes"]:
        out += ["notes:"] + ["  - " + n for n in _items(doc["notes"], clean)]
    if doc["cannot_catch"]:
        out += ["what this cannot catch:"] + ["  - " + n for n in _items(doc["cannot_catch"], clean)]
    return "\n".join(out) + "\n"

# ------------------------------------------------------------------------------------------ markdown

MAIN_HEAD = ["Status", "Case", "dtype", "thr", "cache", "Base", "Head", "Change", "95% CI", "σ\\_b", "vs ORT"]
NC_HEAD = ["Status", "Case", "dtype", "thr", "cache", "Why"]
LEGEND = ("_Legend:_ change = head/base − 1 (positive = slower or worse); the CI is the unadjusted 95% interval; "
          "flags use one-sided tests with Benjamini–Hochberg at q = {q} across all cells; σ\\_b = between-run "
          "spread from A/A calibration (\\* = the default, not calibrated); vs ORT = ours/ORT ratio of base→head.")


def _table(head: list, lines: list) -> list:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + lines


def _md_row(r: dict) -> str:
    cells = [_status(r), md_text(_case(r), 120), md_text(r["dtype"], 16), str(r["threads"]), r["cache"]]
    if r["verdict"] == "not-comparable":
        cells.append(md_text(r["why"], 160))
    else:
        cells += _cells(r, md_text, "\\*")
    return "| " + " | ".join(cells) + " |"


def _md_assemble(pre: list, post: list, rows: list, k: int) -> str:
    shown, out = rows[:k], list(pre)
    groups = [[r for r in shown if r["verdict"] in FLAGGED], [r for r in shown if r["verdict"] == "not-comparable"],
              [r for r in shown if r["verdict"] == "unchanged"]]
    if groups[0]:
        out += _table(MAIN_HEAD, [_md_row(r) for r in groups[0]]) + [""]
    elif not any(r["verdict"] in FLAGGED for r in rows):
        out += ["No flagged cells.", ""]
    if groups[1]:
        out += [f"**{len(groups[1])} not comparable**", ""] + _table(NC_HEAD, [_md_row(r) for r in groups[1]]) + [""]
    if groups[2]:
        out += [f"<details><summary>{len(groups[2])} unchanged</summary>", ""]
        out += _table(MAIN_HEAD, [_md_row(r) for r in groups[2]]) + ["", "</details>", ""]
    if k < len(rows):
        out += [OMITTED.format(len(rows) - k), ""]
    return "\n".join(out + post) + "\n"


def markdown(doc: dict, max_chars: int = 60000) -> str:
    """The PR comment; at most `max_chars` characters (unchanged rows are dropped first, then the
    least severe flagged rows; the summary, host, calibration and caveats are always kept)."""
    b, h = doc["base"], doc["head"]
    pre = [f"### perfbench: base {md_ref(b['ref'])} vs head {md_ref(h['ref'])}", "",
           f"Suite {md_text(doc['suite'], 80)}, {_mode(doc)}"
           + (f"; filters: {'; '.join(md_text(f, 120) for f in doc['filters'][:10])}" if doc["filters"] else "")
           + f"; {md_text(doc['created_at'], 40)}.", "",
           f"**{summary_line(doc)}** (exit {exit_code(doc)})", ""]
    if _stored_disagrees(doc):
        pre += ["⚠️ The document's own summary or exit code disagrees with its rows; the counts here are "
                "from the rows.", ""]
    post = ["**Host:** " + _host(doc, md_text), "", "**Settings:** " + _settings(doc), "",
            "**Calibration:** " + calibration_line(doc, md_text, md=True), ""]
    if doc["notes"]:
        post += ["**Notes**", ""] + ["- " + n for n in _items(doc["notes"], md_text)] + [""]
    post += ["**What this cannot catch**", ""]
    post += ["- " + n for n in _items(doc["cannot_catch"], md_text)] if doc["cannot_catch"] else ["- (none listed)"]
    post += ["", LEGEND.format(q=f"{doc['settings']['q']:g}")]
    rows = _sorted(doc["rows"])
    full = _md_assemble(pre, post, rows, len(rows))
    if len(full) <= max_chars:
        return full
    lo, hi = 0, len(rows) - 1  # the largest k whose rendering fits (length grows with k)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(_md_assemble(pre, post, rows, mid)) <= max_chars:
            lo = mid
        else:
            hi = mid - 1
    text = _md_assemble(pre, post, rows, lo)
    if len(text) <= max_chars:
        return text
    kept = []  # even with no rows the rest is too long: keep whole lines and say so
    for ln in text.split("\n"):
        if len("\n".join(kept + [ln, TRUNCATED])) + 1 > max_chars:
            break
        kept.append(ln)
    return ("\n".join(kept + [TRUNCATED]) + "\n")[:max_chars]
