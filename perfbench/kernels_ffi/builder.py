"""Build the native kernel library into its own path, keyed by what went into it.

The library is a plain shared object loaded in cffi's ABI mode (``ffi.dlopen``), so two builds
(e.g. base and head of a comparison) can be loaded side by side, each with the declarations of
its own header. The output path is ``<build root>/<build id>/libperfbench_native.so`` where the
build id hashes the native sources, the compiler and the flags: when a source changes, the next
load builds the new code automatically (``perfbench build`` does it by hand).

The build must work without AVX-512 or AVX2 support in the compiler: each ISA file is compiled
only if the compiler accepts its flags; the portable path is always compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from perfbench.errors import BuildError

LIB_NAME = "libperfbench_native.so"
BASE_FLAGS = ["-O3", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-pthread", "-fno-math-errno"]
# functions and loops on cache-line boundaries (when the compiler accepts it): a change elsewhere
# in the library then moves a kernel by whole cache lines, not by a few bytes that shift its hot
# loops across lines (perfbench ab saw untouched kernels move 1-4% between two builds otherwise)
ALIGN_FLAGS = ["-falign-functions=64", "-falign-loops=64"]

# (ISA name, source under native/cpu/isa, compiler flags, macro defined when compiled in)
ISA_UNITS = [
    ("avx2", "avx2.c", ["-mavx2", "-mfma", "-mf16c"], "PB_HAVE_AVX2"),
    (
        "avx512",
        "avx512.c",
        ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mavx512vnni", "-mfma", "-mf16c"],
        "PB_HAVE_AVX512",
    ),
]
# always compiled, with BASE_FLAGS only: every .c file of native/cpu, native/cpu/common and
# native/cpu/kernels (a new family's driver is picked up without a list to edit; .inc.c files are
# included by the ISA units, not compiled alone), and the two portable ISA units. Globbed, not
# listed, so that this builder also builds an older revision's tree (perfbench ab's base).
PORTABLE_UNITS = ["isa/portable.c", "isa/portable16.c"]


def common_units(source_dir: Path) -> list[str]:
    cpu = source_dir / "cpu"
    found = [
        p.relative_to(cpu).as_posix()
        for d in (cpu, cpu / "common", cpu / "kernels")
        if d.is_dir()
        for p in sorted(d.glob("*.c"))
        if not p.name.endswith(".inc.c")
    ]
    return found + PORTABLE_UNITS


@dataclass
class BuildInfo:
    """What a built library is: recorded with every result it produced (the 'subject')."""

    path: str
    source_dir: str
    source_hash: str
    build_id: str
    compiler: str
    compiler_version: str
    flags: list[str]
    isa_compiled: list[str]
    isa_flags: dict[str, list[str]] = field(default_factory=dict)
    built_at: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def default_source_dir() -> Path:
    """native/ of the checkout this package lives in."""
    return Path(__file__).resolve().parents[2] / "native"


def default_build_root() -> Path:
    env = os.environ.get("PERFBENCH_BUILD_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "build" / "native"


def source_files(source_dir: Path) -> list[Path]:
    files = [
        p
        for p in source_dir.rglob("*")
        if p.is_file() and p.suffix in {".c", ".h", ".inc", ".def", ".cu", ".cuh"} and "__pycache__" not in p.parts
    ]
    return sorted(files, key=lambda p: p.relative_to(source_dir).as_posix())


def hash_sources(source_dir: Path) -> str:
    h = hashlib.sha256()
    for p in source_files(source_dir):
        h.update(p.relative_to(source_dir).as_posix().encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def find_compiler() -> str:
    cc = os.environ.get("CC")
    candidates = [cc] if cc else ["gcc", "cc", "clang"]
    for c in candidates:
        if c and shutil.which(c):
            return c
    raise BuildError(
        "no C compiler found (tried: %s). Install gcc (e.g. `apt-get install gcc`) or set CC."
        % ", ".join(c for c in candidates if c)
    )


def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"cannot run the C compiler {cc!r}: {e}") from e
    return out.splitlines()[0].strip() if out else "unknown"


def _compiler_accepts(cc: str, flags: list[str]) -> bool:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d, "probe.c")
        src.write_text("int main(void) { return 0; }\n")
        r = subprocess.run([cc, *flags, "-c", str(src), "-o", str(Path(d, "probe.o"))], capture_output=True)
        return r.returncode == 0


def plan(cc: str) -> tuple[list[tuple[str, str, list[str], str]], list[str]]:
    """ISA units this compiler can build here, and the defines that announce them."""
    units = []
    if platform.machine().lower() in {"x86_64", "amd64"}:
        for name, src, flags, macro in ISA_UNITS:
            if os.environ.get("PERFBENCH_DISABLE_" + name.upper()) == "1":
                continue
            if _compiler_accepts(cc, flags):
                units.append((name, src, flags, macro))
    return units, ["-D" + u[3] for u in units]


def build_id_for(source_hash: str, cc_version: str, flags: list[str]) -> str:
    h = hashlib.sha256(f"{source_hash}\0{cc_version}\0{' '.join(flags)}".encode()).hexdigest()
    return h[:16]


def build(source_dir: Path | None = None, build_root: Path | None = None, *, force: bool = False,
          log=None) -> BuildInfo:
    """Build (or reuse) the library for the current sources. Returns its BuildInfo."""
    source_dir = Path(source_dir or default_source_dir())
    build_root = Path(build_root or default_build_root())
    if not (source_dir / "include" / "perfbench.h").is_file():
        raise BuildError(f"native sources not found at {source_dir} (expected include/perfbench.h)")
    cc = find_compiler()
    ccv = compiler_version(cc)
    units, defines = plan(cc)
    flags = BASE_FLAGS + (ALIGN_FLAGS if _compiler_accepts(cc, ALIGN_FLAGS) else []) + defines
    src_hash = hash_sources(source_dir)
    bid = build_id_for(src_hash, ccv, flags + [f for u in units for f in u[2]])
    out_dir = build_root / bid
    lib = out_dir / LIB_NAME
    meta = out_dir / "build.json"
    if lib.is_file() and meta.is_file() and not force:
        return _reused(meta, source_dir)

    if log:
        log(f"building native library {bid} ({', '.join(['portable'] + [u[0] for u in units])}) ...")
    build_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{bid}-", dir=build_root))
    try:
        define_flags = flags + [f'-DPB_BUILD_FLAGS="{" ".join(flags)}"', f'-DPB_COMPILER="{os.path.basename(cc)}"']
        jobs = [(s, []) for s in common_units(source_dir)] + [("isa/" + u[1], u[2]) for u in units]

        def compile_one(job):
            rel, extra = job
            obj = tmp / (rel.replace("/", "_") + ".o")
            cmd = [cc, *define_flags, *extra, "-c", str(source_dir / "cpu" / rel), "-o", str(obj)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise BuildError(f"compiling native/cpu/{rel} failed:\n$ {' '.join(cmd)}\n{r.stderr.strip()}")
            return str(obj)

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            objects = list(pool.map(compile_one, jobs))
        tmp_lib = tmp / LIB_NAME
        cmd = [cc, "-shared", "-pthread", "-o", str(tmp_lib), *objects, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"linking the native library failed:\n$ {' '.join(cmd)}\n{r.stderr.strip()}")
        for o in objects:
            os.unlink(o)
        info = BuildInfo(
            path=str(lib),
            source_dir=str(source_dir),
            source_hash=src_hash,
            build_id=bid,
            compiler=cc,
            compiler_version=ccv,
            flags=flags,
            isa_compiled=["portable", "portable16"] + [u[0] for u in units],
            isa_flags={u[0]: u[2] for u in units},
            built_at=time.time(),
        )
        (tmp / "build.json").write_text(json.dumps(info.to_dict(), indent=2))
        try:
            os.rename(tmp, out_dir)  # atomic: a concurrent builder of the same id loses the race
        except OSError:
            if not lib.is_file():
                raise
        return _reused(meta, source_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _reused(meta: Path, source_dir: Path) -> BuildInfo:
    """A stored build: its record, but with the caller's sources (identical by hash; the ones
    that built it first may be another checkout, since moved or deleted)."""
    info = BuildInfo(**json.loads(meta.read_text()))
    info.source_dir = str(source_dir)
    return info


def main() -> int:  # python -m perfbench.kernels_ffi.builder
    info = build(log=lambda m: print(m, file=sys.stderr), force="--force" in sys.argv)
    print(json.dumps(info.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
