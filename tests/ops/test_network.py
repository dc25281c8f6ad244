"""A server reachable from the network never takes anonymous jobs by accident: without a
token it generates one, logs it once with the dashboard's URL, and requires it."""

import logging
import re
import sys
from urllib.parse import urlencode

import httpx
import pytest
from pydantic import SecretStr

from app import logs
from app.config import Settings, is_loopback
from app.main import create_app
from tests.support.api import Api
from tests.support.live import serve

JOBS = "/api/v1/jobs"
JOB = {"probe": "matmul", "params": {"sweep": "custom", "shapes": [{"m": 8, "k": 8, "n": 8}],
                                     "dtypes": ["float32"], "device": "cpu"}}
FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("tally.example", False)])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_a_network_server_without_a_token_generates_one_and_requires_it(tmp_path, caplog):
    settings = Settings(database_path=tmp_path / "t.db", host="0.0.0.0", embedded_worker=False)
    with caplog.at_level(logging.WARNING, logger="tally"):
        api = Api(create_app(settings))
    try:
        (said,) = [r for r in caplog.records if "generated token" in r.getMessage()]
        token = re.search(r"/\?token=(\S+)", said.getMessage()).group(1)
        assert getattr(said, "reveal", False)  # the one line that shows it
        assert api.post(JOBS, JOB).status_code == 401
        assert api.post(JOBS, JOB, headers={"Authorization": f"Bearer {token}"}).status_code == 202
    finally:
        api.close()


@pytest.mark.parametrize("settings", [
    {"host": "0.0.0.0", "allow_anonymous": True}, {"host": "127.0.0.1"}, {"host": "localhost"}])
def test_anonymous_jobs_only_on_loopback_or_when_allowed(tmp_path, settings):
    chosen = Settings(database_path=tmp_path / "t.db", embedded_worker=False, **settings)
    assert create_app(chosen).state.settings.api_token is None


def test_a_chosen_token_is_kept(tmp_path):
    chosen = Settings(database_path=tmp_path / "t.db", host="0.0.0.0", api_token=SecretStr("mine"))
    assert create_app(chosen).state.settings.api_token.get_secret_value() == "mine"


@pytest.mark.parametrize("typed", ["tökén", "tok\x00en", "tok\nen"])
def test_an_odd_character_in_the_form_token_is_named(tmp_path, typed):
    api = Api(create_app(Settings(database_path=tmp_path / "t.db", api_token=SecretStr("secret"))))
    try:
        form = {"probe": "matmul", "token": typed}
        refused = api.post("/ui/benchmarks/launch", content=urlencode(form), headers=FORM)
        assert refused.status_code == 200 and "token: may hold only printable ASCII" in refused.text
        assert api.get(JOBS).json()["count"] == 0
    finally:
        api.close()


def test_a_real_server_on_every_interface_logs_its_token_once_and_hides_it_elsewhere(tmp_path):
    env = {"TALLY_HOST": "0.0.0.0", "TALLY_DATABASE_PATH": str(tmp_path / "t.db"),
           "TALLY_EMBEDDED_WORKER": "false"}
    with serve([sys.executable, "-m", "app"], env, tmp_path / "server.log") as live:
        token = re.search(r"/\?token=(\S+)", live.log()).group(1)
        assert httpx.post(f"{live.url}{JOBS}", json=JOB, timeout=10).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{live.url}{JOBS}", json=JOB, headers=auth, timeout=10).status_code == 202
        assert httpx.get(f"{live.url}/?token={token}", timeout=10).status_code == 200
    text = live.log()
    assert text.count(token) == 2, text  # the start-up line's URL and its bearer example, only
    assert f"GET /?token={logs.REDACTED}" in text
