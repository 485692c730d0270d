"""`perfbench tickets export DIR` (issue 25): files written atomically (a symlink at a name is
replaced, never written through), each starting with the export's signature line; a ticket file
this export did not write is removed only if it carries that signature (a closed ticket's file from
the last export goes), never by its name or a marker (a user's own ticket-99.md stays, even when a
planted .perfbench-tickets lists it); an unsigned one (an export before signatures) is named on
stderr and left."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import perfbench_cmd
from tests.store.test_store import env  # noqa: F401  (fixture; `store` is tests/conftest.py's SQLite one)
from tests.tickets.test_lifecycle import Runs

SIGNATURE = "<!-- written by perfbench tickets export -->"


@pytest.fixture()
def runs(store, env):  # noqa: F811
    r = Runs(store, env)
    r.take({(32, 1024): 1.6, (32, 4096): 2.4})  # ticket 1 opens
    return r


def export(cli_env, runs, out, *args):
    return subprocess.run(perfbench_cmd() + ["tickets", "export", str(out), *args, "--db", runs.store.url],
                          env=cli_env, capture_output=True, text=True, timeout=120)


def test_index_and_ticket_files_replace_symlinks_never_write_through(runs, cli_env, tmp_path):
    out, outside = tmp_path / "tickets", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    for name in ("index.md", "ticket-1.md"):
        (outside / name).write_text(f"the user's {name}")
        (out / name).symlink_to(outside / name)
    r = export(cli_env, runs, out)
    assert r.returncode == 0, r.stderr
    for name in ("index.md", "ticket-1.md"):
        assert (outside / name).read_text() == f"the user's {name}"
        assert (out / name).is_file() and not (out / name).is_symlink()
    assert (out / "index.md").read_text().startswith(f"{SIGNATURE}\n# perfbench tickets")
    assert (out / "ticket-1.md").read_text().startswith(f"{SIGNATURE}\n# 1. Softmax f32")
    assert not (out / ".perfbench-tickets").exists()  # no marker: the signature is the proof
    assert not list(out.glob(".*.tmp"))


def test_a_users_own_ticket_file_survives(runs, cli_env, tmp_path):
    out = tmp_path / "tickets"
    out.mkdir()
    (out / "ticket-99.md").write_text("my own notes")  # no export wrote it
    for _ in range(2):
        r = export(cli_env, runs, out)
        assert r.returncode == 0, r.stderr
        assert (out / "ticket-1.md").exists() and (out / "ticket-99.md").read_text() == "my own notes"
        assert "note: left ticket-99.md in" in r.stderr


def test_a_users_own_ticket_file_survives_a_planted_marker(runs, cli_env, tmp_path):
    """The review's finding (b): a planted .perfbench-tickets listing the user's own ticket-99.md
    deleted it. The marker is no proof: only the export's signature line is."""
    out = tmp_path / "tickets"
    out.mkdir()
    (out / "ticket-99.md").write_text("my own notes")
    (out / ".perfbench-tickets").write_text(json.dumps({"written": ["ticket-99.md"]}))
    r = export(cli_env, runs, out)
    assert r.returncode == 0, r.stderr
    assert (out / "ticket-99.md").read_text() == "my own notes" and (out / "ticket-1.md").exists()


def test_an_unsigned_ticket_file_from_an_older_export_is_named_and_left(runs, cli_env, tmp_path):
    """The review's finding (c): a folder exported before signatures (and before any marker) holds
    ticket-5.md of a ticket closed since; it cannot be told from the user's own file, so it is
    left, and named on stderr (one line) for the user to delete. (Tickets 5 and 12 are not
    exported this run: at a name the export writes, an unsigned file is refused, see below.)"""
    assert [t["id"] for t in runs.tickets()] == [1]
    out = tmp_path / "tickets"
    out.mkdir()
    (out / "ticket-5.md").write_text("# 5. Softmax f32 (an older export)\n")
    (out / "ticket-12.md").write_text("# 12. another\n")
    r = export(cli_env, runs, out)
    assert r.returncode == 0, r.stderr
    assert (out / "ticket-5.md").read_text().startswith("# 5. Softmax") and (out / "ticket-12.md").exists()
    notes = [line for line in r.stderr.splitlines() if "ticket-5.md" in line]
    assert len(notes) == 1 and "ticket-5.md, ticket-12.md" in notes[0], r.stderr
    assert "before signatures" in notes[0] and "delete them yourself" in notes[0]


