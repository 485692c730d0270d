"""perfbench.suites: the shipped suite loads and expands into stable cells; every malformed suite
file is a UsageError naming the file, the key and a fix (one fixture file per error)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from perfbench import filters, ops, suites
from perfbench.errors import UsageError
from tests.conftest import ROOT, cli_environ, perfbench_cmd

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "suites"
ID_RE = re.compile(r"^[A-Za-z0-9_.=-]+$")


@pytest.fixture(scope="module")
def attention():
    return suites.load("attention")


def test_attention_suite_loads(attention):
    assert attention.name == "attention"
    assert attention.path == suites.suites_dir() / "attention.toml"
    assert [b.op for b in attention.blocks] == (["Softmax"] * 2 + ["RotaryEmbedding"] * 2
                                                + ["GroupQueryAttention"] * 9 + ["MultiHeadAttention"] * 3)
    assert attention.settings["dtypes"] == ["f32", "f16", "bf16"]
    assert attention.settings["threads"] == [1, 2]
    assert attention.settings["replicates"] == 8 and attention.settings["quick_replicates"] == 5
    assert {"heads", "queries", "keys", "seq", "head_size", "layout", "interleaved"} <= attention.axes()
    # loading by path is the same suite
    again = suites.load(str(suites.suites_dir() / "attention.toml"))
    assert again.text_hash == attention.text_hash and again.name == "attention"


def test_expand_full_sweep_counts(attention):
    cells, notes = attention.expand()
    assert notes == []
    timed = [c for c in cells if not c.numerics_only]
    # Softmax 2x1x4 + 2x1x2, Rotary 4x2x2 twice = 8 + 4 + 16 + 16 = 44 cases;
    # GroupQueryAttention: decode 3 pasts x 2 KV modes x 2 layouts = 12, cold 3 x 2 layouts = 6,
    # rotary 2, ragged 1, prefill 2 seqs x 2 layouts = 4, prefill with rotary 1 = 26 cases;
    # MultiHeadAttention: decode 3 warm + 3 cold, prefill 2 seqs x 2 masks = 10 cases;
    # each x 3 dtypes x 2 threads (cold is its own block, so no doubling)
    assert len(timed) == (44 + 26 + 10) * 3 * 2
    assert len([c for c in timed if c.cache == "cold"]) == (6 + 3) * 3 * 2
    # numerics-only shapes: Softmax 3 + Rotary 4 + GQA 7 + MHA 4 = 18, x 3 dtypes x 2 threads
    # (once each: numerics do not depend on cache/spin)
    assert len(cells) - len(timed) == 18 * 3 * 2
    assert len({c.key for c in cells}) == len(cells)


def test_case_ids_are_stable_and_safe(attention):
    cells, _ = attention.expand()
    cells2, _ = suites.load("attention").expand()
    assert [c.key for c in cells] == [c.key for c in cells2]
    for c in cells:
        cid = c.case.case_id
        assert ID_RE.match(cid), cid
        assert ".." not in cid, cid
    # the id is a pure function of the parameters: order of keys and explicit defaults do not matter
    sm = ops.get("Softmax")
    a = sm.make_case({"heads": 32, "queries": 1, "keys": 1024})
    b = sm.make_case({"keys": 1024, "batch": 1, "queries": 1, "heads": 32})
    assert a.case_id == b.case_id == "Softmax.batch=1.heads=32.queries=1.keys=1024"
    assert sm.make_case({"heads": 32, "queries": 1, "keys": 512}).case_id != a.case_id
    assert a.case_id in {c.case.case_id for c in cells}
    rope = ops.get("RotaryEmbedding").make_case({"seq": 1, "heads": 32, "head_size": 128})
    assert rope.case_id == ("RotaryEmbedding.batch=1.seq=1.heads=32.head_size=128.layout=bsnh"
                            ".interleaved=0.pos_offset=1000")


def test_same_case_in_two_blocks_is_one_cell(tmp_path):
    p = tmp_path / "dup.toml"
    p.write_text('[suite]\nname = "dup"\n'
                 '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = [64, 128] }\n'
                 '[[ops]]\nop = "softmax"\naxes = { heads = 2, queries = 1, keys = 64, batch = 1 }\n')
    cells, _ = suites.load(str(p)).expand()
    assert [c.case.p["keys"] for c in cells] == [64, 128]


def test_quick_subset_only_blocks_with_quick(attention):
    full, _ = attention.expand()
    quick, _ = attention.expand(quick=True)
    assert 0 < len(quick) < len(full)
    assert {c.key for c in quick} <= {c.key for c in full}
    timed = [c for c in quick if not c.numerics_only]
    # the quick axes replace the block's axes
    sm = [c for c in timed if c.case.op == "Softmax"]
    assert sm and {(c.case.p["heads"], c.case.p["queries"], c.case.p["keys"]) for c in sm} == {(32, 1, 1024)}
    rope = [c for c in timed if c.case.op == "RotaryEmbedding"]
    assert rope and {(c.case.p["heads"], c.case.p["head_size"], c.case.p["seq"], c.case.p["layout"],
                      c.case.p["interleaved"]) for c in rope} == {(32, 128, 128, "bsnh", 0)}
    # blocks 2 and 4 have no `quick`: none of their cases (queries=128 Softmax, 14x64 rotary) appear
    assert not any(c.case.op == "Softmax" and c.case.p["queries"] == 128 for c in quick)
    assert not any(c.case.op == "RotaryEmbedding" and c.case.p["head_size"] == 64 for c in quick)


def test_quick_true_keeps_block_and_missing_quick_skips():
    s = suites.load(str(FIXTURES / "valid_overrides.toml"))
    quick, _ = s.expand(quick=True)
    assert {c.case.op for c in quick} == {"RotaryEmbedding"}  # the Softmax block has no `quick`
    assert sorted(c.case.p["seq"] for c in quick) == [1, 4]  # quick = true: the whole block


def test_numerics_only_cells_are_marked(attention):
    cells, _ = attention.expand()
    num = [c for c in cells if c.numerics_only]
    shapes = {(c.case.op, c.case.p.get("keys"), c.case.p.get("head_size")) for c in num}
    assert {("Softmax", 4097, None), ("Softmax", 4105, None), ("Softmax", 33, None),
            ("RotaryEmbedding", None, 80), ("RotaryEmbedding", None, 36),
            ("GroupQueryAttention", None, 80), ("MultiHeadAttention", None, 80)} <= shapes
    # the odd shapes are there: head size 80, past 4097, prefill 33
    assert {c.case.op for c in num if c.case.p.get("past") == 4097} == {"GroupQueryAttention", "MultiHeadAttention"}
    assert {c.case.op for c in num if c.case.p.get("seq") == 33} >= {"GroupQueryAttention", "MultiHeadAttention"}
    timed_ids = {c.case.case_id for c in cells if not c.numerics_only}
    assert not timed_ids & {c.case.case_id for c in num}
    # every cell whose shape is listed under a block's `numerics` is marked, and only those
    listed = {ops.get(b.op).make_case(dict(v)).case_id for b in attention.blocks for v in b.numerics}
    for c in cells:
        assert c.numerics_only == (c.case.case_id in listed), c.label()


def test_numerics_only_cells_not_repeated_over_cache_and_spin():
    s = suites.load(str(FIXTURES / "valid_overrides.toml"))
    cells, _ = s.expand(max_threads=64)
    num = [c for c in cells if c.numerics_only]
    assert len(num) == 2 * 2  # 2 dtypes x 2 threads, first cache/spin mode only
    assert {(c.cache, c.spin) for c in num} == {("warm", "off")}
    timed_sm = [c for c in cells if c.case.op == "Softmax" and not c.numerics_only]
    assert len(timed_sm) == 2 * 2 * 2 * 2 * 2  # keys x dtypes x threads x cache x spin


def test_threads_above_max_are_skipped_with_a_note(attention):
    cells, notes = attention.expand(max_threads=1)
    assert {c.threads for c in cells} == {1}
    assert len(notes) == 1
    assert "threads=2" in notes[0] and "1 usable core" in notes[0]
    full, notes_full = attention.expand(max_threads=2)
    assert notes_full == [] and len(full) == 2 * len(cells)
    cells3, notes3 = attention.expand(threads=[1, 3, 8], max_threads=2)
    assert {c.threads for c in cells3} == {1}
    assert any("threads=3" in n and "2 usable cores" in n for n in notes3)
    assert any("threads=8" in n for n in notes3)


def test_command_line_overrides(attention):
    cells, _ = attention.expand(dtypes_=["float16"], threads=[3], cache=["cold"], spin=["on"])
    assert cells
    timed = [c for c in cells if not c.numerics_only]
    assert {c.dtype for c in cells} == {"f16"}  # aliases are canonicalized
    assert {c.threads for c in cells} == {3}
    assert {(c.cache, c.spin) for c in timed} == {("cold", "on")}
    assert all(c.device == "cpu" for c in cells)
    base, _ = attention.expand()
    assert len({c.case.case_id for c in cells}) == len({c.case.case_id for c in base})


def test_block_overrides_beat_suite_and_command_line_beats_block():
    s = suites.load(str(FIXTURES / "valid_overrides.toml"))
    cells, notes = s.expand(max_threads=2)
    sm = [c for c in cells if c.case.op == "Softmax" and not c.numerics_only]
    assert {c.dtype for c in sm} == {"f16", "bf16"}
    assert {c.threads for c in sm} == {2}
    assert {c.cache for c in sm} == {"warm", "cold"} and {c.spin for c in sm} == {"off", "on"}
    assert notes == ["threads=4 skipped: this host has 2 usable cores"]
    rope = [c for c in cells if c.case.op == "RotaryEmbedding"]
    assert {(c.dtype, c.threads, c.cache, c.spin) for c in rope} == {("f32", 1, "warm", "off")}
    cli, _ = s.expand(dtypes_=["f32"], threads=[1], cache=["warm"], spin=["off"])
    assert {(c.dtype, c.threads, c.cache, c.spin) for c in cli} == {("f32", 1, "warm", "off")}


def test_expand_with_filters(attention):
    cells, _ = attention.expand(filters=[filters.parse("op=softmax keys=..512 dtype=float32 threads=1")])
    assert cells and all(c.case.op == "Softmax" and c.case.p["keys"] <= 512 and c.dtype == "f32"
                         and c.threads == 1 for c in cells)
    with pytest.raises(UsageError, match="did you mean 'keys'"):
        attention.expand(filters=[filters.parse("keyz=1")])


# ---- validation errors: one fixture file each ----

ERRORS = [
    # file, what must appear (the key or value at fault), what the fix looks like (regex)
    ("unknown_top_level_key.toml", "'op'", r"did you mean 'ops'"),
    ("unknown_suite_key.toml", "'dtype'", r"did you mean 'dtypes'"),
    ("unknown_block_key.toml", "'axis'", r"did you mean 'axes'"),
    ("unknown_op.toml", "'Softmx'", r"did you mean 'Softmax'"),
    ("unknown_axis_param.toml", "'keyz'", r"did you mean 'keys'"),
    ("wrong_type_threads.toml", "threads", r"must be (a )?positive integer"),
    ("bad_cache.toml", "cache", r"warm.*cold"),
    ("bad_dtype.toml", "dtype", r"f32, f16, bf16"),
    ("empty_axis.toml", "keys", r"at least one|remove|give|e\.g\."),
    ("missing_name.toml", "name", r'name = "'),
    ("missing_ops.toml", "[[ops]]", r"at least one \[\[ops\]\]"),
    ("invalid_toml.toml", "TOML", r"line 3"),
    ("quick_unknown_param.toml", "'kyes'", r"did you mean 'keys'|parameters: .*keys"),
    ("out_of_range.toml", "keys", r">= 1"),
    ("bad_choice.toml", "layout", r"'bsnh', 'bnsh'"),
    ("bad_block_spin.toml", "spin", r"off, on"),
    # quick and numerics shapes are validated when the file loads, like the axes
    ("quick_out_of_range.toml", "quick", r">= 1"),
    ("quick_empty_list.toml", "quick", r"at least one|remove|give|e\.g\."),
    ("numerics_unknown_param.toml", "numerics", r"did you mean 'keys'"),
    # upper bounds (issue 25): heads = 10**12 passed the minimum-only check
    ("heads_too_large.toml", "heads", r"<= 1024.*smaller heads"),
    ("too_many_threads.toml", "threads", r"at most 256"),
]
# values that are wrong must be quoted back to the user
BAD_VALUES = {"wrong_type_threads.toml": "'two'", "bad_cache.toml": "'hot'", "bad_dtype.toml": "'f64'",
              "out_of_range.toml": "got 0", "bad_choice.toml": "'bshn'", "bad_block_spin.toml": "'fast'",
              "quick_out_of_range.toml": "got 0", "numerics_unknown_param.toml": "'keyz'",
              "heads_too_large.toml": "got 1000000000000", "too_many_threads.toml": "1024"}


def test_every_error_fixture_is_used():
    used = {e[0] for e in ERRORS} | {"valid_overrides.toml"}
    assert {p.name for p in FIXTURES.glob("*.toml")} == used


@pytest.mark.parametrize("name, key, fix", ERRORS, ids=[e[0].removesuffix(".toml") for e in ERRORS])
def test_validation_error_names_file_key_and_fix(name, key, fix):
    path = FIXTURES / name
    with pytest.raises(UsageError) as ei:
        suites.load(str(path))
    msg = str(ei.value)
    assert str(path) in msg, msg
    rest = msg.replace(str(path), "")  # the file name alone must not satisfy the checks below
    assert key in rest, msg
    assert re.search(fix, rest), f"no fix in: {msg}"
    if name in BAD_VALUES:
        assert BAD_VALUES[name] in rest, msg
    assert ei.value.exit_code == 2


def test_nested_errors_say_which_block(tmp_path):
    p = tmp_path / "second_block.toml"
    p.write_text('[suite]\nname = "x"\n'
                 '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = 64 }\n'
                 '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = [64, -1] }\n')
    with pytest.raises(UsageError) as ei:
        suites.load(str(p))
    assert "ops[1]" in str(ei.value) and "keys" in str(ei.value)


def test_unknown_suite_name_lists_known_suites():
    with pytest.raises(UsageError) as ei:
        suites.load("nonexistent")
    msg = str(ei.value)
    assert "'nonexistent'" in msg
    assert "attention" in msg
    with pytest.raises(UsageError, match="did you mean 'attention'"):
        suites.load("atention")


# ---- the cell cap (issue 25): counted from the axis lengths, before any cell is made ----

TOO_MANY = ROOT / "tests" / "fixtures" / "too_many_cells.toml"


def test_a_suite_past_the_cell_cap_is_refused_with_its_count():
    s = suites.load(str(TOO_MANY))  # loads: --filter may still narrow it
    with pytest.raises(UsageError) as ei:
        s.expand()
    msg = str(ei.value)
    assert str(TOO_MANY) in msg and "270,000 cells" in msg, msg
    assert f"{suites.MAX_SUITE_CELLS:,}" in msg and "--filter" in msg and "fewer axis values" in msg, msg
    assert ei.value.exit_code == 2
    # --filter narrows it to a size that expands: 30 heads x 30 queries x 1 keys at batch 1
    cells, _ = s.expand(filters=[filters.parse("batch=1 keys=64")])
    assert len(cells) == 30 * 30 and {c.case.p["batch"] for c in cells} == {1}
    # a filter that keeps too much is refused with the filtered count
    with pytest.raises(UsageError, match=r"27,000 cells \(after the filters\)"):
        s.expand(filters=[filters.parse("keys=64")])


def test_a_billion_cell_suite_is_refused_without_making_its_cells(tmp_path):
    values = "[" + ", ".join(str(v) for v in range(1, 1001)) + "]"
    p = tmp_path / "billion.toml"
    p.write_text(f'[suite]\nname = "billion"\n[[ops]]\nop = "Softmax"\n'
                 f"axes = {{ batch = {values}, heads = {values[:200]}], queries = {values}, keys = {values} }}\n")
    s = suites.load(str(p))  # each value checked, not each of the cases
    with pytest.raises(UsageError, match=r"would expand to [0-9,]{13,} cells") as ei:
        s.expand()
    assert ei.value.exit_code == 2


def test_list_refuses_a_suite_past_the_cell_cap_with_exit_2(tmp_path):
    env = cli_environ(tmp_path)
    r = subprocess.run(perfbench_cmd() + ["list", "--suite", str(TOO_MANY)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "270,000 cells" in r.stderr and "--filter" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
    r = subprocess.run(perfbench_cmd() + ["list", "--suite", str(FIXTURES / "heads_too_large.toml")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "heads must be <= 1024, got 1000000000000" in r.stderr, r.stdout + r.stderr


# ---- measurement settings: one set of bounds (suites.LIMITS), shared with the CLI options, the
# runner and `perfbench import`. Before: the loader checked their types only (processes >= 1
# aside), so timeout_s = 100000 or block_ms = 100000 ran and then their run's export could not
# be imported; processes = 10**9 made the runner build a list of a billion workers

def _suite_with(tmp_path, line: str) -> Path:
    p = tmp_path / "limits.toml"
    p.write_text(f'[suite]\nname = "limits"\n{line}\n'
                 '[[ops]]\nop = "Softmax"\naxes = { heads = 2, queries = 1, keys = 64 }\n')
    return p


@pytest.mark.parametrize("line, needle", [
    ("replicates = 1500", "[suite] replicates: 1500 is not an integer in 2..1000"),
    ("replicates = 1", "[suite] replicates: 1 is not an integer in 2..1000"),
    ("quick_replicates = 1001", "[suite] quick_replicates: 1001 is not an integer in 2..1000"),
    ("rounds = 101", "[suite] rounds: 101 is not an integer in 1..100"),
    ("rounds = 0", "[suite] rounds: 0 is not an integer in 1..100"),
    ("processes = 100", "[suite] processes: 100 is not an integer in 1..64"),
    ("processes = 1000000000", "[suite] processes: 1000000000 is not an integer in 1..64"),
    ("processes = 0", "[suite] processes: 0 is not an integer in 1..64"),
    ("block_ms = 100000", "[suite] block_ms: 100000 is not a number > 0 and <= 60000"),
    ("block_ms = 0", "[suite] block_ms: 0 is not a number > 0 and <= 60000"),
    ("timeout_s = 100000", "[suite] timeout_s: 100000 is not a number > 0 and <= 86400"),
    ("timeout_s = inf", "[suite] timeout_s: inf is not a number > 0 and <= 86400"),
    ("timeout_s = nan", "[suite] timeout_s: nan is not a number > 0 and <= 86400"),
    ("seed = -1", "[suite] seed: -1 is not an integer in 0..2147483647"),
])
def test_settings_past_their_bounds_are_refused(tmp_path, line, needle):
    p = _suite_with(tmp_path, line)
    with pytest.raises(UsageError) as ei:
        suites.load(str(p))
    msg = str(ei.value)
    assert msg.startswith(f"{p}: ") and needle in msg and "give one in that range (the default is " in msg, msg
    assert ei.value.exit_code == 2


def test_settings_at_their_bounds_load(tmp_path):
    p = _suite_with(tmp_path, "replicates = 1000\nquick_replicates = 2\nrounds = 100\nprocesses = 64\n"
                              "block_ms = 60000\ntimeout_s = 86400\nseed = 0")
    assert suites.load(str(p)).settings["rounds"] == 100
    p = _suite_with(tmp_path, "replicates = 2\nrounds = 1\nprocesses = 1\nblock_ms = 0.001\ntimeout_s = 0.5")
    assert suites.load(str(p)).settings["processes"] == 1


def test_bounds_are_far_above_every_shipped_setting():
    for path in suites.suites_dir().glob("*.toml"):
        s = suites.load(str(path))
        for key, lim in suites.LIMITS.items():
            assert lim.holds(s.settings[key]) and s.settings[key] * 10 <= lim.hi, (path.name, key)
    for key, lim in suites.LIMITS.items():
        assert lim.holds(suites.DEFAULTS[key]), key


def test_an_axis_list_longer_than_a_run_may_have_cells_is_refused(tmp_path):
    # the block's own threads: before, the [suite] list loaded and was stored with the run,
    # whose bundle then could not be imported
    p = tmp_path / "long.toml"
    p.write_text('[suite]\nname = "long"\nthreads = [' + ", ".join(["1"] * 20_001) + "]\n"
                 '[[ops]]\nop = "Softmax"\nthreads = [1]\naxes = { heads = 2, queries = 1, keys = 64 }\n')
    with pytest.raises(UsageError, match=r"\[suite\] threads: 20,001 values, more than the 20,000 cells"):
        suites.load(str(p))
    s = suites.load(str(_suite_with(tmp_path, "")))
    with pytest.raises(UsageError, match=r"--dtype: 20,001 values, more than the 20,000 cells"):
        s.expand(dtypes_=["f32"] * 20_001, max_threads=1)
