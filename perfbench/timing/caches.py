"""Cache sizes of this CPU, from sysfs (Linux); None where they cannot be read."""

from __future__ import annotations

from pathlib import Path

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
    for level in (4, 3, 2):
        size = cache_bytes(level)
        if size:
            return size
    return None
