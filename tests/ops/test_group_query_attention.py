"""GroupQueryAttention beyond the op contract (tests/ops/test_contract.py runs the gate on every
test case -- these labels among them --, dtype, ISA path and 1/2 threads, and the mutants, bad
arguments through C and K ORT copies):

* shared KV buffer mode really shares: our kernel and ORT (bound through perfbench.ops.ort.Bound
  with the op's aliased outputs) write the new key/value rows into the past input array itself
  and leave every other row alone; cells allocate outputs as the Harness does;
* copy mode: present holds the copied past rows, the new rows, and zeros after each batch row's
  tokens (ragged batches); decode key splits with empty chunks;
* attribute values C does not implement are declined with status 2 (unsupported);
* the Harness's numerics-only pass reports the statuses and ORT paths the suite relies on;
* the Python wrapper rejects bad arguments with UsageError before C is called;
* out of scratch memory is status 3 (GQA and MultiHeadAttention: one driver)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import NativeError, UsageError
from perfbench.kernels_ffi import wrappers
from perfbench.ops import ort as ortlib
from perfbench.ops.base import to_f64
from perfbench.ops.group_query_attention import lengths
from perfbench.timing.protocol import CellSpec, Harness
from tests.conftest import ROOT
from tests.helpers import Cell, cell, same_bits

GQA = "GroupQueryAttention"
pytestmark = pytest.mark.usefixtures("auto_isa")

SEED = 20261207
DTYPES = ("f32", "f16", "bf16")
UNSUPPORTED = 2  # PB_ERR_UNSUPPORTED
SENTINEL = 7.0  # what output buffers hold before a call: rows a kernel must write never keep it


GQA_CASES = {
    "decode-B1": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20},
    "decode-ragged-B3": {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "past": 80, "ragged": 1},
    "decode-ragged-B3-shared": {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "past": 80, "ragged": 1,
                                "kv": "shared"},
    "prompt-ragged": {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "seq": 12, "ragged": 1},
    "chunked-prefill": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 9, "seq": 5},
    "rotary": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20, "rotary": 1},
    "rotary-interleaved-shared": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20, "rotary": 1,
                                  "interleaved": 1, "kv": "shared"},
    "rotary-prompt-ragged": {"batch": 2, "heads": 4, "kv_heads": 1, "head_size": 32, "seq": 9, "ragged": 1,
                             "rotary": 1},
    "rotary-interleaved-prefill": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 6, "seq": 4, "rotary": 1,
                                   "interleaved": 1},
    # large enough that 2 threads are used (work twice the 2-thread grain): decode splits its
    # keys, prefill splits its queries
    "decode-key-splits": {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 8192},
    "prefill-two-threads": {"heads": 4, "kv_heads": 2, "head_size": 32, "seq": 64},
    # 8 query heads per KV head: still the decode form (splits, copy while reading)
    "decode-G8-splits": {"heads": 8, "kv_heads": 1, "head_size": 32, "past": 8200},
    # key splits over ragged rows, both KV modes
    "decode-ragged-splits": {"batch": 3, "heads": 4, "kv_heads": 1, "head_size": 32, "past": 4200, "ragged": 1},
    "decode-ragged-splits-shared": {"batch": 3, "heads": 4, "kv_heads": 1, "head_size": 32, "past": 4200,
                                    "ragged": 1, "kv": "shared"},
    # head sizes that leave a vector tail at 16 lanes (40) and at 16 lanes in prefill (24)
    "head-tail-decode": {"heads": 4, "kv_heads": 2, "head_size": 40, "past": 50},
    "head-tail-prefill": {"heads": 4, "kv_heads": 2, "head_size": 24, "seq": 20},
    "head-tail-prefill-40": {"heads": 4, "kv_heads": 2, "head_size": 40, "seq": 20},  # odd vector count at 8 and 16 lanes
}
CASES = {GQA: GQA_CASES}


def _cell(op_name: str, label: str, dtype: str) -> Cell:
    """A cached Cell of the labelled case (these are among the ops' test_cases): outputs of both
    sides pre-filled with SENTINEL; rows a kernel must write never keep it."""
    return cell(op_name, CASES[op_name][label], dtype, seed=SEED, fill=SENTINEL)


# ---- one cell: inputs, oracle, ORT (cached), ours ---------------------------------------------


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _rows_error(got, want, h: int) -> float:
    return numerics.error(_f64(got), _f64(want), h)


# ---- shared KV buffer mode ----------------------------------------------------------------------


def _check_shared_buffer(side: str, buf: np.ndarray, before: np.ndarray, oracle: np.ndarray, case, tol: float):
    """buf (B, Nkv, cap, H) after a shared-mode call: per batch row, the past rows and the rows
    after its tokens are bit-identical to before, the new rows are the oracle's present rows."""
    past_b, total_b, _ = lengths(case)
    h = case.p["head_size"]
    assert buf.shape == before.shape == oracle.shape
    for b, (pb, tot) in enumerate(zip(past_b.tolist(), total_b.tolist())):
        assert same_bits(buf[b, :, :pb], before[b, :, :pb]), f"{side}: batch row {b} past rows changed"
        assert same_bits(buf[b, :, tot:], before[b, :, tot:]), \
            f"{side}: batch row {b} rows after its {tot} tokens were written"
        new = buf[b, :, pb:tot]
        assert not same_bits(new, before[b, :, pb:tot]), f"{side}: batch row {b} new rows were not written"
        err = _rows_error(new, oracle[b, :, pb:tot], h)
        assert err <= tol, f"{side}: batch row {b} new rows err={err:.3g} > {tol:g}"


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("label", ["decode-ragged-B3-shared", "rotary-interleaved-shared"])
def test_shared_kv_mode_writes_into_the_past_input_itself(lib, label, dtype):
    op = ops_pkg.get(GQA)
    case = op.make_case(GQA_CASES[label])
    assert op.aliases(case) == {"present_key": "past_key", "present_value": "past_value"}
    dt = dtypes.get(dtype)
    inputs = op.make_inputs(case, dt, np.random.default_rng(SEED))
    oracle = op.oracle(case, to_f64(inputs))
    tol = 10 * op.floor(dtype)

    # ours: present is the very array passed as past
    mine = op.private_inputs(case, inputs)
    out = op.new_outputs(case, dt.numpy, mine)
    assert out["present_key"] is mine["past_key"] and out["present_value"] is mine["past_value"]
    before = {n: mine[n].copy() for n in ("past_key", "past_value")}
    out["output"][...] = SENTINEL
    op.prepare_ours(lib, case, mine, out, 1).run()
    for name in ("key", "value"):
        _check_shared_buffer(f"ours past_{name}", mine[f"past_{name}"], before[f"past_{name}"],
                             oracle[f"present_{name}"], case, tol)
    assert not same_bits(inputs["past_key"], mine["past_key"])  # ours wrote its own copy, not the inputs

    # ORT through Bound, its present outputs bound onto its own past input arrays
    graph = op.graph(case)
    sess = ortlib.make_session(ortlib.build_model(graph, dt), 1, "off")
    theirs = op.private_inputs(case, ortlib.to_ort_dtype(inputs, dt))
    ort_out = op.new_outputs(case, dt.numpy, theirs)
    assert ort_out["present_key"] is theirs["past_key"] and ort_out["present_value"] is theirs["past_value"]
    before = {n: theirs[n].copy() for n in ("past_key", "past_value")}
    ortlib.Bound(sess, graph, 1, theirs, ort_out).run()
    for name in ("key", "value"):
        _check_shared_buffer(f"ORT past_{name}", theirs[f"past_{name}"], before[f"past_{name}"],
                             oracle[f"present_{name}"], case, tol)
    # both sides' whole buffers against the oracle's present (which keeps the untouched rows)
    for name in ("key", "value"):
        for side, buf in (("ours", mine[f"past_{name}"]), ("ORT", theirs[f"past_{name}"])):
            err = _rows_error(buf, oracle[f"present_{name}"], case.p["head_size"])
            assert err <= tol, f"{side} present_{name}: err={err:.3g}"


# ---- copy mode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("label", ["decode-ragged-B3", "prompt-ragged", "chunked-prefill", "rotary-prompt-ragged",
                                   "decode-key-splits"])
