"""Output folders that commands write into and clean up (`perfbench dashboard -o DIR`,
`perfbench tickets export DIR`): the primitives that keep them from touching anything else.

Writing: every generated file goes to a temporary file created in its folder (mkstemp: O_EXCL, a
fresh name) and is `os.replace`d onto its name. A symlink at the name is replaced by the new regular
file, never written through; a reader never sees half a file; on any error the temporary file is
removed. The folders written into are made real folders first (`own_folder`): a symlink at one of
our folder names is replaced by a folder, never followed.

Signatures: every file a command generates carries its signature, a fixed string in its first
SIGNED_BYTES bytes (the dashboard's `<meta name="generator" ...>`, the ticket export's first-line
HTML comment), and every folder it creates holds a FOLDER_SIGN file carrying it. A name, a pattern
or a marker proves nothing: only the signature shows that we wrote a thing.

Removing: a folder may record what it wrote in a marker file (JSON {"written_by": ..., "written":
[names]}); the marker is untrusted (anyone can plant one). An entry is removed only if it is a
plain string, relative, with no empty, "." or ".." part, matches the command's own names (`files`
for regular files, `folders` for folders), has no symlink anywhere from the output folder down to
it (itself included), resolves strictly inside the folder (never the folder itself), and carries
the command's signature: a regular file whose first SIGNED_BYTES bytes contain it (opened with
O_NOFOLLOW), or a folder holding a regular FOLDER_SIGN file that does. Anything else is left alone
and reported: a user's own `op-notes.html` or `release-20240101/` survives a marker listing it.
The output folder itself may be a symlink: the user named it on the command line, and following it
is their choice.

A marker that is not JSON or not of that shape lists nothing (read_marker: reported, nothing
removed; parse_marker: BadMarker, for a command that refuses such a folder): a marker is never
trusted further than the names it could hold.

Overwriting follows the same rule as removing: before writing anything, a command asks `not_ours`
which of the names it is about to write hold something without its signature (a user's own
index.html, a page from a version before signatures, a folder where a file goes) and refuses the
folder if any does, so nothing is half-written. A symlink at a name, or on the way to it, is no
obstacle: the write replaces it (never writes through it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from perfbench.errors import UsageError

Log = Callable[[str], None]

SIGNED_BYTES = 4096  # a file's signature must be within its first 4 KiB
FOLDER_SIGN = ".perfbench-folder"  # in every folder a command creates: its signature, the proof it is ours


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: a temporary file in the same folder, then os.replace
    onto the name (a symlink there is replaced, never written through). The file gets the mode an
    ordinary new file would (0666 less the umask)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            os.replace(tmp, path)
        except IsADirectoryError:
            raise UsageError(f"{path} is a folder: it is where a generated file goes; move it away") from None
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """`write_bytes` of the encoded text."""
    write_bytes(path, text.encode(encoding))


def ensure_folder(folder: Path) -> Path:
    """The output folder the user named, created (with its parents) when missing. A symlink to a
    folder is followed (the user named it); a file, or a link to nothing or to a file, is a
    UsageError (exit 2)."""
    folder = Path(folder)
    if os.path.lexists(folder) and not folder.is_dir():
        what = "a symbolic link to no folder" if folder.is_symlink() else "not a folder"
        raise UsageError(f"{folder} is {what}: give a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def signed(path: Path, signature: str) -> bool:
    """Whether `path` is a regular file (not a symlink: opened with O_NOFOLLOW, checked with fstat)
    whose first SIGNED_BYTES bytes contain `signature`. Anything unreadable is not signed."""
    if not signature:
        raise ValueError("an empty signature proves nothing")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = b""
        while len(head) < SIGNED_BYTES:
            chunk = os.read(fd, SIGNED_BYTES - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:
        return False
    finally:
        os.close(fd)
    return signature.encode("utf-8") in head


def own_folder(path: Path, signature: str | None = None, log: Log | None = None) -> Path:
    """A folder of ours inside an output folder (e.g. the dashboard's assets/), made a real folder:
    a symlink at its name is removed (the link only, never what it points to) and a folder made in
    its place; a file there is a UsageError.

    With `signature`, the folder is signed (a FOLDER_SIGN file carrying it, so that a later run may
    remove it) when we create it, when it is empty, or when it is signed already. A folder that is
    there with files in it and no signature is written into but never signed (it may be someone
    else's: signing it would let a later run remove their files); it is reported to `log`."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"{path} is a file where a folder of generated files goes: move it away")
    path.mkdir(exist_ok=True)
    if signature is not None:
        if signed(path / FOLDER_SIGN, signature) or not any(path.iterdir()):
            write_text(path / FOLDER_SIGN, signature + "\n")
        elif log:
            log(f"warning: {path} has files and no {FOLDER_SIGN} (made by a version before signatures, or not by "
                "us): writing into it, but it will never be removed; if it holds only generated files, delete it "
                "and run again")
    return path


class NotOurs(Exception):
    """An entry (of a marker, or a name found in the folder) that is not removed; the message says why."""


def own_path(folder: Path, rel, files: re.Pattern, folders: re.Pattern | None = None, *,
             signature: str) -> Path:
    """The path of marker entry `rel` under `folder` when it names one of our own files or folders
    and carries `signature` (see the module's docstring); NotOurs otherwise. A missing entry is
    returned (nothing to remove)."""
    if not isinstance(rel, str):
        raise NotOurs("not a file name")
    parts = rel.split("/")
    if not rel or os.path.isabs(rel) or "\\" in rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise NotOurs("not a plain relative name inside the folder")
    is_file = files.fullmatch(rel) is not None
    is_folder = folders is not None and folders.fullmatch(rel) is not None
    if not (is_file or is_folder):
        raise NotOurs("not a name this command writes")
    here = Path(folder)
    for part in parts:
        here = here / part
        if here.is_symlink():
            raise NotOurs("a symbolic link on the way")
        if not here.exists():
            return here  # already gone
    base = os.path.realpath(folder)
    real = os.path.realpath(here)
    if real == base or os.path.commonpath([base, real]) != base:
        raise NotOurs("not inside the folder")
    if here.is_dir() and not is_folder:
        raise NotOurs("a folder where this command writes a file")
    if not here.is_dir() and not (is_file and here.is_file()):
        raise NotOurs("not a folder" if is_folder else "not a regular file")
    if here.is_dir() and not signed(here / FOLDER_SIGN, signature):
        raise NotOurs(f"a folder without our {FOLDER_SIGN} (made before signatures, or not by us; delete it "
                      "yourself if it is stale)")
    if not here.is_dir() and not signed(here, signature):
        raise NotOurs("a file without our signature (written before signatures, or not by us; delete it "
                      "yourself if it is stale)")
    return here


def not_ours(folder: Path, names, signature: str,
             accept: Callable[[str, Path], bool] | None = None) -> list[tuple[str, str]]:
    """(name, why) for each of `names` (relative, "/"-separated: what a command is about to write
    in `folder`, in order) where something is in the way that is not the command's own, i.e. that
    writing would destroy or fail on: a regular file without `signature` in its first SIGNED_BYTES
    bytes (unless `accept(name, path)` says it is ours, e.g. a file of a signed folder), a folder
    or any other non-file at the name, or a file where a folder on the way goes. A name with
    nothing at it, or with a symlink at it or on the way to it, is fine: writing replaces the
    link and never follows it (write_bytes, own_folder)."""
    found = []
    for name in names:
        parts = name.split("/")
        here = Path(folder)
        for i, part in enumerate(parts):
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except FileNotFoundError:
                break  # nothing there
            except OSError as e:
                found.append((name, f"unreadable: {e.strerror}"))
                break
            if stat.S_ISLNK(mode):
                break  # replaced, never followed
            if i < len(parts) - 1:
                if not stat.S_ISDIR(mode):
                    found.append((name, f"{'/'.join(parts[:i + 1])} is a file where a folder goes"))
                    break
                continue
            if stat.S_ISDIR(mode):
                found.append((name, "a folder where a file goes"))
            elif not stat.S_ISREG(mode):
                found.append((name, "not a regular file"))
            elif not (signed(here, signature) or (accept is not None and accept(name, here))):
                found.append((name, "no signature"))
    return found


def listing(found: list[tuple[str, str]], most: int = 5) -> str:
    """The first `most` of not_ours' answer for a message: "a, b (a folder where a file goes) and 3 more"."""
    shown = [name if why == "no signature" else f"{name} ({why})" for name, why in found[:most]]
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(shown) + more


def remove(path: Path) -> None:
    """Remove a path `own_path` returned: a folder with its contents (rmtree never follows a
    symlink inside it), a file unlinked; a missing one is no error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


class Pruned(NamedTuple):
    removed: list  # the entries removed
    left: list  # (entry, why) for every entry left alone


def prune(folder: Path, listed: list, keep: set, files: re.Pattern, folders: re.Pattern | None = None,
          log: Log | None = None, *, signature: str, dry_run: bool = False) -> Pruned:
    """Remove the entries of `listed` not in `keep` that name our own signed files or folders
    (own_path); every other entry is left alone and, if `log`, reported (one warning each). With
    `dry_run`, nothing is removed: `removed` has the entries that would be."""
    removed, left = [], []
    for rel in listed:
        if isinstance(rel, str) and rel in keep:
            continue
        try:
            path = own_path(folder, rel, files, folders, signature=signature)
        except NotOurs as e:
            left.append((rel, str(e)))
            if log:
                log(f"warning: not removing {rel!r} in {folder}: {e}")
            continue
        if os.path.lexists(path):
            if not dry_run:
                remove(path)
            removed.append(rel)
    return Pruned(removed, left)


class BadMarker(Exception):
    """A marker file that is unreadable or not JSON of the shape {"written": [...]}; the message says which."""


def parse_marker(path: Path) -> list:
    """The "written" list of marker file `path`; BadMarker when it cannot be read or is not JSON of
    the shape {"written": [...]} (an empty file included). Entries are not checked here (prune does)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadMarker(f"is not readable JSON ({e})") from None
    listed = doc.get("written") if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        raise BadMarker('is not {"written": [names]}')
    return listed


def read_marker(path: Path, log: Log | None = None) -> list:
    """The "written" list of marker file `path`: [] when it is missing, and [] (reported) when it
    is malformed (parse_marker)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        return parse_marker(path)
    except BadMarker as e:
        if log:
            log(f"warning: {path} {e}: removing nothing it lists")
        return []


def write_marker(path: Path, written_by: str, written) -> None:
    """Record what this run wrote (sorted, atomically)."""
    write_text(path, json.dumps({"written_by": written_by, "written": sorted(set(written))}, indent=1) + "\n")
