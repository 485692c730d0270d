"""Git revisions of our native library, built side by side (`perfbench ab`).

A revision's tree is exported once (`git archive`) into <build root>/trees/<sha>, its native/
built by the usual builder (cached by source hash), and the shared object copied to a path of
its own side (<build root>/sides/<label>-<build id>/), so base and head are two separate
mappings even when they are the same build (an A/A comparison measures two loaded copies, as a
real base/head pair is). Each side is loaded with the declarations of its own header.

Whether one process can measure both sides of an op is decided per op from the headers: the
declarations the harness uses for every op (the common part of the cdef block) and the op's own
args struct and entry point must be identical; otherwise that op is measured with each side's
own checkout in its own worker process.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from perfbench import ops
from perfbench.errors import BuildError, UsageError
from perfbench.kernels_ffi import builder
from perfbench.kernels_ffi.library import cdef_from_header

WORKTREE = "worktree"  # the --head-rev default: the working tree as it is (uncommitted changes too)


@dataclass
class Side:
    label: str  # base | head
    ref: str  # what the user gave (a revision, or "worktree")
    sha: str | None  # the commit (None: the working tree)
    checkout: Path  # a tree with perfbench/ and native/ of that revision
    dirty: bool = False
    build: builder.BuildInfo | None = None

    @property
    def header(self) -> str:
        return (self.checkout / "native" / "include" / "perfbench.h").read_text()


def repo_root() -> Path:
    """The git checkout this perfbench runs from (the harness, op files and suites come from it)."""
    here = Path(__file__).resolve().parents[1]
    r = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"perfbench ab needs a git checkout: {here} is not in one ({r.stderr.strip()})")
    return Path(r.stdout.strip())


def resolve(root: Path, rev: str) -> str:
    """A git revision (sha, branch, tag, HEAD~1, a merge base) -> the full commit sha."""
    if not rev or rev.startswith("-"):
        raise UsageError(f"{rev!r} is not a git revision")
    r = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"{rev!r} is not a commit in {root} (git rev-parse found nothing; fetch it first, "
                         "e.g. `git fetch origin main` and use origin/main)")
    return r.stdout.strip()


def _dirty(root: Path) -> bool:
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                       capture_output=True, text=True)
    # untracked sources under native/ are built (the builder hashes every file there) too
    u = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "native"], cwd=root,
                       capture_output=True, text=True)
    return bool(r.stdout.strip() or u.stdout.strip())


def materialize(root: Path, sha: str, trees: Path) -> Path:
    """The tree of commit `sha` under trees/<sha> (exported once, reused after)."""
    dest = trees / sha
    if (dest / ".complete").is_file():
        return dest
    trees.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=trees))
    try:
        with tempfile.TemporaryFile() as f:
            r = subprocess.run(["git", "archive", "--format=tar", sha], cwd=root, stdout=f, stderr=subprocess.PIPE)
            if r.returncode != 0:
                raise BuildError(f"git archive {sha} failed: {r.stderr.decode(errors='replace').strip()}")
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                    tar.extractall(tmp, filter="data")
                else:  # our own commit's tree; refuse what the data filter would
                    bad = [m.name for m in tar.getmembers() if m.name.startswith("/") or ".." in m.name.split("/")
                           or m.issym() or m.islnk()]
                    if bad:
                        raise BuildError(f"commit {sha[:12]} has paths outside its tree or links: {bad[:3]}")
                    tar.extractall(tmp)
        if not (tmp / "native" / "include" / "perfbench.h").is_file():
            raise UsageError(f"commit {sha[:12]} has no native/include/perfbench.h: it predates perfbench's native "
                             "library and cannot be a side of a comparison")
        (tmp / ".complete").write_text(sha)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def side(label: str, rev: str | None, root: Path, build_root: Path) -> Side:
    if rev is None or rev == WORKTREE:
        return Side(label, WORKTREE, None, root, dirty=_dirty(root))
    sha = resolve(root, rev)
    return Side(label, rev, sha, materialize(root, sha, build_root / "trees"))


def build_side(s: Side, build_root: Path, log=None) -> builder.BuildInfo:
    """Build the side's native library, then copy it to a path of its own side."""
    info = builder.build(source_dir=s.checkout / "native", log=log)
    dest = build_root / "sides" / f"{s.label}-{info.build_id}"
    lib = dest / builder.LIB_NAME
    if not lib.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / (builder.LIB_NAME + ".tmp")
        shutil.copy2(info.path, tmp)
        tmp.rename(lib)
    info.path = str(lib)
    (dest / "build.json").write_text(json.dumps(info.to_dict(), indent=2))
    s.build = info
    return info


# ---- per-op compatibility of two headers ----