def test_copy_mode_present_rows(lib, label, dtype, threads):
    """present (our kernel and ORT, outputs pre-filled with a sentinel): rows before the new ones
    copied bit-exactly from past, the seq new rows the oracle's (a first prompt writes all of
    them, padding included, as ORT does), every row after them exactly zero."""
    cell = _cell(GQA, label, dtype)
    case, h, seq = cell.case, cell.case.p["head_size"], cell.case.p["seq"]
    assert cell.op.aliases(case) == {}
    past_b, _, _ = lengths(case)
    _, ours = cell.ours_with_inputs(lib, threads)
    zeroed = 0
    for side, out, src in (("ours", ours, cell.inputs), ("ORT", cell.ort_out, cell.ort_in)):
        tol = 10 * cell.floor if side == "ours" or cell.ort_dt == cell.dt else 10 * numerics.FLOORS["f32"]
        for name in ("key", "value"):
            pres = out[f"present_{name}"]
            assert not any(pres is a for a in src.values())
            for b, pb in enumerate(past_b.tolist()):
                if pb:
                    assert same_bits(pres[b, :, :pb], src[f"past_{name}"][b, :, :pb]), \
                        f"{side} present_{name}[{b}]: past rows not copied exactly"
                end = pb + seq
                err = _rows_error(pres[b, :, pb:end], cell.oracle[f"present_{name}"][b, :, pb:end], h)
                assert err <= tol, f"{side} present_{name}[{b}] new rows: err={err:.3g}"
                assert not np.any(_f64(pres[b, :, end:])), f"{side} present_{name}[{b}]: rows from {end} not zero"
                zeroed += pres.shape[2] - end
    if case.p["ragged"] and case.p["past"]:
        assert zeroed > 0  # a ragged decode has rows to zero


