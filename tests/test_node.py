"""`perfbench node MODEL.onnx`: single-node models built here, run through our kernel and a real
ORT session. Exit codes (CONTRACTS §6), the reference rules (expected outputs are the
specification, else ORT), opset semantics (Softmax before 13 flattens at axis), --save/--data
replay, and clear errors for models and data that do not fit."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from perfbench import node
from perfbench.compare import change
from perfbench.errors import UsageError
from tests.conftest import ROOT, perfbench_cmd


def softmax_model(path, opset, axis, shape, dt=TensorProto.FLOAT, extra_node=False, ir=10):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=axis)]
    outs = [helper.make_tensor_value_info("y", dt, shape)]
    if extra_node:
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
        outs = [helper.make_tensor_value_info("z", dt, shape)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dt, shape)], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.save(m, str(path))
    return str(path)


def write_data(folder, inputs=(), outputs=()):
    folder.mkdir(parents=True, exist_ok=True)
    for k, (name, a) in enumerate(inputs):
        (folder / f"input_{k}.pb").write_bytes(numpy_helper.from_array(np.asarray(a, order="C"), name).SerializeToString())
    for k, (name, a) in enumerate(outputs):
        (folder / f"output_{k}.pb").write_bytes(numpy_helper.from_array(np.asarray(a, order="C"), name).SerializeToString())
    return str(folder)


def softmax_flat(x, axis):
    """ONNX Softmax before opset 13: flatten to 2-D at axis, softmax over the second axis."""
    x64 = x.astype(np.float64)
    flat = x64.reshape(int(np.prod(x.shape[:axis])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


def pb(*args, cwd=ROOT):
    return subprocess.run(perfbench_cmd() + ["node", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_softmax_opset11_flattens_at_axis_and_passes_against_ort(tmp_path, lib):
    model = softmax_model(tmp_path / "sm11.onnx", 11, 1, ["batch", 3, 5, 37])
    rep = node.run(model, dims=["batch=4"], timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    # the case covers the flattened (4, 3*5*37) matrix: softmax over 555 columns, not over 37
    assert rep.case == "Softmax.batch=1.heads=1.queries=4.keys=555"
    assert rep.reference == "ORT" and rep.ort_status == "ok"
    (chk,) = rep.checks
    assert chk.err <= rep.tol and chk.err_oracle_ours <= 1e-5


def test_opset11_semantics_against_expected_outputs(tmp_path, lib):
    """Expected outputs computed by the opset-11 definition pass; the opset-13 (last-axis)
    answer given as 'expected' fails with exit 1 and names the output and the worst element."""
    model = softmax_model(tmp_path / "sm11.onnx", 11, 2, [2, 3, 4, 9])
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 9)).astype(np.float32)
    good = write_data(tmp_path / "good", [("x", x)], [("y", softmax_flat(x, 2).astype(np.float32))])
    rep = node.run(model, data=good, timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.reference == "expected outputs", node.render(rep)
    assert rep.checks[0].err_ort <= rep.tol  # ORT honours opset 11 too
    last_axis = softmax_flat(x.reshape(-1, 9), 1).reshape(x.shape).astype(np.float32)
    bad = write_data(tmp_path / "bad", [("x", x)], [("y", last_axis)])
    rep = node.run(model, data=bad, timing=False, lib=lib)
    assert rep.exit_code == 1
    text = node.render(rep)
    assert "output y" in text and "worst at index" in text and "FAIL: numerics mismatch (exit 1)" in text
    # ORT disagrees with these (wrong) expected outputs as much as we do: not its discrepancy, a hint
    assert rep.ort_status == "ok" and "as well: check that they were computed with this node's semantics" in text


def test_not_last_axis_at_opset13_is_exit_3_with_one_line(tmp_path):
    model = softmax_model(tmp_path / "sm13.onnx", 13, 1, [2, 3, 5, 7])
    r = pb(model)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "over axis 1 of a rank-4 input: our kernel normalizes the last axis only" in r.stdout


def test_unknown_op_is_exit_3_and_takes_precedence_over_4(tmp_path):
    n = helper.make_node("Hardmax", ["x"], ["y"], axis=-1)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "hm.onnx"))
    r = pb(str(tmp_path / "hm.onnx"))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "no kernel for ai.onnx::Hardmax (opset 13)" in r.stdout


def test_bf16_without_ort_kernel_is_exit_4_then_0_with_expected(tmp_path, lib):
    model = softmax_model(tmp_path / "smbf.onnx", 13, -1, [2, 3, 37], TensorProto.BFLOAT16)
    rep = node.run(model, timing=False, lib=lib)
    assert rep.exit_code == 4 and rep.ort_status == "no-kernel", node.render(rep)
    # with expected outputs (the spec) ours is judged against them alone
    from perfbench.dtypes import BF16
    x = (np.random.default_rng(2).standard_normal((2, 3, 37))).astype(BF16.numpy)
    y = softmax_flat(x.astype(np.float32).reshape(-1, 37), 1).reshape(2, 3, 37).astype(BF16.numpy)
    data = write_data(tmp_path / "d", [("x", x)], [("y", y)])
    rep = node.run(model, data=data, timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.reference == "expected outputs", node.render(rep)


def test_save_then_replay_gives_the_same_outputs(tmp_path, lib):
    model = softmax_model(tmp_path / "sm.onnx", 13, -1, [3, 4, 33])
    rep = node.run(model, save_to=str(tmp_path / "saved"), timing=False, lib=lib)
    assert rep.exit_code == 0
    saved = tmp_path / "saved"
    assert sorted(p.name for p in saved.iterdir()) == ["input_0.pb", "model.onnx", "output_0.pb"]
    r = pb(str(saved / "model.onnx"), "--data", str(saved), "--no-time", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["reference"] == "expected outputs" and out["inputs"][0][1] == "given"
    assert out["checks"][0]["err"] == 0.0  # our own outputs, replayed: bit for bit
    # --save never writes over the data folder or a folder with files
    r = pb(str(saved / "model.onnx"), "--data", str(saved), "--save", str(saved), "--no-time")
    assert r.returncode == 2 and "never over the data" in r.stderr
    r = pb(model, "--save", str(saved), "--no-time")
    assert r.returncode == 2 and "not an empty folder" in r.stderr


@pytest.mark.parametrize("case,needle", [
    ("multi", "the graph has 2 nodes"),
    ("missing", "no such file"),
    ("garbage", "not a readable ONNX model"),
    ("nodim", "symbolic dimensions batch: give --dim batch=VALUE"),
    ("baddim", "--dim 'batch=x'"),
    ("shape", "axis 2: 9 != 37"),
    ("dtype", "is float16 but the model declares float"),
    ("gap", "numbered 0..N-1 without gaps"),
    ("count", "1 graph inputs"),
])
def test_bad_input_is_exit_2_with_what_where_how(tmp_path, case, needle):
    model = softmax_model(tmp_path / "m.onnx", 13, -1, ["batch", 3, 37])
    args = [model]
    if case == "multi":
        args = [softmax_model(tmp_path / "two.onnx", 13, -1, [2, 37], extra_node=True)]
    elif case == "missing":
        args = [str(tmp_path / "nope.onnx")]
    elif case == "garbage":
        (tmp_path / "g.onnx").write_bytes(b"not a model")
        args = [str(tmp_path / "g.onnx")]
    elif case == "baddim":
        args += ["--dim", "batch=x"]
    elif case == "shape":
        args += ["--data", write_data(tmp_path / "d", [("x", np.zeros((2, 3, 9), np.float32))])]
    elif case == "dtype":
        args += ["--data", write_data(tmp_path / "d", [("x", np.zeros((2, 3, 37), np.float16))])]
    elif case == "gap":
        d = tmp_path / "d"
        write_data(d, [("x", np.zeros((2, 3, 37), np.float32))])
        (d / "input_0.pb").rename(d / "input_1.pb")
        args += ["--data", str(d)]
    elif case == "count":
        d = write_data(tmp_path / "d", [("x", np.zeros((2, 3, 37), np.float32)), ("z", np.zeros(1, np.float32))])
        args += ["--data", d]
    r = pb(*args, "--no-time")
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_timing_plumbing_reports_a_ratio_and_bandwidth(tmp_path, lib, monkeypatch):
    """Timing runs the usual protocol on the node's own inputs (no figure is asserted)."""
    # a stated spread far above what 2 replicates could show, so that only folding it in makes
    # the interval as wide as asserted below (with 5% a 2-replicate t(1) interval could be)
    monkeypatch.setitem(change.DEFAULT_SIGMA, "ratio", 0.5)
    model = softmax_model(tmp_path / "sm.onnx", 13, -1, [4, 257])
    rep = node.run(model, timing=True, replicates=2, lib=lib)
    assert rep.exit_code == 0
    t = rep.timing
    assert t["replicates"] == 2 and t["K"] >= 2 and t["ratio"] > 0 and t["ci"][0] <= t["ratio"] <= t["ci"][1]
    assert t["bound"] == "memory" and t["ours_gbps"] > 0
    assert "ours/ORT" in node.render(rep)
    # the verdict folds in the stated between-run spread, as an uncalibrated run cell does: the
    # interval is at least +/- 1.96 sigma_b wide on the log scale, whatever the replicates say
    assert t["sigma_b"] == 0.5
    assert math.log(t["ci"][1] / t["ci"][0]) / 2 >= 1.96 * t["sigma_b"]
    assert "between-run spread" in node.render(rep)


