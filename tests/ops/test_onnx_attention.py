"""ai.onnx Attention and RotaryEmbedding (opset 23: ops OnnxAttention, OnnxRotaryEmbedding) end to
end, against real ORT sessions and onnx.reference (the oracle):

* the op files' numpy float64 models (used by the mutants) equal onnx.reference;
* our kernel passes the numerics gate on the suite's numerics-only odd shapes, every dtype, 1 and
  2 threads, every ISA path this CPU runs; ORT departs from the spec only where documented
  (qk_matmul_output mode 2: ORT writes the float lowest, the spec -inf);
* every mutant fails the gate, and our kernel fed a bug-inducing argument fails it too;
* present = past ++ new bit for bit (the decode form copies past rows while reading them, key
  splits included); a fully masked query row is exactly zero;
* the ORT graph loads and K copies run K times;
* from_node maps real nodes (attributes, 3-D/4-D, mask shapes) and declines exactly what is
  missing."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from perfbench import dtypes, numerics
from perfbench import ops as ops_pkg
from perfbench.errors import UsageError
from perfbench.kernels_ffi import onnx_attn as kernels
from perfbench.ops import ort as ortlib
from perfbench.ops.base import NodeInfo, NodeUnsupported, to_f64
from perfbench.ops.onnx_attention import attention64
from perfbench.ops.onnx_rotary_embedding import rotary64
from tests.conftest import isas_to_test

SEED = 20261130
DTYPES = ("f32", "f16", "bf16")
ATT, ROT = "OnnxAttention", "OnnxRotaryEmbedding"

# the numerics-only odd shapes of suites/onnx_attention.toml, then one quick shape each
CASES = {
    ATT: [
        {"heads": 8, "kv_heads": 2, "head_size": 80, "past": 4097, "layout": "3d", "causal": 1},
        {"batch": 2, "heads": 6, "kv_heads": 2, "head_size": 40, "seq": 33, "causal": 1, "mask": "bool",
         "mask_shape": "b1sk"},
        {"batch": 2, "heads": 6, "kv_heads": 3, "head_size": 24, "seq": 17, "past": 5, "causal": 1, "mask": "float",
         "mask_shape": "bnsk", "layout": "3d"},
        {"heads": 4, "kv_heads": 2, "head_size": 36, "seq": 9, "kv_seq": 13, "mask": "bool", "mask_shape": "nsk",
         "softcap": "2", "present": 0},
        {"heads": 4, "kv_heads": 1, "head_size": 20, "seq": 9, "past": 3, "causal": 1, "mask": "bool",
         "softcap": "1.5", "qk_mode": 2},
        {"heads": 4, "kv_heads": 2, "head_size": 16, "seq": 7, "past": 6, "causal": 1, "mask": "float", "qk_mode": 3},
        {"heads": 4, "kv_heads": 2, "head_size": 16, "seq": 7, "kv_seq": 5, "softcap": "3", "qk_mode": 1,
         "layout": "3d"},
        {"heads": 3, "kv_heads": 3, "head_size": 8, "seq": 6, "qk_mode": 0, "scale": "0.3"},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 64, "past": 300, "mask": "bool", "mask_shape": "b1sk",
         "layout": "3d"},
        {"heads": 32, "kv_heads": 8, "head_size": 128, "past": 1024, "layout": "3d", "causal": 1},
    ],
    ROT: [
        {"batch": 2, "seq": 33, "heads": 3, "head_size": 80},
        {"batch": 2, "seq": 5, "heads": 2, "head_size": 80, "layout": "4d", "interleaved": 1},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36, "rotary_dim": 20},
        {"batch": 3, "seq": 7, "heads": 3, "head_size": 36, "rotary_dim": 12, "layout": "4d", "interleaved": 1,
         "positions": 0},
        {"batch": 2, "seq": 9, "heads": 2, "head_size": 22, "rotary_dim": 10, "positions": 0},
        {"seq": 1, "heads": 3, "head_size": 64, "rotary_dim": 32, "max_pos": 50},
        {"seq": 128, "heads": 32, "head_size": 128},
    ],
}


def _ort_departs(case) -> bool:
    """Where ORT 1.31 departs from the spec: qk_matmul_output mode 2 with masked scores (ORT
    writes the float lowest, -3.4e38, the spec -inf)."""
    p = case.p
    return p.get("qk_mode") == 2 and (p["causal"] == 1 or p["mask"] != "none")


@functools.cache
def _lib():
    from perfbench.kernels_ffi import load

    return load()


@pytest.fixture(autouse=True)
def _auto_isa():
    _lib().select_isa("auto")
    yield
    _lib().select_isa("auto")


class Cell:
    def __init__(self, op_name: str, index: int, dtype: str):
        self.op = ops_pkg.get(op_name)
        self.case = self.op.make_case(CASES[op_name][index])
        self.dt = dtypes.get(dtype)
        self.inputs = self.op.make_inputs(self.case, self.dt, np.random.default_rng(SEED))
        self.inputs64 = to_f64(self.inputs)
        self.oracle = self.op.oracle(self.case, self.inputs64)
        self.rows = self.op.row_sizes(self.case)
        self.floor = self.op.floor(dtype)
        ran = ortlib.run_case(self.op, self.case, self.inputs, self.dt)
        assert ran is not None, f"ORT cannot run {self.case.case_id} in {dtype} nor its substitute"
        self.ort_dt, self.ort_in, self.ort_out = ran

    def ours(self, threads: int = 1, **overrides) -> dict:
        out = self.op.new_outputs(self.case, self.dt.numpy, self.inputs)
        for a in out.values():
            a[...] = 7.0
        if overrides:
            _run_with(self, out, threads, **overrides)
        else:
            self.op.prepare_ours(_lib(), self.case, self.inputs, out, threads).run()
        return out

    def gate(self, outputs: dict) -> numerics.GateResult:
        return numerics.gate(outputs, self.ort_out, self.oracle, self.rows, self.floor)


@functools.cache
def _cell(op_name: str, index: int, dtype: str) -> Cell:
    return Cell(op_name, index, dtype)


def _cells():
    return [pytest.param(op, i, dt, id=f"{op}-{i}-{dt}") for op in CASES for i in range(len(CASES[op])) for dt in DTYPES]


# ---- the numpy models the mutants use are the reference --------------------------------------


@pytest.mark.parametrize("op_name", list(CASES))
def test_numpy_model_equals_onnx_reference(op_name):
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, "f32")
        mine = attention64(cell.case, cell.inputs64) if op_name == ATT else {"Y": rotary64(cell.case, cell.inputs64)}
        assert set(mine) == set(cell.oracle)
        for k, v in mine.items():
            assert numerics.error(v, cell.oracle[k], cell.rows[k]) <= 1e-12, f"{cell.case.case_id} {k}"


# ---- positive control ---------------------------------------------------------------------------


@pytest.mark.parametrize("op_name, index, dtype", _cells())
def test_our_kernel_passes_the_gate(op_name, index, dtype):
    cell = _cell(op_name, index, dtype)
    assert cell.ort_dt.name == {"f32": "f32", "f16": "f16", "bf16": "f32"}[dtype]
    for threads in (1, 2):
        g = cell.gate(cell.ours(threads))
        assert g.ours_ok, f"{cell.case.case_id} {dtype} t={threads}: {g.describe()}"
        assert g.ort_discrepancy == _ort_departs(cell.case), g.describe()


@pytest.mark.parametrize("isa", [i for i in isas_to_test(_lib()) if i])
def test_every_isa_path_passes(isa):
    _lib().select_isa(isa)
    for op_name, picks in ((ATT, (1, 2, 4, 5, 8)), (ROT, (0, 3, 4))):
        for i in picks:
            for dt in ("f32", "bf16"):
                cell = _cell(op_name, i, dt)
                g = cell.gate(cell.ours(2))
                assert g.ours_ok, f"{isa} {cell.case.case_id} {dt}: {g.describe()}"


def test_present_is_past_then_new_bit_for_bit():
    for i in (0, 2, 8):  # decode with key splits (copy while reading), prefill with past, batch 3
        for dt in DTYPES:
            cell = _cell(ATT, i, dt)
            for threads in (1, 2):
                out = cell.ours(threads)
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
    y = cell.ours(2)["Y"]
    s = cell.case.p["seq"] // 2
    assert np.all(cell.oracle["Y"][:, :, s] == 0.0)
    assert np.all(y[:, :, s] == 0.0)
    assert np.all(np.any(y[:, :, s + 1] != 0.0, axis=-1))


# ---- negative controls ----------------------------------------------------------------------------


def _mutants():
    out = []
    for op_name in CASES:
        op = ops_pkg.get(op_name)
        for m in op.mutants:
            for dt in DTYPES:
                out.append(pytest.param(op_name, m.name, dt, id=f"{op_name}-{m.name.replace(' ', '_')}-{dt}"))
    return out


@pytest.mark.parametrize("op_name, mutant_name, dtype", _mutants())
def test_mutant_fails_the_gate(op_name, mutant_name, dtype):
    op = ops_pkg.get(op_name)
    mutant = next(m for m in op.mutants if m.name == mutant_name)
    checked, accepted = [], []
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, dtype)
        if not mutant.applies(cell.case):
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            out = {k: np.asarray(v).astype(cell.dt.numpy).astype(np.float64)
                   for k, v in mutant.outputs(op, cell.case, cell.inputs64).items()}
        assert set(out) == set(cell.oracle)
        g = cell.gate(out)
        checked.append(cell.case.case_id)
        if g.ours_ok:
            accepted.append(f"{cell.case.case_id}: {g.describe()}")
    assert checked, f"mutant {mutant_name!r} applies to none of the chosen cases"
    assert not accepted, f"the gate ACCEPTED mutant {mutant_name!r} ({dtype}) on: " + "; ".join(accepted)


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
        kernels.onnx_attention(_lib(), x["Q"], x["K"], x["V"], out["Y"], **kw).run()
    else:
        kw = dict(position_ids=x.get("position_ids"), interleaved=p["interleaved"],
                  rotary_embedding_dim=p["rotary_dim"], num_heads=p["heads"] if p["layout"] == "3d" else None,
                  threads=threads)
        kw.update(bug)
        kernels.onnx_rotary_embedding(_lib(), x["X"], x["cos_cache"], x["sin_cache"], out["Y"], **kw).run()


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
    for i in range(len(CASES[op_name])):
        cell = _cell(op_name, i, dtype)
        if not applies(cell.case):
            continue
        kw = dict(change)
        if kw.get("interleaved") == "flip":
            kw["interleaved"] = 1 - cell.case.p["interleaved"]
        if isinstance(kw.get("position_ids"), str):
            b, s = cell.inputs["position_ids"].shape
            kw["position_ids"] = np.ascontiguousarray(np.tile(np.arange(s, dtype=np.int64), (b, 1)))
        g = cell.gate(cell.ours(1, **kw))
        assert not g.ours_ok, f"{cell.case.case_id} {dtype}: the gate accepted {bug}: {g.describe()}"
        checked += 1
    assert checked


# ---- the ORT graph --------------------------------------------------------------------------------


@pytest.mark.parametrize("op_name, index", [(ATT, 2), (ATT, 5), (ROT, 3)])
def test_k_copies_execute_k_times(op_name, index):
    op = ops_pkg.get(op_name)
    case = op.make_case(CASES[op_name][index])
    spec = op.graph(case)
    inputs = op.make_inputs(case, dtypes.F32, np.random.default_rng(1))
    outputs = {n: np.full(s, np.nan, np.float32) for n, s in op.output_shapes(case).items()}
    assert ortlib.count_node_runs(ortlib.build_model(spec, dtypes.F32, 4), 1, inputs, outputs, spec, 4) == 4
    oracle = op.oracle(case, to_f64(inputs))
    for name, buf in outputs.items():  # every copy wrote the one shared buffer
        assert numerics.error(buf, oracle[name], op.row_sizes(case)[name]) <= 10 * numerics.FLOORS["f32"]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_ort_runs_its_own_kernel(dtype):
    for op_name, index in ((ATT, 1), (ROT, 0)):
        op = ops_pkg.get(op_name)
        case = op.make_case(CASES[op_name][index])
        dt = dtypes.get(dtype)
        inputs = op.make_inputs(case, dt, np.random.default_rng(1))
        outputs = op.new_outputs(case, dt.numpy, inputs)
        kind, ran = ortlib.profile_path(op.graph(case), dt, 1, "off", inputs, outputs)
        assert kind == "kernel", (op_name, dtype, ran)


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


def test_from_node_maps_rotary_embedding():
    op = ops_pkg.get(ROT)
    f32 = np.dtype(np.float32)
    node = NodeInfo("RotaryEmbedding", "", 23, {"num_heads": 8, "rotary_embedding_dim": 32, "interleaved": 1},
                    [(f32, (2, 5, 8 * 64)), (f32, (4096, 16)), (f32, (4096, 16)), (np.dtype(np.int64), (2, 5))],
                    ["Y"], "f32")
    b = op.from_node(node)
    p = b.case.p
    assert (p["layout"], p["heads"], p["head_size"], p["rotary_dim"], p["interleaved"]) == ("3d", 8, 64, 32, 1)
    assert (p["positions"], p["max_pos"]) == (1, 4096)
    assert b.inputs == {"X": 0, "cos_cache": 1, "sin_cache": 2, "position_ids": 3}
    assert op.graph(b.case).inputs[1][2] == (4096, 16)
    node = NodeInfo("RotaryEmbedding", "", 23, {}, [(f32, (1, 4, 5, 32)), (f32, (1, 5, 16)), (f32, (1, 5, 16))],
                    ["Y"], "f32")
    p = op.from_node(node).case.p
    assert (p["layout"], p["positions"], p["rotary_dim"]) == ("4d", 0, 0)
    with pytest.raises(UsageError):  # 3-D needs num_heads
        op.from_node(NodeInfo("RotaryEmbedding", "", 23, {}, [(f32, (1, 5, 64)), (f32, (1, 5, 32)),
                                                              (f32, (1, 5, 32))], ["Y"], "f32"))
    with pytest.raises(UsageError):  # caches do not match rotary_embedding_dim
        op.from_node(NodeInfo("RotaryEmbedding", "", 23, {"rotary_embedding_dim": 16},
                              [(f32, (1, 4, 5, 32)), (f32, (1, 5, 16)), (f32, (1, 5, 16))], ["Y"], "f32"))


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
        kernels.onnx_attention(_lib(), x["Q"], x["K"], x["V"], out["Y"], attn_mask=x["attn_mask"],
                               past_key=x["past_key"], past_value=x["past_value"], present_key=out["present_key"],
                               present_value=out["present_value"], threads=threads).run()
        for name in out:
            assert numerics.error(out[name], want[name], H) <= 1e-5, (S, name)
