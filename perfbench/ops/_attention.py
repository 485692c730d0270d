"""Shared float64 pieces of the attention oracles (GroupQueryAttention, MultiHeadAttention):
rotary on (..., H) rows, masked softmax attention, and the planted probes that make the
mutants visible."""

from __future__ import annotations

import numpy as np

THETA = 10000.0


def rope_tables(max_pos: int, half: int, rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin caches (max_pos, half) of the usual inverse-frequency schedule."""
    inv_freq = THETA ** (-np.arange(0, rotary_dim, 2)[:half] / rotary_dim)
    ang = np.arange(max_pos)[:, None] * inv_freq[None, :]
    return np.cos(ang), np.sin(ang)


def rope64(x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, interleaved: bool,
           swap_halves: bool = False) -> np.ndarray:
    """Rotate rows x (..., S, H) at positions pos -- (S,) for every leading index, or (B, S) for
    x (B, N, S, H) -- with caches (max_pos, half): the first 2*half elements rotate, the rest
    pass through (partial rotary)."""
    half = cos.shape[1]
    c, s = cos[pos], sin[pos]  # (S, half) or (B, S, half)
    if pos.ndim == 2:  # per batch row: broadcast over the heads axis
        c, s = c[:, None], s[:, None]
    out = x.copy()
    r = x[..., : 2 * half]
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
    else:
        x1, x2 = r[..., :half], r[..., half:]
    if swap_halves:
        x1, x2 = x2, x1
    o1 = x1 * c - x2 * s
    o2 = x2 * c + x1 * s
    if interleaved:
        out[..., 0: 2 * half: 2], out[..., 1: 2 * half: 2] = o1, o2
    else:
        out[..., :half], out[..., half: 2 * half] = o1, o2
    return out


def attend64(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, visible: np.ndarray,
             bias: np.ndarray | None = None) -> np.ndarray:
    """q (S, N, H); k, v (N_kv, T, H) already mapped per query head by the caller as k[n] for
    head n (pass k with N rows); visible (S, T) bool; bias (T,) added to scaled scores.
    Returns (S, N, H)."""
    scores = np.einsum("snh,nth->nst", q, k) * scale  # (N, S, T)
    if bias is not None:
        scores = scores + bias[None, None, :]
    scores = np.where(visible[None], scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(scores - m)
    p = np.where(visible[None], p, 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
    return np.einsum("nst,nth->snh", p, v)


def unit(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    u = rng.standard_normal(shape)
    return u / np.linalg.norm(u, axis=-1, keepdims=True)
