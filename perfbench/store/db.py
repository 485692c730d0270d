"""Open the results store: any SQLAlchemy URL (SQLite `results.db` by default, PostgreSQL by
URL), migrated to the current schema with Alembic on open."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from perfbench.errors import DatabaseError

DEFAULT_URL = "sqlite:///results.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def resolve_url(url: str | None) -> str:
    """--db, else $PERFBENCH_DB, else sqlite:///results.db; a bare path means a SQLite file."""
    url = url or os.environ.get("PERFBENCH_DB") or DEFAULT_URL
    if "://" not in url:
        url = "sqlite:///" + url
    return url


# a password given as a parameter: in a URL query up to the next '&' (a quote, ';', '#' or space
# may be part of it), in a libpq keyword string ("password='se cret'") up to the closing quote
_PASSWORD_PARAM = re.compile(r"""(?ix)((?:^|[?&;\s])(?:password|passwd|pwd|sslpassword)\s*=\s*)
                                 ('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^&]*)""")


def redact(url: str) -> str:
    """The URL without its password: the one form every message and listing shows. A URL that
    parses shows its password as `***`; one that does not parse may still carry one, so
    everything between `://` and the last `@` is masked. A password given as a query parameter
    (`?password=...`) is masked in both."""
    url = str(url)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if "@" in (parsed.host or ""):  # an unencoded '@' in the password: parsed at the wrong '@'
            raise ValueError(url)
        shown = url if parsed.password is None else parsed.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001
        head, sep, rest = url.partition("://")
        shown = head + sep + ("***@" + rest.rpartition("@")[2] if "@" in rest else rest)
    return _PASSWORD_PARAM.sub(r"\1***", shown)


def redact_text(text: str, url: str) -> str:
    """`text` (e.g. a driver's error message) with the raw URL, any user:password@ part and any
    password= parameter masked."""
    text = str(text).replace(url, redact(url)) if url else str(text)
    text = re.sub(r"://[^\s'\"]*:[^\s'\"]*@", "://***@", text)
    return _PASSWORD_PARAM.sub(r"\1***", text)


def _alembic_config(connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _sqlite_pragmas(dbapi_connection, _record):
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class Store:
    def __init__(self, url: str | None = None):
        self.url = resolve_url(url)
        self.shown = redact(self.url)  # what messages show: never the password
        try:
            self.engine: Engine = create_engine(self.url, future=True)
        except (SQLAlchemyError, ImportError, ValueError) as e:
            raise DatabaseError(
                f"cannot use database {redact(self.url)}: {redact_text(e, self.url)}\n"
                "Check --db / PERFBENCH_DB: any SQLAlchemy URL (sqlite:///results.db, "
                "postgresql+psycopg://user@host/db) or a SQLite file path.") from e
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False, future=True)
        self.migrate()

    def migrate(self) -> None:
        try:
            with self.engine.begin() as conn:
                head = ScriptDirectory.from_config(_alembic_config(conn)).get_current_head()
                current = MigrationContext.configure(conn).get_current_revision()
                if current != head:
                    command.upgrade(_alembic_config(conn), "head")
        except SQLAlchemyError as e:
            raise DatabaseError(
                f"cannot open database {redact(self.url)}: {e.__class__.__name__}: "
                f"{redact_text(str(e).splitlines()[0], self.url)}\n"
                "Check --db / PERFBENCH_DB (any SQLAlchemy URL, e.g. sqlite:///results.db or "
                "postgresql+psycopg://user@host/db) and that the server is reachable."
            ) from e

    @contextmanager
    def session(self) -> Session:
        s = self._sessions()
        try:
            yield s
            s.commit()
        except SQLAlchemyError as e:
            s.rollback()
            raise DatabaseError(f"database error on {redact(self.url)}: {redact_text(e, self.url)}") from e
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()

    def dispose(self) -> None:
        self.engine.dispose()
