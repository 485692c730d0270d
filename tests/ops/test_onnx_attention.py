"""ai.onnx Attention and RotaryEmbedding (opset 23: ops OnnxAttention, OnnxRotaryEmbedding) end to
end, against real ORT sessions and onnx.reference (the oracle):

* the op files' numpy float64 models (used by the mutants) equal onnx.reference;
* (the gate on every test case, dtype, ISA path and 1/2 threads -- ORT departing from the spec
  only where Op.ort_departure says: qk_matmul_output mode 2 -- the mutants, K ORT copies, bad
  arguments and the from_node round trip are the op contract's: tests/ops/test_contract.py);
* our kernel fed a bug-inducing argument fails the gate;
* present = past ++ new bit for bit (the decode form copies past rows while reading them, key
  splits included); a fully masked query row is exactly zero;
* from_node maps real nodes (attributes, 3-D/4-D, mask shapes) and declines exactly what is
  missing."""

from __future__ import annotations

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import onnx_attn as kernels
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported
from perfbench.ops.onnx_attention import attention64
from perfbench.ops.onnx_rotary_embedding import rotary64
from tests.helpers import Cell, cell, library

SEED = 20261130
DTYPES = ("f32", "f16", "bf16")
ATT, ROT = "OnnxAttention", "OnnxRotaryEmbedding"
pytestmark = pytest.mark.usefixtures("auto_isa")


def _cell(op_name: str, index: int, dtype: str) -> Cell:
    """The op's index-th contract test case (Op.test_cases) as a cached Cell."""
    return cell(op_name, ops_pkg.get(op_name).test_cases[index], dtype, seed=SEED)

# the numerics-only odd shapes of suites/onnx_attention.toml, then one quick shape each
# ---- the numpy models the mutants use are the reference --------------------------------------


@pytest.mark.parametrize("op_name", [ATT, ROT])
def test_numpy_model_equals_onnx_reference(op_name):
    for i in range(len(ops_pkg.get(op_name).test_cases)):
        cell = _cell(op_name, i, "f32")
        mine = attention64(cell.case, cell.inputs64) if op_name == ATT else {"Y": rotary64(cell.case, cell.inputs64)}
        assert set(mine) == set(cell.oracle)
        for k, v in mine.items():
            assert numerics.error(v, cell.oracle[k], cell.rows[k]) <= 1e-12, f"{cell.case.case_id} {k}"


# ---- positive control ---------------------------------------------------------------------------


def test_present_is_past_then_new_bit_for_bit():
    for i in (0, 2, 8):  # decode with key splits (copy while reading), prefill with past, batch 3
        for dt in DTYPES:
            cell = _cell(ATT, i, dt)
            for threads in (1, 2):
                out = cell.ours(library(), threads)
                p = cell.case.p
                x = cell.inputs
                k = x["K"] if p["layout"] == "4d" else x["K"].reshape(p["batch"], -1, p["kv_heads"], p["head_size"]).transpose(0, 2, 1, 3)
                v = x["V"] if p["layout"] == "4d" else x["V"].reshape(p["batch"], -1, p["kv_heads"], p["head_size"]).transpose(0, 2, 1, 3)
                want_k = np.concatenate([x["past_key"], k], axis=2) if p["past"] else k
                want_v = np.concatenate([x["past_value"], v], axis=2) if p["past"] else v
                assert out["present_key"].tobytes() == np.ascontiguousarray(want_k).tobytes()
                assert out["present_value"].tobytes() == np.ascontiguousarray(want_v).tobytes()


def test_fully_masked_row_is_exactly_zero():
    cell = _cell(ATT, 1, "f32")  # bool mask, seq 33: query row 16 fully masked
    y = cell.ours(library(), 2)["Y"]
    s = cell.case.p["seq"] // 2
    assert np.all(cell.oracle["Y"][:, :, s] == 0.0)
    assert np.all(y[:, :, s] == 0.0)
    assert np.all(np.any(y[:, :, s + 1] != 0.0, axis=-1))


# ---- negative controls ----------------------------------------------------------------------------


def _ours_with(cell: Cell, threads: int, **bug) -> dict:
    out = cell.op.new_outputs(cell.case, cell.dt.numpy, cell.inputs)
    for a in out.values():
        a[...] = 7.0
    _run_with(cell, out, threads, **bug)
    return out


