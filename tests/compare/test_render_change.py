"""perfbench.compare.render_change: validating a comparison document (which may come from untrusted
pull-request code) and rendering it for a terminal and as a size-capped, escaped PR comment."""

from __future__ import annotations

import copy
import json
import re

import pytest

from perfbench.compare import render_change as rc
from perfbench.errors import UsageError

HOSTILE = "x|y</details><script>alert(1)</script>[a](http://e) ![i](http://e/i.png) @octocat #1 `code` &#64;me"
HOSTILE_NL = "one\ntwo\r| a | b |\r\n<!-- hidden --> www.evil.example"
ZWSP = "\u200b"


def change(verdict, base, head, chg, lo, hi, sigma=0.01, source="calibrated"):
    return {"verdict": verdict, "base": base, "head": head, "change": chg, "ci_low": lo, "ci_high": hi,
            "sigma_b": sigma, "sigma_source": source, "n": 8, "p_worse": 0.01, "p_worse_m": 0.02,
            "p_better": 0.99, "p_better_m": 0.98}


def row(keys, verdict, abs_=None, ratio=None, why="", numerics=None, op="Softmax", **kw):
    r = {"case_id": f"Softmax.keys={keys}", "op": op, "params": {"batch": 1, "heads": 8, "keys": keys},
         "dtype": "f32", "threads": 1, "device": "cpu", "cache": "warm", "spin": "off", "verdict": verdict,
         "why": why, "abs": abs_, "ratio": ratio,
         "numerics": numerics or {"base_status": "ok", "head_status": "ok", "base_err": 1e-7, "head_err": 1.2e-7,
                                  "tol": 1e-5}}
    r.update(kw)
    return r


def rows():
    """One row of each verdict (keys=101..108 name them), deliberately not in severity order."""
    return [
        row(106, "unchanged", change("unchanged", 10_000.0, 10_050.0, 0.005, -0.01, 0.02),
            change("unchanged", 0.8, 0.804, 0.005, -0.01, 0.02)),
        row(105, "improvement", change("improvement", 2_000_000.0, 1_700_000.0, -0.15, -0.2, -0.1),
            change("improvement", 0.9, 0.77, -0.144, -0.2, -0.1)),
        row(108, "not-comparable", why="timing definition differs"),
        row(103, "regression", change("regression", 50_000.0, 55_000.0, 0.10, 0.06, 0.14),
            change("unchanged", 0.95, 0.96, 0.0105, -0.02, 0.04)),
        row(101, "numerics-broke", why="head mismatch: err 3.1e-02 > tol 1e-05",
            numerics={"base_status": "ok", "head_status": "mismatch", "base_err": 1e-7, "head_err": 0.031,
                      "tol": 1e-5}),
        row(104, "possible", change("possible", 800.0, 830.0, 0.0375, -0.005, 0.08, sigma=0.02, source="default"),
            None),
        row(102, "regression", change("regression", 1_000_000.0, 1_200_000.0, 0.20, 0.15, 0.25),
            change("regression", 1.0, 1.2, 0.2, 0.15, 0.25)),
        row(107, "unchanged", change("unchanged", 3_000.0, 2_990.0, -0.0033, -0.02, 0.015)),
    ]


