"""Jobs on several GPUs: asked for by count or by index, reserved all at once, never starved by
one-GPU jobs, refused when the box cannot serve them, and shown where they ran.

No GPU is needed, as in tests/jobs/test_gpus.py: a dispatcher's GPUs are the leases it takes and the
CUDA_VISIBLE_DEVICES its child gets, which the fault child reports.
"""

import itertools
import json
import sqlite3
import threading
import time

import pytest

from app.config import Settings
from app.jobs import placement, schema
from app.jobs.dispatcher import Dispatcher
from app.jobs.job import Job
from app.jobs.store import Store
from app.main import create_app
from tests.support.api import Api, assert_names_field
from tests.support.cli import run_main
from tests.support.jobs import FAULT_ARGV
from tests.support.results import report, result_for
from tests.support.waiting import PATIENCE_S, wait_for

JOBS = "/api/v1/jobs"
BOX = "box"


def claim(store: Store, gpu: int | None, served=(0, 1, 2, 3)) -> Job | None:
    return store.claim(worker_id=f"w{gpu}", gpu=gpu, host=BOX, served=list(served))


def done(store: Store, job: Job) -> None:
    assert store.finish(job.id, status="succeeded", result=result_for(job.probe))


# --- the schema ------------------------------------------------------------------------------------

def test_a_version_1_database_gains_the_multi_gpu_columns_and_keeps_its_rows(tmp_path):
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:  # the jobs table as version 1 left it, one job run on GPU 1
        db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, probe TEXT NOT NULL, "
                   "params TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
                   "timeout_s REAL NOT NULL, created_at REAL NOT NULL, started_at REAL, finished_at REAL, "
                   "progress_done INTEGER NOT NULL DEFAULT 0, progress_total INTEGER NOT NULL DEFAULT 0, "
                   "progress_message TEXT NOT NULL DEFAULT '', result TEXT, error TEXT, worker_id TEXT, "
                   "heartbeat_at REAL, cancel_requested INTEGER NOT NULL DEFAULT 0, "
                   "revision INTEGER NOT NULL DEFAULT 0, device TEXT, gpu INTEGER, ran_on_gpu INTEGER, "
                   "attempts_log TEXT)")
        db.execute("INSERT INTO jobs (probe, params, status, timeout_s, created_at, gpu, ran_on_gpu, error) "
                   "VALUES ('bandwidth', '{\"size_bytes\": 1024}', 'failed', 60, 0, 1, 1, "
                   "'{\"type\": \"E\", \"message\": \"m\", \"detail\": {}}')")
        db.execute("INSERT INTO jobs (probe, params, status, timeout_s, created_at) "
                   "VALUES ('matmul', '{}', 'queued', 60, 0)")
        db.execute("PRAGMA user_version = 1")
    store = Store(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION >= 2
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    assert {"num_gpus", "gpus", "ran_on_gpus"} <= columns
    old = store.get(1)
    assert (old.params, old.status, old.error["type"]) == ({"size_bytes": 1024}, "failed", "E")
    assert (old.gpu, old.num_gpus, old.gpus, old.ran_on_gpu, old.ran_on_gpus) == (1, 1, None, 1, [1])
    queued = claim(store, 2)  # the old queued row runs as a one-GPU job
    assert (queued.id, queued.num_gpus, queued.ran_on_gpus) == (2, 1, [2])
    new = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpus=[3, 0])
    assert (new.num_gpus, new.gpus, new.ran_on_gpus) == (2, [0, 3], [])
    assert Store(path).get(1) == old  # opening it again changes nothing


# --- the claim: all its GPUs at once ----------------------------------------------------------------

