"""Liveness, readiness and metrics."""

import re

import pytest

from app.config import Settings
from app.main import create_app
from tests.support.api import Api
from tests.support.waiting import wait_for


@pytest.fixture
def api(tmp_path):
    client = Api(create_app(Settings(database_path=tmp_path / "ops.db")))
    yield client
    client.close()


def sample(text: str, name: str, **labels) -> float | None:
    """One sample's value from Prometheus text, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(rf"{re.escape(name)}(?:\{{(.*)\}})? (\S+)", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    return None


def test_healthz_answers_while_the_process_lives(api):
    assert api.get("/healthz").json() == {"status": "ok"}


def test_readyz_needs_a_dispatcher(api):
    down = api.get("/readyz")
    assert down.status_code == 503 and down.json()["database"] and not down.json()["dispatcher_running"]
    api.app.state.store.seen(worker_id="worker-a")  # what a running `tally worker` does every poll
    up = api.get("/readyz")
    assert up.status_code == 200 and up.json()["workers"] == ["worker-a"]
    assert up.json()["dispatcher"] == "external"


def test_readyz_is_503_when_the_database_fails(api, tmp_path):
    api.app.state.store.path = tmp_path / "missing" / "gone.db"  # cannot be opened
    response = api.get("/readyz")
    assert response.status_code == 503 and response.json()["database"] is False


def test_metrics_count_requests_by_route_template_and_status(api):
    for job in (1, 2, 3):
        api.get(f"/api/v1/jobs/{job}")
    api.post("/api/v1/flops/matmul", {"m": 2, "k": 2, "n": 2})
    api.get("/no/such/page")
    text = api.get("/metrics").text
    assert sample(text, "tally_http_requests_total", route="/api/v1/jobs/{job_id}", method="GET",
                  status="404") == 3
    assert sample(text, "tally_http_requests_total", route="/api/v1/flops/matmul", method="POST",
                  status="200") == 1
    assert sample(text, "tally_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert sample(text, "tally_http_request_duration_seconds_count", route="/api/v1/flops/matmul",
                  method="POST") == 1


def test_metrics_report_jobs_by_state_and_queue_depth(api):
    for _ in range(2):
        assert api.post("/api/v1/jobs", {"probe": "bandwidth"}).status_code == 202
    api.post("/api/v1/jobs/1/cancel")
    text = api.get("/metrics").text
    assert sample(text, "tally_jobs", state="queued") == 1
    assert sample(text, "tally_jobs", state="cancelled") == 1
    assert sample(text, "tally_queue_depth") == 1


def test_no_gpu_gauges_without_a_gpu(api):
    info = api.get("/api/v1/device").json()
    text = api.get("/metrics").text
    assert ("tally_gpu_memory_total_bytes" in text) == (info["kind"] == "cuda")


def test_a_running_dispatcher_makes_the_server_ready(api):
    from app.jobs.dispatcher import Dispatcher
    dispatcher = Dispatcher(api.app.state.store, "worker-b")
    dispatcher.start()
    try:
        wait_for(lambda: api.get("/readyz").status_code == 200, timeout=20, what="/readyz to answer 200",
                 every=0.1, context=lambda: api.get("/readyz").json())
        assert api.get("/readyz").json()["workers"] == ["worker-b"]
    finally:
        dispatcher.stop()
