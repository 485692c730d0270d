"""A database password never reaches the terminal (issue 25, item 3): every message that shows the
database URL shows `redact(url)`, and a URL that does not parse is masked between `://` and `@`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from perfbench.store.db import redact, redact_text
from tests.conftest import ROOT, cli_environ, perfbench_cmd

SECRET = "S3cretPW"


def pb(env, *args, timeout=120):
    return subprocess.run(perfbench_cmd() + list(args), env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://alice:{SECRET}@[::1/db",          # the URL: sqlalchemy cannot parse it
    f"postgresql+psycopg://alice:{SECRET}@host:notaport/db",
    f"postgresql+psycopg://alice:{SECRET}@db.example:5432/x",
    f"postgresql+psycopg://alice:p@ss{SECRET}@[::1/db",       # an '@' inside the password
    f"postgresql+psycopg://alice:p@ss{SECRET}@host/db",        # ... in a URL that parses at the wrong '@'
    f"postgresql+psycopg://alice:S3c/{SECRET}@[::1/db",        # '/', '?', '#' inside the password
    f"postgresql+psycopg://alice:S3c?{SECRET}#x@[::1/db",
    f"postgresql+psycopg://alice@host/db?sslmode=require&password={SECRET}",  # a password as a parameter
    f"postgresql+psycopg://alice@[::1/db?password={SECRET}",
    f"postgresql+psycopg://alice@host:1/db?password='x {SECRET}'",  # quotes, spaces, ';' and '#' in it
    f"postgresql+psycopg://alice@host:1/db?password=x;{SECRET}",
    f"postgresql+psycopg://alice@host:1/db?password=x#{SECRET}&sslmode=require",
    f"postgresql+psycopg://alice@host:1/db?password=x {SECRET}",
])
def test_redact_never_shows_the_password(url):
    shown = redact(url)
    assert SECRET not in shown
    assert shown.startswith("postgresql+psycopg://") and "***" in shown


def test_redact_keeps_urls_without_a_password():
    for url in ("sqlite:///results.db", "sqlite:////tmp/a@b.db", "postgresql+psycopg://bob@h:5432/d"):
        assert redact(url) == url


def test_redact_text_masks_the_url_inside_a_driver_message():
    url = f"postgresql+psycopg://alice:{SECRET}@[::1/db"
    assert SECRET not in redact_text(f"could not parse {url!r} here", url)
    assert SECRET not in redact_text(f"other form postgresql://bob:{SECRET}@h/x", "")
    assert SECRET not in redact_text(f"other form postgresql://bob:a/{SECRET}@h/x", "")
    assert SECRET not in redact_text(f"dsn host=h password={SECRET} from postgresql://h/x?password={SECRET}", "")
    assert SECRET not in redact_text(f"libpq: host=h password='a {SECRET}' user=x", "")


def test_unparsable_url_with_password_is_not_printed(tmp_path):
    """The issue's reproduction: `runs --db 'postgresql+psycopg://alice:S3cretPW@[::1/db'`."""
    env = cli_environ(tmp_path)
    for url in (f"postgresql+psycopg://alice:{SECRET}@[::1/db", f"postgresql+psycopg://alice:S3c/{SECRET}@[::1/db",
                f"postgresql+psycopg://alice@[::1/db?password={SECRET}",
                f"postgresql+psycopg://alice@127.0.0.1:1/db?password='S3c {SECRET}'"):
        r = pb(env, "runs", "--db", url)
        assert r.returncode == 2, r.stderr
        assert SECRET not in r.stdout + r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert "***" in r.stderr


def _with_password(pg_url: str) -> str:
    # the throwaway server trusts local connections, so a password in the URL is accepted and unused
    return re.sub(r"://([^@/]+)@", rf"://\1:{SECRET}@", pg_url, count=1)


def test_messages_that_name_the_database_hide_the_password(pg_url, tmp_path):
    url = _with_password(pg_url)
    env = cli_environ(tmp_path)
    checks = [
        (("tickets", "--db", url), 0, "no open tickets"),                   # tickets_cmds: listing, none open
        (("tickets", "show", "5", "--db", url), 2, "no ticket 5"),          # tickets_cmds: show
        (("dashboard", "--host-class", "nope", "-o", str(tmp_path / "site"), "--db", url), 2, "no host class"),
    ]
    for args, rc, what in checks:
        r = pb(env, *args)
        out = r.stdout + r.stderr
        assert r.returncode == rc, (args, out)
        assert what in out, (args, out)
        assert ":***@" in out, (args, out)  # the URL is named, with its password masked
        assert SECRET not in out, (args, out)


def test_cli_never_formats_the_raw_url():
    """Every CLI message goes through Store.shown; `store.url` is for connecting only."""
    hits = [f"{p.name}:{i}" for p in Path(ROOT, "perfbench", "cli").glob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\{[^}]*store\.url", line)]
    assert not hits, hits
