"""Load a built native library in cffi ABI mode; the ONLY place that turns a status into an
exception. Each Library has its own FFI instance with the declarations of its own header, so two
builds (base and head) can be loaded side by side."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import cffi

from perfbench.errors import BuildError, NativeError
from perfbench.kernels_ffi import builder as _build
from perfbench.timing import caches as _caches

STATUS_NAMES = {
    0: "ok",
    1: "invalid argument",
    2: "unsupported",
    3: "out of memory",
    4: "internal error",
}


def cdef_from_header(text: str) -> str:
    """The declarations between PB_CDEF_BEGIN and PB_CDEF_END of perfbench.h."""
    m = re.search(r"/\*\s*PB_CDEF_BEGIN\s*\*/(.*)/\*\s*PB_CDEF_END\s*\*/", text, re.S)
    if not m:
        raise BuildError("perfbench.h has no PB_CDEF_BEGIN/PB_CDEF_END block")
    return m.group(1)


class Library:
    """One loaded build of the native library."""

    def __init__(self, info: _build.BuildInfo, header_text: str | None = None):
        self.info = info
        if header_text is None:
            header_text = (Path(info.source_dir) / "include" / "perfbench.h").read_text()
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_from_header(header_text))
        try:
            self.lib = self.ffi.dlopen(info.path)
        except OSError as e:
            raise BuildError(f"cannot load the native library {info.path}: {e}") from e
        self._kernel_names = None
        self._set_llc()

    def _set_llc(self) -> None:
        """Give the library the last-level cache size its non-temporal-store policy uses: the one
        timing/caches.py reads (builds older than that policy have no setter and keep their own)."""
        if not hasattr(self.lib, "pb_set_llc_bytes"):
            return
        llc = _caches.last_level_bytes()
        self.check(self.lib.pb_set_llc_bytes(llc or 0), "set the last-level cache size")
        if hasattr(self.lib, "pb_set_core_cache_bytes"):  # the GEMM's cache blocking (builds since issue 18)
            self.check(self.lib.pb_set_core_cache_bytes(_caches.cache_bytes(1) or 0, _caches.cache_bytes(2) or 0),
                       "set the L1d and L2 sizes")

    # ---- status handling (the one place) ----
    def check(self, status: int, what: str) -> None:
        if status != 0:
            msg = self.ffi.string(self.lib.pb_last_error()).decode(errors="replace")
            raise NativeError(what, int(status), msg or STATUS_NAMES.get(int(status), "error"))

    def string(self, cptr) -> str:
        return self.ffi.string(cptr).decode() if cptr != self.ffi.NULL else ""

    # ---- library facts ----
    @property
    def isa_active(self) -> str:
        return self.string(self.lib.pb_isa_active())

    @property
    def isa_compiled(self) -> list[str]:
        return self.string(self.lib.pb_isa_compiled()).split(",")

    @property
    def isa_supported(self) -> list[str]:
        return self.string(self.lib.pb_isa_supported()).split(",")

    def select_isa(self, name: str) -> None:
        self.check(self.lib.pb_isa_select(name.encode()), f"select ISA {name!r}")

    @property
    def build_info_string(self) -> str:
        return self.string(self.lib.pb_build_info())

    def kernel_names(self) -> list[str]:
        if self._kernel_names is None:
            self._kernel_names = [self.string(self.lib.pb_kernel_name(i)) for i in range(self.lib.pb_kernel_count())]
        return self._kernel_names

    # ---- pool ----
    def set_spin(self, spin_us: int) -> None:
        self.check(self.lib.pb_pool_set_spin(int(spin_us)), "pool spin")

    def quiesce(self) -> None:
        self.check(self.lib.pb_pool_quiesce(), "pool quiesce")

    # ---- calls and timing ----
    def call(self, kernel: str, args) -> None:
        fn = getattr(self.lib, "pb_" + kernel)
        self.check(fn(args), kernel)

    def time_warm(self, kernel: str, args, iters: int) -> int:
        out = self.ffi.new("int64_t*")
        self.check(self.lib.pb_time_warm(kernel.encode(), args, int(iters), out), kernel)
        return int(out[0])

    def time_cold(self, kernel: str, args, calls: int, evict) -> list[int]:
        out = self.ffi.new("int64_t[]", int(calls))
        self.check(
            self.lib.pb_time_cold(kernel.encode(), args, int(calls), evict.ptr, evict.nbytes, evict.threads, out),
            kernel,
        )
        return [int(v) for v in out]

    def evict(self, evict) -> None:
        self.check(self.lib.pb_evict(evict.ptr, evict.nbytes, evict.threads), "evict")

    def now_ns(self) -> int:
        return int(self.lib.pb_now_ns())

    def timer_resolution_ns(self) -> int:
        return int(self.lib.pb_timer_resolution_ns())

    def ptr(self, array):
        """A void* to a numpy array's data (works for dtypes without buffer protocol, e.g. bfloat16)."""
        return self.ffi.cast("void *", array.ctypes.data)


class EvictBuffer:
    """A buffer larger than the last-level cache, touched before each cold call."""

    def __init__(self, lib: Library, nbytes: int, threads: int):
        import numpy as np

        self.array = np.ones(nbytes, dtype=np.uint8)
        self.nbytes = int(nbytes)
        self.threads = int(threads)
        self.ptr = lib.ptr(self.array)


_lock = threading.Lock()
_loaded: dict[str, Library] = {}


def load(info: _build.BuildInfo | None = None, *, log=None) -> Library:
    """The library for the current native sources (built first if they changed), cached per path."""
    if info is None:
        info = _build.build(log=log)
    with _lock:
        lib = _loaded.get(info.path)
        if lib is None:
            lib = Library(info)
            abi = lib.lib.pb_abi_version()
            if abi != lib.lib.PB_ABI_VERSION:
                raise BuildError(f"{info.path}: ABI version {abi}, header says {lib.lib.PB_ABI_VERSION}")
            _loaded[info.path] = lib
        return lib
