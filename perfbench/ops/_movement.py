"""Shared helpers of the data-movement ops (Transpose, Gather, Concat, ScatterND, Trilu):
shape strings in case ids and Gather's embedding tables
(generated once per seed into a read-only memory-mapped cache file that every worker process
maps)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from perfbench import dtypes
from perfbench.errors import UsageError

MAX_RANK = 8  # what the kernels take (PB_MOVEMENT_MAX_RANK)
TABLE_CAP_BYTES = 1 << 30  # Gather tables: at most 1 GiB in the widest dtype (f32)
MEMMAP_MIN_BYTES = 16 << 20  # tables from this size on live in the cache file
TABLE_VERSION = 1  # bump when the table generator changes (part of the file name)


# ---- shapes in case ids ----------------------------------------------------------------------

def parse_shape(text: str, where: str, what: str = "shape") -> tuple:
    """'1x128x32x128' -> (1, 128, 32, 128); every dimension >= 1, rank 1..MAX_RANK."""
    try:
        dims = tuple(int(t) for t in str(text).split("x"))
    except ValueError:
        raise UsageError(f"{where}: {what}={text!r} must be dimensions joined by 'x', e.g. '1x128x32x128'") from None
    if not 1 <= len(dims) <= MAX_RANK or any(d < 1 for d in dims):
        raise UsageError(f"{where}: {what}={text!r} needs 1..{MAX_RANK} dimensions, each >= 1")
    return dims


def shape_str(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def prod(dims) -> int:
    """The exact product of the dimensions (Python integers: 2**32 x 2**32 is 2**64, never a
    wrapped int64); 1 for no dimensions."""
    return math.prod(int(d) for d in dims)


# ---- Gather's embedding tables ---------------------------------------------------------------

def cache_dir() -> Path:
    """Where large generated inputs live: $PERFBENCH_CACHE_DIR, else build/cache of this
    checkout (git-ignored)."""
    env = os.environ.get("PERFBENCH_CACHE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "build" / "cache"


def _generate(shape: tuple, dt: dtypes.DType, seed: int, out: np.ndarray) -> None:
    """N(0, 1) values (drawn in float32, rounded to dt), written row block by row block so the
    whole table is never held twice; the same blocks whether `out` is a file or memory."""
    rng = np.random.default_rng(seed)
    flat = out.reshape(-1, shape[-1])
    step = max(1, (4 << 20) // shape[-1])
    for r in range(0, flat.shape[0], step):
        block = rng.standard_normal((min(step, flat.shape[0] - r), shape[-1]), dtype=np.float32)
        flat[r:r + block.shape[0]] = block.astype(dt.numpy)


def table(shape: tuple, dt: dtypes.DType, seed: int) -> np.ndarray:
    """A read-only N(0, 1) table of `shape` in dt, the same bytes for the same (shape, dtype,
    seed). From MEMMAP_MIN_BYTES on it is generated once into a cache file (written to a
    temporary name, then renamed into place: two workers may race, neither sees half a file)
    and memory-mapped read-only, so every worker process shares the same pages and no cell
    regenerates or copies it."""
    shape = tuple(int(d) for d in shape)
    nbytes = prod(shape) * dt.itemsize
    if nbytes < MEMMAP_MIN_BYTES:
        a = np.empty(shape, dt.numpy)
        _generate(shape, dt, seed, a)
        a.flags.writeable = False
        return a
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"table-v{TABLE_VERSION}-{shape_str(shape)}-{dt.name}-{seed:016x}.bin"
    if not path.exists() or path.stat().st_size != nbytes:
        _remove_stale_partials(d)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=d)
        try:
            os.close(fd)
            os.chmod(tmp, 0o644)  # mkstemp makes it private; other users may share the cache
            w = np.memmap(tmp, dtype=dt.numpy, mode="w+", shape=shape)
            _generate(shape, dt, seed, w)
            w.flush()
            del w
            with open(tmp, "rb") as f:  # on disk before it gets its final name
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return np.memmap(path, dtype=dt.numpy, mode="r", shape=shape)


def _remove_stale_partials(d: Path, older_than_s: float = 600.0) -> None:
    """Partial tables of writers that died (a worker killed mid-write never runs its cleanup):
    a `.tmp` untouched for 10 minutes is no longer being written."""
    import time

    for f in d.glob("table-*.tmp"):
        try:
            if time.time() - f.stat().st_mtime > older_than_s:
                f.unlink()
        except OSError:
            pass