def test_judge_names_ort_discrepancy_when_ours_matches_the_expected(tmp_path, lib):
    """Expected outputs given, ORT's outputs differ from them, ours agree: ORT's discrepancy, exit 0."""
    model = softmax_model(tmp_path / "sm.onnx", 13, -1, [2, 16])
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    y = softmax_flat(x, 1).astype(np.float32)
    prob = node.load(model, write_data(tmp_path / "d", [("x", x)], [("y", y)]))
    info = node.node_info(prob)
    op, binding = node.bind(prob, info)
    nop = node.NodeOp(prob, info, op, binding)
    ours = {"o0": y.copy()}
    ort_wrong = {"y": np.roll(y, 1, axis=1)}
    rep = node.Report(node=prob.node_label(), ort_status="ok")
    node.judge(prob, nop, ours, ort_wrong, rep, op.floor("f32"))
    assert rep.exit_code == 0 and rep.ort_status == "ort-discrepancy"
    # and ours wrong against the expected: exit 1 whatever ORT says
    rep = node.Report(node=prob.node_label(), ort_status="ok")
    node.judge(prob, nop, {"o0": np.roll(y, 1, axis=1)}, {"y": y}, rep, op.floor("f32"))
    assert rep.exit_code == 1


def test_save_folder_with_files_is_refused(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    model = softmax_model(tmp_path / "m.onnx", 13, -1, [2, 8])
    with pytest.raises(UsageError, match="not an empty folder"):
        node.run(model, save_to=str(tmp_path / "full"), timing=False)


def test_save_is_checked_before_ort_or_ours_run(tmp_path, monkeypatch):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    model = softmax_model(tmp_path / "m.onnx", 13, -1, [2, 8])

    def boom(*a, **k):
        raise AssertionError("ORT ran before the --save folder was checked")

    monkeypatch.setattr(node, "run_ort", boom)
    with pytest.raises(UsageError, match="parent folder .* does not exist"):
        node.run(model, save_to=str(tmp_path / "nope" / "sub"), timing=False)


def test_save_into_an_empty_current_folder(tmp_path, lib, monkeypatch):
    model = softmax_model(tmp_path / "m.onnx", 13, -1, [2, 8])
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    rep = node.run(model, save_to=".", timing=False, lib=lib)
    assert rep.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "here").iterdir()) == ["input_0.pb", "model.onnx", "output_0.pb"]


