"""What every folder shares: each test process's own job database, and the app in-process
(`api`, `make_api`: tests/support/api.py's Api, through httpx's ASGI transport).

The folders, each with its conftest: engine (the calculators against published figures), api
(routes, errors, the OpenAPI document, `tally calc`), fuzz (schemathesis over every operation),
jobs (the queue, dispatchers, workers, the fleet; on SQLite and PostgreSQL), probes (the probes
run on the CPU, and what their results say), calibration (profiles, campaigns, the calibrated
step, the accuracy ledger, the held-out CPU validation), web (the pages as text) and web/browser (in
Chromium), oracles (counts against transformers, peft, gguf, bitsandbytes and torch's
FlopCounterMode), ops (security, logs, Docker, the layout, the README). Helpers live in
tests/support/. Markers (pyproject.toml) are set by folder and fixture."""

import os
import tempfile

# Before the app reads its settings: each test process gets its own job database, and
# subprocesses inherit it, so nothing writes tally.db into the checkout.
os.environ["TALLY_DATABASE_PATH"] = os.path.join(tempfile.mkdtemp(prefix="tally-test-"), "tally.db")

import pytest  # noqa: E402

from app.config import Settings  # noqa: E402
from app.main import create_app  # noqa: E402
from tests.support.api import Api  # noqa: E402


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