# ---- ORT agrees with the oracle; ours passes the gate --------------------------------------------


# ---- attribute values C does not implement ------------------------------------------------------


def _gqa_call(lib, cell: Cell, **kw):
    """A wrappers.group_query_attention call on the cell's inputs (outputs pre-filled)."""
    p = cell.case.p
    x = cell.op.private_inputs(cell.case, cell.inputs)
    out = cell.op.new_outputs(cell.case, cell.dt.numpy, x)
    out["output"][...] = SENTINEL
    call = wrappers.group_query_attention(
        lib, x["query"], x["key"], x["value"], x.get("past_key"), x.get("past_value"), x["seqlens_k"],
        int(x["total_sequence_length"]), out["output"], out["present_key"], out["present_value"],
        num_heads=p["heads"], kv_num_heads=p["kv_heads"], cos_cache=x.get("cos_cache"),
        sin_cache=x.get("sin_cache"), do_rotary=p["rotary"], rotary_interleaved=p["interleaved"], **kw)
    return call, out


@pytest.mark.parametrize("attr, value", [("softcap", 0.5), ("local_window_size", 16), ("smooth_softmax", 1)])
def test_unimplemented_attributes_are_declined(lib, attr, value):
    cell = _cell(GQA, "chunked-prefill", "f32")
    call, out = _gqa_call(lib, cell, **{attr: value})
    with pytest.raises(NativeError) as ei:
        call.run()
    e = ei.value
    assert e.status == UNSUPPORTED, e
    assert e.kernel == "group_query_attention"
    assert f"{attr}=" in e.message and "not implemented" in e.message, e.message
    assert np.all(out["output"] == SENTINEL)  # declined before any work


@pytest.mark.parametrize("smooth", [-1, 0])
def test_smooth_softmax_off_is_accepted(lib, smooth):
    cell = _cell(GQA, "chunked-prefill", "f32")
    ref_call, ref = _gqa_call(lib, cell)
    ref_call.run()
    call, out = _gqa_call(lib, cell, smooth_softmax=smooth)
    call.run()
    for k in ref:
        assert same_bits(out[k], ref[k])
    assert cell.gate(out).ours_ok


# ---- the Harness, numerics only -------------------------------------------------------------------

HARNESS_GQA = [["batch", 2], ["heads", 4], ["kv_heads", 2], ["head_size", 16], ["past", 40], ["ragged", 1],
               ["kv", "shared"]]
