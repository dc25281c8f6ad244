"""The fleet on both databases: devices registered and seen, jobs that target a host, a device or
a model taken only there, campaigns fanned out to every live device, and a burn-in over CPU
"GPUs" on boxes of their own, one made slow on purpose (two processes hogging its core), which
the comparison flags while the others pass."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from app.api.services import fleet as fleet_service
from app.device import fleet_device
from app.jobs.dispatcher import CHILD_ARGV, Dispatcher
from app.jobs.fleet import Serves, Targets
from tests.support import procs
from tests.support.api import assert_names_field
from tests.support.waiting import wait_for

H100 = {
    "device": "GPU-1111",
    "host": "box-a",
    "kind": "cuda",
    "gpu_index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "catalogue_id": "h100",
    "memory_bytes": 85 * 10**9,
}
H200 = {
    "device": "GPU-2222",
    "host": "box-b",
    "kind": "cuda",
    "gpu_index": 0,
    "name": "NVIDIA H200",
    "catalogue_id": "h200",
    "memory_bytes": 150 * 10**9,
}


def serves(row: dict) -> Serves:
    return Serves(row["device"], (row["name"], row["catalogue_id"]))


def test_a_job_is_taken_only_where_its_targets_allow(store):
    for row in (H100, H200):
        store.register(row)
    on_device = store.submit(
        probe="bandwidth", params={}, timeout_s=60, limit=10, targets=Targets(device="GPU-2222")
    )
    on_model = store.submit(
        probe="bandwidth", params={}, timeout_s=60, limit=10, targets=Targets(model="h100")
    )
    on_host = store.submit(
        probe="bandwidth", params={}, timeout_s=60, limit=10, targets=Targets(host="box-b")
    )
    # A dispatcher that serves no fleet device takes none of them.
    assert store.claim(worker_id="plain", host="box-a") is None
    first = store.claim(worker_id="a", gpu=0, host="box-a", serves=serves(H100), served=[0])
    assert first.id == on_model.id and first.ran_on_device == "GPU-1111"
    assert store.claim(worker_id="a", gpu=0, host="box-a", serves=serves(H100), served=[0]) is None
    taken = [
        store.claim(worker_id="b", gpu=0, host="box-b", serves=serves(H200), served=[0]) for _ in range(2)
    ]
    store.finish(
        taken[0].id, status="failed", error={"type": "E", "message": "m", "detail": {}}, claim=taken[0].claim
    )
    taken[1] = taken[1] or store.claim(worker_id="b", gpu=0, host="box-b", serves=serves(H200), served=[0])
    assert {j.id for j in taken} == {on_device.id, on_host.id}
    assert all(j.ran_on_device == "GPU-2222" for j in taken)


def test_a_campaign_fans_out_to_every_live_gpu_of_the_model_asked(store):
    for row in (H100, H200, H200 | {"device": "GPU-3333", "gpu_index": 1}):
        store.register(row)
    store.register(fleet_device("box-c", None))  # a CPU box: GPUs exist, so it is left out
    campaign, jobs = store.start_campaign(
        probe="burn_in", params={}, timeout_s=60, limit=100, outlier_fraction=0.1
    )
    assert sorted(j.target_device for j in jobs) == ["GPU-1111", "GPU-2222", "GPU-3333"]
    assert all(j.campaign_id == campaign.id and j.device == "cuda" for j in jobs)
    _, h200s = store.start_campaign(
        probe="burn_in", params={}, timeout_s=60, limit=100, outlier_fraction=0.1, model="h200"
    )
    assert sorted(j.target_device for j in h200s) == ["GPU-2222", "GPU-3333"]
    found, members = store.campaign(campaign.id)
    assert found.probe == "burn_in" and [j.id for j in members] == [j.id for j in jobs]


def test_a_device_not_seen_is_lost_and_gets_no_campaign_job(store):
    store.register(H100)
    store.register(H200)
    live = time.time()
    seen = {d.device: d for d in store.devices()}
    assert seen["GPU-1111"].live(live) and not seen["GPU-1111"].live(live + 31)
    _, jobs = store.start_campaign(
        probe="burn_in", params={}, timeout_s=60, limit=100, outlier_fraction=0.1, within_s=30
    )
    assert len(jobs) == 2
    view = fleet_service.fleet(store, live + 60)
    assert {d.device: d.state for d in view.devices} == {"GPU-1111": "lost", "GPU-2222": "lost"}


def test_the_fleet_api_lists_devices_and_refuses_a_campaign_with_none(make_api):
    api = make_api(embedded_worker=False)
    assert api.get("/api/v1/fleet").json() == {"live_within_s": 30.0, "hosts": [], "devices": [],
                                               "dispatchers": [], "across_boxes": []}
    assert_names_field(api.post("/api/v1/campaigns", {"probe": "burn_in"}), "probe")
    api.app.state.store.register(fleet_device("box-a", None))
    assert_names_field(api.post("/api/v1/campaigns", {"probe": "burn_in", "model": "h100"}), "model")
    assert_names_field(
        api.post("/api/v1/campaigns", {"probe": "burn_in", "outlier_fraction": 1.5}), "outlier_fraction"
    )
    assert_names_field(
        api.post("/api/v1/campaigns", {"probe": "burn_in", "params": {"sustain_s": 0}}), "params.sustain_s"
    )
    made = api.post("/api/v1/campaigns", {"probe": "burn_in"})
    assert made.status_code == 202 and made.headers["location"].endswith(f"/{made.json()['id']}")
    (device,) = api.get("/api/v1/fleet").json()["devices"]
    assert device["device"] == "box-a:cpu" and device["kind"] == "cpu" and device["state"] == "idle"
    assert api.get("/api/v1/campaigns/99").status_code == 404
    assert api.get("/api/v1/fleet/devices/nowhere/history").status_code == 404
    assert api.get("/api/v1/fleet/devices/box-a:cpu/history").json() == []


def _children() -> list[int]:
    """This process's probe children (python -m app.bench.child)."""
    return procs.children(os.getpid(), b"app.bench.child")


