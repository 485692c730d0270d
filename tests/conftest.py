"""Shared fixtures: the built native library, a throwaway SQLite URL, a private host lock, and
the environment that CLI subprocesses need (test-only ops importable)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _private_lock(tmp_path_factory):
    """Tests never wait on (or block) a real perfbench run's host lock."""
    lock = tmp_path_factory.mktemp("lock") / "perfbench.lock"
    os.environ["PERFBENCH_LOCK"] = str(lock)
    yield


@pytest.fixture(scope="session")
def lib():
    from perfbench.kernels_ffi import load

    library = load()
    yield library
    library.select_isa("auto")


@pytest.fixture()
def auto_isa(lib):
    """Kernels run on the automatically chosen ISA path, whatever another test left selected
    (and leave it so). Modules use it with `pytestmark = pytest.mark.usefixtures("auto_isa")`."""
    lib.select_isa("auto")
    yield lib
    lib.select_isa("auto")


@pytest.fixture()
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture()
def store(db_url):
    """A store on a throwaway SQLite file (tests/store/test_store.py's `store` runs on PostgreSQL too)."""
    from perfbench.store.db import Store

    st = Store(db_url)
    yield st
    st.dispose()


def cli_environ(folder: Path) -> dict:
    """Environment for `perfbench` subprocesses: test ops importable, a private database
    (folder/results.db) and host lock, the ISA path chosen automatically."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PERFBENCH_EXTRA_OPS"] = "tests.fixtures.ops_for_tests"
    env["PERFBENCH_DB"] = f"sqlite:///{folder / 'results.db'}"
    env["PERFBENCH_LOCK"] = str(folder / "lock")
    env.pop("PERFBENCH_ISA", None)
    return env


@pytest.fixture()
def cli_env(tmp_path):
    return cli_environ(tmp_path)


def perfbench_cmd() -> list[str]:
    return [sys.executable, "-m", "perfbench.cli.main"]


def isas_to_test(library) -> list[str]:
    """Every compiled ISA path this CPU can run (the AVX-512 path is skipped loudly elsewhere)."""
    return [i for i in library.isa_supported if i]
