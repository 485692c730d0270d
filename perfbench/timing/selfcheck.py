"""`perfbench selfcheck`: is the harness measuring what it claims? (Reported, not a timed test.)

1. ORT's differential estimate (t_K - t_1)/(K-1) against the plain per-call time of the same
   large op (its 1-node run minus the 1-node harness floor): they should agree within ~5%.
2. Harness floors: our native loop around a no-op kernel (warm, and cold after eviction); ORT's
   1-node IOBinding run; `session.run` without IOBinding.
3. ORT's per-node dispatch: the slope of run time over a chain of Identity nodes with graph
   optimizations off (with them on, ORT deletes Identity nodes).
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from perfbench import dtypes
from perfbench.kernels_ffi import EvictBuffer, wrappers
from perfbench.ops import ort as ortlib
from perfbench.ops.base import GraphSpec


def _median_run_ns(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return float(np.median(ts))


def ort_floor_ns(threads: int = 1, n: int = 2000) -> float:
    gs = GraphSpec("Identity", "", 13, [("x", "float", (1,))], [("y", (1,))])
    sess = ortlib.make_session(ortlib.build_model(gs, dtypes.F32), threads, "off")
    b = ortlib.Bound(sess, gs, 1, {"x": np.ones(1, np.float32)}, {"y": np.empty(1, np.float32)})
    for _ in range(100):
        b.run()
    return _median_run_ns(b.run, n)


def ort_node_dispatch_ns(chain: int = 64, n: int = 400) -> float:
    """Per extra node: (t(chain) - t(1)) / (chain - 1), Identity nodes, optimizations off."""
    def session(k):
        names = ["x"] + [f"h{i}" for i in range(k)]
        nodes = [helper.make_node("Identity", [names[i]], [names[i + 1]]) for i in range(k)]
        g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])])
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        mdl.ir_version = ortlib.IR_VERSION
        so = ortlib.session_options(1, "off")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = ort.InferenceSession(mdl.SerializeToString(), so, providers=["CPUExecutionProvider"])
        bind = s.io_binding()
        x = np.ones(1, np.float32)
        y = np.empty(1, np.float32)
        bind.bind_cpu_input("x", x)
        bind.bind_output(names[-1], "cpu", 0, np.float32, [1], y.ctypes.data)
        return s, bind, (x, y)

    s1, b1, keep1 = session(1)
    sk, bk, keepk = session(chain)
    for _ in range(50):
        s1.run_with_iobinding(b1)
        sk.run_with_iobinding(bk)
    t1s, tks = [], []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        s1.run_with_iobinding(b1)
        t1s.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        sk.run_with_iobinding(bk)
        tks.append(time.perf_counter_ns() - t0)
    return (float(np.median(tks)) - float(np.median(t1s))) / (chain - 1)


def differential_vs_plain(m: int = 512, k: int = 1024, n: int = 1024, threads: int = 1, reps: int = 7) -> dict:
    """A large MatMul: ORT's K=4 differential vs its plain per-call time minus the floor."""
    gs = GraphSpec("MatMul", "", 13, [("a", "float", (m, k)), ("b", "float", (k, n))], [("y", (m, n))])
    rng = np.random.default_rng(0)
    ins = {"a": rng.standard_normal((m, k)).astype(np.float32), "b": rng.standard_normal((k, n)).astype(np.float32)}
    out = {"y": np.empty((m, n), np.float32)}
    K = 4
    b1 = ortlib.Bound(ortlib.make_session(ortlib.build_model(gs, dtypes.F32, 1), threads, "off"), gs, 1, ins, out)
    bk = ortlib.Bound(ortlib.make_session(ortlib.build_model(gs, dtypes.F32, K), threads, "off"), gs, K, ins, out)
    b1.run()
    bk.run()
    t1s, tks = [], []
    for _ in range(reps):
        t1s.append(_median_run_ns(b1.run, 1))
        tks.append(_median_run_ns(bk.run, 1))
    floor = ort_floor_ns(threads, 500)
    t1, tk = float(np.median(t1s)), float(np.median(tks))
    diff = (tk - t1) / (K - 1)
    plain = t1 - floor
    return {"op": f"MatMul {m}x{k}x{n} f32, {threads} thread(s)", "differential_ns": diff, "plain_ns": plain,
            "rel_diff": diff / plain - 1.0, "K": K}


def ours_floors(lib, threads: int = 1) -> dict:
    call = wrappers.noop(lib, threads)
    iters = 200_000
    warm = min(call.time_warm(iters) for _ in range(5)) / iters
    ev = EvictBuffer(lib, 64 * 1024**2, threads)
    cold = float(np.median(call.time_cold(31, ev)))
    return {"warm_ns": warm, "cold_ns": cold}


def session_run_floor_ns(n: int = 2000) -> float:
    gs = GraphSpec("Identity", "", 13, [("x", "float", (1,))], [("y", (1,))])
    sess = ortlib.make_session(ortlib.build_model(gs, dtypes.F32), 1, "off")
    feed = {sess.get_inputs()[0].name: np.ones(1, np.float32)}
    for _ in range(100):
        sess.run(None, feed)
    return _median_run_ns(lambda: sess.run(None, feed), n)


def run_all(lib, log=lambda m: None) -> dict:
    log("differential vs plain per-call time (large op) ...")
    d = differential_vs_plain()
    log("harness floors ...")
    floors = {"ours_noop": ours_floors(lib), "ort_iobinding_1node_ns": ort_floor_ns(),
              "ort_session_run_1node_ns": session_run_floor_ns()}
    log("ORT per-node dispatch (Identity chain, optimizations off) ...")
    disp = ort_node_dispatch_ns()
    return {"differential": d, "floors": floors, "ort_node_dispatch_ns": disp}