def throttle(stop: threading.Event, stopped_s: float = 0.07, running_s: float = 0.03) -> None:
    """Hold the probe's child stopped 70% of the time (SIGSTOP, SIGCONT), as a GPU at its power
    cap idles between bursts: whatever else loads the machine, it gets at most 30% of the time."""
    while not stop.is_set():
        pids = _children()
        for sig, pause in ((signal.SIGSTOP, stopped_s), (signal.SIGCONT, running_s)):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(pause)
    for pid in _children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


QUICK = {"warmup_s": 0.01, "measure_s": 0.05, "min_iters": 2, "max_iters": 5, "sustain_s": 0.6}
HOG = "while True: pass"


@pytest.mark.parametrize("engine", ["sqlite"])
def test_a_burn_in_over_cpu_gpus_flags_the_one_made_slow(make_api, engine):
    """Three boxes of one CPU each, every child pinned to core 0. box-slow's child is held stopped
    70% of the time (throttle), and shares its core with two processes that never yield, so it
    runs at under a third of its siblings' pace whatever else loads the machine. (Two hogs
    alone, and then four, were brought within the bound twice on a box running two suites.)"""
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    boxes = ["box-1", "box-slow", "box-2"]
    dispatchers = {
        box: Dispatcher(
            store,
            f"{box}:1:cpu",
            host=box,
            fleet_device=fleet_device(box, None),
            child_argv=["taskset", "-c", "0", *CHILD_ARGV],
        )
        for box in boxes
    }
    for box in boxes:
        store.register(dispatchers[box].fleet_device)
    made = api.post("/api/v1/campaigns", {"probe": "burn_in", "params": QUICK, "outlier_fraction": 0.3})
    assert made.status_code == 202, made.text
    campaign_id = made.json()["id"]
    for box in boxes:  # one box at a time, so that no two measure at once
        slow = box == "box-slow"
        hogs = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", HOG]) for _ in range(2) if slow]
        stop = threading.Event()
        duty = threading.Thread(target=throttle, args=(stop,), daemon=True)
        if slow:
            duty.start()
        try:
            assert dispatchers[box].run_once()
        finally:
            stop.set()
            if slow:
                duty.join()
            for hog in hogs:
                hog.kill()
                hog.wait()
        assert not dispatchers[box].run_once()  # its one job, and no other box's
    out = api.get(f"/api/v1/campaigns/{campaign_id}").json()
    assert out["done"] and [j["status"] for j in out["jobs"]] == ["succeeded"] * 3, out["jobs"]
    rows = {row["device"]: row for row in out["compared"]}
    assert set(rows) == {"box-1:cpu", "box-slow:cpu", "box-2:cpu"}
    slow = rows["box-slow:cpu"]
    assert slow["flagged"] and slow["shortfall"] > 0.3 and slow["siblings"] == 3, json.dumps(rows)
    assert "contention" in slow["reasons"], slow  # the hogs, seen by the probe's watch of the host
    assert not rows["box-1:cpu"]["flagged"] and not rows["box-2:cpu"]["flagged"], rows
    (model,) = out["leaderboard"]
    assert model["gpus"] == 3 and model["flagged"] == 1
    page = api.get("/burn-in").text  # the newest campaign, and the most flagged device's history
    assert 'class="flagged" data-device="box-slow:cpu"' in page and "contention" in page
    assert page.count('class="flagged"') == 1 and "History of box-slow:cpu" in page
    fleet_page = api.get("/fleet").text
    assert all(f'data-device="{box}:cpu"' in fleet_page for box in boxes)
    assert "3 boxes, 3 devices" in fleet_page
    history = api.get("/api/v1/fleet/devices/box-slow:cpu/history").json()
    assert [h["job_id"] for h in history] == [slow["job_id"]] and history[0]["campaign_id"] == campaign_id