def make_doc(**overrides) -> dict:
    doc = {
        "perfbench_comparison": 1, "schema_version": 1, "kind": "ab", "created_at": "2026-11-29T22:10:00+00:00",
        "suite": "attention", "filters": ["op=Softmax threads=1"],
        "base": {"label": "base", "ref": "abc1234", "git_sha": "abc1234" + "0" * 33, "run_id": None,
                 "build_id": "b-base", "source_hash": "s1"},
        "head": {"label": "head", "ref": "def5678", "git_sha": None, "run_id": None, "build_id": "b-head",
                 "source_hash": "s2"},
        "host": {"hostname": "bench-1", "host_class": "EPYC-9654 | 2 cores | Linux", "cpu_model": "AMD EPYC 9654",
                 "cores": 2, "load_avg": [0.12, 0.3, 0.25], "ort_version": "1.31.1", "compiler": "gcc 13.2",
                 "flags": ["-O3", "-march=x86-64-v3"], "isa": "avx2", "os": "Linux 6.8"},
        "settings": {"min_effect": 0.03, "q": 0.05, "replicates": 8, "mode": "interleaved"},
        "calibration": {"source": "calibrated", "calibration_id": 4, "measured_at": "2026-11-29T19:00:00+00:00",
                        "age_s": 3.2 * 3600, "host_class": "EPYC-9654", "rounds": 4, "default_sigma": 0.02,
                        "cells_calibrated": 8, "cells_default": 0},
        "summary": {"numerics_broke": 1, "regression": 2, "possible": 1, "improvement": 1, "unchanged": 2,
                    "not_comparable": 1},
        "exit_code": 1,
        "rows": rows(),
        "notes": ["Softmax: header changed; measured in alternating worker processes"],
        "cannot_catch": ["slowdowns below the 3% minimum effect", "effects that only show on other hosts"],
    }
    doc.update(overrides)
    return doc