def test_a_mismatch_saves_ours_apart_from_the_reference(tmp_path, lib):
    """Unverified outputs never become the expected ones of a replay."""
    model = softmax_model(tmp_path / "sm11.onnx", 11, 2, [2, 3, 4, 9])
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 9)).astype(np.float32)
    wrong = softmax_flat(x.reshape(-1, 9), 1).reshape(x.shape).astype(np.float32)
    data = write_data(tmp_path / "bad", [("x", x)], [("y", wrong)])
    rep = node.run(model, data=data, save_to=str(tmp_path / "s"), timing=False, lib=lib)
    assert rep.exit_code == 1
    names = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert names == ["input_0.pb", "model.onnx", "ours_output_0.pb", "output_0.pb"]
    _, saved_ref = node.read_tensor(tmp_path / "s" / "output_0.pb")
    assert np.array_equal(saved_ref, wrong)  # the reference, not ours
    # a run without any reference keeps ours apart too
    bf = softmax_model(tmp_path / "bf.onnx", 13, -1, [2, 37], TensorProto.BFLOAT16)
    rep = node.run(bf, save_to=str(tmp_path / "s2"), timing=False, lib=lib)
    assert rep.exit_code == 4
    assert sorted(p.name for p in (tmp_path / "s2").iterdir()) == ["input_0.pb", "model.onnx", "ours_output_0.pb"]


