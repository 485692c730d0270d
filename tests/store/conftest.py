"""A throwaway PostgreSQL server for the store tests (CONTRACTS §9).

`pg_server` (session): initdb into a temporary folder and `pg_ctl start` on a free port, listening on
127.0.0.1 with its unix socket in the same temporary folder; stopped and deleted afterwards. As
root, PostgreSQL refuses to run, so the folder is handed to the `postgres` user (or `nobody`) and
the binaries run through `runuser -u USER --` (or `su`). `pg_url` (per test) creates a fresh
database on it and yields its `postgresql+psycopg://` URL. `store_url` runs a test on SQLite and
on PostgreSQL.

Binaries (or psycopg) missing: a loud skip locally, a failure under CI (CI=true).
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

SUPERUSER = "postgres"  # the database role initdb creates (not necessarily an OS user)


def _unavailable(reason: str):
    msg = f"PostgreSQL store tests not run: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: the PostgreSQL binaries must be installed; .ci/run installs them)",
                    pytrace=False)
    pytest.skip("!!! " + msg + " -- install PostgreSQL (initdb, pg_ctl) to run them !!!")


def _find_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found

    def version(path: str):
        v = Path(path).parts[-3]
        return [int(x) for x in v.split(".") if x.isdigit()] or [0]

    for cand in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=version, reverse=True):
        if os.access(cand, os.X_OK):
            return cand
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _os_user() -> str | None:
    """None when we are not root (run the binaries as ourselves), else an unprivileged user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.fail("running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL")


def _as_user(user: str | None, argv: list[str]) -> list[str]:
    if user is None:
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *argv]
    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(argv)]


@pytest.fixture(scope="session")
def pg_server():
    initdb, pg_ctl = _find_bin("initdb"), _find_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _unavailable("initdb/pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin")
    try:
        import psycopg
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install 'psycopg[binary]')")

    user = _os_user()
    base = Path(tempfile.mkdtemp(prefix="perfbench-pg-"))
    data, sock, log = base / "data", base / "sock", base / "server.log"
    sock.mkdir()
    if user is not None:
        pw = pwd.getpwnam(user)
        for p in (base, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    port = _free_port()

    def run(argv, timeout=120):
        r = subprocess.run(_as_user(user, argv), cwd=base, env=env, capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            server_log = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{shlex.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n{server_log}")
        return r

    started = False
    try:
        try:
            run([initdb, "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            opts = (f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off")
            run([pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", opts, "start"])
            started = True
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            pytest.fail(f"could not start a throwaway PostgreSQL server (binaries {initdb}, {pg_ctl}): {e}",
                        pytrace=False)
        admin = f"host=127.0.0.1 port={port} user={SUPERUSER} dbname=postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        yield {"host": "127.0.0.1", "port": port, "user": SUPERUSER, "admin": admin, "version": version,
               "data": data, "socket_dir": sock}
    finally:
        if started:
            try:
                run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired, OSError):
                pass
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture()
def pg_url(pg_server):
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server["admin"], autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://{pg_server['user']}@{pg_server['host']}:{pg_server['port']}/{name}"
    with psycopg.connect(pg_server["admin"], autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The same test on a fresh SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_url")
