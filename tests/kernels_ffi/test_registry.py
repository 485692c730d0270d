"""The native substrate: the kernel registry (native/cpu/kernels.def) that the by-name table and
every ISA table are generated from, the builder's unit list, the one last-level cache size behind
the non-temporal-store policy, and Sub's scalar-first (sv) microkernel on every ISA path."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from perfbench import ops
from perfbench.kernels_ffi import builder, eltwise
from perfbench.timing import caches, protocol

KERNELS_DEF = builder.default_source_dir() / "cpu" / "kernels.def"


def _registry_entries() -> list[str]:
    text = KERNELS_DEF.read_text()
    body = text[text.index("#endif\n\n") :]  # past the default (empty) macro definitions
    return re.findall(r"^PB_ENTRY\((\w+)\)", body, re.M) + re.findall(r"^PB_BINARY\((\w+),", body, re.M)


def test_the_by_name_table_is_the_registry(lib):
    """Every kernel the library can be called by is a registry line, and every line is callable."""
    names = _registry_entries()
    assert len(names) == len(set(names)), "a kernel declared twice in kernels.def"
    assert sorted(lib.kernel_names()) == sorted(names)
    assert {"sub", "add", "mul", "sigmoid", "onnx_attention"} <= set(names)


def test_every_op_kernel_is_registered(lib):
    for name, op in ops.REGISTRY.items():
        assert op.kernel in lib.kernel_names(), name


def test_builder_compiles_every_driver_and_no_inc_file():
    units = builder.common_units(builder.default_source_dir())
    cpu = builder.default_source_dir() / "cpu"
    on_disk = {p.relative_to(cpu).as_posix() for d in ("", "common", "kernels") for p in (cpu / d).glob("*.c")
               if not p.name.endswith(".inc.c")}
    assert set(units) == on_disk | {"isa/portable.c", "isa/portable16.c"}
    assert not [u for u in units if u.endswith(".inc.c")]
    assert "common/policy.c" in units and "kernels/binary.c" in units
    assert "kernels.def" in {p.name for p in builder.source_files(builder.default_source_dir())}


# ---- the last-level cache size: one number for the harness and the library ----

def test_the_library_uses_the_harness_llc(lib):
    want = caches.last_level_bytes() or 32 << 20
    assert lib.lib.pb_llc_bytes() == want


def test_set_llc_refuses_bad_sizes_and_zero_restores_the_default(lib):
    before = lib.lib.pb_llc_bytes()
    try:
        with pytest.raises(Exception, match="pb_set_llc_bytes: bytes=-1"):
            lib.check(lib.lib.pb_set_llc_bytes(-1), "set llc")
        assert lib.lib.pb_llc_bytes() == before
        lib.check(lib.lib.pb_set_llc_bytes(0), "set llc")
        assert lib.lib.pb_llc_bytes() == 32 << 20
    finally:
        lib.check(lib.lib.pb_set_llc_bytes(before), "restore llc")


SCRIPT = "from perfbench.kernels_ffi import load; print(load().lib.pb_llc_bytes())"


def test_env_override_reaches_the_library():
    env = dict(os.environ, PERFBENCH_LLC_BYTES="12345678")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "12345678"


@pytest.mark.parametrize("bad", ["lots", "0", "-5"])
def test_env_override_bad_value_is_a_clear_error(bad, monkeypatch):
    monkeypatch.setenv("PERFBENCH_LLC_BYTES", bad)
    with pytest.raises(Exception, match=r"PERFBENCH_LLC_BYTES=.*expected a size in bytes"):
        caches.last_level_bytes()


# ---- Sub: the non-commutative binary op (its sv microkernel) on every ISA path ----

@pytest.mark.parametrize("dt", [np.float32])
def test_sub_scalar_first_and_column_first_on_every_isa(lib, dt):
    rng = np.random.default_rng(7)
    b = rng.standard_normal((5, 1031)).astype(dt)
    col = rng.standard_normal((5, 1)).astype(dt)
    s = np.asarray(rng.standard_normal(), dtype=dt)
    try:
        for isa in lib.isa_supported:
            lib.select_isa(isa)
            for a, bb in ((s, b), (col, b), (b, col), (b, s)):
                y = np.full(np.broadcast_shapes(a.shape, bb.shape), np.nan, dtype=dt)
                eltwise.sub(lib, a, bb, y, 2).run()
                assert np.array_equal(y, a - bb), (isa, a.shape, bb.shape)
    finally:
        lib.select_isa("auto")


def test_a_small_override_moves_the_threshold_never_the_eviction(monkeypatch):
    """PERFBENCH_LLC_BYTES=3 streams every output, but cold-cache cells still evict twice the cache
    sysfs reports (evicting 6 bytes would leave them warm)."""
    monkeypatch.setenv("PERFBENCH_LLC_BYTES", "3")
    assert caches.last_level_bytes() == 3
    sysfs = caches.sysfs_last_level_bytes()
    assert protocol.default_evict_bytes() == (2 * sysfs if sysfs else 64 << 20)
    monkeypatch.setenv("PERFBENCH_LLC_BYTES", str(1 << 40))
    assert protocol.default_evict_bytes() == 2 << 40


def test_an_l2_is_never_taken_for_the_last_level(monkeypatch):
    """A VM whose sysfs shows only an L2 (1 MiB) gets no last level (the library's 32 MiB), not a
    third of 1 MiB as its streaming threshold."""
    monkeypatch.delenv("PERFBENCH_LLC_BYTES", raising=False)
    monkeypatch.setattr(caches, "cache_bytes", lambda level: 1 << 20 if level == 2 else None)
    assert caches.sysfs_last_level_bytes() is None and caches.last_level_bytes() is None
    monkeypatch.setattr(caches, "cache_bytes", lambda level: {2: 1 << 20, 3: 32 << 20}.get(level))
    assert caches.last_level_bytes() == 32 << 20