def test_unknown_op_with_data_runs_ort_and_still_exits_3(tmp_path):
    n = helper.make_node("Hardmax", ["x"], ["y"], axis=-1)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "hm.onnx"))
    d = write_data(tmp_path / "d", [("x", np.ones((2, 8), np.float32))])
    r = pb(str(tmp_path / "hm.onnx"), "--data", d)
    assert r.returncode == 3 and "ORT: ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("case,needle", [("attr", "Unrecognized attribute: foo"), ("noout", "no graph outputs")])
def test_invalid_onnx_is_exit_2(tmp_path, case, needle):
    attrs = {"axis": -1, "foo": "bar"} if case == "attr" else {"axis": -1}
    n = helper.make_node("Softmax", ["x"], ["y"], **attrs)
    outs = [] if case == "noout" else [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])]
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = pb(str(tmp_path / "m.onnx"), "--no-time")
    assert r.returncode == 2 and needle in r.stderr, r.stdout + r.stderr


def test_ir14_initializer_input_and_substituted_ort_timing(tmp_path, lib):
    """onnx >= 1.23 writes IR 14, which ORT 1.31 cannot read: node lowers it. An initializer is used
    as given. bf16: ORT has no bf16 Softmax, so timing compares with its f32 kernel (CONTRACTS §2)."""
    x = np.random.default_rng(5).standard_normal((3, 40)).astype(np.float32)
    n = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    g = helper.make_graph([n], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40])],
                          initializer=[numpy_helper.from_array(x, "x")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 14
    onnx.save(m, str(tmp_path / "init.onnx"))
    rep = node.run(str(tmp_path / "init.onnx"), timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.ort_status == "ok", node.render(rep)
    assert rep.inputs[0][:2] == ("x", "initializer")
    bf = softmax_model(tmp_path / "bf.onnx", 13, -1, [4, 257], TensorProto.BFLOAT16)
    from perfbench.dtypes import BF16
    xb = np.random.default_rng(6).standard_normal((4, 257)).astype(BF16.numpy)
    yb = softmax_flat(xb.astype(np.float32), 1).astype(BF16.numpy)
    rep = node.run(bf, data=write_data(tmp_path / "d", [("x", xb)], [("y", yb)]), replicates=2, lib=lib)
    assert rep.exit_code == 0 and rep.timing["ort_dtype"] == "f32" and rep.timing["ratio"] > 0, node.render(rep)


def test_without_expected_an_ort_far_from_the_oracle_is_ort_discrepancy(tmp_path, lib):
    """No expected outputs: ORT is the reference, unless it departs from the op's float64 oracle
    by more than 10 x the floor (CONTRACTS §8) -- then ours is judged against the oracle."""
    model = softmax_model(tmp_path / "sm.onnx", 13, -1, [2, 16])
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    prob = node.load(model, write_data(tmp_path / "d", [("x", x)]))
    info = node.node_info(prob)
    op, binding = node.bind(prob, info)
    nop = node.NodeOp(prob, info, op, binding)
    y = softmax_flat(x, 1).astype(np.float32)
    rep = node.Report(node=prob.node_label(), ort_status="ok")
    node.judge(prob, nop, {"o0": y.copy()}, {"y": np.roll(y, 1, axis=1)}, rep, op.floor("f32"))
    assert rep.exit_code == 0 and rep.ort_status == "ort-discrepancy" and rep.reference.startswith("float64 oracle")
    rep = node.Report(node=prob.node_label(), ort_status="ok")
    node.judge(prob, nop, {"o0": y.copy()}, {"y": y * (1 + 1e-6)}, rep, op.floor("f32"))
    assert rep.exit_code == 0 and rep.ort_status == "ok" and rep.reference == "ORT"


def test_bf16_head_to_head_with_ort(tmp_path, lib):
    """ORT runs Transpose in bf16 (its numpy bridge knows no bfloat16: node binds OrtValues)."""
    n = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 5, 7, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "t.onnx"))
    rep = node.run(str(tmp_path / "t.onnx"), timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.ort_status == "ok" and rep.reference == "ORT", node.render(rep)
    assert rep.checks[0].err == 0.0


def test_rank0_inputs_stay_rank0(tmp_path, lib):
    """A scalar index (Gather axis=1 with a 0-d index drops that axis): 0-d arrays must not
    become shape (1,) on the way to ORT or to us."""
    n = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7, 5]),
                                     helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "g.onnx"))
    x = np.random.default_rng(4).standard_normal((3, 7, 5)).astype(np.float32)
    d = write_data(tmp_path / "d", [("x", x), ("i", np.array(-2, np.int64))])
    rep = node.run(str(tmp_path / "g.onnx"), data=d, timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.ort_status == "ok", node.render(rep)
    assert rep.inputs[1][3] == []


def test_an_op_only_ort_defines_in_the_default_domain_is_not_refused(tmp_path, lib):
    """SimplifiedLayerNormalization lives in ORT's default domain but has no onnx schema: the
    model check must not turn it into exit 2 (real exported decoders use it)."""
    n = helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 70]),
                                     helper.make_tensor_value_info("s", TensorProto.FLOAT, [70])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 70])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "sln.onnx"))
    rep = node.run(str(tmp_path / "sln.onnx"), timing=False, lib=lib)
    assert rep.exit_code == 0 and rep.op == "SimplifiedLayerNormalization", node.render(rep)