@pytest.mark.parametrize("op_name, params, dtype, ort_dt, path", [
    pytest.param(GQA, HARNESS_GQA, "f32", "f32", "kernel", id="GQA-shared-f32"),
    pytest.param(GQA, HARNESS_GQA, "bf16", "f32", "substituted", id="GQA-shared-bf16"),
])
def test_harness_numerics_only_cell(lib, op_name, params, dtype, ort_dt, path):
    spec = CellSpec(op=op_name, params=params, dtype=dtype, threads=1, numerics_only=True)
    out = Harness(lib).measure(spec)
    assert out.ours_status == "ok", out.ours_message
    assert out.ort_status == "ok", out.ort_message
    assert out.ort_path == path, out.ort_ops
    assert out.ort_dtype == ort_dt
    assert out.err_ours is not None and out.err_ours <= out.tol
    assert out.ours_ns == [] and out.ort_ns == []  # numerics only: nothing timed


# ---- the Python wrappers reject bad arguments --------------------------------------------------


def _gqa_args(cell: Cell) -> dict:
    p = cell.case.p
    x = cell.op.private_inputs(cell.case, cell.inputs)
    out = cell.op.new_outputs(cell.case, cell.dt.numpy, x)
    out["output"][...] = SENTINEL
    return dict(query=x["query"], key=x["key"], value=x["value"], past_key=x.get("past_key"),
                past_value=x.get("past_value"), seqlens_k=x["seqlens_k"].copy(),
                total_sequence_length=int(x["total_sequence_length"]), output=out["output"],
                present_key=out["present_key"], present_value=out["present_value"], num_heads=p["heads"],
                kv_num_heads=p["kv_heads"], cos_cache=x.get("cos_cache"), sin_cache=x.get("sin_cache"),
                do_rotary=p["rotary"], rotary_interleaved=p["interleaved"])


def _gqa_bad(label: str, change):
    def make():
        a = _gqa_args(_cell(GQA, label, "f32"))
        change(a)
        return a
    return make


def _set(**kw):
    def change(a):
        a.update({k: (v(a) if callable(v) else v) for k, v in kw.items()})
    return change


def _seqlens(i, v):
    def change(a):
        a["seqlens_k"][i] = v
    return change


GQA_BAD = {
    "seqlens_k-beyond-capacity": (_gqa_bad("decode-B1", _seqlens(0, 21)), "seqlens_k[0]=21"),
    "seqlens_k-negative": (_gqa_bad("decode-ragged-B3", _seqlens(2, -1)), "seqlens_k[2]=-1"),
    "seqlens_k-below-seq": (_gqa_bad("chunked-prefill", _seqlens(0, 2)), "seqlens_k[0]=2"),
    "seqlens_k-prompt-longer-than-seq": (_gqa_bad("prompt-ragged", _seqlens(1, 12)), "seqlens_k[1]=12"),
    "seqlens_k-int64": (_gqa_bad("decode-B1", _set(seqlens_k=lambda a: a["seqlens_k"].astype(np.int64))),
                        "seqlens_k must be int32"),
    "present-capacities-differ": (_gqa_bad("decode-B1", _set(
        present_value=lambda a: np.zeros((1, 2, 22, 32), np.float32))), "present_value must have shape"),
    "present-wrong-head-size": (_gqa_bad("decode-B1", _set(
        present_key=lambda a: np.zeros((1, 2, 21, 16), np.float32),
        present_value=lambda a: np.zeros((1, 2, 21, 16), np.float32))), "present_key must have shape"),
    "present-3d": (_gqa_bad("decode-B1", _set(present_key=lambda a: np.zeros((1, 2, 21 * 32), np.float32))),
                   "present_key must be (B, Nkv, capacity, H)"),
    "heads-not-a-multiple": (_gqa_bad("decode-B1", _set(num_heads=3)), "not a multiple of kv_num_heads=2"),
    "position-beyond-cos-cache": (_gqa_bad("rotary", _set(cos_cache=lambda a: np.ascontiguousarray(a["cos_cache"][:20]),
                                                          sin_cache=lambda a: np.ascontiguousarray(a["sin_cache"][:20]))),
                                  "position 20 is outside the cos/sin cache"),
    "rotary-without-caches": (_gqa_bad("rotary", _set(cos_cache=None, sin_cache=None)), "needs cos_cache"),
    "share-one-cache-only": (_gqa_bad("decode-ragged-B3-shared", _set(present_value=lambda a: a["past_value"].copy())),
                             "share both caches"),
    "past-key-without-value": (_gqa_bad("decode-B1", _set(past_value=None)), "both past_key and past_value"),
    "key-dtype-differs": (_gqa_bad("decode-B1", _set(key=lambda a: a["key"].astype(np.float16))), "key dtype"),
    "total-sequence-length-0": (_gqa_bad("decode-B1", _set(total_sequence_length=0)), "total_sequence_length"),
    "threads-0": (_gqa_bad("decode-B1", lambda a: None), "threads=0"),
}


