"""The store tests' databases (SQLite and a throwaway PostgreSQL server) for the tickets' tests."""

from tests.store.conftest import pg_server, pg_url, store_url  # noqa: F401