def test_a_closed_tickets_file_from_the_last_export_goes(runs, cli_env, tmp_path):
    out = tmp_path / "tickets"
    assert export(cli_env, runs, out).returncode == 0 and (out / "ticket-1.md").exists()
    runs.take({})  # every cell measured, none a loss: ticket 1 closes
    r = export(cli_env, runs, out)
    assert r.returncode == 0, r.stderr
    assert not (out / "ticket-1.md").exists()  # written (signed) by the last export, closed since: removed
    assert "note: left" not in r.stderr
    r = export(cli_env, runs, out, "--all")  # closed ones too
    assert r.returncode == 0 and (out / "ticket-1.md").exists()


def test_a_planted_tickets_marker_removes_nothing_else(runs, cli_env, tmp_path):
    out, elsewhere = tmp_path / "tickets", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "ticket-7.md"
    victim.write_text(f"{SIGNATURE}\nvictim")  # signed, but reached only through a symlink
    (out / "link").symlink_to(elsewhere)
    (out / "ticket-8.md").symlink_to(victim)
    (out / "ticket-9.md").mkdir()  # a folder by a ticket file's name, with a signed file in it
    (out / "ticket-9.md" / "ticket-9.md").write_text(f"{SIGNATURE}\nmine")
    (out / "notes.md").write_text("mine")
    (out / ".perfbench-tickets").write_text(json.dumps(
        {"written": [str(victim), "../elsewhere/ticket-7.md", "link/ticket-7.md", "ticket-8.md", "notes.md", ".",
                     5, None]}))
    r = export(cli_env, runs, out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert victim.read_text() == f"{SIGNATURE}\nvictim" and (out / "ticket-8.md").is_symlink()
    assert (out / "notes.md").exists() and (out / "ticket-9.md" / "ticket-9.md").exists()
    assert "note: left ticket-8.md, ticket-9.md in" in r.stderr


def test_a_symlinked_folder_is_followed_and_a_dangling_one_refused(runs, cli_env, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    r = export(cli_env, runs, tmp_path / "link")
    assert r.returncode == 0, r.stderr
    assert (target / "ticket-1.md").is_file() and (target / "index.md").is_file()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    r = export(cli_env, runs, tmp_path / "dangling")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "symbolic link to no folder" in r.stderr, r.stderr


# ---- the signature rule applies to overwriting too: a user's own file at a name this export writes ----

@pytest.mark.parametrize("name", ["index.md", "ticket-1.md"])
def test_a_users_own_file_at_a_name_this_export_writes_is_refused(runs, cli_env, tmp_path, name):
    """The review's finding: a user's own index.md (or a ticket-1.md of theirs, ticket 1 being
    exported) was replaced without a word. Now the export refuses up front (exit 2), naming it,
    and writes nothing."""
    assert [t["id"] for t in runs.tickets()] == [1]
    out = tmp_path / "tickets"
    out.mkdir()
    (out / name).write_text("my own notes")
    r = export(cli_env, runs, out)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert (out / name).read_text() == "my own notes"
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing half-written
    assert name in r.stderr and "not written by perfbench tickets export" in r.stderr
    assert "written by an older perfbench or by someone else" in r.stderr
    assert "move them away or export to another folder" in r.stderr


def test_an_unsigned_file_from_an_older_export_at_a_name_this_export_writes_is_refused(runs, cli_env, tmp_path):
    """Files from an export before signatures cannot be told from the user's own: at a name this
    export writes they are refused (a one-time step: move them away); our own signed files from
    the last export are written over."""
    out = tmp_path / "tickets"
    assert export(cli_env, runs, out).returncode == 0
    assert export(cli_env, runs, out).returncode == 0  # our own signed files: written over
    (out / "index.md").write_text("# perfbench tickets\n(an older export)\n")
    r = export(cli_env, runs, out)
    assert r.returncode == 2 and "index.md" in r.stderr and "ticket-1.md" not in r.stderr, r.stderr
    assert (out / "index.md").read_text() == "# perfbench tickets\n(an older export)\n"
    (out / "index.md").unlink()  # the one-time step
    assert export(cli_env, runs, out).returncode == 0 and (out / "index.md").read_text().startswith(SIGNATURE)
