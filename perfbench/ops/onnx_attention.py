"""ai.onnx Attention (opset 23), registered as "OnnxAttention" (kernel onnx_attention).

Inputs Q, K, V: 4-D (B, Nq, S, H) / (B, Nkv, T, H) or 3-D (B, S, Nq*H) / (B, T, Nkv*H) with the
q_num_heads / kv_num_heads attributes; optional attn_mask (bool: True = attend; or float, added),
broadcastable to (B, Nq, S, P+T); optional past_key/past_value (B, Nkv, P, H). Outputs Y (Q's
layout), present_key/present_value = past ++ new (B, Nkv, P+T, H), and the optional
qk_matmul_output (B, Nq, S, P+T) at the stage qk_matmul_output_mode names.

Semantics are onnx.reference's (the oracle): scores (Q K^T) * scale, softcap c*tanh(x/c) BEFORE
the mask bias, is_causal bottom-right (query s sees keys t <= P + s), a row with no visible key
gives zeros, GQA maps query head n to KV head n // (Nq/Nkv). qk modes: 0 = scaled QK, 1 = after
softcap, 2 = after softcap and mask (-inf where masked), 3 = softmax. Declined: mode 0 with
softcap > 0 (onnx.reference returns the softcapped scores, the spec's text says raw).

ORT 1.31 (CPU) agrees with the reference on everything the suite runs except mode 2, where it
writes the float lowest (-3.4e38) instead of -inf for masked scores: such cells give ORT
`ort-discrepancy`. ORT rejects masks whose query axis is broadcast or whose last axis is shorter
than P+T, so the op's mask shapes always carry both (`mask_shape`)."""

from __future__ import annotations

import math

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import onnx_attn as kernels
from perfbench.ops import _attention as att
from perfbench.ops._onnx_attn import float_param, float_text
from perfbench.ops._reference import evaluate_spec
from perfbench.ops.base import (
    MAX_HEADS,
    Case,
    GraphSpec,
    Mutant,
    NodeBinding,
    NodeInfo,
    NodeUnsupported,
    Op,
    Param,
    register,
)

MASK_SHAPES = ("sk", "nsk", "b1sk", "bnsk")  # (S,T) (Nq,S,T) (B,1,S,T) (B,Nq,S,T), T = P + kv_seq


def dims(case: Case) -> tuple:
    """(B, S, T, P, Nq, Nkv, H): T = new keys (kv_seq, 0 = seq), P = past."""
    p = case.p
    return p["batch"], p["seq"], p["kv_seq"] or p["seq"], p["past"], p["heads"], p["kv_heads"], p["head_size"]


def _total(case: Case) -> int:
    _, _, T, P, _, _, _ = dims(case)
    return P + T


def _scale(case: Case) -> float:
    """1/sqrt(H), or the scale attribute as onnx.reference applies it: a float32 whose square
    root (taken in float32) scales Q and K each."""
    s = case.p["scale"]
    return 1.0 / np.sqrt(case.p["head_size"]) if s == "default" else float(np.sqrt(np.float32(s))) ** 2


def _softcap(case: Case) -> float:
    return float(np.float32(case.p["softcap"]))


def mask_shape(case: Case) -> tuple:
    B, S, _, _, Nq, _, _ = dims(case)
    total = _total(case)
    return {"sk": (S, total), "nsk": (Nq, S, total), "b1sk": (B, 1, S, total),
            "bnsk": (B, Nq, S, total)}[case.p["mask_shape"]]


def _q_shape(case: Case) -> tuple:
    B, S, _, _, Nq, _, H = dims(case)
    return (B, Nq, S, H) if case.p["layout"] == "4d" else (B, S, Nq * H)


def _kv_shape(case: Case) -> tuple:
    B, _, T, _, _, Nkv, H = dims(case)
    return (B, Nkv, T, H) if case.p["layout"] == "4d" else (B, T, Nkv * H)


def _to_bnsh(a: np.ndarray, case: Case, heads: int) -> np.ndarray:
    """Q, K, V or Y in the case's layout -> (B, N, S, H)."""
    if case.p["layout"] == "4d":
        return a
    b, s, d = a.shape
    return a.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


