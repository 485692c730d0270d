"""`perfbench repro RUN --filter F -o DIR`: one stored cell as a single-node model plus ONNX test
data (the exact input bytes, the oracle's outputs), checked with onnx's checker and a real ORT
session; and its errors (no match, several matches, a folder with files)."""

from __future__ import annotations

import glob
import json
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from perfbench import dtypes, ops
from perfbench.store import models as m
from perfbench.store import repo
from tests.conftest import perfbench_cmd
from tests.store.test_store import T0, add_run, env  # noqa: F401  (fixture)
from tests.tickets.test_lifecycle import add_cells


@pytest.fixture()
def db(store, env):  # noqa: F811
    with store.session() as s:
        rid = add_run(s, env, minutes=5)
        add_cells(s, rid, {(32, 4096): 1.4})
        bf = add_run(s, env, minutes=6)
        add_cells(s, bf, {}, heads=(14,), keys=(128,))
        for c in s.query(m.Cell).filter(m.Cell.run_id == bf):
            c.dtype = "bf16"
            c.side("ort").dtype = "f32"  # ORT has no bf16 Softmax: the run compared with f32
        # a GroupQueryAttention decode cell with a shared KV cache (present bound as past)
        gqa = {"batch": 1, "seq": 1, "heads": 4, "kv_heads": 2, "head_size": 64, "past": 16, "kv": "shared",
               "rotary": 0, "interleaved": 0, "ragged": 0}
        case = repo.ensure_case(s, "GroupQueryAttention" + "".join(f".{k}={v}" for k, v in gqa.items()),
                                "GroupQueryAttention", gqa, "x")
        c = m.Cell(run_id=rid, case_pk=case.id, dtype="f32", threads=1, device="cpu", cache="warm", spin="off",
                   timing_hash="x", numerics_hash="n", seed=1, verdict="win", measured_at=T0)
        c.measurements.append(m.Measurement(impl="ours", status="ok", dtype="f32"))
        c.measurements.append(m.Measurement(impl="ort", status="ok", dtype="f32", path="kernel"))
        s.add(c)
        s.flush()
        # the timing definition the op computes now (the synthetic cells carry a placeholder)
        for c in s.query(m.Cell).all():
            op = ops.get(c.case.op)
            c.timing_hash = op.timing_definition(op.make_case(dict(c.case.params)), c.dtype, c.side("ort").dtype)
        stale = add_run(s, env, minutes=7)
        add_cells(s, stale, {}, heads=(14,), keys=(128,), th="an-older-definition")
    return store.url


def pb(cli_env, db, *args):
    return subprocess.run(perfbench_cmd() + ["repro", *args, "--db", db], env=cli_env, capture_output=True,
                          text=True, timeout=120)


def load(d):
    ins = [onnx.load_tensor(p) for p in sorted(glob.glob(f"{d}/test_data_set_0/input_*.pb"))]
    outs = [onnx.load_tensor(p) for p in sorted(glob.glob(f"{d}/test_data_set_0/output_*.pb"))]
    return onnx.load(f"{d}/model.onnx"), ins, outs