def test_a_job_may_target_a_box_a_device_or_a_model_of_the_fleet(make_api):
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    for row in (H100, H200):
        store.register(row)
    made = api.post("/api/v1/jobs", {"probe": "bandwidth", "gpu_model": "h200"})
    assert made.status_code == 202, made.text
    job = made.json()
    assert job["gpu_model"] == "h200" and job["device"] == "cuda" and job["host"] is None
    assert api.post("/api/v1/jobs", {"probe": "bandwidth", "host": "box-a"}).json()["host"] == "box-a"
    assert (
        api.post("/api/v1/jobs", {"probe": "bandwidth", "gpu_uuid": "GPU-1111"}).json()["gpu_uuid"]
        == "GPU-1111"
    )
    assert_names_field(api.post("/api/v1/jobs", {"probe": "bandwidth", "gpu_uuid": "GPU-9"}), "gpu_uuid")
    assert_names_field(api.post("/api/v1/jobs", {"probe": "bandwidth", "gpu_model": "a100"}), "gpu_model")
    assert_names_field(
        api.post("/api/v1/jobs", {"probe": "bandwidth", "host": "box-b", "gpu_uuid": "GPU-1111"}), "gpu_uuid"
    )
    assert_names_field(
        api.post("/api/v1/jobs", {"probe": "bandwidth", "host": "box-a", "num_gpus": 2}), "host"
    )
    # Sized against the device it targets: 100 GB fits an H200 (150 GB), not an H100 (85 GB).
    big = {"probe": "bandwidth", "params": {"size_bytes": 50 * 10**9}}
    assert api.post("/api/v1/jobs", big | {"gpu_uuid": "GPU-2222"}).status_code == 202
    assert_names_field(api.post("/api/v1/jobs", big | {"gpu_uuid": "GPU-1111"}), "params.size_bytes")


