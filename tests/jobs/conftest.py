"""The job queue, its dispatchers and workers, and the fleet, on both databases: `database` is a
SQLite file, then a fresh database on a throw-away PostgreSQL cluster (tests/support/pg.py; one
per test process, started when first needed). A test that reaches PostgreSQL is marked postgres."""

import os

import pytest

from app.jobs.store import Store
from tests.support import pg
from tests.support.marks import mark_folder, uses_postgresql

DATABASES = ["sqlite", "postgresql"]


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.postgres, when=uses_postgresql)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """A throw-away PostgreSQL cluster for this test process; its URL (database postgres)."""
    with pg.cluster() as url:
        yield url


@pytest.fixture(params=DATABASES)
def database(request, tmp_path) -> str | os.PathLike:
    """An empty job database on each engine in turn: a SQLite file's path, a PostgreSQL URL."""
    if request.param == "sqlite":
        return tmp_path / "tally.db"
    return pg.new_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def store(database) -> Store:
    """A Store on `database`, closed at the end (a PostgreSQL server's connections are few)."""
    opened = Store(database)
    yield opened
    opened.close()
