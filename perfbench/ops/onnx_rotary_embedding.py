"""ai.onnx RotaryEmbedding (opset 23), registered as "OnnxRotaryEmbedding" (kernel
onnx_rotary_embedding; "RotaryEmbedding" is the com.microsoft op).

Input X: 4-D (B, N, S, H) or 3-D (B, S, N*H) with the num_heads attribute. The first
rotary_embedding_dim elements of each head vector rotate (halves (x[i], x[i+rot/2]), or pairs
(x[2i], x[2i+1]) when interleaved), the rest pass through unchanged. With position_ids (int64
(B, S)) the cos/sin caches are (max_pos, rot/2) indexed by position; without, they are
(B, S, rot/2), one row per token. ORT 1.31 has float32 and float16 CPU kernels (bfloat16 cells are
compared with float32); the oracle is onnx.reference in float64."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError
from perfbench.kernels_ffi import onnx_attn as kernels
from perfbench.ops import _attention as att
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

RAGGED_STEP = 37  # batch row b starts 37*b positions later than row 0


def _rot(case: Case) -> int:
    return case.p["rotary_dim"] or case.p["head_size"]


def _x_shape(case: Case) -> tuple:
    p = case.p
    if p["layout"] == "3d":
        return (p["batch"], p["seq"], p["heads"] * p["head_size"])
    return (p["batch"], p["heads"], p["seq"], p["head_size"])


def _to_bnsh(x: np.ndarray, case: Case) -> np.ndarray:
    p = case.p
    if p["layout"] == "3d":
        return x.reshape(p["batch"], p["seq"], p["heads"], p["head_size"]).transpose(0, 2, 1, 3)
    return x


def _from_bnsh(y: np.ndarray, case: Case) -> np.ndarray:
    if case.p["layout"] == "3d":
        return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(_x_shape(case))
    return y


def positions(case: Case) -> np.ndarray:
    """(B, S) int64: batch row b starts at pos_offset + 37*b (never arange from 0); wrapped into
    [1, max_pos) when max_pos is given (position 0 would be the identity rotation)."""
    p = case.p
    pos = p["pos_offset"] + RAGGED_STEP * np.arange(p["batch"])[:, None] + np.arange(p["seq"])[None, :]
    if p["max_pos"]:
        pos = 1 + (pos - 1) % (p["max_pos"] - 1) if p["max_pos"] > 1 else 0 * pos
    return pos.astype(np.int64)


def _max_pos(case: Case) -> int:
    # without max_pos: the largest of positions (last batch row, last token) in exact integers, so
    # huge batch or seq values meet the bytes cap instead of becoming a (batch, seq) array first
    p = case.p
    return p["max_pos"] or p["pos_offset"] + RAGGED_STEP * (p["batch"] - 1) + p["seq"] - 1 + 4  # a few unused rows


def _cache_shape(case: Case) -> tuple:
    p = case.p
    return (_max_pos(case), _rot(case) // 2) if p["positions"] else (p["batch"], p["seq"], _rot(case) // 2)


def rotary64(case: Case, x: dict, *, interleaved=None, swap_halves=False, arange_positions=False,
             shared_rows=False, rest_zeroed=False, tail=0) -> np.ndarray:
    """float64 ai.onnx RotaryEmbedding in numpy (equal to onnx.reference; the tests check it);
    the keyword arguments switch one bug on (mutants)."""
    p = case.p
    xb = _to_bnsh(x["X"], case)  # (B, N, S, H)
    half = _rot(case) // 2
    if p["positions"]:
        pos = x["position_ids"]
        if arange_positions:
            pos = np.broadcast_to(np.arange(p["seq"]), pos.shape)
        c, s = x["cos_cache"][pos], x["sin_cache"][pos]  # (B, S, half)
    else:
        c, s = x["cos_cache"], x["sin_cache"]
        if shared_rows:  # every batch row reads row 0's cache
            c, s = np.broadcast_to(c[:1], c.shape), np.broadcast_to(s[:1], s.shape)
    c, s = c[:, None], s[:, None]
    inter = bool(p["interleaved"]) if interleaved is None else interleaved
    r = xb[..., : 2 * half]
    x1, x2 = (r[..., 0::2], r[..., 1::2]) if inter else (r[..., :half], r[..., half:])
    if swap_halves:
        x1, x2 = x2, x1
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = xb.copy()
    if inter:
        out[..., 0: 2 * half: 2], out[..., 1: 2 * half: 2] = o1, o2
    else:
        out[..., :half], out[..., half: 2 * half] = o1, o2
    if rest_zeroed:
        out[..., 2 * half:] = 0.0
    if tail:  # the last `tail` pairs of each half (or elements, interleaved) left unrotated
        if inter:
            out[..., 2 * half - tail: 2 * half] = xb[..., 2 * half - tail: 2 * half]
        else:
            out[..., half - tail: half] = xb[..., half - tail: half]
            out[..., 2 * half - tail: 2 * half] = xb[..., 2 * half - tail: 2 * half]
    return _from_bnsh(out, case)


def _tail_len(case: Case) -> int:
    """Elements a vector loop without its tail would leave unrotated: the remainder modulo 8
    lanes if any, else modulo 16 (0: no tail)."""
    half = _rot(case) // 2
    n = 2 * half if case.p["interleaved"] else half
    return n % 8 or n % 16


def _m(**bug):
    return lambda op, case, x: {"Y": rotary64(case, x, **bug)}


def _m_interleave(op, case, x):
    return {"Y": rotary64(case, x, interleaved=not case.p["interleaved"])}


def _m_tail(op, case, x):
    return {"Y": rotary64(case, x, tail=_tail_len(case))}


def _m_zero_row(op, case, x):
    y = rotary64(case, x)
    y.reshape(-1, case.p["head_size"])[-1] = 0.0
    return {"Y": y}


@register
class OnnxRotaryEmbedding(Op):
    kernel_optional_args = ("position_ids",)  # NULL: positions 0..seq-1 (the caches' own rows)
    name = "OnnxRotaryEmbedding"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"batch": 2, "seq": 33, "heads": 3, "head_size": 80},
        {"batch": 2, "seq": 5, "heads": 2, "head_size": 80, "layout": "4d", "interleaved": 1},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36, "rotary_dim": 20},
        {"batch": 3, "seq": 7, "heads": 3, "head_size": 36, "rotary_dim": 12, "layout": "4d", "interleaved": 1, "positions": 0},
        {"batch": 2, "seq": 9, "heads": 2, "head_size": 22, "rotary_dim": 10, "positions": 0},
        {"seq": 1, "heads": 3, "head_size": 64, "rotary_dim": 32, "max_pos": 50},
        {"seq": 128, "heads": 32, "head_size": 128},  # 2 threads really split it
    )
    kernel = "onnx_rotary_embedding"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("seq", int, None, minimum=1, help="tokens per batch row (1 = decode)"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="heads N"),
        Param("head_size", int, None, minimum=1, help="head size H"),
        Param("layout", str, "3d", choices=("3d", "4d"), help="input (B,S,N*H) with num_heads, or (B,N,S,H)"),
        Param("interleaved", int, 0, choices=(0, 1), help="rotate (x[2i], x[2i+1]) pairs instead of halves"),
        Param("rotary_dim", int, 0, minimum=0, help="rotary_embedding_dim (0 = H; < H: the rest passes through)"),
        Param("positions", int, 1, choices=(0, 1),
              help="1: position_ids input, caches (max_pos, rot/2); 0: caches (B, S, rot/2) per token"),
        Param("pos_offset", int, 1000, minimum=0, help="first position of batch row 0 (row b starts 37*b later)"),
        Param("max_pos", int, 0, minimum=0, help="cache rows with position_ids (0 = just past the last position)"),
    )
    ort_substitute = {"bf16": "f32"}
    mutants = (
        Mutant("rotary halves swapped", _m(swap_halves=True)),
        Mutant("positions ignored", _m(arange_positions=True), lambda c: c.p["positions"] == 1),
        Mutant("batch rows share row 0's cache", _m(shared_rows=True),
               lambda c: c.p["positions"] == 0 and c.p["batch"] > 1),
        Mutant("interleaving ignored", _m_interleave),
        Mutant("pass-through part zeroed", _m(rest_zeroed=True), lambda c: _rot(c) < c.p["head_size"]),
        Mutant("tail elements ignored", _m_tail, lambda c: _tail_len(c) > 0),
        Mutant("a row zeroed", _m_zero_row),
    )

    def validate(self, case: Case, where: str) -> None:
        p = case.p
        rot = _rot(case)
        if rot % 2 or rot > p["head_size"] or rot < 2:
            raise UsageError(f"{where}: rotary dimension {rot} must be even and in [2, head_size={p['head_size']}]")
        if not p["positions"] and p["max_pos"]:
            raise UsageError(f"{where}: max_pos needs positions=1 (without position_ids the caches are per token)")

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        shape = _x_shape(case)
        inputs = [("X", "float", shape), ("cos_cache", "float", _cache_shape(case)),
                  ("sin_cache", "float", _cache_shape(case))]
        if p["positions"]:
            inputs.append(("position_ids", "int64", (p["batch"], p["seq"])))
        attrs = {"interleaved": p["interleaved"]}
        if p["rotary_dim"]:
            attrs["rotary_embedding_dim"] = p["rotary_dim"]
        if p["layout"] == "3d":
            attrs["num_heads"] = p["heads"]
        return GraphSpec("RotaryEmbedding", "", 23, inputs, [("Y", shape)], attrs)

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        h, rot = p["head_size"], _rot(case)
        x = rng.standard_normal(_x_shape(case))
        # probes (distinctive elements): the first and last rotated elements, the first and last
        # pass-through ones, at the last token and first token of the last head
        xb = _to_bnsh(x, case)
        xb[:, -1, -1, 0] += 8.0
        xb[:, -1, -1, rot - 1] -= 6.0
        xb[:, -1, 0, h - 1] -= 8.0
        if rot < h:
            xb[:, 0, -1, rot] += 7.0
        pos = positions(case)
        if p["positions"]:
            cos, sin = att.rope_tables(_max_pos(case), rot // 2, rot)
        else:
            c_all, s_all = att.rope_tables(int(pos.max()) + 1, rot // 2, rot)
            cos, sin = c_all[pos], s_all[pos]  # (B, S, rot/2)
        out = {
            "X": np.ascontiguousarray(x.astype(dtype.numpy)),
            "cos_cache": np.ascontiguousarray(cos.astype(dtype.numpy)),
            "sin_cache": np.ascontiguousarray(sin.astype(dtype.numpy)),
        }
        if p["positions"]:
            out["position_ids"] = pos
        return out

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        return kernels.onnx_rotary_embedding(
            lib, inputs["X"], inputs["cos_cache"], inputs["sin_cache"], outputs["Y"],
            position_ids=inputs.get("position_ids"), interleaved=p["interleaved"], rotary_embedding_dim=p["rotary_dim"],
            num_heads=p["heads"] if p["layout"] == "3d" else None, threads=threads, device=device)

    def oracle(self, case: Case, inputs: dict) -> dict:
        # an ONNX-standard op: the truth is ONNX's own reference implementation, in float64
        return evaluate_spec(self.graph(case), inputs)

    def row_sizes(self, case: Case) -> dict:
        return {"Y": case.p["head_size"]}

    def flops(self, case: Case) -> float:
        p = case.p
        return 3.0 * p["batch"] * p["seq"] * p["heads"] * _rot(case)

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        tokens = p["batch"] * p["seq"]
        x = tokens * p["heads"] * p["head_size"] * dtype.itemsize
        caches = tokens * _rot(case) * dtype.itemsize  # cos + sin rows, rot/2 each, per token
        return 2.0 * x + caches + (8.0 * tokens if p["positions"] else 0.0)

    # ---- perfbench node ----
    node_types = (("", "RotaryEmbedding"),)

    def from_node(self, node: NodeInfo) -> NodeBinding:
        where = f"RotaryEmbedding node (opset {node.opset})"
        if node.opset < 23:
            raise UsageError(f"{where}: ai.onnx RotaryEmbedding exists from opset 23")
        if not 3 <= len(node.inputs) <= 4 or any(i is None for i in node.inputs[:3]):
            raise UsageError(f"{where}: needs X, cos_cache, sin_cache and optionally position_ids")
        if node.dtype not in ("f32", "f16", "bf16"):
            raise NodeUnsupported(f"{where}: element type {node.dtype} is not implemented (f32, f16, bf16)")
        xs = tuple(node.inputs[0][1])
        cs, ss = tuple(node.inputs[1][1]), tuple(node.inputs[2][1])
        n_attr = int(node.attr("num_heads", 0) or 0)
        if len(xs) == 4:
            b, n, s, h = xs
            if n_attr and n_attr != n:
                raise UsageError(f"{where}: num_heads={n_attr} contradicts X's {n} heads")
            layout = "4d"
        elif len(xs) == 3:
            if not n_attr or xs[2] % n_attr:
                raise UsageError(f"{where}: 3-D X {xs} needs num_heads dividing {xs[2]}")
            b, s, n, h = xs[0], xs[1], n_attr, xs[2] // n_attr
            layout = "3d"
        else:
            raise UsageError(f"{where}: X must be 3-D or 4-D, got {xs}")
        rot = int(node.attr("rotary_embedding_dim", 0) or 0)
        if rot and (rot % 2 or rot > h):
            raise UsageError(f"{where}: rotary_embedding_dim={rot} must be even and <= head size {h}")
        interleaved = int(node.attr("interleaved", 0))
        if interleaved not in (0, 1):
            raise UsageError(f"{where}: interleaved={interleaved}, expected 0 or 1")
        half = (rot or h) // 2
        has_pos = len(node.inputs) == 4 and node.inputs[3] is not None
        if cs != ss:
            raise UsageError(f"{where}: cos_cache {cs} and sin_cache {ss} differ")
        if has_pos:
            if tuple(node.inputs[3][1]) != (b, s) or len(cs) != 2 or cs[1] != half:
                raise UsageError(f"{where}: position_ids must be ({b}, {s}) and caches (max_pos, {half}), got "
                                 f"{tuple(node.inputs[3][1])} and {cs}")
        elif cs != (b, s, half):
            raise UsageError(f"{where}: without position_ids the caches must be ({b}, {s}, {half}), got {cs}")
        values = {"batch": b, "seq": s, "heads": n, "head_size": h, "layout": layout, "interleaved": interleaved,
                  "rotary_dim": rot if rot and rot != h else 0, "positions": int(has_pos),
                  "max_pos": cs[0] if has_pos else 0}
        case = self.make_case(values, where)
        inputs = {"X": 0, "cos_cache": 1, "sin_cache": 2}
        if has_pos:
            inputs["position_ids"] = 3
        return NodeBinding(case, inputs, {"Y": (0, xs)})