def _run_with(cell: Cell, out: dict, threads: int, **bug) -> None:
    """Our kernel with one argument changed (a kernel fed a bug-inducing argument)."""
    p, x = cell.case.p, cell.inputs
    if cell.op.name == ATT:
        three = p["layout"] == "3d"
        kw = dict(q_num_heads=p["heads"] if three else None, kv_num_heads=p["kv_heads"] if three else None,
                  attn_mask=x.get("attn_mask"), past_key=x.get("past_key"), past_value=x.get("past_value"),
                  present_key=out.get("present_key"), present_value=out.get("present_value"),
                  qk_output=out.get("qk_matmul_output"), is_causal=p["causal"],
                  scale=0.0 if p["scale"] == "default" else float(p["scale"]), softcap=float(p["softcap"]),
                  qk_matmul_output_mode=max(p["qk_mode"], 0), threads=threads)
        kw.update(bug)
        kernels.onnx_attention(library(), x["Q"], x["K"], x["V"], out["Y"], **kw).run()
    else:
        kw = dict(position_ids=x.get("position_ids"), interleaved=p["interleaved"],
                  rotary_embedding_dim=p["rotary_dim"], num_heads=p["heads"] if p["layout"] == "3d" else None,
                  threads=threads)
        kw.update(bug)
        kernels.onnx_rotary_embedding(library(), x["X"], x["cos_cache"], x["sin_cache"], out["Y"], **kw).run()


