"""Heavy calculations never stall the server (app/api/compute.py): a real `tally serve`, its worker
processes found in the process table and held stopped (SIGSTOP) so a heavy request is surely in
flight while the test asks the server for everything else; a search past its budget stopped and
named; each client's share of heavy work bounded."""

import sys
import threading

import httpx
import pytest

from tests.support.live import compute_workers as workers
from tests.support.live import gauge, serve, stopped
from tests.support.waiting import wait_for

FIT = {"model": "llama3-8b", "gpu": "rtx-4090", "seq_len": 2048}
# The audit's layout search: seconds of pure Python (9.2 s on its box), far past a 1 s budget.
HUGE_SEARCH = {"model": "llama3-70b", "gpu": "h100-sxm", "seq_len": 8192, "num_gpus": 8,
               "global_batch_sequences": 73513440,
               "limits": {"pipeline_parallel": [1, 2, 4], "virtual_stages": [1], "zero_stage": [0, 1]}}
CHEAP = ("/api/v1/flops/matmul", {"m": 1024, "k": 256, "n": 64})


class InFlight:
    """A request sent from a thread, its answer kept."""

    def __init__(self, url: str, body: dict) -> None:
        self.response: httpx.Response | None = None
        self.thread = threading.Thread(target=self._send, args=(url, body))
        self.thread.start()

    def _send(self, url: str, body: dict) -> None:
        self.response = httpx.post(url, json=body, timeout=120)

    def result(self) -> httpx.Response:
        self.thread.join(120)
        assert self.response is not None
        return self.response


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heavy")
    env = {"TALLY_DATABASE_PATH": str(tmp / "tally.db"), "TALLY_EMBEDDED_WORKER": "false",
           "TALLY_COMPUTE_WORKERS": "1", "TALLY_COMPUTE_BUDGET_S": "2", "TALLY_COMPUTE_PER_CLIENT": "2"}
    with serve([sys.executable, "-m", "app"], env, tmp / "server.log") as live:
        wait_for(lambda: workers(live), what="the compute worker to start", context=live.log)
        yield live


def test_a_heavy_request_in_flight_stalls_nothing_else(server):
    (worker,) = workers(server)
    with stopped([worker]):
        heavy = InFlight(f"{server.url}/api/v1/fit", FIT)
        wait_for(lambda: gauge(server, "tally_compute_in_flight") == 1, what="the fit to be in flight")
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        cheap = httpx.post(server.url + CHEAP[0], json=CHEAP[1], timeout=30)
        assert cheap.status_code == 200 and cheap.json()["flops"] == 2 * 1024 * 256 * 64
        assert httpx.get(f"{server.url}/api/v1/jobs", timeout=30).status_code == 200
        assert heavy.response is None  # all of that while the fit was still waiting on its worker
    answered = heavy.result()
    assert answered.status_code == 200, answered.text
    assert answered.json() == httpx.post(f"{server.url}/api/v1/fit", json=FIT, timeout=60).json()


def test_a_client_has_at_most_its_share_of_heavy_work_at_once(server):
    (worker,) = workers(server)
    with stopped([worker]):
        first, second = (InFlight(f"{server.url}/api/v1/fit", FIT) for _ in range(2))
        wait_for(lambda: gauge(server, "tally_compute_in_flight") == 2, what="two fits in flight")
        third = httpx.post(f"{server.url}/api/v1/plan/training", json=HUGE_SEARCH, timeout=30)
        assert third.status_code == 429 and third.headers["Retry-After"] == "1"
        assert third.json()["detail"][0]["field"] == "client" and "TALLY_COMPUTE_PER_CLIENT" in third.text
    assert first.result().status_code == second.result().status_code == 200


def test_a_search_past_its_budget_is_stopped_and_named_and_its_worker_replaced(server):
    (before,) = workers(server)
    refused = httpx.post(f"{server.url}/api/v1/plan/training", json=HUGE_SEARCH, timeout=120)
    assert refused.status_code == 422, refused.text
    item = refused.json()["detail"][0]
    assert (item["field"], item["type"]) == ("limits", "too_costly")
    assert "TALLY_COMPUTE_BUDGET_S" in item["msg"] and "pipeline_parallel" in item["msg"]
    assert gauge(server, "tally_compute_over_budget_total") == 1
    wait_for(lambda: workers(server) and before not in workers(server), what="a new worker")
    assert httpx.post(f"{server.url}/api/v1/fit", json=FIT, timeout=60).status_code == 200


def test_another_sites_img_tags_start_no_search(server):
    query = "model=llama3-70b&gpu=h100-sxm&num_gpus=8&seq_len=8192&global_batch_sequences=73513440"
    hostile = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    fragment = httpx.get(f"{server.url}/ui/scale?{query}", headers=hostile, timeout=30)
    assert fragment.status_code == 403 and fragment.json()["detail"][0]["field"] == "origin"
    link = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    page = httpx.get(f"{server.url}/scale?{query}", headers=link, timeout=30)
    assert page.status_code == 200 and 'data-testid="deferred"' in page.text
    assert gauge(server, "tally_compute_in_flight") == 0 and 'data-testid="step"' not in page.text
