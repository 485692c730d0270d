"""The only code that touches C: build, load and call the native kernel library."""

from perfbench.kernels_ffi.builder import BuildInfo, build
from perfbench.kernels_ffi.library import EvictBuffer, Library, load

__all__ = ["BuildInfo", "EvictBuffer", "Library", "build", "load"]