def _declarations(header: str) -> list[str]:
    """The cdef block as normalized top-level declarations (comments and spacing removed)."""
    text = re.sub(r"/\*.*?\*/", " ", cdef_from_header(header), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out, depth, cur = [], 0, []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            out.append(" ".join(line.split()))
            continue
        for ch in line + " ":
            cur.append(ch)
            depth += ch == "{"
            depth -= ch == "}"
            if ch == ";" and depth == 0:
                out.append(" ".join("".join(cur).split()))
                cur = []
    return out


class Interface(NamedTuple):
    """A header as the harness sees it: the declarations every op uses, and each kernel's own."""

    common: str  # the shared declarations (status codes, timing, pool, ...), normalized
    structs: dict  # args-struct name (pb_<name>_args) -> its declaration
    entries: dict  # kernel name (int pb_<name>(const void *args)) -> its declaration


def interface(header: str) -> Interface:
    """The header split into the common declarations and each kernel's own: its
    `pb_<args>_args` struct, its `pb_<kernel>(` entry point, and the `#define PB_<NAME>_...`
    constants named after one of them (PB_GELU_TANH is gelu's, PB_SIGMOID_MUL sigmoid's), so a
    new op's header lines leave every other op comparable in one process."""
    structs: dict[str, str] = {}
    entries: dict[str, str] = {}
    defines, common = [], []
    for d in _declarations(header):
        m = re.search(r"\bpb_([a-z0-9_]+)_args\s*;$", d) if d.startswith("typedef struct") else None
        e = None if m else re.match(r"int pb_([a-z0-9_]+)\(const void \*args\);$", d)
        if m and m.group(1) != "noop":
            structs[m.group(1)] = d
        elif e and e.group(1) != "noop":
            entries[e.group(1)] = d
        elif re.match(r"#define PB_[A-Z0-9_]+ ", d):
            defines.append(d)
        else:
            common.append(d)
    names = sorted(set(structs) | set(entries), key=len, reverse=True)  # the longest prefix wins
    for d in defines:
        macro = d.split()[1]
        owner = next((n for n in names if macro.startswith(f"PB_{n.upper()}_")), None)
        if owner is None:
            common.append(d)
        elif owner in structs:
            structs[owner] += "\n" + d
        else:
            entries[owner] += "\n" + d
    return Interface("\n".join(common), structs, entries)


def kernel_of(op_name: str) -> tuple[str, str]:
    """(entry point, args struct) of the native kernel an op calls: its op file's `Op.kernel`
    (the only mapping from op to kernel) and `Op.kernel_args` (the struct, when several kernels
    share one, e.g. Add and Mul's pb_binary_args; else the kernel's own)."""
    op = ops.get(op_name)
    if not op.kernel:
        raise UsageError(f"op {op_name} declares no native kernel (Op.kernel is empty in its op file)")
    return op.kernel, op.kernel_args or op.kernel


def _own(iface: Interface, op_name: str) -> str | None:
    """The op's kernel declarations in this header (entry point + args struct), None if either is missing."""
    k, a = kernel_of(op_name)
    if k not in iface.entries or a not in iface.structs:
        return None
    return iface.entries[k] + "\n" + iface.structs[a]


_PROTOTYPE = re.compile(r"^[A-Za-z_][\w\s\*]*\bpb_\w+\([^;]*\);$")


def _shared_compatible(base_common: str, head_common: str) -> bool:
    """One process can measure both sides when the shared declarations are equal, or when head
    only adds function prototypes or constants to them (a new pool counter, a test hook): every
    declaration base has is in head unchanged, and the harness calls nothing head added on
    base's library. A changed or removed declaration, or an added type, is not compatible."""
    if base_common == head_common:
        return True
    base, head = base_common.splitlines(), head_common.splitlines()
    if not set(base) <= set(head):
        return False
    added = [d for d in head if d not in set(base)]
    return all(_PROTOTYPE.match(d) or re.match(r"#define PB_[A-Z0-9_]+ ", d) for d in added)


def lacking(base_header: str, head_header: str, op_names: list[str]) -> dict:
    """op -> "base" or "head": the side whose header declares no kernel for it (ops both have: absent)."""
    b, h = interface(base_header), interface(head_header)
    out = {}
    for op in op_names:
        if _own(b, op) is None:
            out[op] = "base"
        elif _own(h, op) is None:
            out[op] = "head"
    return out


def compatibility(base_header: str, head_header: str, op_names: list[str]) -> dict:
    """op -> None when one process can measure both sides with this checkout's op file, else
    the reason it cannot (that op is then measured in each side's own checkout)."""
    b, h = interface(base_header), interface(head_header)
    out = {}
    for op in op_names:
        k, a = kernel_of(op)
        what = f"pb_{k}" if a == k else f"pb_{k} (args pb_{a}_args)"
        if not _shared_compatible(b.common, h.common):
            out[op] = "the header's shared declarations changed between base and head"
        elif _own(b, op) is None:
            out[op] = f"base's header declares no {what}"
        elif _own(h, op) is None:
            out[op] = f"head's header declares no {what}"
        elif _own(b, op) != _own(h, op):
            out[op] = f"pb_{a}_args or pb_{k}() changed between base and head"
        else:
            out[op] = None
    return out
