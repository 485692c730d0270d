"""com.microsoft MultiHeadAttention with separate query/key/value (B, S, N*H): prefill without
past (optionally with a key padding mask) and decode with past_key/past_value (B, N, P, H) ->
present = past ++ new (B, N, P + S, H).

Semantics (ORT 1.31, CPU; checked against it): scores = q.k * scale (scale 0 = 1/sqrt(H)), then
mask_filter_value (-10000) added where key_padding_mask (B, P + S) is 0, softmax over all keys.
ORT has a float32 kernel only: float16 runs through Casts ORT inserts; bfloat16 is compared
with ORT in float32."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import wrappers
from perfbench.ops import _attention as att
from perfbench.ops.base import MAX_ATTENTION_HEAD_SIZE, MAX_HEADS, Case, GraphSpec, Mutant, Op, Param, register

MASK_FILTER = -10000.0


def _total(case: Case) -> int:
    return case.p["past"] + case.p["seq"]


def keep_mask(case: Case) -> np.ndarray:
    """(B, total) int32: row b masks its last 3 + 7*b keys (right padding)."""
    p = case.p
    total = _total(case)
    t = np.arange(total)
    return np.stack([(t < total - (3 + 7 * b)).astype(np.int32) for b in range(p["batch"])])


def oracle64(case: Case, x: dict, *, scale=None, drop_last_key=False, key_tail=0, mask_ignored=False,
             past_ignored=False) -> dict:
    p = case.p
    B, S, N, H, P = p["batch"], p["seq"], p["heads"], p["head_size"], p["past"]
    q = x["query"].reshape(B, S, N, H)
    kn = x["key"].reshape(B, S, N, H).transpose(0, 2, 1, 3)
    vn = x["value"].reshape(B, S, N, H).transpose(0, 2, 1, 3)
    if P:
        k = np.concatenate([x["past_key"], kn], axis=2)
        v = np.concatenate([x["past_value"], vn], axis=2)
    else:
        k, v = kn, vn
    total = P + S
    sc = (1.0 / np.sqrt(H)) if scale is None else scale
    out = np.empty((B, S, N, H))
    t = np.arange(total)
    for b in range(B):
        n_keys = total
        if key_tail and n_keys % key_tail:
            n_keys -= n_keys % key_tail
        keep = t < n_keys
        if drop_last_key:  # the last key that counts: the last unmasked one
            last = int(np.nonzero(x["key_padding_mask"][b] > 0)[0].max()) if p["mask"] else total - 1
            keep &= t != last
        visible = np.broadcast_to(keep & ((t >= P) if past_ignored else True), (S, total))
        bias = None
        if p["mask"] and not mask_ignored:
            bias = np.where(x["key_padding_mask"][b] > 0, 0.0, MASK_FILTER)
        out[b] = att.attend64(q[b], k[b], v[b], sc, visible, bias)
    res = {"output": out.reshape(B, S, N * H)}
    if P:
        res["present_key"], res["present_value"] = k, v
    return res


def _m_seqlen(op, case, x):
    return oracle64(case, x, drop_last_key=True)


def _m_scale(op, case, x):
    return oracle64(case, x, scale=1.0)


def _m_mask(op, case, x):
    return oracle64(case, x, mask_ignored=True)


def _m_tail(op, case, x):
    return oracle64(case, x, key_tail=16)


def _m_past(op, case, x):
    return oracle64(case, x, past_ignored=True)


@register
class MultiHeadAttention(Op):
    kernel_optional_args = ("key_padding_mask",)  # NULL: no mask
    name = "MultiHeadAttention"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"heads": 3, "head_size": 40, "past": 37},
        {"batch": 2, "heads": 2, "head_size": 24, "seq": 17, "mask": 1},
        {"heads": 2, "head_size": 32, "past": 30, "mask": 1},
        {"heads": 2, "head_size": 64, "past": 4200},  # 2 threads: key splits
        {"heads": 2, "head_size": 64, "seq": 70},  # 2 threads: prefill
        {"heads": 3, "head_size": 80, "past": 4097},
        {"batch": 2, "heads": 2, "head_size": 96, "seq": 33, "mask": 1},
        {"heads": 4, "head_size": 64, "past": 130, "mask": 1},
    )
    kernel = "multi_head_attention"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("seq", int, 1, minimum=1, help="query (and new key) tokens: 1 = decode"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="heads N"),
        Param("head_size", int, None, minimum=1, maximum=MAX_ATTENTION_HEAD_SIZE, help="head size H"),
        Param("past", int, 0, minimum=0, help="past tokens in past_key/past_value (0 = none)"),
        Param("mask", int, 0, choices=(0, 1), help="key padding mask: row b masks its last 3 + 7*b keys"),
    )
    ort_substitute = {"bf16": "f32"}
    mutants = (
        Mutant("off-by-one sequence length", _m_seqlen),
        Mutant("scale ignored", _m_scale),
        Mutant("padding mask ignored", _m_mask, lambda c: c.p["mask"] == 1),
        # with a padding mask the dropped tail keys are masked anyway: no bug to see
        Mutant("key tail ignored", _m_tail, lambda c: _total(c) % 16 != 0 and c.p["mask"] == 0),
        Mutant("past ignored", _m_past, lambda c: c.p["past"] > 0),
    )

    def validate(self, case: Case, where: str) -> None:
        p = case.p
        if p["mask"] and _total(case) <= 3 + 7 * (p["batch"] - 1):
            raise UsageError(f"{where}: the padding mask would hide every key of a batch row")

    def bound_for(self, case: Case) -> str:
        return "compute" if case.p["seq"] > 1 else "memory"

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        B, S, N, H, P = p["batch"], p["seq"], p["heads"], p["head_size"], p["past"]
        d = N * H
        inputs = [("query", "float", (B, S, d)), ("key", "float", (B, S, d)), ("value", "float", (B, S, d)),
                  ("", "", ())]
        inputs.append(("key_padding_mask", "int32", (B, _total(case))) if p["mask"] else ("", "", ()))
        outputs = [("output", (B, S, d))]
        if P:
            inputs += [("", "", ()), ("past_key", "float", (B, N, P, H)), ("past_value", "float", (B, N, P, H))]
            outputs += [("present_key", (B, N, P + S, H)), ("present_value", (B, N, P + S, H))]
        return GraphSpec("MultiHeadAttention", "com.microsoft", 1, inputs, outputs, {"num_heads": N})

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        B, S, N, H, P = p["batch"], p["seq"], p["heads"], p["head_size"], p["past"]
        total = P + S
        q = rng.standard_normal((B, S, N, H))
        k = rng.standard_normal((B, S, N, H))
        v = rng.standard_normal((B, S, N, H))
        pk = rng.standard_normal((B, N, P, H))
        pv = rng.standard_normal((B, N, P, H))
        # probes: queries lean toward u; keys along u at the first key, the last past key, the
        # new token(s), the last key (masked when mask=1) and the last unmasked key, with
        # distinctive values
        u = att.unit(rng, (B, N, H))
        q += 1.5 * u[:, None, :, :]
        big = 2.0 * np.sqrt(H)
        probes = {0: 3.0, P - 1: -3.0, P: 2.0, total - 1: -2.5} if P else {0: 3.0, total - 1: -2.5}
        rows = [dict(probes) for _ in range(B)]
        if p["mask"]:  # and at each row's last unmasked key
            for b in range(B):
                rows[b][total - 1 - (3 + 7 * b)] = 2.5
        for b, row in enumerate(rows):
            for t, val in row.items():
                if t < P:
                    pk[b, :, t] += big * u[b]
                    pv[b, :, t] += val
                else:
                    k[b, t - P] += big * u[b]
                    v[b, t - P] += val
        out = {"query": q.reshape(B, S, N * H), "key": k.reshape(B, S, N * H), "value": v.reshape(B, S, N * H)}
        if P:
            out["past_key"], out["past_value"] = pk, pv
        out = {n: np.ascontiguousarray(a.astype(dtype.numpy)) for n, a in out.items()}
        if p["mask"]:
            out["key_padding_mask"] = keep_mask(case)
        return out

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        return wrappers.multi_head_attention(
            lib, inputs["query"], inputs["key"], inputs["value"], outputs["output"], num_heads=case.p["heads"],
            key_padding_mask=inputs.get("key_padding_mask"), past_key=inputs.get("past_key"),
            past_value=inputs.get("past_value"), present_key=outputs.get("present_key"),
            present_value=outputs.get("present_value"), mask_filter_value=MASK_FILTER, threads=threads,
            device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return oracle64(case, inputs)

    def row_sizes(self, case: Case) -> dict:
        h = case.p["head_size"]
        return {"output": h, "present_key": h, "present_value": h} if case.p["past"] else {"output": h}

    def flops(self, case: Case) -> float:
        p = case.p
        return 4.0 * p["batch"] * p["heads"] * p["head_size"] * p["seq"] * _total(case)

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        """The least traffic the op needs: queries in, output out, every key and value read once,
        and with a past, present written (past rows can be copied while they are read)."""
        p = case.p
        B, S, N, H, P = p["batch"], p["seq"], p["heads"], p["head_size"], p["past"]
        e = dtype.itemsize
        qo = 2 * B * S * N * H * e
        kv = 2 * B * N * (P + S) * H * e
        present = kv if P else 0
        return qo + kv + present + (4 * B * (P + S) if p["mask"] else 0)
