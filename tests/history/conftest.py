"""The history tests' databases: a SQLite file always, and a throwaway PostgreSQL server where one can run."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.postgres_server import PostgresUnavailable, Server


@pytest.fixture(scope="session")
def postgres():
    """One throwaway server for the test session; skipped, with what stopped it, where it cannot run."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("no psycopg (pip install 'commbench[postgresql]')")
    root = Path(tempfile.mkdtemp(prefix="commbench-pg-"))
    server = Server(root)
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(str(exc))
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])  # starts a server
def target(request, tmp_path):
    """Where a fresh history lives: a SQLite file, or a fresh database on the PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return request.getfixturevalue("postgres").create_database()
