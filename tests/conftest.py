"""Requests go through httpx's ASGI transport: the whole app, no socket (and no
lifespan, so no embedded dispatcher: job tests start their own).

The job store's tests run on both databases: `database` is a SQLite file, then a fresh database on
a throw-away PostgreSQL cluster (tests/support/pg.py; one per test process, started when first needed)."""

import asyncio
import os
import tempfile

# Before the app reads its settings: each test process gets its own job database, and
# subprocesses inherit it, so nothing writes tally.db into the checkout.
os.environ["TALLY_DATABASE_PATH"] = os.path.join(tempfile.mkdtemp(prefix="tally-test-"), "tally.db")

import httpx  # noqa: E402
import pytest  # noqa: E402

from app.config import Settings  # noqa: E402
from app.jobs.store import Store  # noqa: E402
from app.main import create_app  # noqa: E402
from tests.support import pg  # noqa: E402

DATABASES = ["sqlite", "postgresql"]


class Api:
    """A synchronous face over an httpx.AsyncClient on the ASGI app."""

    def __init__(self, app=None) -> None:
        self.loop = asyncio.new_event_loop()
        self.app = app or create_app()
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://localhost")

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return self.loop.run_until_complete(self.client.request(method, path, **kwargs))

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json=None, **kwargs) -> httpx.Response:
        return self.request("POST", path, json=json, **kwargs)

    def ok(self, path: str, body: dict) -> dict:
        """POST and insist on 200."""
        response = self.post(path, body)
        assert response.status_code == 200, response.text
        return response.json()

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(scope="session")
def api():
    client = Api()
    yield client
    client.close()


@pytest.fixture
def make_api(tmp_path):
    """Apps of their own, each on its own database in tmp_path, with these settings."""
    made = []

    def make(**settings) -> Api:
        api = Api(create_app(Settings(database_path=tmp_path / f"{len(made)}.db", **settings)))
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def assert_names_field(response: httpx.Response, field: str, status: int = 422) -> dict:
    """A 4xx whose message names `field`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert any(item["field"] == field for item in body["detail"]), body
    assert field in body["message"], body
    return body


@pytest.fixture(scope="session")
def pg_server() -> str:
    """A throw-away PostgreSQL cluster for this test process; its URL (database postgres)."""
    with pg.cluster() as url:
        yield url


pg_database = pg.new_database


@pytest.fixture(params=DATABASES)
def database(request, tmp_path) -> str | os.PathLike:
    """An empty job database on each engine in turn: a SQLite file's path, a PostgreSQL URL."""
    if request.param == "sqlite":
        return tmp_path / "tally.db"
    return pg_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def store(database) -> Store:
    """A Store on `database`, closed at the end (a PostgreSQL server's connections are few)."""
    opened = Store(database)
    yield opened
    opened.close()
