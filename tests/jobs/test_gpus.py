"""Multi-GPU boxes: one dispatcher per GPU, and a job that names its GPU runs there alone.

No GPU is needed: a dispatcher's GPU is the CUDA_VISIBLE_DEVICES its children get, and
the fault child reports what it saw, as a probe's torch would.
"""

import os
import socket
import sqlite3
from urllib.parse import urlencode

from app.config import Settings
from app.jobs.dispatcher import Dispatcher, default_worker_id
from app.jobs.store import Store
from app.main import create_app, dispatchers
from app.ops.metrics import Metrics
from tests.support.api import Api, assert_names_field
from tests.support.jobs import FAULT_ARGV, overlapping
from tests.support.results import report
from tests.support.waiting import PATIENCE_S, wait_for

JOBS = "/api/v1/jobs"


def test_a_gpu_dispatcher_takes_its_own_jobs_and_unnamed_ones(tmp_path):
    store = Store(tmp_path / "tally.db")
    for_one = store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpu=1)
    anywhere = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    assert store.claim(worker_id="w0", gpu=0).id == anywhere.id  # job 1 is GPU 1's: GPU 0 skips it
    assert store.claim(worker_id="w0", gpu=0) is None
    claimed = store.claim(worker_id="w1", gpu=1)
    assert (claimed.id, claimed.gpu, claimed.ran_on_gpu) == (for_one.id, 1, 1)
    assert store.get(anywhere.id).ran_on_gpu == 0
    assert store.requeue(for_one.id) and store.get(for_one.id).ran_on_gpu is None
    # A dispatcher serving no one GPU takes any job, and runs a named one on its GPU.
    assert store.claim(worker_id="any").ran_on_gpu == 1


def test_jobs_for_different_gpus_run_side_by_side_and_never_two_on_one(tmp_path):
    """Each GPU's first child waits at a gate that opens only once both GPUs run a job, so the two
    runs certainly overlap; the rows' [started_at, finished_at] then show every overlap there was."""
    store = Store(tmp_path / "tally.db")
    gate = tmp_path / "gate"
    env = {"TALLY_FAULT": "gated", "TALLY_FAULT_GATE": str(gate)}
    running = [Dispatcher(store, f"box:gpu{i}", child_argv=FAULT_ARGV, child_env=env, poll_s=0.02, gpu=i)
               for i in (0, 1)]
    ids = [store.submit(probe="matmul", params={"sleep_s": 0.4}, timeout_s=60, limit=100, gpu=gpu).id
           for gpu in (1, 1, 0, 0, 1)]
    ids += [store.submit(probe="matmul", params={"sleep_s": 0.1}, timeout_s=60, limit=100).id
            for _ in range(3)]
    for each in running:
        each.start()
    try:
        wait_for(lambda: {job.ran_on_gpu for job in store.page(status="running")[0]} == {0, 1},
                 what="a job running on each GPU")
        gate.touch()
        wait_for(lambda: store.counts()["succeeded"] == len(ids), what="every job to finish")
    finally:
        for each in running:
            each.stop(PATIENCE_S)
    jobs = {job.id: job for job in store.page(limit=100)[0]}
    for job_id in ids:
        job = jobs[job_id]
        assert job.attempts == 1  # one run each, so each row's times are its only run
        if job.gpu is not None:  # a named GPU is the one it ran on, and the only one its child saw
            assert job.ran_on_gpu == job.gpu and job.worker_id == f"box:gpu{job.gpu}"
        assert report(job)["cuda_visible_devices"] == str(job.ran_on_gpu)
    on = {gpu: [job for job in jobs.values() if job.ran_on_gpu == gpu] for gpu in (0, 1)}
    assert len(on[0]) + len(on[1]) == len(ids)
    assert overlapping(on[0]) == [] and overlapping(on[1]) == []
    side_by_side = overlapping(list(jobs.values()))
    assert side_by_side and all(jobs[a].ran_on_gpu != jobs[b].ran_on_gpu for a, b in side_by_side)


def test_the_server_starts_one_dispatcher_per_gpu(tmp_path):
    settings = Settings(database_path=tmp_path / "tally.db", gpus=[0, 1], worker_id="box")
    assert [(d.worker_id, d.gpu) for d in dispatchers(Store(settings.database_path), settings)] == [
        ("box:gpu0", 0), ("box:gpu1", 1)]
    cpu_only = settings.model_copy(update={"gpus": []})
    assert [(d.worker_id, d.gpu) for d in dispatchers(Store(settings.database_path), cpu_only)] == [
        ("box:cpu", None)]


