"""Cache sizes of this CPU, from sysfs (Linux); None where they cannot be read.

last_level_bytes() is the one last-level cache size of perfbench: the harness evicts twice it
for cold-cache cells, and every loaded native library gets it (pb_set_llc_bytes) for its
non-temporal-store policy. $PERFBENCH_LLC_BYTES overrides it (a VM may report a cache it does not
have: one reported a 256 MB L3)."""

from __future__ import annotations

import os
from pathlib import Path

from perfbench.errors import UsageError

_BASE = Path("/sys/devices/system/cpu/cpu0/cache")


def cache_bytes(level: int) -> int | None:
    """Size of the data/unified cache at `level` seen by cpu0."""
    try:
        entries = sorted(p for p in _BASE.iterdir() if p.is_dir() and p.name.startswith("index"))
    except OSError:
        return None
    for idx in entries:
        try:
            if (idx / "level").read_text().strip() != str(level):
                continue
            if (idx / "type").read_text().strip() not in ("Unified", "Data"):
                continue
            s = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(s[-1], 1)
            return int(s.rstrip("KMG")) * mult
        except (OSError, ValueError):
            continue
    return None


def last_level_bytes() -> int | None:
    """$PERFBENCH_LLC_BYTES, else the largest cache level sysfs reports for cpu0 (None: neither)."""
    env = os.environ.get("PERFBENCH_LLC_BYTES", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            value = -1
        if value < 1 or value > 1 << 40:
            raise UsageError(f"PERFBENCH_LLC_BYTES={env!r}: expected a size in bytes, 1 .. 2^40 (e.g. 33554432 for 32 MiB)")
        return value
    return sysfs_last_level_bytes()


def sysfs_last_level_bytes() -> int | None:
    """The L4 or L3 sysfs reports for cpu0 (None: neither). An L2 is not taken for a last level:
    a VM that hides its L3 would otherwise get a ~1 MiB threshold and stream nearly every output."""
    for level in (4, 3):
        size = cache_bytes(level)
        if size:
            return size
    return None