def _from_bnsh(a: np.ndarray, case: Case) -> np.ndarray:
    if case.p["layout"] == "4d":
        return a
    b, n, s, h = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(b, s, n * h)


def attention64(case: Case, x: dict, *, kv_group=None, scale=None, causal_offset=True, diagonal=0,
                mask_ignored=False, softcap_ignored=False, softcap_after_mask=False, empty_rows="zero",
                drop_last_key=False, qk_stage=None) -> dict:
    """float64 ai.onnx Attention written out in numpy (equal to onnx.reference; the tests check
    it): the keyword arguments switch one bug on (mutants)."""
    B, S, T, P, Nq, Nkv, H = dims(case)
    G = Nq // Nkv
    total = P + T
    q = _to_bnsh(x["Q"], case, Nq)
    k = _to_bnsh(x["K"], case, Nkv)
    v = _to_bnsh(x["V"], case, Nkv)
    if P:
        k = np.concatenate([x["past_key"], k], axis=2)
        v = np.concatenate([x["past_value"], v], axis=2)
    heads_kv = np.arange(Nq) // G if kv_group is None else kv_group(np.arange(Nq), Nq, Nkv)
    sc = _scale(case) if scale is None else scale
    raw = np.einsum("bnsh,bnth->bnst", q, k[:, heads_kv]) * sc
    c = _softcap(case)
    capped = c * np.tanh(raw / c) if c > 0 and not (softcap_ignored or softcap_after_mask) else raw
    bias = np.zeros((B, Nq, S, total))
    if case.p["mask"] != "none" and not mask_ignored:
        m = x["attn_mask"]
        bias = bias + (np.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m)
    if case.p["causal"]:
        t = np.arange(total)[None, :]
        s = np.arange(S)[:, None] + (P if causal_offset else 0) + diagonal
        bias = bias + np.where(t <= s, 0.0, -np.inf)
    if drop_last_key:
        bias[..., -1] = -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        z = capped + bias
        if softcap_after_mask and c > 0:
            z = c * np.tanh(z / c)
        mx = z.max(axis=-1, keepdims=True)
        e = np.exp(z - np.where(np.isfinite(mx), mx, 0.0))
        e = np.where(np.isneginf(z), 0.0, e)
        den = e.sum(axis=-1, keepdims=True)
        probs = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
    empty = np.isneginf(bias.max(axis=-1, keepdims=True))
    if empty_rows == "uniform":  # a row with no visible key averages every value row
        probs = np.where(empty, 1.0 / total, probs)
    else:
        probs = np.where(empty, 0.0, probs)
    y = np.einsum("bnst,bnth->bnsh", probs, v[:, heads_kv])
    out = {"Y": _from_bnsh(y, case)}
    if case.p["present"]:
        out["present_key"], out["present_value"] = k, v
    mode = case.p["qk_mode"] if qk_stage is None else qk_stage
    if case.p["qk_mode"] >= 0:
        out["qk_matmul_output"] = [raw, capped, capped + bias, probs][mode]
    return out


# ---- mutants ----

def _m(**bug):
    return lambda op, case, x: attention64(case, x, **bug)


def _qk_shift(op, case, x):
    """qk_matmul_output taken one stage early (mode 0: the scale left out)."""
    mode = case.p["qk_mode"]
    if mode == 0:
        out = attention64(case, x)
        out["qk_matmul_output"] = out["qk_matmul_output"] / _scale(case)
        return out
    return attention64(case, x, qk_stage=mode - 1 if mode != 2 or _softcap(case) > 0 else 0)


def _has_mask(c):
    return c.p["mask"] != "none"


def _empty_row_applies(c):
    return c.p["mask"] != "none" and c.p["seq"] > 1


