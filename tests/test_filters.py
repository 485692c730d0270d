"""perfbench.filters (CONTRACTS §5): values, lists, ranges, aliases, AND within a filter, OR across
filters, and errors that name the mistake."""

from __future__ import annotations

import pytest

from perfbench import filters, ops
from perfbench.errors import UsageError
from perfbench.suites import Cell


def softmax(keys, heads=32, queries=1, dtype="f32", threads=1, cache="warm", spin="off"):
    case = ops.get("Softmax").make_case({"heads": heads, "queries": queries, "keys": keys})
    return Cell(case, dtype, threads, cache, spin)


def rotary(seq, layout="bsnh", dtype="f32", threads=1):
    case = ops.get("RotaryEmbedding").make_case({"heads": 2, "head_size": 16, "seq": seq, "layout": layout})
    return Cell(case, dtype, threads)


SOFTMAX_KEYS = [64, 128, 512, 1024, 4096]


def keys_matching(*texts):
    flts = [filters.parse(t) for t in texts]
    return [k for k in SOFTMAX_KEYS if filters.matches(flts, softmax(k))]


def test_parse_single_value_and_list():
    f = filters.parse("keys=128")
    assert len(f.terms) == 1 and f.terms[0].field == "keys" and f.terms[0].values == ("128",)
    assert str(f) == "keys=128"
    assert keys_matching("keys=128") == [128]
    assert keys_matching("keys=128,1024") == [128, 1024]
    assert keys_matching("keys=7") == []


@pytest.mark.parametrize("text, want", [
    ("keys=128..1024", [128, 512, 1024]),  # inclusive at both ends
    ("keys=..512", [64, 128, 512]),
    ("keys=128..", [128, 512, 1024, 4096]),
    ("keys=129..1023", [512]),
    ("keys=4096..4096", [4096]),
    ("keys=5000..", []),
])
def test_inclusive_ranges_with_open_ends(text, want):
    t = filters.parse(text).terms[0]
    assert t.is_range
    assert keys_matching(text) == want


def test_range_bounds_parse_as_numbers():
    t = filters.parse("keys=..512").terms[0]
    assert (t.lo, t.hi) == (None, 512)
    t = filters.parse("keys=128..").terms[0]
    assert (t.lo, t.hi) == (128, None)
    assert str(t) == "keys=128.."


def test_cell_fields_threads_cache_spin_device():
    c = softmax(128, threads=2, cache="cold", spin="on")
    assert filters.matches([filters.parse("threads=2")], c)
    assert not filters.matches([filters.parse("threads=1")], c)
    assert filters.matches([filters.parse("threads=1..2")], c)
    assert filters.matches([filters.parse("cache=cold spin=on device=cpu")], c)
    assert not filters.matches([filters.parse("cache=warm")], c)
    assert not filters.matches([filters.parse("device=cuda")], c)


@pytest.mark.parametrize("alias", ["f16", "float16", "fp16", "F16", "FLOAT16"])
def test_dtype_aliases(alias):
    f = filters.parse(f"dtype={alias}")
    assert f.terms[0].values == ("f16",)
    assert filters.matches([f], softmax(128, dtype="f16"))
    assert not filters.matches([f], softmax(128, dtype="f32"))
    assert not filters.matches([f], softmax(128, dtype="bf16"))


def test_dtype_list_with_aliases():
    f = filters.parse("dtype=float32,bfloat16")
    assert [d for d in ("f32", "f16", "bf16") if filters.matches([f], softmax(128, dtype=d))] == ["f32", "bf16"]


def test_unknown_dtype_in_filter_is_a_usage_error():
    with pytest.raises(UsageError, match="f64"):
        filters.parse("dtype=f64")


@pytest.mark.parametrize("text", ["op=Softmax", "op=softmax", "op=SOFTMAX", "op=RotaryEmbedding,softmax"])
def test_op_matches_case_insensitively(text):
    assert filters.matches([filters.parse(text)], softmax(128))


def test_op_does_not_match_other_op():
    assert not filters.matches([filters.parse("op=rotaryembedding")], softmax(128))
    assert filters.matches([filters.parse("op=rotaryembedding")], rotary(1))
    assert not filters.matches([filters.parse("op=Softmaxx")], softmax(128))