def test_tally_burn_in_runs_a_campaign_through_a_live_server_and_prints_its_table(tmp_path):
    """A real server on SQLite, its embedded CPU dispatcher registered as
    box-x; `tally burn-in` posts the campaign, follows it and prints the table. One device alone
    is never flagged, so it exits 0."""
    from tests.support.cli import TALLY, tally
    from tests.support.live import serve

    env = {
        "TALLY_DATABASE_PATH": str(tmp_path / "t.db"),
        "TALLY_BOX_NAME": "box-x",
        "TALLY_API_TOKEN": "s3cret",
    }
    with serve([*TALLY, "serve"], env, tmp_path / "server.log") as live:
        refused = tally("burn-in", "--server", live.url, "--token", "wrong", timeout=60)
        assert refused.returncode == 2 and "401" in refused.stderr
        done = tally("burn-in", "--server", live.url, "--token", "s3cret", "--sustain-s", "0.1", timeout=300)
        assert done.returncode == 0, done.stderr + live.log()
        assert "box-x:cpu" in done.stdout and "models against the catalogue" in done.stdout
        # stderr is a pipe here: a line each time the count changes, none repeated, no \r (issue 28, 12)
        progress = [line for line in done.stderr.splitlines() if line.startswith("campaign ")]
        assert "\r" not in done.stderr and progress and len(progress) == len(set(progress))
        again = tally("burn-in", "--server", live.url, "--campaign", "1", "--output", "json", timeout=60)
        assert again.returncode == 0 and json.loads(again.stdout)["jobs"][0]["device"] == "box-x:cpu"