@pytest.mark.parametrize("case", list(GQA_BAD))
def test_gqa_wrapper_rejects(lib, case):
    make, words = GQA_BAD[case]
    a = make()
    threads = 0 if case == "threads-0" else 1
    with pytest.raises(UsageError) as ei:
        wrappers.group_query_attention(lib, **a, threads=threads)
    assert words in str(ei.value), str(ei.value)
    assert np.all(a["output"] == SENTINEL)  # C was never called


def test_gqa_wrapper_baseline_arguments_are_valid(lib):
    for label in ("decode-B1", "decode-ragged-B3", "prompt-ragged", "chunked-prefill", "rotary",
                  "decode-ragged-B3-shared"):
        a = _gqa_args(_cell(GQA, label, "f32"))
        if label == "decode-ragged-B3-shared":
            a["present_key"], a["present_value"] = a["past_key"], a["past_value"]
        wrappers.group_query_attention(lib, **a).run()
        assert np.isfinite(a["output"]).all() and not np.any(a["output"] == SENTINEL)


# ---- scratch memory refused: a status, not a crash -----------------------------------------------

_NO_SCRATCH = """
import numpy as np
from perfbench import dtypes, ops
from perfbench.errors import NativeError
from perfbench.kernels_ffi import load
lib = load()
for name, params in (("GroupQueryAttention", {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20}),
                     ("GroupQueryAttention", {"heads": 4, "kv_heads": 2, "head_size": 32, "seq": 16}),
                     ("MultiHeadAttention", {"heads": 2, "head_size": 32, "past": 20}),
                     ("OnnxAttention", {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20}),
                     ("OnnxAttention", {"heads": 4, "kv_heads": 2, "head_size": 32, "seq": 16, "causal": 1}),
                     ("OnnxAttention", {"heads": 4, "kv_heads": 2, "head_size": 32, "seq": 4, "qk_mode": 3})):
    op = ops.get(name)
    case = op.make_case(params)
    x = op.make_inputs(case, dtypes.F32, np.random.default_rng(0))
    out = op.new_outputs(case, np.float32, x)
    try:
        op.prepare_ours(lib, case, x, out, 1).run()
        print(name, "ran")
    except NativeError as e:
        print(name, "status", e.status, e.message)
"""