def test_a_cell_becomes_a_model_ort_runs_to_the_expected_outputs(db, cli_env, tmp_path):
    out = tmp_path / "cell"
    r = pb(cli_env, db, "1", "--filter", "op=Softmax heads=32 keys=4096", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "Softmax.batch=1.heads=32.queries=1.keys=4096 f32 threads=1 of run 1 (loss, ours/ORT 1.40" in r.stdout
    model, ins, outs = load(out)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Softmax"] and [i.name for i in model.graph.input] == ["x"]
    # the exact bytes the run measured: the op's generator with the cell's seed
    op = ops.get("Softmax")
    case = op.make_case({"batch": 1, "heads": 32, "queries": 1, "keys": 4096})
    want = op.make_inputs(case, dtypes.get("f32"), np.random.default_rng(1))["x"]
    assert np.array_equal(numpy_helper.to_array(ins[0]), want)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": numpy_helper.to_array(ins[0])})[0]
    np.testing.assert_allclose(got, numpy_helper.to_array(outs[0]), rtol=1e-5, atol=1e-7)
    info = json.loads((out / "cell.json").read_text())
    assert info["verdict"] == "loss" and info["seed"] == 1 and info["node"]["op_type"] == "Softmax"
    assert out.stat().st_mode & 0o755 == 0o755  # an ordinary folder, not mkdtemp's private one
    # replayed with `perfbench node`: our kernel on the exact bytes, judged against the oracle's outputs
    r = subprocess.run(perfbench_cmd() + ["node", str(out / "model.onnx"), "--data", str(out / "test_data_set_0"),
                                          "--no-time", "--format", "json"], env=cli_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["reference"] == "expected outputs" and rep["case"] == "Softmax.batch=1.heads=1.queries=32.keys=4096"
    assert rep["checks"][0]["err"] <= rep["tol"] and rep["checks"][0]["err_ort"] <= rep["tol"]


def test_bf16_cells_keep_their_dtype(db, cli_env, tmp_path):
    out = tmp_path / "bf"
    r = pb(cli_env, db, "2", "--filter", "op=Softmax heads=14 keys=128", "-o", str(out))
    assert r.returncode == 0, r.stderr
    model, ins, outs = load(out)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.BFLOAT16
    assert ins[0].data_type == TensorProto.BFLOAT16 and outs[0].data_type == TensorProto.BFLOAT16
    note = json.loads((out / "cell.json").read_text())["ort_dtype_note"]
    assert "converted to f32" in note
    # `perfbench node` replays it: ORT has no bf16 Softmax, so the expected outputs alone judge ours
    r = subprocess.run(perfbench_cmd() + ["node", str(out / "model.onnx"), "--data", str(out / "test_data_set_0"),
                                          "--no-time", "--format", "json"], env=cli_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["ort_status"] == "no-kernel" and rep["reference"] == "expected outputs" and rep["dtype"] == "bf16"


def test_a_shared_kv_cache_is_recorded_and_the_model_runs(db, cli_env, tmp_path):
    out = tmp_path / "gqa"
    r = pb(cli_env, db, "1", "--filter", "op=GroupQueryAttention kv=shared", "-o", str(out))
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "cell.json").read_text())
    assert info["node"]["aliases"] == {"present_key": "past_key", "present_value": "past_value"}
    model, ins, outs = load(out)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: numpy_helper.to_array(t) for i, t in zip(sess.get_inputs(), ins)}
    got = sess.run(None, feed)
    np.testing.assert_allclose(got[0], numpy_helper.to_array(outs[0]), rtol=1e-4, atol=1e-5)  # the attention output


def test_errors_are_clear_and_nothing_is_overwritten(db, cli_env, tmp_path):
    r = pb(cli_env, db, "1", "--filter", "op=Softmax keys=999", "-o", str(tmp_path / "a"))
    assert r.returncode == 2 and "no cell of run 1 matches" in r.stderr
    r = pb(cli_env, db, "1", "--filter", "op=Softmax", "-o", str(tmp_path / "b"))
    assert r.returncode == 2 and "8 cells of run 1 match" in r.stderr and "Softmax.batch=1.heads=14" in r.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    r = pb(cli_env, db, "1", "--filter", "op=Softmax heads=32 keys=4096", "-o", str(full))
    assert r.returncode == 2 and "not an empty folder" in r.stderr and (full / "keep.txt").read_text() == "mine"
    assert not (full / "model.onnx").exists()


def test_a_changed_definition_and_a_typo_are_refused(db, cli_env, tmp_path):
    r = pb(cli_env, db, "3", "--filter", "op=Softmax", "-o", str(tmp_path / "stale"))
    assert r.returncode == 2 and "definition" in r.stderr and "changed since run 3" in r.stderr
    assert not (tmp_path / "stale").exists()  # nothing half-written
    r = pb(cli_env, db, "1", "--filter", "op=Softmax key=4096", "-o", str(tmp_path / "typo"))
    assert r.returncode == 2 and "did you mean 'keys'" in r.stderr


def test_a_symlink_to_an_empty_folder_is_written_through_and_a_dangling_one_refused(db, cli_env, tmp_path):
    """Issue 25: -o naming a symlink to an empty folder ended in a traceback. The user named the
    link: the folder it points to becomes the repro folder; a link to nothing is a clear error."""
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    r = pb(cli_env, db, "1", "--filter", "op=Softmax heads=32 keys=4096", "-o", str(tmp_path / "link"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link").is_symlink() and (target / "model.onnx").is_file()
    assert (tmp_path / "link" / "test_data_set_0" / "input_0.pb").is_file()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    r = pb(cli_env, db, "1", "--filter", "op=Softmax heads=32 keys=4096", "-o", str(tmp_path / "dangling"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "symbolic link" in r.stderr, r.stderr
    assert not (tmp_path / "nowhere").exists()
