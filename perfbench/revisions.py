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


def interface(header: str) -> tuple[str, dict]:
    """(common declarations, kernel -> its own declarations) of a header. A kernel's own are its
    `pb_<kernel>_args` struct and its `pb_<kernel>(` entry point."""
    own: dict[str, list[str]] = {}
    common = []
    for d in _declarations(header):
        m = re.search(r"\bpb_([a-z0-9_]+)_args\s*;$", d) if d.startswith("typedef struct") else None
        m = m or re.match(r"int pb_([a-z0-9_]+)\(const void \*args\);$", d)
        if m and m.group(1) not in ("noop",):
            own.setdefault(m.group(1), []).append(d)
        else:
            common.append(d)
    return "\n".join(common), {k: "\n".join(v) for k, v in own.items()}


def kernel_of(op_name: str) -> str:
    """The native kernel an op calls: its op file's `kernel` (Op.kernel), the one mapping from op
    to kernel. Not derived from the op's name: several ops share a kernel (FastGelu and BiasGelu
    call `gelu`, QuickGelu calls `sigmoid`, the LayerNormalization family `layer_norm`)."""
    return ops.get(op_name).kernel


def lacking(base_header: str, head_header: str, op_names: list[str]) -> dict:
    """op -> "base" or "head": the side whose header declares no kernel for it (ops both have: absent)."""
    bk, hk = interface(base_header)[1], interface(head_header)[1]
    return {op: ("base" if kernel_of(op) not in bk else "head") for op in op_names
            if kernel_of(op) not in bk or kernel_of(op) not in hk}


def compatibility(base_header: str, head_header: str, op_names: list[str]) -> dict:
    """op -> None when one process can measure both sides with this checkout's op file, else
    the reason it cannot (that op is then measured in each side's own checkout)."""
    bc, bk = interface(base_header)
    hc, hk = interface(head_header)
    out = {}
    for op in op_names:
        k = kernel_of(op)
        if bc != hc:
            out[op] = "the header's shared declarations changed between base and head"
        elif k not in bk:
            out[op] = f"base's header declares no pb_{k}"
        elif k not in hk:
            out[op] = f"head's header declares no pb_{k}"
        elif bk[k] != hk[k]:
            out[op] = f"pb_{k}_args or pb_{k}() changed between base and head"
        else:
            out[op] = None
    return out