@pytest.mark.parametrize("limit, where", [("0", "driver"), ("4096", "kernel")])
def test_attention_without_scratch_returns_out_of_memory(limit, where):
    """PERFBENCH_SCRATCH_MAX_BYTES=0: the front end's own buffers are refused; 4096: those fit
    and the microkernels' tiles are refused inside the parallel region (the engine's decode,
    prefill and full-row forms, for all three attention ops). Either way: status 3 and a message,
    never a crash."""
    env = dict(os.environ, PERFBENCH_SCRATCH_MAX_BYTES=limit)
    r = subprocess.run([sys.executable, "-c", _NO_SCRATCH], env=env, capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 6, r.stdout
    for line in lines:
        assert " status 3 " in line and "scratch" in line, line
        if where == "kernel":  # only pb_attn_run's message says where the limit comes from
            assert "see PERFBENCH_SCRATCH_MAX_BYTES" in line, line


# ---- key splits where a short batch row leaves splits empty --------------------------------------


@pytest.mark.parametrize("kv", ["copy", "shared"])
def test_decode_splits_with_empty_chunks(lib, kv):
    """Batch rows of 4201 and 301 tokens at 2 threads: the keys split in 4 chunks of ~1088, so
    three chunks of row 1 hold no key (their partials say max = -inf and the combine skips them).
    Output and present against a float64 reference; past rows copied exactly once."""
    from perfbench.ops import _attention as att

    rng = np.random.default_rng(11)
    B, Nq, Nkv, H, P = 2, 4, 1, 32, 4200
    tot = np.array([4201, 301])
    cap = P + 1
    q = rng.standard_normal((B, 1, Nq * H)).astype(np.float32)
    k = rng.standard_normal((B, 1, Nkv * H)).astype(np.float32)
    v = rng.standard_normal((B, 1, Nkv * H)).astype(np.float32)
    pk = rng.standard_normal((B, Nkv, cap if kv == "shared" else P, H)).astype(np.float32)
    pv = rng.standard_normal((B, Nkv, cap if kv == "shared" else P, H)).astype(np.float32)
    seqlens = (tot - 1).astype(np.int32)
    out = np.full((B, 1, Nq * H), SENTINEL, np.float32)
    if kv == "shared":
        prk, prv = pk.copy(), pv.copy()
        pk_in, pv_in = prk, prv
    else:
        prk, prv = np.full((B, Nkv, cap, H), SENTINEL, np.float32), np.full((B, Nkv, cap, H), SENTINEL, np.float32)
        pk_in, pv_in = pk, pv
    wrappers.group_query_attention(lib, q, k, v, pk_in, pv_in, seqlens, int(tot.max()), out, prk, prv,
                                   num_heads=Nq, kv_num_heads=Nkv, threads=2).run()
    for b in range(B):
        pb = int(tot[b]) - 1
        keys = np.concatenate([pk[b, :, :pb], k[b].reshape(1, Nkv, H).transpose(1, 0, 2)], axis=1).astype(np.float64)
        vals = np.concatenate([pv[b, :, :pb], v[b].reshape(1, Nkv, H).transpose(1, 0, 2)], axis=1).astype(np.float64)
        heads = np.arange(Nq) // (Nq // Nkv)
        ref = att.attend64(q[b].reshape(1, Nq, H).astype(np.float64), keys[heads], vals[heads], 1 / np.sqrt(H),
                           np.ones((1, pb + 1), bool))
        assert np.allclose(out[b].reshape(1, Nq, H), ref, rtol=1e-4, atol=1e-5), b
        assert np.array_equal(prk[b, :, : pb + 1], keys.astype(np.float32))  # past copied once, new row appended
        assert np.array_equal(prv[b, :, : pb + 1], vals.astype(np.float32))
        if kv == "copy":
            assert not np.any(prk[b, :, pb + 1:])  # zeros after the row's tokens, as ORT writes them


# ---- cells allocate outputs as the Harness does -------------------------------------------------


def _shared_kv_cases():
    op = ops_pkg.get("GroupQueryAttention")
    return [p for p in op.test_cases if op.make_case(p).p["kv"] == "shared"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cells_allocate_outputs_as_the_harness_does(lib, dtype):
    """Shared KV mode: each side's present IS its own copy of past (never the cell's inputs,
    never a fresh array); the cell's inputs are left as make_inputs made them."""
    assert _shared_kv_cases(), "no shared-KV GroupQueryAttention test case"
    for params in _shared_kv_cases():
        c = cell("GroupQueryAttention", params, dtype, seed=SEED)
        pristine = c.op.make_inputs(c.case, c.dt, np.random.default_rng(SEED))
        for name in ("key", "value"):
            assert c.ort_out[f"present_{name}"] is c.ort_in[f"past_{name}"]
            assert c.ort_in[f"past_{name}"] is not c.inputs[f"past_{name}"]
        mine, out = c.ours_with_inputs(lib)
        for name in ("key", "value"):
            assert out[f"present_{name}"] is mine[f"past_{name}"]
            assert mine[f"past_{name}"] is not c.inputs[f"past_{name}"]
        for k, v in pristine.items():
            assert same_bits(c.inputs[k], v), f"{k} was written"
        # and the kernel wrote the new rows into its copy (the shared buffer is really written)
        assert not same_bits(mine["past_key"], pristine["past_key"])
