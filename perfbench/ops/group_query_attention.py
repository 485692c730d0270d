"""com.microsoft GroupQueryAttention: query (B, S, Nq*H), key/value (B, S, Nkv*H), BNSH KV caches
past_key/past_value -> present_key/present_value, seqlens_k int32 (B,) = tokens - 1 per batch
row, total_sequence_length int32; optional rotary (cos/sin caches) on queries and new keys.

Semantics (ORT 1.31, CPU; checked against it): seq == total_sequence_length is a first prompt
(no past read, positions 0..seq-1, rows may be right-padded); otherwise batch row b has
past_b = seqlens_k[b] + 1 - seq past tokens, its new tokens sit at rows/positions
past_b .. past_b + seq - 1, and query s sees keys 0 .. min(past_b + s, total_b - 1).
KV modes: "copy" (present is a new tensor: past rows copied, later rows zero) and "shared"
(past and present are ONE buffer of capacity past + seq, bound as both: only the new rows are
written; the past length dimension is symbolic in the graph, as decoders declare it)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import wrappers
from perfbench.ops import _attention as att
from perfbench.ops.base import MAX_ATTENTION_HEAD_SIZE, MAX_HEADS, Case, GraphSpec, Mutant, Op, Param, register

RAGGED_STEP = 37  # decode: batch row b holds 37*b fewer past tokens than row 0
PROMPT_PAD_STEP = 5  # first prompt: batch row b is right-padded by 5*b tokens


def lengths(case: Case) -> tuple[np.ndarray, np.ndarray, bool]:
    """(past_b, total_b) per batch row and whether this is a first prompt."""
    p = case.p
    b = np.arange(p["batch"])
    first = p["past"] == 0
    if first:
        total = p["seq"] - (PROMPT_PAD_STEP * b if p["ragged"] else 0 * b)
        return np.zeros_like(total), total, True
    past = p["past"] - (RAGGED_STEP * b if p["ragged"] else 0 * b)
    return past, past + p["seq"], False


def _cap(case: Case) -> int:
    """Capacity of the present tensor (and of the shared buffer)."""
    return case.p["past"] + case.p["seq"]


def _max_pos(case: Case) -> int:
    return case.p["past"] + case.p["seq"] + 3


def oracle64(case: Case, x: dict, *, kv_group=None, halves_swapped=False, positions_ignored=False, scale=None,
             diagonal=0, drop_last_key=False, key_tail=0) -> dict:
    """float64 GroupQueryAttention; the keyword arguments switch one bug on (mutants)."""
    p = case.p
    B, S, Nq, Nkv, H = p["batch"], p["seq"], p["heads"], p["kv_heads"], p["head_size"]
    G = Nq // Nkv
    shared = p["kv"] == "shared"
    q = x["query"].reshape(B, S, Nq, H)
    kn = x["key"].reshape(B, S, Nkv, H)
    vn = x["value"].reshape(B, S, Nkv, H)
    past_b, total_b, first = lengths(case)
    cap = _cap(case)
    if shared:
        pk, pv = x["past_key"].copy(), x["past_value"].copy()
    else:
        pk, pv = np.zeros((B, Nkv, cap, H)), np.zeros((B, Nkv, cap, H))
    sc = (1.0 / np.sqrt(H)) if scale is None else scale
    out = np.empty((B, S, Nq, H))
    heads_kv = (np.arange(Nq) // G) if kv_group is None else kv_group(np.arange(Nq), Nq, Nkv)
    for b in range(B):
        pb, tot = int(past_b[b]), int(total_b[b])
        pos = pb + np.arange(S)
        rpos = np.arange(S) if positions_ignored else pos
        qb, kb = q[b], kn[b]  # (S, N, H)
        if p["rotary"]:
            kw = {"interleaved": bool(p["interleaved"]), "swap_halves": halves_swapped}
            qb = att.rope64(qb.transpose(1, 0, 2), rpos, x["cos_cache"], x["sin_cache"], **kw).transpose(1, 0, 2)
            kb = att.rope64(kb.transpose(1, 0, 2), rpos, x["cos_cache"], x["sin_cache"], **kw).transpose(1, 0, 2)
        if not shared and not first and pb > 0:
            pk[b, :, :pb] = x["past_key"][b, :, :pb]
            pv[b, :, :pb] = x["past_value"][b, :, :pb]
        pk[b, :, pb: pb + S] = kb.transpose(1, 0, 2)
        pv[b, :, pb: pb + S] = vn[b].transpose(1, 0, 2)
        n_keys = tot - 1 if drop_last_key else tot
        if key_tail and n_keys % key_tail:
            n_keys -= n_keys % key_tail
        t = np.arange(tot)
        visible = (t[None, :] <= (pos[:, None] + diagonal)) & (t[None, :] < n_keys)
        out[b] = att.attend64(qb, pk[b, heads_kv, :tot], pv[b, heads_kv, :tot], sc, visible)
    return {"output": out.reshape(B, S, Nq * H), "present_key": pk, "present_value": pv}


def _m_seqlen(op, case, x):
    return oracle64(case, x, drop_last_key=True)


def _m_group(op, case, x):
    return oracle64(case, x, kv_group=lambda n, nq, nkv: n % nkv)


def _m_halves(op, case, x):
    return oracle64(case, x, halves_swapped=True)


def _m_positions(op, case, x):
    return oracle64(case, x, positions_ignored=True)


def _m_scale(op, case, x):
    return oracle64(case, x, scale=1.0)


def _m_diag_before(op, case, x):
    return oracle64(case, x, diagonal=-1)


def _m_diag_after(op, case, x):
    return oracle64(case, x, diagonal=1)


def _m_key_tail(op, case, x):
    return oracle64(case, x, key_tail=16)


def _key_tail_applies(case):
    _, total, _ = lengths(case)
    return bool(np.any(total % 16))


@register
class GroupQueryAttention(Op):
    name = "GroupQueryAttention"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20},  # decode, batch 1
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "past": 80, "ragged": 1},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "past": 80, "ragged": 1, "kv": "shared"},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 32, "seq": 12, "ragged": 1},  # ragged first prompts
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 9, "seq": 5},  # chunked prefill
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20, "rotary": 1},
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 20, "rotary": 1, "interleaved": 1, "kv": "shared"},
        {"batch": 2, "heads": 4, "kv_heads": 1, "head_size": 32, "seq": 9, "ragged": 1, "rotary": 1},
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 6, "seq": 4, "rotary": 1, "interleaved": 1},
        {"heads": 4, "kv_heads": 2, "head_size": 32, "past": 8192},  # 2 threads: decode splits its keys
        {"heads": 4, "kv_heads": 2, "head_size": 32, "seq": 64},  # 2 threads: prefill splits its queries
        {"heads": 8, "kv_heads": 1, "head_size": 32, "past": 8200},  # 8 query heads per KV head, key splits
        {"batch": 3, "heads": 4, "kv_heads": 1, "head_size": 32, "past": 4200, "ragged": 1},  # key splits over ragged rows
        {"batch": 3, "heads": 4, "kv_heads": 1, "head_size": 32, "past": 4200, "ragged": 1, "kv": "shared"},
        {"heads": 4, "kv_heads": 2, "head_size": 40, "past": 50},  # a vector tail at 16 lanes
        {"heads": 4, "kv_heads": 2, "head_size": 24, "seq": 20},  # a tail at 16 lanes in prefill
        {"heads": 4, "kv_heads": 2, "head_size": 40, "seq": 20},  # odd vector count at 8 and 16 lanes
        {"heads": 8, "kv_heads": 2, "head_size": 80, "past": 4097, "rotary": 1},
        {"heads": 8, "kv_heads": 2, "head_size": 80, "seq": 33, "rotary": 1, "interleaved": 1},
        {"batch": 3, "heads": 4, "kv_heads": 2, "head_size": 64, "past": 300, "ragged": 1, "kv": "shared"},
        {"heads": 4, "kv_heads": 2, "head_size": 64, "past": 9, "seq": 5},
        {"batch": 2, "heads": 4, "kv_heads": 1, "head_size": 32, "seq": 20, "ragged": 1, "rotary": 1},
    )
    kernel = "group_query_attention"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("seq", int, 1, minimum=1, help="new tokens per batch row (1 = decode; > 1 with past 0 = prefill)"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="query heads Nq"),
        Param("kv_heads", int, None, minimum=1, maximum=MAX_HEADS,
              help="key/value heads Nkv (Nq / Nkv query heads share one)"),
        Param("head_size", int, None, minimum=8, maximum=MAX_ATTENTION_HEAD_SIZE,
              help="head size H (a multiple of 8; of 16 with rotary)"),
        Param("past", int, 0, minimum=0, help="past tokens of batch row 0 (0 = first prompt)"),
        Param("kv", str, "copy", choices=("copy", "shared"),
              help="present as a new tensor (copy) or past and present one buffer (shared)"),
        Param("rotary", int, 0, choices=(0, 1), help="do_rotary: rotate queries and new keys"),
        Param("interleaved", int, 0, choices=(0, 1), help="rotary_interleaved"),
        Param("ragged", int, 0, choices=(0, 1),
              help=f"batch rows of different lengths (decode: {RAGGED_STEP}*b fewer past tokens; "
                   f"prompt: {PROMPT_PAD_STEP}*b padding)"),
    )
    ort_substitute = {"bf16": "f32"}
    mutants = (
        Mutant("off-by-one sequence length", _m_seqlen),
        Mutant("wrong KV-group mapping", _m_group, lambda c: c.p["heads"] > c.p["kv_heads"] > 1),
        Mutant("rotary halves swapped", _m_halves, lambda c: c.p["rotary"] == 1),
        Mutant("positions ignored", _m_positions, lambda c: c.p["rotary"] == 1 and c.p["past"] > 0),
        Mutant("scale ignored", _m_scale),
        Mutant("causal diagonal shifted back", _m_diag_before, lambda c: c.p["seq"] > 1),
        Mutant("causal diagonal shifted forward", _m_diag_after, lambda c: c.p["seq"] > 1),
        Mutant("key tail ignored", _m_key_tail, _key_tail_applies),
    )

    def validate(self, case: Case, where: str) -> None:
        p = case.p
        if p["heads"] % p["kv_heads"]:
            raise UsageError(f"{where}: heads={p['heads']} must be a multiple of kv_heads={p['kv_heads']}")
        step = 16 if p["rotary"] else 8
        if p["head_size"] % step:
            raise UsageError(f"{where}: head_size={p['head_size']} must be a multiple of {step} (ORT's rule)")
        if p["seq"] > 1 and p["past"] > 0 and p["batch"] > 1:
            raise UsageError(f"{where}: ORT takes seq > 1 after a past only at batch 1")
        if p["ragged"]:
            if p["batch"] < 2:
                raise UsageError(f"{where}: ragged needs batch >= 2")
            if p["past"] > 0 and p["past"] - RAGGED_STEP * (p["batch"] - 1) < 0:
                raise UsageError(f"{where}: ragged rows need past >= {RAGGED_STEP * (p['batch'] - 1)}")
            if p["past"] == 0 and p["seq"] - PROMPT_PAD_STEP * (p["batch"] - 1) < 1:
                raise UsageError(f"{where}: ragged prompt rows need seq > {PROMPT_PAD_STEP * (p['batch'] - 1)}")
        if p["interleaved"] and not p["rotary"]:
            raise UsageError(f"{where}: interleaved=1 needs rotary=1")

    def bound_for(self, case: Case) -> str:
        return "compute" if case.p["seq"] > 1 else "memory"

    # ---- graph ----
    def dim_sizes(self, case: Case) -> dict:
        return {"past_capacity": _cap(case)}

    def _has_past(self, case: Case) -> bool:
        return case.p["kv"] == "shared" or case.p["past"] > 0

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        B, S, Nq, Nkv, H = p["batch"], p["seq"], p["heads"], p["kv_heads"], p["head_size"]
        shared = p["kv"] == "shared"
        past_dim = "past_capacity" if shared else p["past"]
        pres_dim = "past_capacity" if shared else _cap(case)
        inputs = [("query", "float", (B, S, Nq * H)), ("key", "float", (B, S, Nkv * H)),
                  ("value", "float", (B, S, Nkv * H))]
        if self._has_past(case):
            inputs += [("past_key", "float", (B, Nkv, past_dim, H)), ("past_value", "float", (B, Nkv, past_dim, H))]
        else:
            inputs += [("", "", ()), ("", "", ())]
        inputs += [("seqlens_k", "int32", (B,)), ("total_sequence_length", "int32", ())]
        attrs = {"num_heads": Nq, "kv_num_heads": Nkv}
        if p["rotary"]:
            mp = _max_pos(case)
            inputs += [("cos_cache", "float", (mp, H // 2)), ("sin_cache", "float", (mp, H // 2))]
            attrs.update(do_rotary=1, rotary_interleaved=p["interleaved"])
        return GraphSpec("GroupQueryAttention", "com.microsoft", 1, inputs,
                         [("output", (B, S, Nq * H)), ("present_key", (B, Nkv, pres_dim, H)),
                          ("present_value", (B, Nkv, pres_dim, H))], attrs)

    def output_shapes(self, case: Case) -> dict:
        p = case.p
        kv = (p["batch"], p["kv_heads"], _cap(case), p["head_size"])
        return {"output": (p["batch"], p["seq"], p["heads"] * p["head_size"]), "present_key": kv, "present_value": kv}

    def aliases(self, case: Case) -> dict:
        return {"present_key": "past_key", "present_value": "past_value"} if case.p["kv"] == "shared" else {}

    # ---- inputs with planted probes ----
    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        B, S, Nq, Nkv, H = p["batch"], p["seq"], p["heads"], p["kv_heads"], p["head_size"]
        G = Nq // Nkv
        shared = p["kv"] == "shared"
        past_b, total_b, first = lengths(case)
        q = rng.standard_normal((B, S, Nq, H))
        k = rng.standard_normal((B, S, Nkv, H))
        v = rng.standard_normal((B, S, Nkv, H))
        past_cap = _cap(case) if shared else p["past"]
        pk = rng.standard_normal((B, Nkv, past_cap, H)) if self._has_past(case) else None
        pv = rng.standard_normal((B, Nkv, past_cap, H)) if self._has_past(case) else None
        mp = _max_pos(case)
        cos, sin = att.rope_tables(mp, H // 2, H)
        # probes: every query of a KV group leans toward a direction u; keys planted along it
        # (rotated as the query will be) at the first key and the last past key; each new key
        # leans toward its own query heads (the causal diagonal, and the new token in decode).
        u = att.unit(rng, (B, Nkv, H))
        q += 1.5 * np.repeat(u, G, axis=1)[:, None, :, :]
        sqrt_h = np.sqrt(H)
        for b in range(B):
            pb = int(past_b[b])
            if pk is not None and pb > 0 and not first:
                dq = u[b]  # (Nkv, H): the query direction at the decode position, rotated
                if p["rotary"]:
                    dq = att.rope64(dq[:, None, :], np.array([pb]), cos, sin,
                                    interleaved=bool(p["interleaved"]))[:, 0, :]
                for t, sign in ((0, 1.0), (pb - 1, -1.0)):
                    pk[b, :, t] += 2.0 * sqrt_h * dq  # score +3 over the rest
                    pv[b, :, t] += 3.0 * sign
            qm = q[b].reshape(S, Nkv, G, H).mean(axis=2)  # (S, Nkv, H)
            qm /= np.linalg.norm(qm, axis=-1, keepdims=True)
            k[b] += 4.0 * qm
            v[b, :, :, : H // 2] += 2.0
        out = {
            "query": q.reshape(B, S, Nq * H), "key": k.reshape(B, S, Nkv * H), "value": v.reshape(B, S, Nkv * H),
        }
        if pk is not None:
            out["past_key"], out["past_value"] = pk, pv
        out = {n: np.ascontiguousarray(a.astype(dtype.numpy)) for n, a in out.items()}
        out["seqlens_k"] = (total_b - 1).astype(np.int32)
        out["total_sequence_length"] = np.array(p["seq"] if first else p["past"] + p["seq"], dtype=np.int32)
        if p["rotary"]:
            out["cos_cache"] = np.ascontiguousarray(cos.astype(dtype.numpy))
            out["sin_cache"] = np.ascontiguousarray(sin.astype(dtype.numpy))
        return out

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        return wrappers.group_query_attention(
            lib, inputs["query"], inputs["key"], inputs["value"], inputs.get("past_key"), inputs.get("past_value"),
            inputs["seqlens_k"], int(inputs["total_sequence_length"]), outputs["output"], outputs["present_key"],
            outputs["present_value"], num_heads=p["heads"], kv_num_heads=p["kv_heads"],
            cos_cache=inputs.get("cos_cache"), sin_cache=inputs.get("sin_cache"), do_rotary=p["rotary"],
            rotary_interleaved=p["interleaved"], threads=threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        return oracle64(case, inputs)

    def row_sizes(self, case: Case) -> dict:
        h = case.p["head_size"]
        return {"output": h, "present_key": h, "present_value": h}

    def flops(self, case: Case) -> float:
        p = case.p
        past_b, total_b, _ = lengths(case)
        seen = 0
        for pb, tot in zip(past_b, total_b):
            s = np.arange(p["seq"])
            seen += int(np.minimum(pb + s + 1, tot).sum())
        return 4.0 * p["heads"] * p["head_size"] * seen

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        """The least traffic the op needs: queries in, output out, every key and value row read
        once (past rows included: a kernel can copy them while it reads them), new rows read and
        written into the cache, and in copy mode the rest of present written."""
        p = case.p
        B, S, Nq, Nkv, H = p["batch"], p["seq"], p["heads"], p["kv_heads"], p["head_size"]
        _, total_b, _ = lengths(case)
        e = dtype.itemsize
        qo = 2 * B * S * Nq * H * e
        kv_read = 2 * Nkv * H * e * float(np.sum(total_b))
        new = 2 * B * S * Nkv * H * e * 2
        rest = 0.0 if p["kv"] == "shared" else 2 * Nkv * H * e * B * (_cap(case) - S)
        return qo + kv_read + new + rest