def test_a_job_on_named_gpus_takes_all_their_leases_or_none(store):
    blocker = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpu=1)
    pair = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpus=[1, 0])
    assert claim(store, 1).id == blocker.id
    assert claim(store, 0) is None  # GPU 1 is busy: GPU 0 is not leased alone
    assert store.held_leases() == [(f"{BOX}:gpu1", blocker.id)]
    done(store, blocker)
    assert claim(store, 2) is None  # not one of its GPUs: GPU 2's dispatcher leaves it
    running = claim(store, 1)
    assert (running.id, running.ran_on_gpus, running.ran_on_gpu) == (pair.id, [0, 1], None)
    assert store.held_leases() == [(f"{BOX}:gpu0", pair.id), (f"{BOX}:gpu1", pair.id)]
    assert claim(store, 0) is None
    assert store.requeue(pair.id) and store.get(pair.id).ran_on_gpus == []
    assert store.held_leases() == []


def test_num_gpus_takes_the_claimers_gpu_and_the_lowest_free_others(store):
    one = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpu=0)
    three = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, num_gpus=3)
    assert claim(store, 0).id == one.id
    running = claim(store, 3)
    assert (running.id, running.num_gpus, running.gpus, running.ran_on_gpus) == (three.id, 3, None, [1, 2, 3])
    assert sorted(device for device, _ in store.held_leases()) == [f"{BOX}:gpu{i}" for i in range(4)]
    done(store, running)
    assert store.held_leases() == [(f"{BOX}:gpu0", one.id)]


def tick(store: Store, gpu: int, running: dict[int, Job], submitted: list[int],
         started: dict[int, int]) -> None:
    """GPU `gpu`'s dispatcher finishes its job (a job on several GPUs ends once each of its GPUs has
    ticked), a new one-GPU job joins the queue, and the dispatcher claims what it may."""
    job = running.pop(gpu, None)
    if job is not None and not any(other.id == job.id for other in running.values()):
        done(store, job)
    submitted.append(store.submit(probe="matmul", params={}, timeout_s=60, limit=1000).id)
    if gpu not in running and (job := claim(store, gpu)) is not None:
        started[job.id] = len(started)
        for each in job.ran_on_gpus:
            running[each] = job


@pytest.mark.parametrize("asked", [{"gpus": [0, 1]}, {"num_gpus": 2}])
def test_a_stream_of_one_gpu_jobs_does_not_starve_a_job_on_two(store, asked):
    """Four GPUs whose jobs end in turn (0, 2, 3, 1, ...), a new one-GPU job arriving at each end: no
    two GPUs are ever free at once unless one is held, so without the reservation the job on GPUs
    0 and 1 would wait for ever."""
    running: dict[int, Job] = {}
    submitted: list[int] = []
    started: dict[int, int] = {}  # job id: order of starting
    for gpu in range(4):
        tick(store, gpu, running, submitted, started)
    assert sorted(running) == [0, 1, 2, 3]
    big = store.submit(probe="matmul", params={}, timeout_s=60, limit=1000, **asked).id
    for gpu in itertools.islice(itertools.cycle((0, 2, 3, 1)), 12):
        tick(store, gpu, running, submitted, started)
    assert big in started, "the job on two GPUs never started"
    ran_on = store.get(big).ran_on_gpus
    assert len(ran_on) == 2 and (ran_on == [0, 1] if "gpus" in asked else True)
    newer = [job_id for job_id in submitted if job_id > big and job_id in started]
    # No newer job started on its GPUs before it; the other GPUs kept working meanwhile.
    before = [job_id for job_id in newer if started[job_id] < started[big]]
    assert all(not set(store.get(job_id).ran_on_gpus) & set(ran_on) for job_id in before)
    if "gpus" in asked:
        assert before, "GPUs 2 and 3 idled while it waited"