def test_a_kernel_without_a_node_mapping_says_so(tmp_path):
    """com.microsoft GroupQueryAttention has our kernel but no from_node: exit 3 says the mapping
    is what is missing, not the kernel."""
    n = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tsl"], ["y", "pk", "pv"],
                         domain="com.microsoft", num_heads=4, kv_num_heads=2)
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 1, 256]),
           helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 1, 128]),
           helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 1, 128]),
           helper.make_tensor_value_info("sl", TensorProto.INT32, [1]),
           helper.make_tensor_value_info("tsl", TensorProto.INT32, [])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 256]),
            helper.make_tensor_value_info("pk", TensorProto.FLOAT, [1, 2, 1, 64]),
            helper.make_tensor_value_info("pv", TensorProto.FLOAT, [1, 2, 1, 64])]
    m = helper.make_model(helper.make_graph([n], "g", ins, outs),
                          opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    onnx.save(m, str(tmp_path / "gqa.onnx"))
    r = pb(str(tmp_path / "gqa.onnx"), "--no-time")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "our GroupQueryAttention kernel exists, but perfbench node cannot map a node onto it yet" in r.stdout


def test_node_replicates_past_the_bound_is_a_usage_error(tmp_path):
    """--replicates has the bound every run has (suites.LIMITS), checked before the model is read."""
    r = subprocess.run(perfbench_cmd() + ["node", str(tmp_path / "missing.onnx"), "--replicates", "1000000"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--replicates: 1000000 is not an integer in 2..1000" in r.stderr, r.stderr


def _matmul_model(path, a_shape, w, y_shape, weight_as="initializer"):
    init = [numpy_helper.from_array(w, "W")] if weight_as == "initializer" else []
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape)]
    if weight_as != "initializer":
        ins.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w.shape)))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("a_shape, w_shape, y_shape", [([2, 1, 5, 33], [3, 33, 7], [2, 3, 5, 7]),  # batch broadcast
                                                       ([33], [33, 7], [7]),  # 1-D x
                                                       ([2, 5, 33], [33], [2, 5])])  # 1-D weight