@register
class OnnxAttention(Op):
    kernel_optional_args = ("qk_output",)  # NULL: the QK matmul output is not asked for
    name = "OnnxAttention"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"heads": 8, "kv_heads": 2, "head_size": 80, "past": 4097, "layout": "3d", "causal": 1},  # 2 threads really split it (decode key splits)
        {"batch": 2, "heads": 6, "kv_heads": 2, "head_size": 40, "seq": 33, "causal": 1, "mask": "bool", "mask_shape": "b1sk"},
        {"batch": 2, "heads": 6, "kv_heads": 3, "head_size": 24, "seq": 17, "past": 5, "causal": 1, "mask": "float", "mask_shape": "bnsk", "layout": "3d"},
        {"heads": 4, "kv_heads": 2, "head_size": 36, "seq": 9, "kv_seq": 13, "mask": "bool", "mask_shape": "nsk", "softcap": "2", "present": 0},
        {"heads": 4, "kv_heads": 1, "head_size": 20, "seq": 9, "past": 3, "causal": 1, "mask": "bool", "softcap": "1.5", "qk_mode": 2},
        {"heads": 4, "kv_heads": 2, "head_size": 16, "seq": 7, "past": 6, "causal": 1, "mask": "float", "qk_mode": 3},
        {"heads": 4, "kv_heads": 2, "head_size": 16, "seq": 7, "kv_seq": 5, "softcap": "3", "qk_mode": 1, "layout": "3d"},
        {"heads": 3, "kv_heads": 3, "head_size": 8, "seq": 6, "qk_mode": 0, "scale": "0.3"},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 64, "past": 300, "mask": "bool", "mask_shape": "b1sk", "layout": "3d"},
        {"heads": 32, "kv_heads": 8, "head_size": 128, "past": 1024, "layout": "3d", "causal": 1},
    )
    kernel = "onnx_attention"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("seq", int, 1, minimum=1, help="query positions S (1 = decode)"),
        Param("kv_seq", int, 0, minimum=0, help="new keys/values T (0 = seq)"),
        Param("past", int, 0, minimum=0, help="past keys P (past_key/past_value inputs when > 0)"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="query heads Nq"),
        Param("kv_heads", int, None, minimum=1, maximum=MAX_HEADS,
              help="key/value heads Nkv (Nq / Nkv query heads share one)"),
        Param("head_size", int, None, minimum=1, help="head size H"),
        Param("layout", str, "4d", choices=("4d", "3d"), help="4-D (B,N,S,H) inputs or 3-D (B,S,N*H) with num_heads"),
        Param("causal", int, 0, choices=(0, 1), help="is_causal (bottom-right: query s sees keys <= P + s)"),
        Param("mask", str, "none", choices=("none", "bool", "float"), help="attn_mask input and its type"),
        Param("mask_shape", str, "sk", choices=MASK_SHAPES,
              help="attn_mask dims: sk (S,P+T), nsk (Nq,S,P+T), b1sk (B,1,S,P+T), bnsk (B,Nq,S,P+T)"),
        Param("softcap", str, "0", help="softcap attribute (0 = off)"),
        Param("scale", str, "default", help="scale attribute ('default' = 1/sqrt(H))"),
        Param("qk_mode", int, -1, choices=(-1, 0, 1, 2, 3),
              help="qk_matmul_output output at this qk_matmul_output_mode (-1 = not requested)"),
        Param("present", int, 1, choices=(0, 1), help="present_key/present_value requested"),
    )
    ort_substitute = {"bf16": "f32"}
    mutants = (
        Mutant("off-by-one sequence length", _m(drop_last_key=True)),
        Mutant("wrong KV-group mapping", _m(kv_group=lambda n, nq, nkv: n % nkv),
               lambda c: c.p["heads"] > c.p["kv_heads"] > 1),
        Mutant("scale ignored", _m(scale=1.0), lambda c: c.p["head_size"] > 1),
        Mutant("causal diagonal shifted back", _m(diagonal=-1), lambda c: c.p["causal"] == 1),
        Mutant("causal offset ignored (top-left with past)", _m(causal_offset=False),
               lambda c: c.p["causal"] == 1 and c.p["past"] > 0),
        Mutant("mask ignored", _m(mask_ignored=True), _has_mask),
        Mutant("fully masked row averaged", _m(empty_rows="uniform"), _empty_row_applies),
        Mutant("softcap ignored", _m(softcap_ignored=True), lambda c: float(c.p["softcap"]) > 0),
        Mutant("softcap after the mask", _m(softcap_after_mask=True),
               lambda c: float(c.p["softcap"]) > 0 and (c.p["causal"] == 1 or c.p["mask"] != "none")),
        Mutant("qk_matmul_output one stage early", _qk_shift, lambda c: c.p["qk_mode"] >= 0),
    )

    def validate(self, case: Case, where: str) -> None:
        p = case.p
        if p["heads"] % p["kv_heads"]:
            raise UsageError(f"{where}: heads={p['heads']} must be a multiple of kv_heads={p['kv_heads']}")
        if p["past"] > 0 and not p["present"]:
            raise UsageError(f"{where}: past > 0 needs present=1 (the op concatenates past into present)")
        if p["mask"] == "none" and p["mask_shape"] != "sk":
            raise UsageError(f"{where}: mask_shape={p['mask_shape']!r} needs a mask")
        softcap = float_param(p["softcap"], "softcap", where)
        if softcap < 0:
            raise UsageError(f"{where}: softcap={p['softcap']} must be >= 0 (0 = off)")
        if p["scale"] != "default" and float_param(p["scale"], "scale", where) <= 0:
            raise UsageError(f"{where}: scale={p['scale']} must be > 0 (the spec takes its square root)")
        if p["qk_mode"] == 0 and softcap > 0:
            raise UsageError(f"{where}: qk_mode=0 with softcap > 0 is declined (onnx.reference returns the "
                             f"softcapped scores, the spec's text the raw ones)")

    def bound_for(self, case: Case) -> str:
        return "compute" if case.p["seq"] > 1 else "memory"

    # ---- graph ----
    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        B, S, T, P, Nq, Nkv, H = dims(case)
        total = P + T
        inputs = [("Q", "float", _q_shape(case)), ("K", "float", _kv_shape(case)), ("V", "float", _kv_shape(case))]
        inputs.append(("attn_mask", "bool" if p["mask"] == "bool" else "float", mask_shape(case))
                      if p["mask"] != "none" else ("", "", ()))
        if P:
            inputs += [("past_key", "float", (B, Nkv, P, H)), ("past_value", "float", (B, Nkv, P, H))]
        while not inputs[-1][0]:
            inputs.pop()
        kv = (B, Nkv, total, H)
        outputs = [("Y", _q_shape(case))]
        outputs += [("present_key", kv), ("present_value", kv)] if p["present"] else [("", ()), ("", ())]
        outputs.append(("qk_matmul_output", (B, Nq, S, total)) if p["qk_mode"] >= 0 else ("", ()))
        while not outputs[-1][0]:
            outputs.pop()
        attrs = {"is_causal": p["causal"]}
        if p["layout"] == "3d":
            attrs.update(q_num_heads=Nq, kv_num_heads=Nkv)
        if float(p["softcap"]) > 0:
            attrs["softcap"] = float(p["softcap"])
        if p["scale"] != "default":
            attrs["scale"] = float(p["scale"])
        if p["qk_mode"] >= 0:
            attrs["qk_matmul_output_mode"] = p["qk_mode"]
        return GraphSpec("Attention", "", 23, inputs, outputs, attrs)

    # ---- inputs with planted probes ----
    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        B, S, T, P, Nq, Nkv, H = dims(case)
        G, total = Nq // Nkv, P + T
        q = rng.standard_normal((B, Nq, S, H))
        keys = rng.standard_normal((B, Nkv, total, H))  # past rows then new rows
        vals = rng.standard_normal((B, Nkv, total, H))
        # probes: the queries of a KV group lean toward a direction u; keys planted along it at
        # the first key and the last past key (distinctive value rows); each new key leans
        # toward the query of its own position (the causal diagonal; the new token in decode)
        u = att.unit(rng, (B, Nkv, H))
        q += 1.5 * np.repeat(u, G, axis=1)[:, :, None, :]
        root = np.sqrt(H)
        for t, sign in ((0, 1.0), (P - 1, -1.0)):
            if t >= 0 and (t > 0 or sign > 0):
                keys[:, :, t] += 2.0 * root * u
                vals[:, :, t] += 3.0 * sign
        qm = q.reshape(B, Nkv, G, S, H).mean(axis=2)  # (B, Nkv, S, H)
        qm /= np.linalg.norm(qm, axis=-1, keepdims=True)
        for j in range(min(S, T)):
            keys[:, :, P + j] += 4.0 * qm[:, :, j]
        vals[:, :, P:, : max(1, H // 2)] += 2.0
        out = {
            "Q": _from_bnsh(q, case),
            "K": _from_bnsh(np.ascontiguousarray(keys[:, :, P:]), case),
            "V": _from_bnsh(np.ascontiguousarray(vals[:, :, P:]), case),
        }
        if P:
            out["past_key"], out["past_value"] = keys[:, :, :P], vals[:, :, :P]
        out = {n: np.ascontiguousarray(a.astype(dtype.numpy)) for n, a in out.items()}
        if p["mask"] != "none":
            out["attn_mask"] = self._mask(case, dtype, rng)
        return out

    def _mask(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> np.ndarray:
        """Keys masked at random (1 in 8), the planted first key masked for odd query rows, per
        batch row b the last 3*b keys masked (padding), per head n one more key; with S > 1 the
        middle query row fully masked (zeros by the spec). Float masks: N(0,1) biases with -inf
        where a bool mask would be False."""
        B, S, T, P, Nq, _, _ = dims(case)
        total = P + T
        shape4 = (B if case.p["mask_shape"] in ("b1sk", "bnsk") else 1,
                  Nq if case.p["mask_shape"] in ("nsk", "bnsk") else 1, S, total)
        keep = rng.random(shape4) >= 0.125
        keep[:, :, 1::2, 0] = False
        for b in range(1, shape4[0]):
            keep[b, :, :, max(1, total - 3 * b):] = False
        for n in range(1, shape4[1]):
            keep[:, n, :, n % total] = False
        if S > 1:
            keep[:, :, S // 2, :] = False
        keep = keep.reshape(mask_shape(case))
        if case.p["mask"] == "bool":
            return np.ascontiguousarray(keep)
        bias = np.where(keep, rng.standard_normal(keep.shape), -np.inf)
        return np.ascontiguousarray(bias.astype(dtype.numpy))

    # ---- ours ----
    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        three = p["layout"] == "3d"
        return kernels.onnx_attention(
            lib, inputs["Q"], inputs["K"], inputs["V"], outputs["Y"],
            q_num_heads=p["heads"] if three else None, kv_num_heads=p["kv_heads"] if three else None,
            attn_mask=inputs.get("attn_mask"), past_key=inputs.get("past_key"), past_value=inputs.get("past_value"),
            present_key=outputs.get("present_key"), present_value=outputs.get("present_value"),
            qk_output=outputs.get("qk_matmul_output"), is_causal=p["causal"],
            scale=0.0 if p["scale"] == "default" else float(p["scale"]), softcap=float(p["softcap"]),
            qk_matmul_output_mode=max(p["qk_mode"], 0), threads=threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        # an ONNX-standard op: the truth is ONNX's own reference implementation, in float64
        return evaluate_spec(self.graph(case), inputs)

    def ort_departure(self, case: Case) -> str:
        p = case.p
        if p["qk_mode"] == 2 and (p["causal"] == 1 or p["mask"] != "none"):
            return ("qk_matmul_output mode 2 with masked scores: ORT 1.31 writes the float lowest "
                    "(-3.4e38) where the spec (onnx.reference) has -inf")
        return ""

    def row_sizes(self, case: Case) -> dict:
        h = case.p["head_size"]
        return {"Y": h, "present_key": h, "present_value": h, "qk_matmul_output": _total(case)}

    def _visible_pairs(self, case: Case) -> int:
        B, S, T, P, _, _, _ = dims(case)
        total = P + T
        if not case.p["causal"]:
            return B * S * total
        return B * int(np.clip(P + np.arange(S) + 1, 0, total).sum())

    def flops(self, case: Case) -> float:
        _, _, _, _, Nq, _, H = dims(case)
        return 4.0 * Nq * H * self._visible_pairs(case)

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        """Every input read once and every output written once: Q in, Y out, new K/V in, past
        K/V in and present out, the mask, the qk output."""
        B, S, T, P, Nq, Nkv, H = dims(case)
        e, total = dtype.itemsize, P + T
        n = 2 * B * S * Nq * H + 2 * B * Nkv * T * H + 2 * B * Nkv * P * H
        if case.p["present"]:
            n += 2 * B * Nkv * total * H
        if case.p["qk_mode"] >= 0:
            n += B * Nq * S * total
        mask = 0
        if case.p["mask"] != "none":
            mask = math.prod(mask_shape(case)) * (1 if case.p["mask"] == "bool" else e)
        return float(n * e + mask)

    # ---- perfbench node ----
    node_types = (("", "Attention"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        where = f"Attention node (opset {node.opset})"
        if node.opset < 23:
            raise UsageError(f"{where}: ai.onnx Attention exists from opset 23")
        if node.opset > 25:
            raise NodeUnsupported(f"{where}: opset {node.opset} is newer than the 23..25 this op maps")
        ins = list(node.inputs) + [None] * (7 - len(node.inputs))
        if len(node.inputs) > 7 or len(node.inputs) < 3 or any(i is None for i in ins[:3]):
            raise UsageError(f"{where}: needs Q, K, V and at most 7 inputs, got {len(node.inputs)}")
        if ins[6] is not None:
            raise NodeUnsupported(f"{where}: nonpad_kv_seqlen (external KV cache) is not implemented")
        for a in ("left_window_size", "right_window_size"):
            if node.attr(a, -1) != -1:
                raise NodeUnsupported(f"{where}: {a}={node.attr(a)} (sliding window) is not implemented")
        precision = node.attr("softmax_precision")
        if precision not in (None, 1, 11):
            raise NodeUnsupported(f"{where}: softmax_precision={precision} (softmax below float32) is not "
                                  f"implemented: we compute it in float32")
        if node.dtype not in ("f32", "f16", "bf16"):
            raise NodeUnsupported(f"{where}: element type {node.dtype} is not implemented (f32, f16, bf16)")
        (qd, qs), (kd, ks), (vd, vs) = ins[0], ins[1], ins[2]
        if np.dtype(kd) != np.dtype(qd) or np.dtype(vd) != np.dtype(qd):
            raise NodeUnsupported(f"{where}: Q, K, V of different element types ({qd}, {kd}, {vd}) are not "
                                  "implemented (the spec allows V its own type)")
        if not len(qs) == len(ks) == len(vs) or len(qs) not in (3, 4):
            raise UsageError(f"{where}: Q, K, V must all be 3-D or all 4-D, got {qs}, {ks}, {vs}")
        if len(qs) == 4:
            B, Nq, S, H = qs
            _, Nkv, T, _ = ks
            if ks[0] != B or ks[3] != H or vs[:3] != ks[:3]:
                raise UsageError(f"{where}: K {ks} / V {vs} do not match Q {qs}")
            if vs[3] != H:
                raise NodeUnsupported(f"{where}: value head size {vs[3]} != query head size {H} is not implemented")
            layout = "4d"
        else:
            Nq, Nkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
            if not Nq or not Nkv:
                raise UsageError(f"{where}: 3-D inputs need q_num_heads and kv_num_heads")
            B, S, D = qs
            if D % Nq or ks[2] % Nkv or ks[0] != B or vs[:2] != ks[:2]:
                raise UsageError(f"{where}: shapes Q {qs}, K {ks}, V {vs} do not fit q_num_heads={Nq}, "
                                 f"kv_num_heads={Nkv}")
            H, T = D // Nq, ks[1]
            if ks[2] // Nkv != H:
                raise UsageError(f"{where}: key head size {ks[2] // Nkv} != query head size {H}")
            if vs[2] // Nkv != H:
                raise NodeUnsupported(f"{where}: value head size {vs[2] // Nkv} != query head size {H} is not "
                                      f"implemented")
            layout = "3d"
        if Nq % Nkv:
            raise UsageError(f"{where}: q_num_heads={Nq} is not a multiple of kv_num_heads={Nkv}")
        if (ins[4] is None) != (ins[5] is None):
            raise UsageError(f"{where}: past_key and past_value go together")
        P = 0
        if ins[4] is not None:
            pk = tuple(ins[4][1])
            P = pk[2] if len(pk) == 4 else -1
            if pk != (B, Nkv, P, H) or tuple(ins[5][1]) != pk:
                raise UsageError(f"{where}: past_key {pk} / past_value {ins[5][1]} must be ({B}, {Nkv}, P, {H})")
        total = P + T
        outs = list(node.outputs) + [""] * (4 - len(node.outputs))
        present = bool(outs[1] or outs[2]) or P > 0
        mask, shape_name = "none", "sk"
        if ins[3] is not None:
            md, ms = ins[3]
            mask = "bool" if np.dtype(md) == np.bool_ else "float"
            if mask == "float" and np.dtype(md) != np.dtype(qd):
                raise NodeUnsupported(f"{where}: an attn_mask of type {np.dtype(md)} with Q of type {np.dtype(qd)} is "
                                      "not implemented (a bool mask, or a mask of Q's type)")
            ms = tuple(ms)
            if not 2 <= len(ms) <= 4 or ms[-1] != total or ms[-2] != S:
                raise NodeUnsupported(f"{where}: attn_mask shape {ms} is not mapped: its last two axes must be "
                                      f"(q_seq={S}, past+kv_seq={total}) (ORT 1.31 requires it too; a shorter or "
                                      f"query-broadcast mask is not)")
            lead = list(ms[:-2])
            while lead and lead[0] == 1:
                lead.pop(0)
            shape_name = {(): "sk", (Nq,): "nsk", (B, 1): "b1sk", (B, Nq): "bnsk"}.get(tuple(lead))
            if shape_name is None or (len(lead) == 2 and len(ms) != 4):
                raise UsageError(f"{where}: attn_mask shape {ms} does not broadcast to ({B}, {Nq}, {S}, {total})")
        qk_mode = -1
        if outs[3]:
            qk_mode = int(node.attr("qk_matmul_output_mode", 0))
            if qk_mode not in (0, 1, 2, 3):
                raise UsageError(f"{where}: qk_matmul_output_mode={qk_mode}, expected 0..3")
        softcap = float(node.attr("softcap", 0.0) or 0.0)
        if softcap < 0:
            raise NodeUnsupported(f"{where}: softcap={softcap} < 0 is not implemented")
        if qk_mode == 0 and softcap > 0:
            raise NodeUnsupported(f"{where}: qk_matmul_output_mode=0 with softcap={softcap} is not implemented (the "
                                  f"spec's text says the raw QK, onnx.reference returns it softcapped)")
        scale = node.attr("scale")
        if scale is not None and float(scale) == 0.0:
            raise NodeUnsupported(f"{where}: scale=0 is not implemented (our kernel reads 0 as 1/sqrt(H))")
        if scale is not None and float(scale) < 0.0:
            raise UsageError(f"{where}: scale={scale} < 0 (the spec takes its square root; ORT refuses it)")
        is_causal = int(node.attr("is_causal", 0))
        if is_causal not in (0, 1):
            raise UsageError(f"{where}: is_causal={is_causal}, expected 0 or 1")
        values = {"batch": B, "seq": S, "kv_seq": T if T != S else 0, "past": P, "heads": Nq, "kv_heads": Nkv,
                  "head_size": H, "layout": layout, "causal": is_causal, "mask": mask, "mask_shape": shape_name,
                  "softcap": float_text(softcap) if softcap > 0 else "0",
                  "scale": "default" if scale is None else float_text(float(scale)),
                  "qk_mode": qk_mode, "present": int(present)}
        case = self.make_case(values, where)
        inputs = {"Q": 0, "K": 1, "V": 2}
        if mask != "none":
            inputs["attn_mask"] = 3
        if P:
            inputs.update(past_key=4, past_value=5)
        shapes = self.output_shapes(case)
        outputs = {"Y": (0, tuple(qs))}
        for i, name in ((1, "present_key"), (2, "present_value"), (3, "qk_matmul_output")):
            if outs[i] and name in shapes:
                outputs[name] = (i, shapes[name])
        return NodeBinding(case, inputs, outputs)