def test_the_reservation_keeps_free_gpus_for_the_waiting_job_and_no_others():
    """placement.choose alone: GPUs 0 and 3 run jobs; a queued job on GPUs {0, 1} holds GPU 1
    against a newer one-GPU job, and leaves GPU 2 to it."""
    busy = {"gpu0", "gpu3"}
    pair = placement.Waiting(id=1, device="cuda", gpu=None, num_gpus=2, gpus=[0, 1])
    single = placement.Waiting(id=2, device="cuda", gpu=None, num_gpus=1, gpus=None)
    assert placement.choose([pair, single], claimer=1, served=range(4), busy=busy) is None
    on_two = placement.choose([pair, single], claimer=2, served=range(4), busy=busy)
    assert (on_two.job.id, on_two.units, on_two.ran_on_gpus) == (2, ["gpu2"], [2])
    # By count: the free GPUs 1 and 2 are both its own until it can start; an older job goes first.
    any_two = placement.Waiting(id=1, device="cuda", gpu=None, num_gpus=3, gpus=None)
    assert placement.choose([any_two, single], claimer=2, served=range(4), busy=busy) is None
    older = placement.Waiting(id=0, device="cuda", gpu=2, num_gpus=1, gpus=None)
    assert placement.choose([older, any_two, single], claimer=2, served=range(4), busy=busy).job.id == 0
    assert placement.choose([any_two], claimer=2, served=range(4), busy={"gpu3"}).ran_on_gpus == [0, 1, 2]


# --- dispatchers on a simulated four-GPU box --------------------------------------------------------

def test_dispatchers_run_a_job_on_two_gpus_amid_a_stream_of_one_gpu_jobs(store):
    served = [0, 1, 2]
    running = [Dispatcher(store, f"box:gpu{i}", child_argv=FAULT_ARGV, child_env={"TALLY_FAULT": "ok"},
                          poll_s=0.02, gpu=i, served=served) for i in served]
    stop = threading.Event()

    def feed() -> None:  # keeps two one-GPU jobs waiting, each a fifth of a second long
        while not stop.is_set():
            if store.counts()["queued"] < 2:
                store.submit(probe="matmul", params={"sleep_s": 0.2}, timeout_s=60, limit=1000)
            time.sleep(0.01)

    feeder = threading.Thread(target=feed)
    for each in running:
        each.start()
    feeder.start()
    try:
        wait_for(lambda: store.counts()["succeeded"] >= 3, what="the stream to flow")
        big = store.submit(probe="matmul", params={"sleep_s": 0.2}, timeout_s=60, limit=1000, num_gpus=2)
        wait_for(lambda: store.get(big.id).status == "succeeded", what="the job on two GPUs to run")
        wait_for(lambda: len([job for job in store.page(status="succeeded", limit=1000)[0]
                              if job.id > big.id]) >= 3, what="the stream to go on")
    finally:
        stop.set()
        feeder.join(PATIENCE_S)
        for each in running:
            each.stop(PATIENCE_S)
    big = store.get(big.id)
    assert len(big.ran_on_gpus) == 2  # and its child saw them both, as cuda:0 and cuda:1
    assert report(big)["cuda_visible_devices"] == ",".join(map(str, big.ran_on_gpus))
    jobs = [job for job in store.page(limit=1000)[0] if job.status == "succeeded"]
    for gpu in served:  # never two jobs on one GPU
        on = sorted((job for job in jobs if gpu in job.ran_on_gpus), key=lambda job: job.started_at)
        assert all(a.finished_at <= b.started_at for a, b in itertools.pairwise(on)), gpu
    # No job newer than it started on its GPUs before it did.
    assert not [job.id for job in jobs if job.id > big.id and set(job.ran_on_gpus) & set(big.ran_on_gpus)
                and job.started_at < big.started_at]


# --- the API ---------------------------------------------------------------------------------------

@pytest.fixture
def four_gpu_api(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", gpus=[0, 1, 2, 3],
                                  embedded_worker=False)))
    yield api
    api.close()


@pytest.mark.parametrize("body,field", [
    ({"gpu": 0, "gpus": [1, 2]}, "gpus"),
    ({"gpu": 0, "num_gpus": 2}, "num_gpus"),
    ({"gpus": [0, 1], "num_gpus": 3}, "num_gpus"),
    ({"num_gpus": 5}, "num_gpus"),
    ({"num_gpus": 0}, "num_gpus"),
    ({"gpus": [0, 4]}, "gpus.1"),
    ({"gpus": [2, 1, 2]}, "gpus.2"),
    ({"gpus": []}, "gpus"),
    ({"gpus": [0, -1]}, "gpus.1"),
    ({"num_gpus": 2, "params": {"device": "cpu"}}, "num_gpus"),
    ({"gpus": [0, 1], "params": {"device": "cpu"}}, "gpus"),
])
def test_gpus_the_box_cannot_give_are_refused_naming_the_field(four_gpu_api, body, field):
    assert_names_field(four_gpu_api.post(JOBS, {"probe": "bandwidth"} | body), field)


