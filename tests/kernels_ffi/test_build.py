"""Building the native library: what a build records, that its id follows the sources, that two
builds load side by side, and the header's cdef block. Two real builds (of copies of native/,
into a temporary build root): each takes several seconds."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from perfbench.errors import BuildError
from perfbench.kernels_ffi import builder, library, wrappers

pytestmark = pytest.mark.slow

CHANGED_FILE = Path("cpu") / "kernels" / "softmax.c"


class Builds:
    def __init__(self, root: Path):
        src = builder.default_source_dir()
        self.plain_src = root / "native-plain"
        self.changed_src = root / "native-changed"
        shutil.copytree(src, self.plain_src)
        shutil.copytree(self.plain_src, self.changed_src)
        self.original_text = (self.plain_src / CHANGED_FILE).read_text()
        with open(self.changed_src / CHANGED_FILE, "a") as f:
            f.write("\n/* perfbench tests: a comment is a source change too */\n")
        self.out = root / "build-root"
        self.plain = builder.build(source_dir=self.plain_src, build_root=self.out)
        self.changed = builder.build(source_dir=self.changed_src, build_root=self.out)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Builds:
    return Builds(tmp_path_factory.mktemp("native-builds"))


def test_build_records_what_went_into_it(builds):
    info = builds.plain
    # compiler: the one the builder finds, and its version line
    assert info.compiler == builder.find_compiler()
    first_line = subprocess.run([info.compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert info.compiler_version == first_line.strip() and info.compiler_version
    # flags: the base flags plus one define per compiled-in ISA path
    assert info.flags[: len(builder.BASE_FLAGS)] == builder.BASE_FLAGS
    assert "portable" in info.isa_compiled
    extra = [i for i in info.isa_compiled if not i.startswith("portable")]
    for isa in extra:
        assert f"-DPB_HAVE_{isa.upper()}" in info.flags
        assert info.isa_flags[isa], isa
    assert set(info.isa_flags) == set(extra)
    # source hash: of these sources, and a real digest
    assert re.fullmatch(r"[0-9a-f]{64}", info.source_hash)
    assert info.source_hash == builder.hash_sources(builds.plain_src)
    assert info.source_dir == str(builds.plain_src)
    # where it lives, and the record next to it
    lib_path = Path(info.path)
    assert lib_path == builds.out / info.build_id / builder.LIB_NAME
    assert lib_path.is_file()
    assert json.loads((lib_path.parent / "build.json").read_text()) == info.to_dict()
    assert info.built_at > 0
    # the library agrees with the record: the ISA paths and flags it was compiled with
    lib = library.Library(info)
    assert set(lib.isa_compiled) == set(info.isa_compiled)
    assert "flags=" + " ".join(info.flags) in lib.build_info_string


def test_build_id_follows_the_sources(builds, lib):
    a, b = builds.plain, builds.changed
    assert a.source_hash != b.source_hash
    assert a.build_id != b.build_id
    assert a.path != b.path
    assert Path(a.path).is_file() and Path(b.path).is_file()
    # nothing else differed: same compiler, same flags
    assert (a.compiler_version, a.flags, a.isa_compiled) == (b.compiler_version, b.flags, b.isa_compiled)
    # unchanged sources reuse the build (no rebuild: same record, same time)
    again = builder.build(source_dir=builds.plain_src, build_root=builds.out)
    assert again.to_dict() == a.to_dict()
    # the id is keyed by content, not by where the sources live: the unmodified copy has the id
    # of the checkout's own build (unless someone edits native/ while the tests run)
    if builder.hash_sources(builder.default_source_dir()) == a.source_hash == lib.info.source_hash:
        assert a.build_id == lib.info.build_id
    # reverting the change brings the old id back
    text = (builds.changed_src / CHANGED_FILE).read_text()
    assert builder.hash_sources(builds.changed_src) == b.source_hash
    (builds.changed_src / CHANGED_FILE).write_text(builds.original_text)
    try:
        assert builder.hash_sources(builds.changed_src) == a.source_hash
    finally:
        (builds.changed_src / CHANGED_FILE).write_text(text)


def test_cached_build_reports_the_callers_sources(builds, tmp_path):
    """A second checkout with the same sources reuses the build (same id), but the BuildInfo it
    gets must describe ITS sources: Library() reads the header from info.source_dir, so a record
    pointing at the first builder's directory breaks once that directory is gone (e.g. two
    checkouts sharing PERFBENCH_BUILD_DIR, or a temporary base checkout of a comparison)."""
    other = tmp_path / "other-checkout-native"
    shutil.copytree(builds.plain_src, other)
    info = builder.build(source_dir=other, build_root=builds.out)  # a cache hit: no compile
    assert info.build_id == builds.plain.build_id
    # the first builder's sources go away (moved aside here, and put back afterwards)
    aside = builds.plain_src.with_name(builds.plain_src.name + "-aside")
    builds.plain_src.rename(aside)
    try:
        try:
            lib = library.Library(info)
        except BuildError:
            lib = None  # acceptable: a clear perfbench error
        if lib is not None:
            _softmax_ok(lib)
        assert info.source_dir == str(other), (
            f"build(source_dir={other}) returned a BuildInfo whose source_dir is {info.source_dir}")
    finally:
        aside.rename(builds.plain_src)


def _softmax_ok(lib) -> None:
    x = np.random.default_rng(3).standard_normal((5, 33)).astype(np.float32)
    y = np.empty_like(x)
    wrappers.softmax(lib, x, y, 1).run()
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    assert np.allclose(y, ref, rtol=1e-5, atol=1e-7)


def test_two_builds_load_side_by_side(builds):
    la, lb = library.Library(builds.plain), library.Library(builds.changed)
    assert la.lib.pb_abi_version() == la.lib.PB_ABI_VERSION
    assert lb.lib.pb_abi_version() == lb.lib.PB_ABI_VERSION
    try:
        _softmax_ok(la)
        _softmax_ok(lb)
        # two separate libraries, each with its own state: forcing a path in one (portable16 is
        # never chosen automatically) leaves the other alone, and both still compute correctly
        la.select_isa("portable16")
        assert la.isa_active == "portable16"
        assert lb.isa_active != "portable16"
        _softmax_ok(la)
        _softmax_ok(lb)
        assert lb.isa_active != "portable16"
    finally:
        la.select_isa("auto")
        lb.select_isa("auto")


def test_cdef_from_header():
    header = (builder.default_source_dir() / "include" / "perfbench.h").read_text()
    cdef = library.cdef_from_header(header)
    assert "pb_softmax_args" in cdef and "pb_rotary_embedding_args" in cdef
    assert "#ifndef" not in cdef and "extern \"C\"" not in cdef
    no_end = header.replace("PB_CDEF_END", "PB_CDEF_FINISH")
    no_begin = header.replace("PB_CDEF_BEGIN", "PB_CDEF_START")
    for text in (no_end, no_begin, "", "int pb_abi_version(void);"):
        with pytest.raises(BuildError):
            library.cdef_from_header(text)


def test_library_with_a_header_without_markers_is_a_build_error(lib):
    with pytest.raises(BuildError):
        library.Library(lib.info, header_text="/* no cdef block here */ int pb_abi_version(void);")


def test_build_without_sources_is_a_build_error(tmp_path):
    with pytest.raises(BuildError, match="perfbench.h"):
        builder.build(source_dir=tmp_path / "nowhere", build_root=tmp_path / "out")
