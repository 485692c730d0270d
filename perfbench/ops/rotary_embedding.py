"""com.microsoft RotaryEmbedding: input (B, S, N*H) ("bsnh") or (B, N, S, H) ("bnsh"),
position_ids int64 (B, S), cos/sin caches (max_pos, H/2); interleaved 0/1; full-head rotation
(rotary_embedding_dim = H)."""

from __future__ import annotations

import numpy as np

from perfbench import dtypes
from perfbench.kernels_ffi import wrappers
from perfbench.ops import _attention as att
from perfbench.ops.base import MAX_HEADS, Case, GraphSpec, Mutant, Op, Param, register


def _in_shape(case: Case) -> tuple:
    p = case.p
    if p["layout"] == "bsnh":
        return (p["batch"], p["seq"], p["heads"] * p["head_size"])
    return (p["batch"], p["heads"], p["seq"], p["head_size"])


def _to_bnsh(x: np.ndarray, case: Case) -> np.ndarray:
    p = case.p
    if p["layout"] == "bsnh":
        return x.reshape(p["batch"], p["seq"], p["heads"], p["head_size"]).transpose(0, 2, 1, 3)
    return x


def _from_bnsh(y: np.ndarray, case: Case) -> np.ndarray:
    p = case.p
    if p["layout"] == "bsnh":
        return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(_in_shape(case))
    return y


def rotary64(case: Case, x, pos, cos, sin, *, interleaved: bool, swap_halves: bool = False,
             rotate_dims: int | None = None) -> np.ndarray:
    """float64 reference. rotate_dims < H leaves the last H - rotate_dims elements unrotated
    (only used by the 'tails ignored' mutant)."""
    xb = _to_bnsh(x, case)  # (B, N, S, H)
    h = xb.shape[-1]
    out = att.rope64(xb, pos, cos, sin, interleaved=interleaved, swap_halves=swap_halves)
    if rotate_dims is not None and rotate_dims < h:
        out[..., rotate_dims:] = xb[..., rotate_dims:]
    return _from_bnsh(out, case)


def _ref(case, x, **kw):
    return {"output": rotary64(case, x["input"], x["position_ids"], x["cos_cache"], x["sin_cache"],
                               interleaved=bool(case.p["interleaved"]), **kw)}


def _m_halves(op, case, x):
    return _ref(case, x, swap_halves=True)


def _m_positions(op, case, x):
    b, s = x["position_ids"].shape
    return _ref(case, {**x, "position_ids": np.broadcast_to(np.arange(s), (b, s))})


def _m_interleave(op, case, x):
    return {"output": rotary64(case, x["input"], x["position_ids"], x["cos_cache"], x["sin_cache"],
                               interleaved=not case.p["interleaved"])}


def _tail_len(case) -> int:
    """Elements a vector loop without its tail would leave unrotated: the remainder modulo 8
    lanes if any, else modulo 16 (0: no tail at this head size)."""
    h = case.p["head_size"]
    n = h if case.p["interleaved"] else h // 2
    return n % 8 or n % 16