def test_a_cpu_only_box_refuses_a_job_on_several_gpus(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", gpus=[], embedded_worker=False)))
    try:
        body = assert_names_field(api.post(JOBS, {"probe": "bandwidth", "num_gpus": 2}), "num_gpus")
        assert "no GPUs" in body["message"]
        assert api.post(JOBS, {"probe": "bandwidth", "num_gpus": 1}).status_code == 202
    finally:
        api.close()


def test_the_job_json_and_page_show_the_gpus_asked_for_and_run_on(four_gpu_api):
    asked = four_gpu_api.post(JOBS, {"probe": "bandwidth", "gpus": [3, 1]})
    assert asked.status_code == 202, asked.text
    shown = asked.json()
    assert (shown["gpu"], shown["num_gpus"], shown["gpus"], shown["ran_on_gpu"], shown["ran_on_gpus"]) == (
        None, 2, [1, 3], None, [])
    counted = four_gpu_api.post(JOBS, {"probe": "bandwidth", "num_gpus": "3"}).json()
    assert (counted["num_gpus"], counted["gpus"]) == (3, None)
    assert "for GPUs 1, 3" in four_gpu_api.get(f"/benchmarks/jobs/{shown['id']}").text
    assert "for 3 GPUs" in four_gpu_api.get(f"/benchmarks/jobs/{counted['id']}").text
    store = four_gpu_api.app.state.store
    ran = store.claim(worker_id="w", gpu=1, served=[0, 1, 2, 3])
    assert ran.id == shown["id"]
    after = four_gpu_api.get(f"{JOBS}/{ran.id}").json()
    assert (after["ran_on_gpu"], after["ran_on_gpus"]) == (None, [1, 3])
    assert "on GPUs 1, 3" in four_gpu_api.get(f"/benchmarks/jobs/{ran.id}").text


# --- tally probe ------------------------------------------------------------------------------------

def test_tally_probe_runs_a_job_on_the_gpus_asked_for(capsys, monkeypatch, tmp_path):
    """The fault child stands in for the probe and reports the GPUs its dispatcher gave it."""
    monkeypatch.setattr("app.jobs.dispatcher.CHILD_ARGV", tuple(FAULT_ARGV))
    three_gpus = Settings(gpus=[0, 1, 2], database_path=tmp_path / "unused.db")
    monkeypatch.setattr("app.config.get_settings", lambda: three_gpus)
    for argv, seen in ((["--num-gpus", "2"], "0,1"), (["--gpus", "2,0"], "0,2"), (["--gpus", "2"], "2")):
        status, out, err = run_main(capsys, "probe", "bandwidth", *argv, "--output", "json")
        assert status == 0, err
        assert json.loads(json.loads(out)["environment"]["platform"])["cuda_visible_devices"] == seen
    status, _, err = run_main(capsys, "probe", "bandwidth", "--num-gpus", "4")
    assert status == 2 and json.loads(err)["message"].startswith("num_gpus: 4 GPUs asked for")
    status, _, err = run_main(capsys, "probe", "bandwidth", "--gpu", "0", "--gpus", "1,2")
    assert status == 2 and json.loads(err)["message"].startswith("gpus: give gpu")


def test_a_dispatcher_told_of_no_other_gpus_still_counts_its_own():
    two = placement.Waiting(id=1, device="cuda", gpu=None, num_gpus=2, gpus=None)
    assert placement.choose([two], claimer=1, served=[], busy=set()) is None  # one GPU known: it waits
    assert placement.choose([two], claimer=1, served=[0], busy=set()).ran_on_gpus == [0, 1]
