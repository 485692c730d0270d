"""perfbench.outdir (issue 25): atomic writes that replace a symlink instead of writing through
it, and marker entries trusted only when they name our own files strictly inside the folder with
no symlink on the way and carry our signature (a name is no proof: a user's page-3.html or folder
named like ours survives a marker listing it)."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from perfbench import outdir
from perfbench.errors import UsageError

FILES = re.compile(r"page-[0-9]+\.html|sub/page-[0-9]+\.html")
FOLDERS = re.compile(r"assets|sub|[a-z]+-[0-9]{8}")
SIG = '<meta name="generator" content="test">'


def ours(path, text=""):
    """A file as the command writes it: its signature first."""
    path.write_text(f"<head>{SIG}</head>{text}")


@pytest.fixture()
def folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir(parents=True)
    outdir.own_folder(out / "assets", SIG)  # signed: made by the command
    (out / "assets" / "x.js").write_text("js")
    outdir.own_folder(out / "sub", SIG)
    ours(out / "sub" / "page-2.html", "2")
    ours(out / "page-1.html", "1")
    (out / "notes.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    ours(outside / "page-1.html", "outside")  # signed, but reached only through a symlink
    (out / "page-9.html").symlink_to(outside / "page-1.html")
    (out / "link").symlink_to(outside)
    return out


def test_write_replaces_a_symlink_and_leaves_its_target(folder, tmp_path):
    outdir.write_text(folder / "page-9.html", "new")
    assert (tmp_path / "outside" / "page-1.html").read_text().endswith("outside")
    assert not (folder / "page-9.html").is_symlink() and (folder / "page-9.html").read_text() == "new"
    assert (folder / "page-9.html").stat().st_mode & 0o644 == 0o644  # an ordinary file, not mkstemp's 0600


def test_a_failed_write_leaves_no_temporary_file(folder, monkeypatch):
    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        outdir.write_text(folder / "page-1.html", "new")
    assert (folder / "page-1.html").read_text().endswith("1") and not [p for p in os.listdir(folder) if p.endswith(".tmp")]


def test_writing_onto_a_folder_is_a_usage_error(folder):
    with pytest.raises(UsageError, match="is a folder"):
        outdir.write_text(folder / "sub", "x")
    assert (folder / "sub" / "page-2.html").exists() and not [p for p in os.listdir(folder) if p.endswith(".tmp")]


@pytest.mark.parametrize("rel", [
    "page-1.html", "assets", "sub", "sub/page-2.html", "page-5.html",  # the last one missing: nothing to do
])
def test_own_entries(folder, rel):
    assert outdir.own_path(folder, rel, FILES, FOLDERS, signature=SIG) == folder / rel


@pytest.mark.parametrize("rel, why", [
    (5, "not a file name"), (None, "not a file name"), (["page-1.html"], "not a file name"),
    ("", "not a plain relative name"), (".", "not a plain relative name"), ("sub/", "not a plain relative name"),
    ("sub//page-2.html", "not a plain relative name"), ("./page-1.html", "not a plain relative name"),
    ("sub/../page-1.html", "not a plain relative name"), ("/etc/passwd", "not a plain relative name"),
    ("notes.txt", "not a name this command writes"), ("link", "not a name this command writes"),
    ("page-9.html", "a symbolic link on the way"), ("page-1.html\0", "not a plain relative name"),
])
def test_entries_that_are_not_ours(folder, rel, why):
    with pytest.raises(outdir.NotOurs, match=why):
        outdir.own_path(folder, rel, FILES, FOLDERS, signature=SIG)


def test_no_symlink_on_the_way_and_the_right_kind(folder, tmp_path):
    shutil.rmtree(folder / "sub")
    (folder / "sub").symlink_to(tmp_path / "outside")  # sub/page-1.html would be outside
    files = re.compile(r"sub/page-1\.html|page-1\.html")
    with pytest.raises(outdir.NotOurs, match="symbolic link on the way"):
        outdir.own_path(folder, "sub/page-1.html", files, FOLDERS, signature=SIG)
    with pytest.raises(outdir.NotOurs, match="folder where this command writes a file"):
        outdir.own_path(folder, "assets", re.compile("assets"), signature=SIG)
    with pytest.raises(outdir.NotOurs, match="not a folder"):
        outdir.own_path(folder, "page-1.html", re.compile("x"), re.compile(r"page-1\.html"), signature=SIG)


def test_a_symlinked_output_folder_is_followed(folder, tmp_path):
    (tmp_path / "named").symlink_to(folder)
    assert outdir.own_path(tmp_path / "named", "page-1.html", FILES, signature=SIG) == tmp_path / "named" / "page-1.html"


def test_a_name_is_no_proof_only_the_signature_is(folder, tmp_path):
    """The review's findings: a marker listing a user's own page-3.html or release-20240101/ (both
    named like ours) must not remove them; only a signed file, or a folder with a signed
    FOLDER_SIGN, counts as ours."""
    (folder / "page-3.html").write_text("my own page")
    (folder / "release-20240101").mkdir()
    (folder / "release-20240101" / "photo.jpg").write_bytes(b"\xff\xd8 a photo")
    for rel, why in (("page-3.html", "without our signature"), ("release-20240101", "without our .perfbench-folder")):
        with pytest.raises(outdir.NotOurs, match=why):
            outdir.own_path(folder, rel, FILES, FOLDERS, signature=SIG)
    with pytest.raises(outdir.NotOurs, match="without our signature"):  # another command's signature
        outdir.own_path(folder, "page-1.html", FILES, FOLDERS, signature="<!-- someone else -->")
    sign = folder / "release-20240101" / outdir.FOLDER_SIGN
    sign.symlink_to(folder / "sub" / outdir.FOLDER_SIGN)  # a link to a signed file is no signature
    with pytest.raises(outdir.NotOurs, match="without our .perfbench-folder"):
        outdir.own_path(folder, "release-20240101", FILES, FOLDERS, signature=SIG)
    sign.unlink()
    sign.mkdir()  # nor is a folder by that name
    with pytest.raises(outdir.NotOurs, match="without our .perfbench-folder"):
        outdir.own_path(folder, "release-20240101", FILES, FOLDERS, signature=SIG)
    sign.rmdir()
    sign.write_text("x" * outdir.SIGNED_BYTES + SIG)  # only the first 4 KiB are read
    with pytest.raises(outdir.NotOurs, match="without our .perfbench-folder"):
        outdir.own_path(folder, "release-20240101", FILES, FOLDERS, signature=SIG)
    sign.write_text("x" * (outdir.SIGNED_BYTES - len(SIG)) + SIG)
    assert outdir.own_path(folder, "release-20240101", FILES, FOLDERS, signature=SIG) == folder / "release-20240101"
    os.mkfifo(folder / "page-4.html")  # never opened (a FIFO would block)
    with pytest.raises(outdir.NotOurs, match="not a regular file"):
        outdir.own_path(folder, "page-4.html", FILES, FOLDERS, signature=SIG)
    assert not outdir.signed(folder / "page-4.html", SIG) and not outdir.signed(folder / "page-9.html", SIG)
    assert outdir.signed(folder / "page-1.html", SIG) and not outdir.signed(folder / "missing", SIG)
    with pytest.raises(ValueError, match="empty signature"):
        outdir.signed(folder / "page-3.html", "")


def test_prune_removes_only_our_entries_and_reports_the_rest(folder, tmp_path):
    logged = []
    (folder / "page-3.html").write_text("my own page")
    (folder / "mine-20240101").mkdir()
    got = outdir.prune(folder, ["page-1.html", "assets", "sub/page-2.html", "notes.txt", "page-9.html", ".",
                                str(tmp_path / "outside" / "page-1.html"), 7, "page-5.html", "page-3.html",
                                "mine-20240101"],
                       {"sub/page-2.html"}, FILES, FOLDERS, logged.append, signature=SIG)
    assert got.removed == ["page-1.html", "assets"]
    assert [rel for rel, _ in got.left] == ["notes.txt", "page-9.html", ".", str(tmp_path / "outside" / "page-1.html"),
                                            7, "page-3.html", "mine-20240101"]
    assert not (folder / "assets").exists() and (folder / "sub" / "page-2.html").exists()
    assert (folder / "notes.txt").exists() and (folder / "page-9.html").is_symlink()
    assert (folder / "page-3.html").read_text() == "my own page" and (folder / "mine-20240101").is_dir()
    assert (tmp_path / "outside" / "page-1.html").read_text().endswith("outside")
    assert len(logged) == 7 and all(line.startswith("warning: not removing") for line in logged)


@pytest.mark.parametrize("text", ["not json", "[1]", "{}", '{"written": "page-1.html"}', '{"written": {"a": 1}}'])
def test_a_malformed_marker_lists_nothing(tmp_path, text):
    (tmp_path / "m").write_text(text)
    logged = []
    assert outdir.read_marker(tmp_path / "m", logged.append) == [] and len(logged) == 1
    assert outdir.read_marker(tmp_path / "missing", logged.append) == [] and len(logged) == 1


@pytest.mark.parametrize("text", ["", "not json", "[1]", "{}", '{"written": "page-1.html"}', '{"written": {"a": 1}}'])
def test_parse_marker_refuses_a_malformed_or_empty_marker(tmp_path, text):
    """For a command that refuses such a folder (the dashboard): an empty or malformed marker is
    no sign that a folder is ours."""
    (tmp_path / "m").write_text(text)
    with pytest.raises(outdir.BadMarker):
        outdir.parse_marker(tmp_path / "m")
    with pytest.raises(outdir.BadMarker, match="not readable"):
        outdir.parse_marker(tmp_path / "missing")
    (tmp_path / "m").write_text('{"written": ["a", 5]}')
    assert outdir.parse_marker(tmp_path / "m") == ["a", 5]  # entries are prune's to check


def test_not_ours_names_what_a_write_would_destroy(folder, tmp_path):
    """Overwriting follows the removing rule: a name about to be written may hold our own signed
    file, nothing, or a symlink (replaced, never followed); anything else is named."""
    (folder / "page-3.html").write_text("my own page")
    (folder / "page-5.html").mkdir()
    os.mkfifo(folder / "page-6.html")
    (folder / "notes").write_text("a file where a folder goes")
    (folder / "link" / "page-7.html").write_text("outside, reached through a symlink")
    names = ["page-1.html", "sub/page-2.html", "page-9.html", "page-3.html", "page-4.html", "page-5.html",
             "page-6.html", "notes/page-1.html", "link/page-7.html", "assets/x.js", "new/page-1.html"]
    assert outdir.not_ours(folder, names, SIG) == [
        ("page-3.html", "no signature"), ("page-5.html", "a folder where a file goes"),
        ("page-6.html", "not a regular file"), ("notes/page-1.html", "notes is a file where a folder goes"),
        ("assets/x.js", "no signature")]
    # an unsigned file a command knows to be its own (a file of a signed folder of ours)
    def accept(name, path):
        return outdir.signed(path.parent / outdir.FOLDER_SIGN, SIG)

    assert [n for n, _ in outdir.not_ours(folder, ["assets/x.js", "page-3.html"], SIG, accept)] == ["page-3.html"]
    assert outdir.not_ours(folder, ["page-3.html"], "<!-- someone else -->") == [("page-3.html", "no signature")]
    assert outdir.not_ours(folder, ["page-1.html"], "<!-- someone else -->") == [("page-1.html", "no signature")]
    found = outdir.not_ours(folder, names, SIG)
    assert outdir.listing(found, most=3) == ("page-3.html, page-5.html (a folder where a file goes), page-6.html "
                                             "(not a regular file) and 2 more")
    assert (folder / "page-3.html").read_text() == "my own page"  # only looked at


def test_a_dry_run_prune_removes_nothing(folder):
    got = outdir.prune(folder, ["page-1.html", "assets", "notes.txt", "page-5.html"], set(), FILES, FOLDERS,
                       signature=SIG, dry_run=True)
    assert got.removed == ["page-1.html", "assets"] and [rel for rel, _ in got.left] == ["notes.txt"]
    assert (folder / "page-1.html").exists() and (folder / "assets" / "x.js").exists()


def test_marker_round_trip(tmp_path):
    outdir.write_marker(tmp_path / "m", "test", ["b", "a", "b"])
    assert outdir.read_marker(tmp_path / "m") == ["a", "b"]


def test_folders(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "assets").symlink_to(tmp_path / "elsewhere")
    assert outdir.own_folder(tmp_path / "assets").is_dir() and not (tmp_path / "assets").is_symlink()
    assert (tmp_path / "elsewhere").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file where a folder"):
        outdir.own_folder(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="symbolic link to no folder"):
        outdir.ensure_folder(tmp_path / "dangling")
    with pytest.raises(UsageError, match="not a folder"):
        outdir.ensure_folder(tmp_path / "file")
    assert outdir.ensure_folder(tmp_path / "a" / "b").is_dir()


def test_own_folder_signs_only_what_it_may_claim(tmp_path):
    logged = []
    new = outdir.own_folder(tmp_path / "new", SIG, logged.append)  # made here: signed
    assert outdir.signed(new / outdir.FOLDER_SIGN, SIG)
    (tmp_path / "empty").mkdir()  # empty: nothing of anyone's in it, signed
    assert outdir.signed(outdir.own_folder(tmp_path / "empty", SIG, logged.append) / outdir.FOLDER_SIGN, SIG)
    (new / "page.html").write_text("x")  # signed already: stays signed
    assert outdir.signed(outdir.own_folder(new, SIG, logged.append) / outdir.FOLDER_SIGN, SIG) and logged == []
    # a folder with files and no signature (an older version's, or the user's own assets/): written into,
    # never signed, so that a later run never removes the user's files with it
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "logo.png").write_bytes(b"png")
    for _ in range(2):
        outdir.own_folder(tmp_path / "assets", SIG, logged.append)
        assert not os.path.lexists(tmp_path / "assets" / outdir.FOLDER_SIGN)
    assert len(logged) == 2 and "has files and no .perfbench-folder" in logged[0]
    with pytest.raises(outdir.NotOurs, match="without our .perfbench-folder"):
        outdir.own_path(tmp_path, "assets", re.compile("x"), re.compile("assets"), signature=SIG)
