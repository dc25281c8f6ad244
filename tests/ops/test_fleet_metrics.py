"""/metrics' fleet families (app/ops/fleet_metrics.py): the energy jobs measured, per device and per
job, and each device's last burn-in verdict, scraped through the app from a store seeded with
finished jobs on registered devices. Every expected number is worked by hand from the seeded
windows (each one's joules = its watts x its seconds)."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.jobs.fleet import Serves, Targets
from app.main import create_app
from app.ops import fleet_metrics
from app.probes.energy import Energy
from app.probes.matmul import MatmulPoint
from app.probes.results import Environment, Stats
from app.probes.sustained import Sustained
from tests.support.api import Api
from tests.support.results import minimal, result_for

H100 = "NVIDIA H100 80GB HBM3"
DEVICES = {  # three H100s on two boxes, and a box with a CPU only
    "GPU-A0": {"host": "box-a", "kind": "cuda", "gpu_index": 0, "name": H100, "catalogue_id": "h100"},
    "GPU-A1": {"host": "box-a", "kind": "cuda", "gpu_index": 1, "name": H100, "catalogue_id": "h100"},
    "GPU-B": {"host": "box-b", "kind": "cuda", "gpu_index": 0, "name": H100, "catalogue_id": "h100"},
    "box-c:cpu": {"host": "box-c", "kind": "cpu", "gpu_index": None, "name": "a CPU", "catalogue_id": None},
}
T = 1e12


@pytest.fixture
def api(tmp_path):
    client = Api(create_app(Settings(database_path=tmp_path / "fleet.db")))
    for device, row in DEVICES.items():
        client.app.state.store.register({"device": device, **row})
    yield client
    client.close()


def scrape(api: Api) -> dict:
    """The families of one scrape by name (a counter's without _total)."""
    response = api.get("/metrics")
    assert response.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def values(family, *keys: str) -> dict:
    """Each sample's value by its labels `keys`, in that order."""
    return {tuple(s.labels[k] for k in keys) if len(keys) > 1 else s.labels[keys[0]]: s.value
            for s in family.samples}


def window(watts: float, seconds: float, iterations: int) -> Energy:
    joules = watts * seconds
    return Energy(joules=joules, seconds=seconds, watts=watts, method="energy_counter",
                  samples=int(seconds / 0.01), counter_updates=int(seconds / 0.1), iterations=iterations,
                  seconds_per_iteration=seconds / iterations, joules_per_iteration=joules / iterations)


def run(store, device: str, probe: str, result=None, *, status: str = "succeeded", num_gpus: int = 1,
        gpu: int | None = None, served: list[int] | None = None, job_id: int | None = None) -> int:
    """Submit (unless `job_id` is queued already) and claim a job as `device`'s dispatcher does (GPU
    `gpu`, default the device's own), then end it with `result`."""
    row = DEVICES[device]
    if job_id is None:
        targets = Targets(host=row["host"]) if num_gpus > 1 else Targets(device=device)
        job_id = store.submit(probe=probe, params={}, timeout_s=60, limit=100, num_gpus=num_gpus,
                              targets=targets).id
    gpu = row["gpu_index"] if gpu is None else gpu
    names = tuple(name for name in (row["name"], row["catalogue_id"]) if name)
    job = store.claim(worker_id=device, gpu=gpu, host=row["host"], serves=Serves(device, names),
                      served=served or ([] if gpu is None else [gpu]))
    assert job is not None and job.id == job_id, job
    error = None if status == "succeeded" else {"type": "E", "message": "it broke", "detail": {}}
    assert store.finish(job.id, status=status, result=result if status == "succeeded" else None, error=error,
                        claim=job.claim)
    return job.id


def matmul_900_j():
    """Two points of 400 W x 0.3 s = 120 J and 500 W x 0.16 s = 80 J, `best` repeating the second
    (its window counted once), and a sustained run of 700 W x 1 s = 700 J: 900 J."""
    second = minimal(MatmulPoint, m=2, time=minimal(Stats, energy=window(500, 0.16, 16)))
    points = [minimal(MatmulPoint, m=1, time=minimal(Stats, energy=window(400, 0.3, 30))), second]
    held = window(700, 1.0, 50)
    return result_for("matmul", points=points, best={"bfloat16": second},
                      sustained=minimal(Sustained, seconds=1.0, iterations=50, energy_joules=700.0,
                                        average_power_watts=700.0, energy=held))


def bandwidth_350_j():
    """A copy's window of 250 W x 0.2 s = 50 J, and a sustained run stored before runs carried an
    Energy: energy_joules 600 W x 0.5 s = 300 J; 350 J."""
    return result_for("bandwidth", time=minimal(Stats, energy=window(250, 0.2, 20)),
                      sustained=minimal(Sustained, seconds=0.5, iterations=40, energy_joules=300.0))


def seed_energy(store) -> dict[str, int]:
    jobs = {
        "matmul": run(store, "GPU-A0", "matmul", matmul_900_j()),
        "bandwidth": run(store, "GPU-A0", "bandwidth", bandwidth_350_j()),
        # 255 W x 0.1 s = 25.5 J on box-b's GPU
        "copy_b": run(store, "GPU-B", "bandwidth",
                      result_for("bandwidth", time=minimal(Stats, energy=window(255, 0.1, 10)))),
        # On GPUs 0 and 1 of box-a, taken by GPU 1's dispatcher: rank 0's step, 400 W x 0.1 s = 40 J, is
        # GPU 0's (GPU-A0); the 80 J of both ranks together are no one device's.
        "two_gpus": run(store, "GPU-A1", "data_parallel_step",
                        result_for("data_parallel_step", step=minimal(Stats, energy=window(400, 0.1, 5)),
                                   joules_per_step_all_ranks=80.0), num_gpus=2, gpu=1, served=[0, 1]),
        "cpu": run(store, "box-c:cpu", "bandwidth", result_for("bandwidth")),  # a CPU: no energy
        "failed": run(store, "GPU-B", "bandwidth", status="failed"),
    }
    assert store.get(jobs["two_gpus"]).ran_on_gpus == [0, 1]
    return jobs


def test_energy_is_summed_per_device_and_shown_per_job(api):
    jobs = seed_energy(api.app.state.store)
    families = scrape(api)
    per_device = values(families["tally_device_energy_joules"], "device", "host", "gpu_model")
    assert families["tally_device_energy_joules"].type == "counter"
    assert per_device == {
        ("GPU-A0", "box-a", H100): pytest.approx(900 + 350 + 40),
        ("GPU-B", "box-b", H100): pytest.approx(25.5),
    }  # GPU-A1 measured nothing of its own, and the CPU nothing at all: no series
    per_job = values(families["tally_job_energy_joules"], "job_id", "probe", "device")
    assert per_job == {
        (str(jobs["matmul"]), "matmul", "GPU-A0"): pytest.approx(900),
        (str(jobs["bandwidth"]), "bandwidth", "GPU-A0"): pytest.approx(350),
        (str(jobs["copy_b"]), "bandwidth", "GPU-B"): pytest.approx(25.5),
        (str(jobs["two_gpus"]), "data_parallel_step", "GPU-A0"): pytest.approx(40),
    }


def test_only_the_newest_jobs_get_a_series_of_their_own(api, monkeypatch):
    monkeypatch.setattr(fleet_metrics, "RECENT_JOBS", 2)
    jobs = seed_energy(api.app.state.store)
    per_job = values(scrape(api)["tally_job_energy_joules"], "job_id")
    assert per_job == {str(jobs["copy_b"]): pytest.approx(25.5), str(jobs["two_gpus"]): pytest.approx(40)}


def test_a_result_is_read_once_and_a_long_history_a_share_per_scrape(api, monkeypatch):
    store = api.app.state.store
    read: list[list[int]] = []
    real = store.jobs_by_id
    monkeypatch.setattr(store, "jobs_by_id", lambda ids: read.append(sorted(ids)) or real(ids))
    monkeypatch.setattr(fleet_metrics, "LOAD_PER_SCRAPE", 2)
    jobs = seed_energy(store)
    succeeded = sorted(v for k, v in jobs.items() if k != "failed")  # 5 jobs, 2 a scrape, newest first
    shares = []
    for _ in range(3):
        shares.append(values(scrape(api)["tally_device_energy_joules"], "device"))
    assert read == [succeeded[3:], succeeded[1:3], succeeded[:1]]
    assert shares[:2] == [{}, {}]  # no partial sum: a counter's first value is the whole of it
    assert shares[2] == {"GPU-A0": pytest.approx(1290), "GPU-B": pytest.approx(25.5)}
    scrape(api)
    assert len(read) == 3  # nothing new: nothing read
    later = run(store, "GPU-B", "bandwidth",  # 100 W x 0.5 s = 50 J more
                result_for("bandwidth", time=minimal(Stats, energy=window(100, 0.5, 5))))
    assert values(scrape(api)["tally_device_energy_joules"], "device")["GPU-B"] == pytest.approx(25.5 + 50)
    assert read[3:] == [[later]]


def test_a_box_without_energy_has_the_families_and_no_series(api):
    run(api.app.state.store, "box-c:cpu", "bandwidth", result_for("bandwidth"))
    families = scrape(api)
    assert families["tally_device_energy_joules"].samples == []
    assert families["tally_job_energy_joules"].samples == []
    assert families["tally_burn_in_verdict"].samples == []


def burn_in(matmul_flop_per_sec: float, device: str):
    return result_for("burn_in", gpu_uuid=device, environment=minimal(Environment, device_name=H100,
                                                                       catalogue_id="h100"),
                      matmul=result_for("matmul", sustained=minimal(Sustained, seconds=1.0, iterations=10,
                                                                    flop_per_sec=matmul_flop_per_sec)))


def campaign(store, rates: dict[str, float | None]) -> tuple[int, dict[str, int]]:
    """A burn-in campaign on the three GPUs, each ending at its matmul rate (None: the job failed)."""
    c, members = store.start_campaign(probe="burn_in", params={}, timeout_s=60, limit=100,
                                      outlier_fraction=0.1)
    ids = {}
    for job in members:
        device, rate = job.target_device, rates[job.target_device]
        ids[device] = run(store, device, "burn_in", None if rate is None else burn_in(rate, device),
                          status="failed" if rate is None else "succeeded", job_id=job.id)
    return c.id, ids


def test_each_devices_last_burn_in_verdict_is_the_campaigns(api):
    store = api.app.state.store
    campaign(store, {"GPU-A0": 650 * T, "GPU-A1": 652 * T, "GPU-B": 655 * T})  # all within 1%: passed
    # The newer campaign: GPU-A1's job fails; of the two that succeed the median is (650 + 500) / 2 =
    # 575 TFLOP/s, and GPU-B's 500 is 1 - 500/575 = 13% below it, past the 10% bound: slow.
    newer, ids = campaign(store, {"GPU-A0": 650 * T, "GPU-A1": None, "GPU-B": 500 * T})
    cancelled = store.submit(probe="burn_in", params={}, timeout_s=60, limit=100,
                             targets=Targets(device="GPU-A0"))
    store.cancel(cancelled.id)  # says nothing of GPU-A0: its verdict stays the campaign's
    families = scrape(api)
    verdicts = values(families["tally_burn_in_verdict"], "device", "verdict")
    assert {k: v for k, v in verdicts.items() if v == 1} == {
        ("GPU-A0", "passed"): 1, ("GPU-A1", "failed"): 1, ("GPU-B", "slow"): 1}
    assert len(verdicts) == 3 * 3  # every verdict of every device, the others 0
    labels = {s.labels["device"]: (s.labels["host"], s.labels["gpu_model"])
              for s in families["tally_burn_in_verdict"].samples}
    assert labels == {"GPU-A0": ("box-a", H100), "GPU-A1": ("box-a", H100), "GPU-B": ("box-b", H100)}
    when = values(families["tally_burn_in_last_timestamp_seconds"], "device")
    assert when == {device: store.get(job_id).finished_at for device, job_id in ids.items()}
    # The campaign's page and JSON flag the same device, by the same comparison.
    rows = {row["device"]: row["flagged"] for row in api.get(f"/api/v1/campaigns/{newer}").json()["compared"]}
    assert rows == {"GPU-A0": False, "GPU-B": True}


def test_the_scrape_answers_without_the_database(api, tmp_path):
    seed_energy(api.app.state.store)
    campaign(api.app.state.store, {"GPU-A0": 650 * T, "GPU-A1": 652 * T, "GPU-B": 500 * T})
    assert scrape(api)["tally_device_energy_joules"].samples  # read, and cached, while it answered
    api.app.state.store.path = tmp_path / "missing" / "gone.db"  # cannot be opened
    families = scrape(api)
    assert families["tally_jobs_available"].samples[0].value == 0
    assert not {"tally_device_energy_joules", "tally_job_energy_joules", "tally_burn_in_verdict",
                "tally_burn_in_last_timestamp_seconds"} & set(families)
    assert "tally_http_requests" in families


def test_a_result_this_server_cannot_read_leaves_out_that_job_only(api, monkeypatch):
    store = api.app.state.store
    jobs = seed_energy(store)
    real = store.jobs_by_id

    def reading(ids):  # as when a result's probe module is no longer among TALLY_PROBE_MODULES
        if jobs["bandwidth"] in ids:
            raise ValueError("1 validation error for tagged-union")
        return real(ids)

    monkeypatch.setattr(store, "jobs_by_id", reading)
    per_device = values(scrape(api)["tally_device_energy_joules"], "device")
    assert per_device == {"GPU-A0": pytest.approx(900 + 40), "GPU-B": pytest.approx(25.5)}  # 350 J left out