def md_rows(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| Status")]


def line_of(text: str, keys: int) -> int:
    hits = [i for i, ln in enumerate(text.splitlines()) if f"keys={keys}" in ln.replace("\\", "")]
    assert len(hits) == 1, (keys, text)
    return hits[0]


# ---------------------------------------------------------------------------------------------- load

def test_load_accepts_the_fixture_as_dict_text_and_bytes():
    doc = make_doc()
    assert rc.load(doc) is doc
    assert rc.load(json.dumps(doc)) == doc
    assert rc.load(json.dumps(doc).encode()) == doc
    assert rc.load(json.dumps(make_doc(extra_key={"anything": [1]}))) is not None  # unknown keys ignored


@pytest.mark.parametrize("marker, version", [(1, None), (1, 2), (1, "1"), (1, True), (1, 1.0), (None, 1), (2, 1),
                                             (1, "<script>alert(1)</script>")])
def test_load_rejects_other_versions_with_a_fixed_message(marker, version):
    doc = make_doc(suite=HOSTILE)
    for key, v in (("perfbench_comparison", marker), ("schema_version", version)):
        if v is None:
            del doc[key]
        else:
            doc[key] = v
    for data in (doc, json.dumps(doc)):
        with pytest.raises(UsageError) as e:
            rc.load(data)
        assert str(e.value) == rc.BAD_VERSION
        assert "script" not in str(e.value) and "octocat" not in str(e.value)


@pytest.mark.parametrize("data", ["", "{", "[1, 2]", b"\xff\xfe", "null", '"x"', "[" * 100_000])
def test_load_rejects_non_documents(data):
    with pytest.raises(UsageError):
        rc.load(data)


def _set(doc, path, value):
    *parents, last = path
    obj = doc
    for p in parents:
        obj = obj[p]
    if value is KeyError:
        del obj[last]
    else:
        obj[last] = value


@pytest.mark.parametrize("path, value, where", [
    (("rows", 3, "abs", "change"), "12%", "rows[3].abs.change: expected a finite number"),
    (("rows", 3, "abs", "n"), 8.0, "rows[3].abs.n"),
    (("rows", 0, "verdict"), HOSTILE, "rows[0].verdict: expected one of"),
    (("rows", 3, "ratio", "verdict"), "not-comparable", "rows[3].ratio.verdict"),
    (("rows", 1, "why"), KeyError, "rows[1].why: missing"),
    (("rows", 2, "threads"), True, "rows[2].threads"),
    (("rows", 2, "cache"), "lukewarm", "rows[2].cache"),
    (("rows", 4, "numerics", "tol"), "1e-5", "rows[4].numerics.tol"),
    (("rows", 5, "params", "keys"), [1], "rows[5].params[2]"),
    (("rows", 5, "abs"), [], "rows[5].abs: expected an object"),
    (("rows", 6), "row", "rows[6]: expected an object"),
    (("rows",), {}, "rows: expected a list"),
    (("host", "cores"), True, "host.cores"),
    (("host", "load_avg"), [0.1, 0.2], "host.load_avg: expected a list of 3"),
    (("host", "flags", 1), 3, "host.flags[1]: expected a string"),
    (("host", "hostname"), None, "host.hostname: expected a string"),
    (("base", "run_id"), -1, "base.run_id"),
    (("head", "ref"), 5, "head.ref"),
    (("settings", "mode"), "sequential", "settings.mode"),
    (("calibration", "age_s"), "3 h", "calibration.age_s"),
    (("calibration", "source"), KeyError, "calibration.source: missing"),
    (("summary", "regression"), "2", "summary.regression"),
    (("exit_code",), True, "exit_code"),
    (("exit_code",), 1.0, "exit_code"),
    (("notes", 0), {"text": "x"}, "notes[0]"),
    (("cannot_catch",), "everything", "cannot_catch: expected a list"),
    (("kind",), "abc", "kind"),
    (("suite",), "\ud800", "suite"),
])
def test_type_violations_name_the_path_and_not_the_content(path, value, where):
    doc = make_doc()
    doc["rows"][5]["params"] = {HOSTILE: 1, "batch": 1, "keys": 104}  # a hostile key must not be echoed
    rc.load(copy.deepcopy(doc))
    _set(doc, path, value)
    with pytest.raises(UsageError) as e:
        rc.load(doc)
    msg = str(e.value)
    assert where in msg, msg
    assert "octocat" not in msg and "script" not in msg and "sequential" not in msg and "12%" not in msg


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_rejected(token):
    text = json.dumps(make_doc()).replace('"change": 0.1,', f'"change": {token},', 1)
    assert token in text
    with pytest.raises(UsageError, match=r"rows\[3\]\.abs\.change: expected a finite number"):
        rc.load(text)
    doc = make_doc()
    doc["host"]["load_avg"][2] = float("nan")
    with pytest.raises(UsageError, match=r"host\.load_avg\[2\]"):
        rc.load(doc)
    doc = make_doc()
    doc["rows"][0]["params"]["heads"] = float("inf")
    with pytest.raises(UsageError, match=r"rows\[0\]\.params\[1\]"):
        rc.load(doc)


# ---------------------------------------------------------------------------------- summary, exit code

def test_summary_line_counts_rows_with_plurals():
    assert rc.summary_line(make_doc()) == ("1 numerics broke, 2 regressions, 1 possible, 1 improvement, "
                                           "2 unchanged, 1 not comparable")
    doc = make_doc(rows=[r for r in rows() if r["params"]["keys"] in (102, 105)] + [row(109, "improvement")])
    assert rc.summary_line(doc) == ("0 numerics broke, 1 regression, 0 possible, 2 improvements, 0 unchanged, "
                                    "0 not comparable")
    assert rc.summary_line(make_doc(rows=[])).startswith("0 numerics broke, 0 regressions,")


def test_counts_come_from_the_rows_not_the_stored_summary():
    doc = make_doc(summary=dict.fromkeys(make_doc()["summary"], 0), exit_code=0)
    assert rc.load(doc) is doc
    assert rc.summary_line(doc).startswith("1 numerics broke, 2 regressions")
    assert rc.exit_code(doc) == 1
    assert "disagrees with its rows" in rc.markdown(doc)
    assert "disagrees with its rows" in rc.terminal(doc)
    assert "disagrees" not in rc.markdown(make_doc()) and "disagrees" not in rc.terminal(make_doc())


def test_exit_code():
    assert rc.exit_code(make_doc()) == 1
    keep = {104, 105, 106, 108}
    calm = make_doc(rows=[r for r in rows() if r["params"]["keys"] in keep])
    assert rc.exit_code(calm) == 0
    assert rc.exit_code(make_doc(rows=[r for r in rows() if r["params"]["keys"] == 101])) == 1
    ratio_only = row(110, "possible", change("unchanged", 1.0, 1.0, 0.0, -0.01, 0.01),
                     change("regression", 1.0, 1.1, 0.1, 0.05, 0.15))
    assert rc.exit_code(make_doc(rows=[ratio_only])) == 1


# ------------------------------------------------------------------------------------------ rendering

ORDER = [101, 102, 103, 104, 105, 108]  # numerics, regressions (bigger first), possible, improvement, n/c


def test_markdown_orders_by_severity_and_folds_unchanged():
    md = rc.markdown(make_doc())
    lines = md.splitlines()
    assert lines[0] == "### perfbench: base `abc1234` vs head `def5678`"
    assert "measured side by side, interleaved" in md
    summary = next(i for i, ln in enumerate(lines) if rc.summary_line(make_doc()) in ln)
    first_table = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    assert summary < first_table
    pos = [line_of(md, k) for k in ORDER]
    assert pos == sorted(pos)
    opening = lines.index("<details><summary>2 unchanged</summary>")
    closing = lines.index("</details>")
    assert opening > pos[-1]
    assert all(opening < line_of(md, k) < closing for k in (106, 107))
    assert md.count("<details>") == 1 and md.count("</details>") == 1
    row_101 = lines[line_of(md, 101)]
    assert row_101.startswith("| ❌ numerics broke |") and "mismatch 3.1e-02" in row_101
    assert lines[line_of(md, 102)].startswith("| 🔴 regression |")
    assert "| 1.00 ms | 1.20 ms | +20.0% | [+15.0%, +25.0%] | 1.0% | 1.000→1.200 (+20.0%) |" in md
    assert "| 800 ns | 830 ns | +3.8% | [-0.5%, +8.0%] | 2.0%\\* | - |" in md
    assert "timing definition differs" in lines[line_of(md, 108)]
    assert "**What this cannot catch**" in md and "- slowdowns below the 3\\% minimum effect" in md
    assert "Benjamini–Hochberg at q = 0.05" in md
    assert "AMD EPYC 9654, 2 cores" in md and "load average 0.12 0.30 0.25" in md
    assert "min effect 3.0%, q = 0.05, 8 replicates, mode interleaved" in md


def test_terminal_orders_by_severity_and_shows_everything():
    out = rc.terminal(make_doc())
    lines = out.splitlines()
    assert lines[0].startswith(rc.summary_line(make_doc()))
    pos = [line_of(out, k) for k in ORDER + [106]]
    assert pos == sorted(pos)
    line_of(out, 107)
    assert "+20.0%" in lines[line_of(out, 102)] and "[+15.0%, +25.0%]" in lines[line_of(out, 102)]
    assert "2.0%*" in lines[line_of(out, 104)]
    assert "timing definition differs" in lines[line_of(out, 108)]
    assert any(ln.startswith("calibration: calibrated 3.2 h ago on EPYC-9654, 4 rounds") for ln in lines)
    assert "Softmax: header changed" in out and "slowdowns below the 3% minimum effect" in out
    assert "\x1b[" not in out
    colored = rc.terminal(make_doc(), color=True)
    assert "\x1b[31m" in colored and "\x1b[32m" in colored


def test_disagreeing_verdicts_show_both():
    md, term = rc.markdown(make_doc()), rc.terminal(make_doc())
    assert md.splitlines()[line_of(md, 103)].startswith("| 🔴 abs / ✅ vs ORT |")
    assert "🔴 abs / ✅ vs ORT" in term.splitlines()[line_of(term, 103)]
    assert "abs /" not in md.splitlines()[line_of(md, 102)]


def test_calibration_wording():
    assert "**Calibration:** calibrated 3.2 h ago on EPYC\\-9654, 4 rounds" in rc.markdown(make_doc())
    default = make_doc(calibration={"source": "default", "calibration_id": None, "measured_at": None, "age_s": None,
                                    "host_class": None, "rounds": None, "default_sigma": 0.02,
                                    "cells_calibrated": 0, "cells_default": 8})
    assert "not calibrated: σ\\_b = 2.0% default for every cell" in rc.markdown(default)
    assert "calibration: not calibrated: σ_b = 2.0% default for every cell" in rc.terminal(default)
    mixed = make_doc()
    mixed["calibration"].update(source="mixed", age_s=90_000.0, rounds=1, cells_calibrated=6, cells_default=2)
    text = rc.terminal(mixed)
    assert "partly calibrated: 6 cells calibrated 25.0 h ago on EPYC-9654, 1 round; 2 cells use the σ_b = 2.0%" in text
    old = make_doc()
    old["calibration"]["age_s"] = 5 * 86400.0
    assert "calibrated 5.0 d ago" in rc.terminal(old)


# ------------------------------------------------------------------------------------------- escaping

def hostile_doc() -> dict:
    doc = make_doc(suite=HOSTILE, filters=[HOSTILE, HOSTILE_NL], notes=[HOSTILE, HOSTILE_NL],
                   cannot_catch=[HOSTILE], created_at=HOSTILE)
    doc["base"]["ref"] = HOSTILE
    doc["head"]["ref"] = "`" + HOSTILE_NL
    for key in ("hostname", "host_class", "cpu_model", "compiler", "ort_version", "isa", "os"):
        doc["host"][key] = HOSTILE
    doc["host"]["flags"] = [HOSTILE, HOSTILE_NL]
    doc["calibration"]["host_class"] = HOSTILE
    for i, r in enumerate(doc["rows"]):
        r.update(case_id=HOSTILE, op=HOSTILE + " op", dtype=HOSTILE_NL, why=HOSTILE)
        r["params"][HOSTILE] = HOSTILE_NL if i % 2 else HOSTILE
        r["numerics"]["head_status"] = HOSTILE
    return rc.load(doc)


def test_markdown_escapes_every_document_string():
    md = rc.markdown(hostile_doc())
    bare = re.sub(r"\\.", "", md)  # drop every backslash-escaped character: what is left is markup
    assert "<script" not in bare.lower() and "<!--" not in bare and "<i" not in bare
    assert bare.count("<") == 4 and md.count("<details><summary>") == 1 and bare.count("</details>") == 1
    assert "[" not in bare.replace("[+", "").replace("[-", "") and "](" not in bare and "![" not in bare
    assert not re.search(r"@[\w-]", md) and not re.search(r"#\d", md)  # no mention, no issue link
    assert "://" not in md and not re.search(r"(?i)www\.", md) and "&" not in bare
    assert "\r" not in md
    # no line of the comment starts with document text (no new block from a newline in the data)
    for ln in md.splitlines():
        if "octocat" in ln or "two" in ln.replace("\\", ""):
            assert ln.startswith(("| ", "### ", "Suite ", "- ", "**Host:**", "**Calibration:**")), ln
    # refs that are not plain ref names are escaped text, not code spans
    assert "`" not in re.sub(r"\\.", "", md.splitlines()[0])
    assert rc.md_ref("main~2") == "`main~2`" and rc.md_ref("a`b") == "a\\`b"
    # tables: every row has exactly the header's number of unescaped pipes
    header_pipes = None
    for ln in md.splitlines():
        if ln.startswith("| Status"):
            header_pipes = len(re.findall(r"(?<!\\)\|", ln))
        elif ln.startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", ln)) == header_pipes, ln
    assert len(md_rows(md)) == len(rows())
    # and the text is still there, escaped
    plain = re.sub(r"\\(.)", r"\1", md).replace(ZWSP, "")
    assert "x|y</details><script>alert(1)</script>[a](http://e) ![i](http://e/i.png) @octocat #1" in plain


SHA40 = "0123456789abcdef0123456789abcdef01234567"
AUTOLINKS = f"GH-123 gh-7 octo-org/kernels#12 octo-org/kernels@{SHA40} fixed in {SHA40}, see abc1234 and ABCDEF0123."


def test_markdown_breaks_githubs_issue_and_commit_autolinks():
    """GitHub links `GH-123` to an issue and a standalone run of 7 to 40 hex digits to the commit it
    names: document text gets a zero-width space in each, as `@` and `#` already do."""
    out = rc.md_text(AUTOLINKS, 400)
    bare = re.sub(r"\\(.)", r"\1", out)  # the escapes gone: the text GitHub autolinks
    assert not re.search(r"(?i)gh-\d", bare) and not re.search(r"#\d", bare) and not re.search(r"@\w", bare)
    assert not re.search(r"[0-9a-fA-F]{7,}", bare), bare
    assert bare.replace(ZWSP, "") == AUTOLINKS  # nothing else changes: the text reads the same
    assert rc.md_text("deadbee-fed") == "deadbe" + ZWSP + "e\\-fed"  # the hex run, split into runs of 6
    # left whole: numbers (no letter), hex inside a longer word (GitHub does not link those), short runs
    assert rc.md_text("1048576 bytes x0123456789abcdef abc123") == "1048576 bytes x0123456789abcdef abc123"
    # in the rendered comment: notes, filters and a row's explanation carry no linkable SHA or GH-N
    md = rc.markdown(rc.load(make_doc(notes=[AUTOLINKS], filters=[AUTOLINKS])))
    body = re.sub(r"`[^`]*`", "", re.sub(r"\\(.)", r"\1", md))  # code spans (md_ref) are never linked
    assert "fixed in" in body and not re.search(r"(?<![\w/])[0-9a-f]{7,}(?![\w])", body)
    assert not re.search(r"(?i)gh-\d", body)
    # a ref stays inline code, whole: GitHub does not autolink inside code spans
    assert rc.md_ref(SHA40) == f"`{SHA40}`"


def test_terminal_drops_control_characters():
    doc = hostile_doc()
    doc["rows"][0]["op"] = "Soft\x1b[31mmax\u202e"
    out = rc.terminal(doc)
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    same_shape = make_doc(notes=["a", "b"], cannot_catch=["c"])  # newlines in the data add no lines
    assert len(out.splitlines()) == len(rc.terminal(same_shape).splitlines())


# ------------------------------------------------------------------------------------------- size cap

def big_doc(n=2000, flagged_every=50):
    out = []
    for i in range(n):
        if i % flagged_every == 0:
            out.append(row(10_000 + i, "regression", change("regression", 1e6, 1.1e6, 0.1, 0.05, 0.15)))
        else:
            out.append(row(10_000 + i, "unchanged", change("unchanged", 1e6, 1e6, 0.0, -0.01, 0.01)))
    return make_doc(rows=out)


def test_size_cap_drops_unchanged_first_and_says_how_many():
    doc = big_doc()
    assert len(rc.markdown(doc, max_chars=10**7)) > 60000
    md = rc.markdown(doc)
    assert len(md) <= 60000
    assert rc.summary_line(doc) in md and "**What this cannot catch**" in md and "effects that only show" in md
    assert "**Calibration:**" in md and "AMD EPYC 9654" in md
    shown = md_rows(md)
    m = re.search(r"… (\d+) rows omitted \(size cap\); the full comparison is in the JSON artifact", md)
    assert m and int(m.group(1)) == 2000 - len(shown)
    assert sum(ln.startswith("| 🔴") for ln in shown) == 40  # every regression kept
    assert md.count("<details>") == md.count("</details>") <= 1


def test_size_cap_truncates_flagged_rows_when_needed():
    doc = big_doc(flagged_every=1)
    for cap in (60000, 8000, 2500):
        md = rc.markdown(doc, max_chars=cap)
        assert len(md) <= cap
        assert rc.summary_line(doc) in md and "**What this cannot catch**" in md
        m = re.search(r"… (\d+) rows omitted", md)
        assert m and int(m.group(1)) == 2000 - len(md_rows(md))
        assert "<details>" not in md
    assert len(rc.markdown(doc, max_chars=300)) <= 300


def test_small_documents_are_not_capped():
    md = rc.markdown(make_doc())
    assert "omitted" not in md and len(md_rows(md)) == len(rows())


def test_huge_document_strings_stay_within_the_cap():
    huge = ("@#|<" * 5000)[:20000]
    doc = big_doc(n=300, flagged_every=3)
    doc.update(suite=huge, filters=[huge] * 50, notes=[huge] * 500, cannot_catch=[huge] * 500)
    for key in ("hostname", "cpu_model", "compiler", "os", "host_class"):
        doc["host"][key] = huge
    doc["host"]["flags"] = [huge] * 500
    for r in doc["rows"]:
        r.update(op=huge, why=huge)
        r["params"] = {huge + str(i): huge for i in range(5)}
    md = rc.markdown(rc.load(doc))
    assert len(md) <= 60000 and rc.summary_line(doc) in md and "**What this cannot catch**" in md
    assert "… and 480 more" in md  # long lists are cut, and say so
    assert re.search(r"… \d+ rows omitted", md)