KERNEL_BUGS = {
    ATT: [
        ("causal off", lambda c: c.p["causal"] == 1 and c.p["seq"] > 1, {"is_causal": 0}),
        ("causal on", lambda c: c.p["causal"] == 0 and c.p["seq"] > 1, {"is_causal": 1}),
        ("mask dropped", lambda c: c.p["mask"] != "none", {"attn_mask": None}),
        ("softcap dropped", lambda c: float(c.p["softcap"]) > 0, {"softcap": 0.0}),
        ("scale 1", lambda c: True, {"scale": 1.0}),
    ],
    ROT: [
        ("interleaved flipped", lambda c: True, {"interleaved": "flip"}),
        ("positions arange", lambda c: c.p["positions"] == 1, {"position_ids": "arange"}),
    ],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_name, bug", [(op, b[0]) for op in KERNEL_BUGS for b in KERNEL_BUGS[op]])
def test_kernel_fed_a_wrong_argument_fails_the_gate(op_name, bug, dtype):
    name, applies, change = next(b for b in KERNEL_BUGS[op_name] if b[0] == bug)
    checked = 0
    for i in range(len(ops_pkg.get(op_name).test_cases)):
        cell = _cell(op_name, i, dtype)
        if not applies(cell.case):
            continue
        kw = dict(change)
        if kw.get("interleaved") == "flip":
            kw["interleaved"] = 1 - cell.case.p["interleaved"]
        if isinstance(kw.get("position_ids"), str):
            b, s = cell.inputs["position_ids"].shape
            kw["position_ids"] = np.ascontiguousarray(np.tile(np.arange(s, dtype=np.int64), (b, 1)))
        g = cell.gate(_ours_with(cell, 1, **kw))
        assert not g.ours_ok, f"{cell.case.case_id} {dtype}: the gate accepted {bug}: {g.describe()}"
        checked += 1
    assert checked


# ---- the ORT graph --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_ort_runs_its_own_kernel(dtype):
    for op_name, index in ((ATT, 1), (ROT, 0)):
        op = ops_pkg.get(op_name)
        case = op.make_case(ops_pkg.get(op_name).test_cases[index])
        dt = dtypes.get(dtype)
        inputs = op.make_inputs(case, dt, np.random.default_rng(1))
        outputs = op.new_outputs(case, dt.numpy, inputs)
        kind, ran = ortlib.profile_path(op.graph(case), dt, 1, "off", inputs, outputs)
        assert kind == "kernel", (op_name, dtype, ran)


@pytest.mark.parametrize("op_name", [ATT, ROT])
def test_ort_has_no_bf16_kernel_so_f32_stands_in(op_name):
    """bf16 cells are compared with ORT in f32 (the op's declared substitute): ORT 1.31 has no bf16
    kernel for either op (what the gate tests once asserted cell by cell)."""
    op = ops_pkg.get(op_name)
    assert op.ort_substitute.get("bf16") == "f32"
    case = op.make_case(op.test_cases[0])
    with pytest.raises(Exception) as ei:
        ortlib.make_session(ortlib.build_model(op.graph(case), dtypes.BF16), 1, "off")
    assert ortlib.is_missing_kernel(ei.value), str(ei.value)


# ---- from_node ------------------------------------------------------------------------------------


def _att_node(q, k, v, mask=None, past=None, attrs=None, outputs=("Y",), opset=23, dtype=np.float32, extra=None):
    ins = [(np.dtype(dtype), q), (np.dtype(dtype), k), (np.dtype(dtype), v)]
    if mask is not None or past is not None or extra is not None:
        ins.append(mask)
    if past is not None or extra is not None:
        ins += [(np.dtype(dtype), past), (np.dtype(dtype), past)] if past else [None, None]
    if extra is not None:
        ins.append(extra)
    return NodeInfo("Attention", "", opset, attrs or {}, ins, list(outputs),
                    {np.float32: "f32", np.float16: "f16"}[dtype])


def test_from_node_maps_3d_gqa_decode_with_past_and_mask():
    op = ops_pkg.get(ATT)
    node = _att_node((2, 1, 32 * 128), (2, 1, 8 * 128), (2, 1, 8 * 128), mask=(np.dtype(bool), (2, 1, 1, 1025)),
                     past=(2, 8, 1024, 128), attrs={"q_num_heads": 32, "kv_num_heads": 8, "is_causal": 1},
                     outputs=("Y", "pk", "pv"))
    b = op.from_node(node)
    p = b.case.p
    assert (p["batch"], p["seq"], p["past"], p["heads"], p["kv_heads"], p["head_size"]) == (2, 1, 1024, 32, 8, 128)
    assert (p["layout"], p["causal"], p["mask"], p["mask_shape"], p["qk_mode"]) == ("3d", 1, "bool", "b1sk", -1)
    assert b.inputs == {"Q": 0, "K": 1, "V": 2, "attn_mask": 3, "past_key": 4, "past_value": 5}
    assert b.outputs == {"Y": (0, (2, 1, 4096)), "present_key": (1, (2, 8, 1025, 128)),
                         "present_value": (2, (2, 8, 1025, 128))}


def test_from_node_maps_4d_attributes_and_mask_shapes():
    op = ops_pkg.get(ATT)
    q, k = (1, 4, 6, 16), (1, 2, 6, 16)
    for mshape, want in (((6, 6), "sk"), ((1, 1, 6, 6), "sk"), ((4, 6, 6), "nsk"), ((1, 4, 6, 6), "nsk")):
        b = op.from_node(_att_node(q, k, k, mask=(np.dtype(np.float32), mshape)))
        assert b.case.p["mask_shape"] == want and b.case.p["mask"] == "float"
    b = op.from_node(_att_node(q, k, k, attrs={"softcap": 30.0, "scale": 0.125, "qk_matmul_output_mode": 3},
                               outputs=("Y", "", "", "qk")))
    p = b.case.p
    assert (p["softcap"], p["scale"], p["qk_mode"], p["present"]) == ("30", "0.125", 3, 0)
    assert b.outputs == {"Y": (0, q), "qk_matmul_output": (3, (1, 4, 6, 6))}
    # qk_matmul_output_mode without the 4th output: no qk output
    assert op.from_node(_att_node(q, k, k, attrs={"qk_matmul_output_mode": 2})).case.p["qk_mode"] == -1


@pytest.mark.parametrize("what, node, message", [
    ("mode 0 + softcap", dict(attrs={"softcap": 5.0}, outputs=("Y", "", "", "qk")), "qk_matmul_output_mode=0"),
    ("nonpad_kv_seqlen", dict(extra=(np.dtype(np.int64), (1,))), "nonpad_kv_seqlen"),
    ("softmax in f16", dict(attrs={"softmax_precision": 10}), "softmax_precision=10"),
    ("short mask", dict(mask=(np.dtype(bool), (6, 5))), "attn_mask shape"),
    ("query-broadcast mask", dict(mask=(np.dtype(bool), (1, 1, 1, 6))), "attn_mask shape"),
    ("window", dict(attrs={"left_window_size": 4}, opset=25), "left_window_size"),
])
def test_from_node_declines_exactly_what_is_missing(what, node, message):
    q, k = (1, 4, 6, 16), (1, 2, 6, 16)
    with pytest.raises(NodeUnsupported, match=message):
        ops_pkg.get(ATT).from_node(_att_node(q, k, k, **node))


def test_from_node_rejects_invalid_attention_nodes():
    op = ops_pkg.get(ATT)
    with pytest.raises(UsageError):  # 3-D without head counts
        op.from_node(_att_node((1, 6, 64), (1, 6, 32), (1, 6, 32)))
    with pytest.raises(UsageError):  # heads not a multiple
        op.from_node(_att_node((1, 3, 6, 16), (1, 2, 6, 16), (1, 2, 6, 16)))
    with pytest.raises(UsageError):  # opset before Attention existed
        op.from_node(_att_node((1, 4, 6, 16), (1, 2, 6, 16), (1, 2, 6, 16), opset=22))


def test_case_validation():
    op = ops_pkg.get(ATT)
    for bad in ({"heads": 4, "kv_heads": 3, "head_size": 8},
                {"heads": 4, "kv_heads": 2, "head_size": 8, "past": 3, "present": 0},
                {"heads": 4, "kv_heads": 2, "head_size": 8, "qk_mode": 0, "softcap": "2"},
                {"heads": 4, "kv_heads": 2, "head_size": 8, "softcap": "-1"},
                {"heads": 4, "kv_heads": 2, "head_size": 8, "mask_shape": "nsk"}):
        with pytest.raises(UsageError):
            op.make_case(bad)
    rot = ops_pkg.get(ROT)
    for bad in ({"seq": 2, "heads": 2, "head_size": 7}, {"seq": 2, "heads": 2, "head_size": 8, "rotary_dim": 10},
                {"seq": 2, "heads": 2, "head_size": 8, "positions": 0, "max_pos": 9}):
        with pytest.raises(UsageError):
            rot.make_case(bad)


# ---- kernel shapes the op does not sweep ----------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_pads_a_short_mask_and_broadcasts_it_over_queries(threads):
    """A (B, 1, 1, L) bool mask with L < past (decode, keys past L masked: the decode form must
    still copy every past row into present) and a (1, L) float mask over 5 queries, both without
    is_causal (onnx.reference mis-broadcasts such masks with it), against onnx.reference."""
    from perfbench.ops._reference import evaluate_spec
    from perfbench.ops.base import GraphSpec

    rng = np.random.default_rng(5)
    for S, P, mshape, mdt in ((1, 700, (2, 1, 1, 300), np.bool_), (5, 40, (1, 30), np.float32)):
        B, Nq, Nkv, H = 2, 6, 2, 24
        T, total = S, P + S
        x = {"Q": rng.standard_normal((B, Nq, S, H)).astype(np.float32),
             "K": rng.standard_normal((B, Nkv, T, H)).astype(np.float32),
             "V": rng.standard_normal((B, Nkv, T, H)).astype(np.float32),
             "attn_mask": (rng.random(mshape) > 0.3) if mdt is np.bool_ else rng.standard_normal(mshape).astype(mdt),
             "past_key": rng.standard_normal((B, Nkv, P, H)).astype(np.float32),
             "past_value": rng.standard_normal((B, Nkv, P, H)).astype(np.float32)}
        spec = GraphSpec("Attention", "", 23,
                         [("Q", "float", (B, Nq, S, H)), ("K", "float", (B, Nkv, T, H)), ("V", "float", (B, Nkv, T, H)),
                          ("attn_mask", "bool" if mdt is np.bool_ else "float", mshape),
                          ("past_key", "float", (B, Nkv, P, H)), ("past_value", "float", (B, Nkv, P, H))],
                         [("Y", (B, Nq, S, H)), ("present_key", (B, Nkv, total, H)),
                          ("present_value", (B, Nkv, total, H))])
        want = evaluate_spec(spec, x)
        out = {n: np.full(s, 7.0, np.float32) for n, s in (("Y", (B, Nq, S, H)), ("present_key", (B, Nkv, total, H)),
                                                           ("present_value", (B, Nkv, total, H)))}
        kernels.onnx_attention(library(), x["Q"], x["K"], x["V"], out["Y"], attn_mask=x["attn_mask"],
                               past_key=x["past_key"], past_value=x["past_value"], present_key=out["present_key"],
                               present_value=out["present_value"], threads=threads).run()
        for name in out:
            assert numerics.error(out[name], want[name], H) <= 1e-5, (S, name)
