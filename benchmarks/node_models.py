#!/usr/bin/env python3
"""Single-node models with tricky attributes, each run through `perfbench node` (issue 7's
must-show): writes the models (and data folders where the data steers the node) into a folder,
runs the real command on each and prints the command, its output and its exit code.

    .venv/bin/python benchmarks/node_models.py [--out /tmp/node-models] [--replicates 3] [--only NAME]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
F, H, B, I64, I32, BOOL = TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.INT64, TP.INT32, TP.BOOL
NP = {F: np.float32, H: np.float16, B: ml_dtypes.bfloat16, I64: np.int64, I32: np.int32, BOOL: np.bool_}


def model(path: Path, op, inputs, outputs, attrs=None, domain="", opset=None, inits=()):
    """inputs/outputs: [(name, type, shape)] ('' name = absent optional input); inits: [(name, array)]."""
    init_names = {n for n, _ in inits}
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], domain=domain or None,
                            **(attrs or {}))
    g = helper.make_graph([node], op, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs
                                       if n and n not in init_names],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs if n],
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    imports = [helper.make_opsetid("", opset or 23)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    m = helper.make_model(g, opset_imports=imports, producer_name="perfbench node_models")
    m.ir_version = 10
    onnx.save(m, str(path))
    return str(path)


def data(folder: Path, inputs=(), outputs=()):
    folder.mkdir(parents=True, exist_ok=True)
    for k, (n, a) in enumerate(inputs):
        (folder / f"input_{k}.pb").write_bytes(numpy_helper.from_array(np.asarray(a, order="C"), n).SerializeToString())
    for k, (n, a) in enumerate(outputs):
        (folder / f"output_{k}.pb").write_bytes(numpy_helper.from_array(np.asarray(a, order="C"), n).SerializeToString())
    return str(folder)


def cases(d: Path) -> list:
    """(name, why it is tricky, [perfbench node args])"""
    rng = np.random.default_rng(7)
    out = []

    m = model(d / "softmax11_axis1.onnx", "Softmax", [("x", F, ["batch", 3, 5, 37])], [("y", F, ["batch", 3, 5, 37])],
              {"axis": 1}, opset=11)
    out.append(("softmax11_axis1", "Softmax opset 11 axis=1: flattens to 2-D (rows = batch, cols = 3*5*37)",
                [m, "--dim", "batch=4"]))

    m = model(d / "softmax13_axis1.onnx", "Softmax", [("x", F, [2, 3, 5, 37])], [("y", F, [2, 3, 5, 37])],
              {"axis": 1}, opset=13)
    out.append(("softmax13_axis1", "Softmax opset 13 axis=1 (not the last axis): our kernel declines", [m]))

    shape = [2, 7, 16, 96]
    scale = (1 + 0.1 * rng.standard_normal((16, 96))).astype(ml_dtypes.bfloat16)
    bias = (0.1 * rng.standard_normal((16, 96))).astype(ml_dtypes.bfloat16)
    m = model(d / "layernorm_axis-2_bf16.onnx", "LayerNormalization",
              [("x", B, shape), ("scale", B, [16, 96]), ("bias", B, [16, 96])],
              [("y", B, shape), ("mean", F, [2, 7, 1, 1]), ("inv_std", F, [2, 7, 1, 1])],
              {"axis": -2, "epsilon": 1e-3}, opset=17, inits=[("scale", scale), ("bias", bias)])
    out.append(("layernorm_axis-2_bf16", "LayerNormalization opset 17, axis=-2 (normalize over the last two "
                "axes), bf16 head to head, Mean/InvStdDev outputs (float32), scale/bias initializers", [m]))

    m = model(d / "rmsnorm23_bf16.onnx", "RMSNormalization", [("x", B, [4, 896]), ("scale", B, [896])],
              [("y", B, [4, 896])], {"epsilon": 1e-6}, opset=23)
    out.append(("rmsnorm23_bf16", "RMSNormalization opset 23 in bf16: ORT has no bf16 kernel and no expected "
                "outputs are given", [m]))

    axes = np.array([-1], np.int64)
    m = model(d / "reducemean18_keepdims0.onnx", "ReduceMean", [("x", F, [8, 1000]), ("axes", I64, [1])],
              [("y", F, [8])], {"keepdims": 0}, opset=18, inits=[("axes", axes)])
    out.append(("reducemean18_keepdims0", "ReduceMean opset 18: axes as an initializer input [-1], keepdims=0", [m]))

    m = model(d / "reducemean13_all.onnx", "ReduceMean", [("x", H, [64, 1031])], [("y", H, [1, 1])], {}, opset=13)
    out.append(("reducemean13_all", "ReduceMean opset 13 with no axes attribute: the mean of all 65,984 f16 "
                "elements (keepdims default 1)", [m]))

    m = model(d / "gelu20_tanh_f16.onnx", "Gelu", [("x", H, [64, 1031])], [("y", H, [64, 1031])],
              {"approximate": "tanh"}, opset=20)
    out.append(("gelu20_tanh_f16", "Gelu opset 20 approximate='tanh' in f16 (ORT: a function body plus Casts)", [m]))

    m = model(d / "fastgelu_bias.onnx", "FastGelu", [("x", F, [3, 77, 1000]), ("bias", F, [1000])],
              [("y", F, [3, 77, 1000])], domain="com.microsoft", opset=21)
    out.append(("fastgelu_bias", "com.microsoft FastGelu with its optional bias input", [m]))

    m = model(d / "add_broadcast.onnx", "Add", [("a", F, [2, 1, 33, 33]), ("b", F, [2, 12, 1, 33])],
              [("y", F, [2, 12, 33, 33])], opset=14)
    out.append(("add_broadcast", "Add with both inputs broadcast: (2,1,33,33) + (2,12,1,33)", [m]))

    table = rng.standard_normal((1000, 96)).astype(ml_dtypes.bfloat16)
    idx = np.array([[0, -1, 999, 5], [-1000, 17, 3, -2]], np.int32)
    m = model(d / "gather_negative_int32.onnx", "Gather", [("table", B, [1000, 96]), ("idx", I32, [2, 4])],
              [("y", B, [2, 4, 96])], {"axis": 0}, opset=13)
    dd = data(d / "gather_negative_int32.data", [("table", table), ("idx", idx)])
    out.append(("gather_negative_int32", "Gather axis=0 with int32 indices, negatives wrapping (-1, -1000, -2), "
                "bf16 table", [m, "--data", dd]))

    m = model(d / "transpose_0231.onnx", "Transpose", [("x", H, [2, 12, 65, 64])], [("y", H, [2, 65, 64, 12])],
              {"perm": [0, 2, 3, 1]}, opset=13)
    out.append(("transpose_0231", "Transpose perm (0,2,3,1) in f16: the last axis moves", [m]))

    k = np.array(-1, np.int64)
    m = model(d / "trilu_lower_k-1.onnx", "Trilu", [("x", F, [3, 17, 19]), ("k", I64, [])], [("y", F, [3, 17, 19])],
              {"upper": 0}, opset=14, inits=[("k", k)])
    out.append(("trilu_lower_k-1", "Trilu upper=0 with k=-1 (an initializer): strictly below the diagonal", [m]))

    m = model(d / "concat_axis-2.onnx", "Concat", [("past", B, [1, 8, 100, 64]), ("new", B, [1, 8, 1, 64])],
              [("y", B, [1, 8, 101, 64])], {"axis": -2}, opset=13)
    out.append(("concat_axis-2", "Concat axis=-2 (KV append), bf16", [m]))

    q, kv, hd, S, P = 8, 2, 64, 5, 11
    m = model(d / "attention23_3d_gqa_causal_past_softcap.onnx", "Attention",
              [("Q", F, [1, S, q * hd]), ("K", F, [1, S, kv * hd]), ("V", F, [1, S, kv * hd]), ("", F, []),
               ("past_key", F, [1, kv, P, hd]), ("past_value", F, [1, kv, P, hd])],
              [("Y", F, [1, S, q * hd]), ("present_key", F, [1, kv, P + S, hd]),
               ("present_value", F, [1, kv, P + S, hd])],
              {"q_num_heads": q, "kv_num_heads": kv, "is_causal": 1, "softcap": 30.0}, opset=23)
    out.append(("attention23_3d_gqa_causal_past_softcap", "ONNX Attention opset 23: 3-D inputs, 8 query / 2 KV "
                "heads, is_causal with a past of 11 (the spec's offset), softcap=30, present outputs", [m]))

    mask = np.tril(np.ones((S, S), bool))
    mask[2, :] = False  # a fully masked query row
    m = model(d / "attention23_bool_mask_fully_masked_row.onnx", "Attention",
              [("Q", F, [1, 4, S, hd]), ("K", F, [1, 4, S, hd]), ("V", F, [1, 4, S, hd]), ("mask", BOOL, [S, S])],
              [("Y", F, [1, 4, S, hd])], {}, opset=23, inits=[("mask", mask)])
    out.append(("attention23_bool_mask_fully_masked_row", "ONNX Attention opset 23: 4-D, boolean mask with one "
                "fully masked query row (spec vs ORT)", [m]))

    m = model(d / "rotary23_partial_interleaved.onnx", "RotaryEmbedding",
              [("x", F, [2, 4, 7, 64]), ("cos", F, [64, 16]), ("sin", F, [64, 16]), ("pos", I64, [2, 7])],
              [("y", F, [2, 4, 7, 64])], {"interleaved": 1, "rotary_embedding_dim": 32}, opset=23)
    ang = np.arange(64)[:, None] / (10000 ** (np.arange(16)[None, :] / 16))
    xr = rng.standard_normal((2, 4, 7, 64)).astype(np.float32)
    pos = np.array([[0, 1, 2, 3, 4, 5, 6], [63, 10, 20, 30, 40, 50, 60]], np.int64)
    dd = data(d / "rotary23.data", [("x", xr), ("cos", np.cos(ang).astype(np.float32)),
                                    ("sin", np.sin(ang).astype(np.float32)), ("pos", pos)])
    out.append(("rotary23_partial_interleaved", "ONNX RotaryEmbedding opset 23: 4-D, interleaved, "
                "rotary_embedding_dim=32 of head 64 (the rest passes through), position_ids", [m, "--data", dd]))

    # wrong expected outputs (the opset-13 last-axis answer given for an opset-11 axis=2 node): exit 1
    x = rng.standard_normal((2, 3, 4, 9)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    m = model(d / "softmax11_axis2_wrong_expected.onnx", "Softmax", [("x", F, [2, 3, 4, 9])], [("y", F, [2, 3, 4, 9])],
              {"axis": 2}, opset=11)
    dd = data(d / "softmax11_wrong.data", [("x", x)], [("y", (e / e.sum(-1, keepdims=True)).astype(np.float32))])
    out.append(("softmax11_axis2_wrong_expected", "expected outputs computed with the wrong (last-axis) semantics",
                [m, "--data", dd]))

    dd = data(d / "bad_shape.data", [("x", np.zeros((2, 3, 9), np.float32))])
    m = model(d / "softmax13_last.onnx", "Softmax", [("x", F, ["batch", 3, 37])], [("y", F, ["batch", 3, 37])],
              {"axis": -1}, opset=13)
    out.append(("bad_data", "data that does not fit the model", [m, "--data", dd]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/node-models")
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--only", action="append")
    ap.add_argument("--no-time", action="store_true")
    a = ap.parse_args()
    d = Path(a.out)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    codes = []
    for name, why, args in cases(d):
        if a.only and name not in a.only:
            continue
        cmd = [sys.executable, "-m", "perfbench.cli.main", "node", *args]
        cmd += ["--no-time"] if a.no_time else ["--replicates", str(a.replicates)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        shown = " ".join(["perfbench node"] + [x.replace(str(d) + "/", "") for x in args])
        print(f"### {name}: {why}\n$ {shown}\n{r.stdout.rstrip()}\n{r.stderr.rstrip()}\n-> exit {r.returncode}\n",
              flush=True)
        codes.append((name, r.returncode))
    print("summary: " + ", ".join(f"{n}={c}" for n, c in codes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