def test_the_fleet_compose_file_runs_postgresql_a_server_and_a_worker():
    import re

    import yaml

    from app.config import Settings
    from tests.support.live import ROOT

    compose = yaml.safe_load((ROOT / "docker-compose.fleet.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "server", "worker"}
    assert (
        any(v.startswith("tally-pg:") for v in services["postgres"]["volumes"])
        and "tally-pg" in compose["volumes"]
    )

    def settings(service: dict) -> Settings:  # compose's ${VAR:-default}, with nothing set in the shell
        env = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in service["environment"].items()}
        return Settings(
            **{k.removeprefix("TALLY_").lower(): v for k, v in env.items() if k.startswith("TALLY_")}
        )

    server, worker = settings(services["server"]), settings(services["worker"])
    assert server.embedded_worker is False and server.database() == worker.database()
    assert str(server.database()).startswith("postgresql+psycopg://tally:tally@postgres:5432/tally")
    assert services["worker"]["command"] == ["worker"]
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert all(
        services[s]["depends_on"]["postgres"]["condition"] == "service_healthy" for s in ("server", "worker")
    )


def test_a_campaign_sizes_its_jobs_against_the_devices_it_picks_only(make_api):
    """A 16 GiB copy needs 32 GiB (source and destination): an L4's 24 GB cannot hold it, an
    H200's 150 GB can. A campaign on the H200s is queued; one on every GPU is refused naming the
    parameter and the L4, with nothing queued."""
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    store.register(H200)
    store.register(H200 | {"device": "GPU-4444", "host": "box-d", "name": "NVIDIA L4", "catalogue_id": "l4",
                           "memory_bytes": 24 * 10**9})
    big = {"probe": "bandwidth", "params": {"size_bytes": 16 * 2**30}}
    refused = assert_names_field(api.post("/api/v1/campaigns", big), "params.size_bytes")
    assert "NVIDIA L4" in refused["message"]
    assert store.counts().get("queued", 0) == 0 and store.campaigns() == []
    made = api.post("/api/v1/campaigns", big | {"model": "h200"})
    assert made.status_code == 202, made.text
    assert [j["device"] for j in made.json()["jobs"]] == ["GPU-2222"]


def test_a_job_for_a_device_lost_for_good_fails_as_device_lost_and_a_live_ones_waits(store):
    """On both databases: two devices, one kept live (its dispatcher seen), the other gone; each
    targeted by a queued job. Once the lost one has not been seen for after_s (and its job has
    waited that long), only its job fails, as DeviceLost naming its target."""
    store.register(H100)
    store.register(H200)
    gone = store.submit(probe="bandwidth", params={}, timeout_s=60, limit=10, device="cuda",
                        targets=Targets(device="GPU-1111"))
    kept = store.submit(probe="bandwidth", params={}, timeout_s=60, limit=10, device="cuda",
                        targets=Targets(model="h200"))

    def expired() -> list[int]:
        store.touch("GPU-2222", worker_id="w")  # the H200's dispatcher is alive
        return store.expire_lost(after_s=0.5)

    assert wait_for(expired, what="the lost device's job to fail") == [gone.id]
    failed = store.get(gone.id)
    assert failed.status == "failed" and failed.error["type"] == "DeviceLost"
    assert "device GPU-1111" in failed.error["message"] and "TALLY_DEVICE_LOST_AFTER_S" in failed.error["message"]
    assert store.get(kept.id).status == "queued" and expired() == []


def test_a_campaign_can_be_cancelled_from_the_api_and_from_its_page(make_api):
    from tests.support.html import form_post

    api = make_api(embedded_worker=False, api_token="s3cret")
    store = api.app.state.store
    store.register(H100)
    store.register(H200)
    auth = {"Authorization": "Bearer s3cret"}
    first = api.post("/api/v1/campaigns", {"probe": "bandwidth"}, headers=auth).json()
    assert api.post(f"/api/v1/campaigns/{first['id']}/cancel").status_code == 401
    cancelled = api.post(f"/api/v1/campaigns/{first['id']}/cancel", headers=auth)
    assert cancelled.status_code == 200, cancelled.text
    out = cancelled.json()
    assert out["done"] and {j["status"] for j in out["jobs"]} == {"cancelled"} and len(out["jobs"]) == 2
    assert_names_field(api.post(f"/api/v1/campaigns/{first['id']}/cancel", headers=auth), "campaign_id", 409)
    assert_names_field(api.post("/api/v1/campaigns/99/cancel", headers=auth), "campaign_id", 404)
    second = api.post("/api/v1/campaigns", {"probe": "bandwidth"}, headers=auth).json()
    page = api.get(f"/burn-in?campaign={second['id']}").text
    assert 'data-testid="cancel-campaign"' in page and f"/ui/burn-in/{second['id']}/cancel" in page
    wrong = form_post(api, f"/ui/burn-in/{second['id']}/cancel", {"token": "wrong"})
    assert wrong.status_code == 200 and "TALLY_API_TOKEN" in wrong.text and "HX-Refresh" not in wrong.headers
    done = form_post(api, f"/ui/burn-in/{second['id']}/cancel", {"token": "s3cret"})
    assert done.headers["HX-Refresh"] == "true"
    assert api.get(f"/api/v1/campaigns/{second['id']}").json()["done"]
    assert 'data-testid="cancel-campaign"' not in api.get(f"/burn-in?campaign={second['id']}").text


def test_tally_burn_in_stops_at_its_deadline_and_a_lost_devices_campaign_ends(tmp_path):
    """A real server, and a real worker that registers box-gone and is then killed for good. A
    campaign queued for it: `tally burn-in --deadline 1` exits 3 naming the pending job; within
    TALLY_DEVICE_LOST_AFTER_S the server fails it as DeviceLost, and the campaign is done (exit 1:
    a job did not succeed)."""
    from tests.support.cli import TALLY, tally
    from tests.support.live import serve

    env = {"TALLY_DATABASE_PATH": str(tmp_path / "t.db"), "TALLY_EMBEDDED_WORKER": "false",
           "TALLY_DEVICE_LOST_AFTER_S": "2"}
    with serve([*TALLY, "serve"], env, tmp_path / "server.log") as live:
        worker_env = {**os.environ, **env, "TALLY_BOX_NAME": "box-gone"}
        worker = subprocess.Popen([*TALLY, "worker"], env=worker_env, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: any(d["device"] == "box-gone:cpu" and d["state"] == "idle"
                                 for d in httpx.get(f"{live.url}/api/v1/fleet", timeout=10).json()["devices"]),
                     what="the worker's device to join the fleet", context=live.log)
        finally:
            worker.kill()
            worker.wait()
        waited = tally("burn-in", "--server", live.url, "--deadline", "1", timeout=120)
        assert waited.returncode == 3, waited.stderr
        assert "1 of 1 jobs pending after 1 s" in waited.stderr and "on box-gone:cpu: queued" in waited.stderr
        job_id = httpx.get(f"{live.url}/api/v1/campaigns/1", timeout=10).json()["jobs"][0]["job_id"]
        failed = wait_for(lambda: (j := httpx.get(f"{live.url}/api/v1/jobs/{job_id}", timeout=10).json())["status"]
                          == "failed" and j, what="the lost device's job to fail", context=live.log)
        assert failed["error"]["type"] == "DeviceLost"
        ended = tally("burn-in", "--server", live.url, "--campaign", "1", "--deadline", "30", timeout=120)
        assert ended.returncode == 1, ended.stderr
        assert f"job {job_id} on box-gone:cpu: failed" in ended.stdout


def test_every_dispatcher_is_shown_though_two_serve_one_device(make_api):
    """Issue 28, point 12: two dispatchers on one box's CPU share its one device row; the Fleet page
    said "1 box, 1 device" and showed one. Each is listed, with the job it runs."""
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    store.register(fleet_device("box-a", None))
    for worker in ("box-a-1", "box-a-2"):
        store.seen(worker_id=worker)
        store.touch("box-a:cpu", worker_id=worker)
    job = store.submit(probe="bandwidth", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="box-a-2", serves=Serves("box-a:cpu", ()), host="box-a")
    fleet = api.get("/api/v1/fleet").json()
    assert len(fleet["devices"]) == 1
    assert [(w["worker_id"], w["state"], w["job_id"]) for w in fleet["dispatchers"]] == [
        ("box-a-1", "idle", None), ("box-a-2", "busy", job.id)]
    page = api.get("/ui/fleet").text
    assert 'data-testid="dispatcher-count">2 dispatchers<' in page
    assert 'data-worker="box-a-1"' in page and 'data-worker="box-a-2"' in page


def test_the_burn_in_page_starts_a_campaign_with_the_token_and_says_what_it_refuses(make_api):
    """Issue 28, point 12: the Burn-in page had no way to start a campaign. Its form posts what
    POST /api/v1/campaigns takes; the token rule holds and each refusal names its box."""
    api = make_api(embedded_worker=False, api_token="s3cret-token")
    api.app.state.store.register(fleet_device("box-a", None))
    page = api.get("/burn-in").text
    assert 'hx-post="/ui/burn-in/start"' in page and 'name="token" type="password"' in page
    form = {"content-type": "application/x-www-form-urlencoded"}
    no_token = api.request("POST", "/ui/burn-in/start", content="token=&sustain_s=0.5", headers=form)
    assert "token" in no_token.text and api.get("/api/v1/campaigns").json() == []
    refused = api.request("POST", "/ui/burn-in/start", content="token=s3cret-token&sustain_s=0", headers=form)
    assert '"sustain_s": ' in refused.text and "must be &gt;= 0.1" in refused.text
    started = api.request("POST", "/ui/burn-in/start", content="token=s3cret-token&sustain_s=0.5&outlier_fraction=0.2",
                              headers=form)
    (campaign,) = api.get("/api/v1/campaigns").json()
    assert started.headers["hx-redirect"] == f"/burn-in?campaign={campaign['id']}"
    assert campaign["probe"] == "burn_in" and campaign["outlier_fraction"] == 0.2
    assert "in float32 on a CPU" in api.get(f"/burn-in?campaign={campaign['id']}").text