def _m_tail(op, case, x):
    h, t = case.p["head_size"], _tail_len(case)
    ref = _ref(case, x)["output"]
    xb = _to_bnsh(x["input"], case)
    out = _to_bnsh(ref.copy(), case)
    if case.p["interleaved"]:
        out[..., h - t:] = xb[..., h - t:]
    else:
        out[..., h // 2 - t: h // 2] = xb[..., h // 2 - t: h // 2]
        out[..., h - t:] = xb[..., h - t:]
    return {"output": _from_bnsh(out, case)}


def _m_zero_row(op, case, x):
    out = _ref(case, x)["output"]
    out.reshape(-1, case.p["head_size"])[-1] = 0.0
    return {"output": out}


@register
class RotaryEmbedding(Op):
    name = "RotaryEmbedding"
    # the op contract's cases (Op.test_cases): tails at 4/8/16 lanes, every form, a 2-thread split
    test_cases = (
        {"batch": 2, "seq": 33, "heads": 3, "head_size": 80},
        {"batch": 2, "seq": 5, "heads": 2, "head_size": 80, "layout": "bnsh", "interleaved": 1},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36},
        {"batch": 2, "seq": 7, "heads": 3, "head_size": 36, "layout": "bnsh", "interleaved": 1},
        {"batch": 2, "seq": 5, "heads": 2, "head_size": 8},
        {"seq": 128, "heads": 32, "head_size": 128, "layout": "bsnh", "interleaved": 0},  # 2 threads really split it
    )
    kernel = "rotary_embedding"
    params = (
        Param("batch", int, 1, minimum=1, help="batch size"),
        Param("seq", int, None, minimum=1, help="tokens per batch row (1 = decode)"),
        Param("heads", int, None, minimum=1, maximum=MAX_HEADS, help="attention heads N"),
        Param("head_size", int, None, minimum=2, help="head size H (even)"),
        Param("layout", str, "bsnh", choices=("bsnh", "bnsh"), help="input (B,S,N*H) or (B,N,S,H)"),
        Param("interleaved", int, 0, choices=(0, 1), help="rotate (x[2i], x[2i+1]) pairs instead of halves"),
        Param("pos_offset", int, 1000, minimum=0,
              help="first position of batch row 0 (mid-context: positions are never arange from 0)"),
    )
    mutants = (
        Mutant("rotary halves swapped", _m_halves),
        Mutant("positions ignored", _m_positions),
        Mutant("interleaving ignored", _m_interleave),
        Mutant("tail elements ignored", _m_tail, lambda case: _tail_len(case) > 0),
        Mutant("a row zeroed", _m_zero_row),
    )

    def validate(self, case: Case, where: str) -> None:
        from perfbench.errors import UsageError

        if case.p["head_size"] % 2:
            raise UsageError(f"{where}: head_size={case.p['head_size']} must be even")

    def _positions(self, case: Case) -> np.ndarray:
        p = case.p
        # each batch row starts at a different offset: ragged, never arange
        starts = p["pos_offset"] + 37 * np.arange(p["batch"])
        return (starts[:, None] + np.arange(p["seq"])[None, :]).astype(np.int64)

    def _max_pos(self, case: Case) -> int:
        # the largest of _positions (last batch row, last token), in exact integers: huge batch or
        # seq values are refused by the bytes cap, not turned into a (batch, seq) array first
        p = case.p
        return p["pos_offset"] + 37 * (p["batch"] - 1) + p["seq"] - 1 + 1 + 3  # a few unused rows past the end

    def graph(self, case: Case) -> GraphSpec:
        p = case.p
        shape = _in_shape(case)
        half = p["head_size"] // 2
        mp = self._max_pos(case)
        attrs = {"interleaved": p["interleaved"]}
        if p["layout"] == "bsnh":
            attrs["num_heads"] = p["heads"]
        return GraphSpec(
            "RotaryEmbedding", "com.microsoft", 1,
            [("input", "float", shape), ("position_ids", "int64", (p["batch"], p["seq"])),
             ("cos_cache", "float", (mp, half)), ("sin_cache", "float", (mp, half))],
            [("output", shape)], attrs,
        )

    def make_inputs(self, case: Case, dtype: dtypes.DType, rng: np.random.Generator) -> dict:
        p = case.p
        h = p["head_size"]
        mp = self._max_pos(case)
        x = rng.standard_normal(_in_shape(case))
        # probe: a distinctive head vector (large first and last elements) at the last token
        xb = _to_bnsh(x, case)
        xb[:, -1, -1, 0] += 8.0
        xb[:, 0, -1, -1] -= 8.0
        cos, sin = att.rope_tables(mp, h // 2, h)
        return {
            "input": np.ascontiguousarray(x.astype(dtype.numpy)),
            "position_ids": self._positions(case),
            "cos_cache": np.ascontiguousarray(cos.astype(dtype.numpy)),
            "sin_cache": np.ascontiguousarray(sin.astype(dtype.numpy)),
        }

    def prepare_ours(self, lib, case: Case, inputs: dict, outputs: dict, threads: int, device: str = "cpu"):
        p = case.p
        return wrappers.rotary_embedding(
            lib, inputs["input"], inputs["position_ids"], inputs["cos_cache"], inputs["sin_cache"],
            outputs["output"], interleaved=bool(p["interleaved"]), num_heads=p["heads"], threads=threads,
            device=device,
        )

    def oracle(self, case: Case, inputs: dict) -> dict:
        return _ref(case, inputs)

    def row_sizes(self, case: Case) -> dict:
        return {"output": case.p["head_size"]}

    def flops(self, case: Case) -> float:
        p = case.p
        return 3.0 * p["batch"] * p["seq"] * p["heads"] * p["head_size"]

    def bytes_moved(self, case: Case, dtype: dtypes.DType) -> float:
        p = case.p
        tokens = p["batch"] * p["seq"]
        x = tokens * p["heads"] * p["head_size"] * dtype.itemsize
        caches = tokens * p["head_size"] * dtype.itemsize  # cos + sin rows, H/2 each
        return 2.0 * x + caches + 8.0 * tokens