def test_matmul_nodes_map_with_their_weight_as_a_constant(tmp_path, lib, a_shape, w_shape, y_shape):
    """A model's MatMul weight (an initializer) maps to b_form=initializer; the same weight given
    with --data is an input."""
    w = np.random.default_rng(3).standard_normal(w_shape).astype(np.float32)
    rep = node.run(_matmul_model(tmp_path / "mm.onnx", a_shape, w, y_shape), timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert rep.case.endswith("b_form=initializer") and ("W", "initializer", "float32", w_shape) in rep.inputs
    data = write_data(tmp_path / "d", [("x", np.ones(a_shape, np.float32)), ("W", w)])
    rep = node.run(_matmul_model(tmp_path / "mm_in.onnx", a_shape, w, y_shape, weight_as="input"), data=data,
                   timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert rep.case.endswith("b_form=input")


def _node_graph(path):
    from perfbench.node.bind import NodeOp, bind

    prob = node.load(str(path), None, node.parse_dims(None))
    info = node.node_info(prob)
    op, binding = bind(prob, info)
    return NodeOp(prob, info, op, binding).graph()


def test_only_a_weight_the_op_declares_stays_a_constant_of_orts_node_graph(tmp_path):
    """MatMul's initializer weight is a constant of ORT's graph (prepacked there); a Gather
    table that is a model initializer stays bound (as constants, each of K copies would hold one)."""
    w = np.ones((33, 7), np.float32)
    assert _node_graph(_matmul_model(tmp_path / "mm.onnx", [5, 33], w, [5, 7])).initializers == ("i1",)
    table = numpy_helper.from_array(np.ones((50, 8), np.float32), "T")
    g = helper.make_graph([helper.make_node("Gather", ["T", "ids"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])], initializer=[table])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "gather.onnx"))
    assert _node_graph(tmp_path / "gather.onnx").initializers == ()