def test_default_dispatcher_ids_name_host_process_and_device(tmp_path):
    """The server's dispatchers and a `tally worker` on one host never share an id by default."""
    settings = Settings(database_path=tmp_path / "tally.db", gpus=[0, 1])
    ids = [d.worker_id for d in dispatchers(Store(settings.database_path), settings)]
    assert ids == [f"{socket.gethostname()}:{os.getpid()}:gpu{i}" for i in (0, 1)]
    assert default_worker_id(None, None) == f"{socket.gethostname()}:{os.getpid()}:cpu"


def test_a_job_may_name_only_a_gpu_the_server_serves(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", gpus=[0, 1])))
    try:
        assert len(api.get("/api/v1/devices").json()) == 2
        job = api.post(JOBS, {"probe": "bandwidth", "gpu": 1})
        assert job.status_code == 202, job.text
        assert (job.json()["gpu"], job.json()["ran_on_gpu"]) == (1, None)
        assert_names_field(api.post(JOBS, {"probe": "bandwidth", "gpu": 2}), "gpu")
        assert_names_field(api.post(JOBS, {"probe": "bandwidth", "gpu": -1}), "gpu")
        assert_names_field(api.post(JOBS, {"probe": "bandwidth", "gpu": 0, "params": {"device": "cpu"}}),
                           "gpu")
    finally:
        api.close()
    no_gpu = Api(create_app(Settings(database_path=tmp_path / "cpu.db", gpus=[])))
    try:
        devices = no_gpu.get("/api/v1/devices").json()
        assert [d["kind"] for d in devices] == ["cpu"]
        body = assert_names_field(no_gpu.post(JOBS, {"probe": "bandwidth", "gpu": 0}), "gpu")
        assert "no GPU" in body["message"]
    finally:
        no_gpu.close()


def test_an_older_database_gains_the_gpu_columns_and_keeps_its_jobs(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the jobs table as the first release wrote it
        db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, probe TEXT NOT NULL, "
                   "params TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
                   "timeout_s REAL NOT NULL, created_at REAL NOT NULL, started_at REAL, finished_at REAL, "
                   "progress_done INTEGER NOT NULL DEFAULT 0, progress_total INTEGER NOT NULL DEFAULT 0, "
                   "progress_message TEXT NOT NULL DEFAULT '', result TEXT, error TEXT, worker_id TEXT, "
                   "heartbeat_at REAL, cancel_requested INTEGER NOT NULL DEFAULT 0, "
                   "revision INTEGER NOT NULL DEFAULT 0, device TEXT)")
        db.execute("INSERT INTO jobs (probe, params, status, timeout_s, created_at) "
                   "VALUES ('bandwidth', '{}', 'queued', 60, 0)")
    store = Store(path)
    old = store.get(1)
    assert (old.probe, old.status, old.gpu, old.ran_on_gpu) == ("bandwidth", "queued", None, None)
    assert old.attempts_log == []
    assert store.submit(probe="matmul", params={}, timeout_s=60, limit=10, gpu=3).gpu == 3


def test_gpu_gauges_carry_the_gpu_index(tmp_path):
    readings = {0: {"power_watts": 300.5}, 1: {"power_watts": 120.0}}
    text = Metrics(Store(tmp_path / "m.db"), lambda: readings).exposition().decode()
    assert 'tally_gpu_power_watts{gpu="0"} 300.5' in text
    assert 'tally_gpu_power_watts{gpu="1"} 120.0' in text


def test_the_launch_form_offers_each_gpu_and_passes_the_choice_on(tmp_path):
    api = Api(create_app(Settings(database_path=tmp_path / "tally.db", gpus=[0, 1])))
    try:
        page = api.get("/benchmarks").text
        assert '<select id="gpu" name="gpu"' in page and page.count('<option value="1">1: ') == 1
        form = {"probe": "bandwidth", "gpu": "1"}
        launched = api.post("/ui/benchmarks/launch", content=urlencode(form),
                            headers={"content-type": "application/x-www-form-urlencoded"})
        assert launched.status_code == 200 and "Job #1" in launched.text, launched.text
        assert api.get(f"{JOBS}/1").json()["gpu"] == 1
        refused = api.post("/ui/benchmarks/launch", content=urlencode(form | {"gpu": "5"}),
                           headers={"content-type": "application/x-www-form-urlencoded"})
        assert "GPU 5 is not served here" in refused.text
    finally:
        api.close()