def test_id_exact_and_wildcards():
    c = softmax(1024)
    cid = c.case.case_id
    assert filters.matches([filters.parse(f"id={cid}")], c)
    assert filters.matches([filters.parse("id=Softmax.*")], c)
    assert filters.matches([filters.parse("id=*.keys=1024")], c)
    assert filters.matches([filters.parse("id=Softmax.batch=1.heads=3?.queries=1.keys=1024")], c)
    assert not filters.matches([filters.parse("id=*.keys=128")], c)
    assert not filters.matches([filters.parse("id=Rotary*")], c)
    # an id is matched whole, not as a substring and not as a range
    assert not filters.matches([filters.parse("id=keys=1024")], c)
    assert not filters.parse("id=Softmax.*..*").terms[0].is_range


def test_and_within_a_filter():
    f = filters.parse("op=Softmax keys=128..1024 heads=14")
    assert len(f.terms) == 3
    assert filters.matches([f], softmax(512, heads=14))
    assert not filters.matches([f], softmax(512, heads=32))  # one term fails
    assert not filters.matches([f], softmax(4096, heads=14))


def test_or_across_filters():
    flts = [filters.parse("keys=128"), filters.parse("seq=1")]
    assert filters.matches(flts, softmax(128))
    assert not filters.matches(flts, softmax(512))
    assert filters.matches(flts, rotary(1))
    assert not filters.matches(flts, rotary(4))
    assert keys_matching("keys=64", "keys=4096") == [64, 4096]


def test_no_filters_match_everything():
    assert filters.matches([], softmax(128))


@pytest.mark.parametrize("text", ["seq=1", "seq=1,2", "seq=..10", "seq=0..", "layout=bsnh", "head_size=16"])
def test_term_on_missing_axis_never_matches(text):
    # a Softmax case has no seq/layout/head_size: the term never matches, whatever its value
    assert not filters.matches([filters.parse(text)], softmax(128))
    assert not filters.matches([filters.parse(f"op=Softmax {text}")], softmax(128))


def test_term_on_missing_axis_does_not_block_other_filters():
    assert filters.matches([filters.parse("seq=1"), filters.parse("op=Softmax")], softmax(128))


def test_string_axis_value():
    assert filters.matches([filters.parse("layout=bnsh")], rotary(4, layout="bnsh"))
    assert not filters.matches([filters.parse("layout=bnsh")], rotary(4, layout="bsnh"))


@pytest.mark.parametrize("text, needle", [
    ("keys", "keys"),            # no '='
    ("op=Softmax keys", "keys"),  # second term malformed
    ("=128", "=128"),
    ("keys=", "keys="),
    ("keys=a..b", "keys=a..b"),
    ("keys=1..b", "keys=1..b"),
    ("keys=..", "keys=.."),
    ("", "empty"),
    ("   ", "empty"),
])
def test_malformed_terms_raise_usage_error(text, needle):
    with pytest.raises(UsageError) as ei:
        filters.parse(text)
    assert needle in str(ei.value)


def test_check_names_accepts_cell_fields_and_axes():
    axes = {"heads", "queries", "keys", "batch"}
    filters.check_names([filters.parse(f"{f}={'f32' if f == 'dtype' else '1'}") for f in filters.CELL_FIELDS],
                        axes)
    filters.check_names([filters.parse("keys=1 heads=2"), filters.parse("batch=1")], axes)


def test_check_names_rejects_unknown_names_with_hint():
    axes = {"heads", "queries", "keys", "batch"}
    with pytest.raises(UsageError) as ei:
        filters.check_names([filters.parse("op=Softmax"), filters.parse("keyz=128")], axes)
    msg = str(ei.value)
    assert "'keyz'" in msg and "did you mean 'keys'" in msg and "keyz=128" in msg
    with pytest.raises(UsageError, match="did you mean 'threads'"):
        filters.check_names([filters.parse("thread=2")], axes)
    with pytest.raises(UsageError, match="'zzz'"):
        filters.check_names([filters.parse("zzz=2")], axes)