@pytest.mark.parametrize("c_shape", [None, [], [1, 1], [7], [1, 7], [5, 1], [5, 7]])
def test_gemm_nodes_with_transposes_and_c_broadcasts(tmp_path, lib, c_shape):
    """transA/transB, alpha/beta, C as a 0-d scalar, a (1, N) row or an (M, 1) column; the weight
    an initializer (prepacked by ORT, by us outside the call)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((7, 33)).astype(np.float32)  # (N, K): transB = 1
    init = [numpy_helper.from_array(w, "W")]
    ins = ["x", "W"]
    if c_shape is not None:
        init.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(np.float32), "C"))
        ins.append("C")
    g = helper.make_graph([helper.make_node("Gemm", ins, ["y"], alpha=0.5, beta=2.0, transA=1, transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [33, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "gemm.onnx"))
    rep = node.run(str(tmp_path / "gemm.onnx"), timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert "trans_a=1.trans_b=1.alpha=0.5.beta=2.0" in rep.case and rep.case.endswith("b_form=initializer")


def test_gemm_with_a_constant_weight_and_a_runtime_c(tmp_path, lib):
    """B a model constant, C a graph input: b_form=initializer (ORT prepacks B); C bound per run."""
    w = np.random.default_rng(5).standard_normal((33, 7)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 33]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])],
                          initializer=[numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "gemm_c.onnx"))
    rep = node.run(str(tmp_path / "gemm_c.onnx"), timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert rep.case.endswith("c=row.b_form=initializer")
    assert _node_graph(tmp_path / "gemm_c.onnx").initializers == ("i1",)


def _nbits_model(path, a_shape, n, *, bits=4, bs=32, zp="packed", bias=False, accuracy=0, g_idx=False):
    from perfbench.ops import _nbits as nbits

    k = a_shape[-1]
    b, s, z = nbits.random_weights(np.random.default_rng(5), n, k, bits=bits, block_size=bs, packed_zp=zp == "packed")
    consts = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(s, "S")]
    names = ["x", "B", "S"]
    if zp != "none":
        consts.append(numpy_helper.from_array(z, "Z"))
    names.append("Z" if zp != "none" else "")
    if g_idx:
        consts.append(numpy_helper.from_array((np.arange(k) // bs).astype(np.int32), "G"))
    names.append("G" if g_idx else "")
    if bias:
        consts.append(numpy_helper.from_array(np.linspace(-1, 1, n).astype(np.float32), "bias"))
    names.append("bias" if bias else "")
    while names[-1] == "":
        names.pop()
    node_ = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=bs,
                             accuracy_level=accuracy)
    g = helper.make_graph([node_], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, a_shape[:-1] + [n])], initializer=consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("a_shape, kw", [([2, 3, 64], dict(zp="packed", bias=True)),  # leading dims flattened into M
                                         ([1, 96], dict(bits=2, bs=16, zp="float")),
                                         ([4, 100], dict(bits=8, zp="none", accuracy=2)),  # K tail; level 2 runs f32
                                         ([3, 160], dict(accuracy=4, bias=True))])  # int8 activations, ORT's too
def test_matmul_nbits_nodes_map_and_pass_against_ort(tmp_path, lib, a_shape, kw):
    rep = node.run(_nbits_model(tmp_path / "nb.onnx", a_shape, 24, **kw), timing=False, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert rep.case.startswith(f"MatMulNBits.m={int(np.prod(a_shape[:-1]))}.k={a_shape[-1]}.n=24")
    assert rep.case.endswith(f"accuracy_level={4 if kw.get('accuracy') == 4 else 0}")


def test_a_matmul_nbits_node_whose_bound_the_host_decides_reports_its_bandwidth(tmp_path, lib):
    """M = 1 at accuracy 0 is a "roofline" cell (compute or memory by the host's peaks, which node
    does not measure): its JSON says so and the report gives its GB/s, as for a byte-bound op."""
    rep = node.run(_nbits_model(tmp_path / "nb.onnx", [1, 64], 24), timing=True, replicates=2, lib=lib)
    assert rep.exit_code == 0, node.render(rep)
    assert rep.timing["bound"] == "roofline" and rep.timing["ours_gbps"] > 0
    assert "MB moved: ours" in node.render(rep)


@pytest.mark.parametrize("kw, needle", [(dict(g_idx=True), "g_idx")])
def test_matmul_nbits_nodes_we_do_not_run_are_exit_3_with_the_reason(tmp_path, kw, needle):
    r = pb(_nbits_model(tmp_path / "nb.onnx", [2, 64], 8, **kw), "--no-time")
    assert r.returncode == 3, r.stdout + r.stderr
    assert needle in r.stdout + r.stderr
