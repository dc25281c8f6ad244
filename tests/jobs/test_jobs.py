"""The dispatcher and the standalone worker, over a real job queue (the queue itself: test_store.py),
on SQLite and on PostgreSQL (`store`, tests/jobs/conftest.py).

Children are tests/support/fault_child.py: the real child protocol with probes that misbehave on
request. Waits poll against generous deadlines; nothing here asserts a speed.
"""

import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.jobs import sweep
from app.jobs.dispatcher import Dispatcher
from app.jobs.store import Store
from tests.support import ROOT
from tests.support.jobs import FAULT_ARGV, alive, overlapping, pids
from tests.support.results import report
from tests.support.waiting import PATIENCE_S, wait_for, wait_for_count


@pytest.fixture
def pidfile(tmp_path) -> Path:
    return tmp_path / "children.pids"


def dispatcher(store: Store, fault: str, pidfile: Path | None = None, **env: str) -> Dispatcher:
    child_env = {"TALLY_FAULT": fault, **env} | ({"TALLY_FAULT_PIDS": str(pidfile)} if pidfile else {})
    return Dispatcher(store, "test-worker", child_argv=FAULT_ARGV, child_env=child_env, poll_s=0.05,
                      kill_grace_s=2)


# --- the dispatcher, one fault at a time -------------------------------------------------------------

def run_one(store: Store, fault: str, pidfile: Path | None = None, timeout_s: float = 60,
            params: dict | None = None):
    job = store.submit(probe="matmul", params=params or {}, timeout_s=timeout_s, limit=10)
    assert dispatcher(store, fault, pidfile).run_once()
    return store.get(job.id)


def test_ok_succeeds_with_result_and_progress(store, caplog):
    caplog.set_level(logging.INFO, logger="tally.jobs")
    job = run_one(store, "ok", params={"sleep_s": 0.2, "n": 3})
    assert caplog.records and all(record.job_id == job.id for record in caplog.records)
    assert (job.status, job.error) == ("succeeded", None)
    assert job.result.probe == "matmul"
    assert report(job) == {"echo": {"sleep_s": 0.2, "n": 3}, "cuda_visible_devices": None}
    assert (job.progress_done, job.progress_total, job.progress_message) == (2, 2, "measuring")
    assert job.attempts == 1 and job.worker_id == "test-worker"


def test_run_once_without_jobs(store):
    assert not dispatcher(store, "ok").run_once()


def test_hang_times_out_and_the_child_is_gone(store, pidfile):
    started = time.monotonic()
    job = run_one(store, "hang", pidfile, timeout_s=1)
    assert time.monotonic() - started < PATIENCE_S
    assert job.status == "timeout" and "1 s" in job.error["message"]
    assert [pid for pid in pids(pidfile) if alive(pid)] == []


def test_crash_names_the_signal(store):
    job = run_one(store, "crash")
    assert job.status == "crashed"
    assert job.error["detail"]["signal"] == "SIGSEGV" and "SIGSEGV" in job.error["message"]
    assert job.error["detail"]["exit_code"] == -signal.SIGSEGV


def test_oom_is_reported_as_oom(store):
    job = run_one(store, "oom")
    assert job.status == "oom"
    assert job.error["type"] == "OutOfMemoryError" and "20.00 GiB" in job.error["message"]


def test_fail_carries_the_message(store):
    job = run_one(store, "fail")
    assert job.status == "failed"
    assert (job.error["type"], job.error["message"]) == ("ValueError", "matmul failed on purpose")


def test_a_malformed_line_is_a_crash(store, pidfile):
    job = run_one(store, "garbage", pidfile)
    assert job.status == "crashed" and job.error["type"] == "ProtocolError"
    assert job.error["detail"]["line"] == "this is not JSON\n"
    assert [pid for pid in pids(pidfile) if alive(pid)] == []


def test_a_result_not_of_its_probes_type_is_a_crash(store):
    """Results are parsed into their probe's type as they arrive; one that is not is refused there."""
    job = run_one(store, "misreport")
    assert (job.status, job.result, job.error["type"]) == ("crashed", None, "ProtocolError")
    assert "not a matmul result" in job.error["message"] and "environment" in job.error["message"]


def test_a_child_that_cannot_start_is_a_crash(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    assert Dispatcher(store, "w", child_argv=["/nonexistent/python"]).run_once()
    after = store.get(job.id)
    assert after.status == "crashed" and "could not start" in after.error["message"]


def running_child(store: Store, job_id: int, pidfile: Path) -> int:
    wait_for(lambda: store.get(job_id).status == "running" and pids(pidfile), what="the child to start")
    return pids(pidfile)[-1]


def test_cancel_stops_a_running_child(store, pidfile):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    worker = threading.Thread(target=dispatcher(store, "hang", pidfile).run_once)
    worker.start()
    pid = running_child(store, job.id, pidfile)
    store.cancel(job.id)
    worker.join(PATIENCE_S)
    assert store.get(job.id).status == "cancelled"
    assert not alive(pid)


def test_stop_requeues_the_running_job(store, pidfile):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    running = dispatcher(store, "hang", pidfile)
    running.start()
    pid = running_child(store, job.id, pidfile)
    assert running.stop(PATIENCE_S)
    after = store.get(job.id)
    assert (after.status, after.attempts) == ("queued", 0)
    assert not alive(pid)


# Submitted at once from 16 threads: more than the threads, so submits queue behind each other too;
# each job is a child process (about a second of CPU on a small box).
SUBMITS = 24


def test_one_job_at_a_time_under_concurrent_submits(store):
    running = dispatcher(store, "ok")
    running.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            jobs = pool.map(lambda i: store.submit(probe="matmul", params={"i": i, "sleep_s": 0},
                                                   timeout_s=60, limit=100), range(SUBMITS))
            ids = [job.id for job in jobs]
        wait_for_count(lambda: store.counts()["succeeded"], SUBMITS, what="jobs finished")
    finally:
        running.stop(PATIENCE_S)
    assert sorted(ids) == list(range(1, SUBMITS + 1))
    rows = store.page(limit=100)[0]
    assert {job.attempts for job in rows} == {1}  # one run each, so each row's times are its only run
    assert overlapping(rows) == []
    assert {report(job)["echo"]["i"] for job in rows} == set(range(SUBMITS))


def test_two_dispatchers_claim_each_job_once(store):
    dispatchers = [Dispatcher(store, f"w{i}", child_argv=FAULT_ARGV, child_env={"TALLY_FAULT": "ok"},
                              poll_s=0.02) for i in range(2)]
    for each in dispatchers:
        each.start()
    try:
        for i in range(12):
            store.submit(probe="matmul", params={"i": i, "sleep_s": 0}, timeout_s=60, limit=100)
        wait_for(lambda: store.counts()["succeeded"] == 12, what="12 jobs to finish")
    finally:
        for each in dispatchers:
            each.stop(PATIENCE_S)
    assert {job.attempts for job in store.page()[0]} == {1}


# --- the standalone worker, killed and restarted ------------------------------------------------------

WORKER = """
import json, logging, sys
from app.jobs.worker import run
logging.basicConfig(level=logging.INFO)
logging.getLogger("tally.jobs").setLevel(logging.DEBUG)  # its idle waits too: a test counts them
run(**json.loads(sys.argv[1]))
"""
# Seconds without a heartbeat before a killed worker's job is recovered (the dispatcher beats every 1 s).
STALE_S = 3


@pytest.fixture
def workers(store, tmp_path, pidfile):
    """start(fault, worker_id="w1") -> a worker process on the store's database, its log in
    tmp_path/<worker_id>.log; jobs it leaves running are stale after STALE_S; all killed at the end."""
    started: list[subprocess.Popen] = []

    def start(fault: str, worker_id: str = "w1", worker_loss_retries: int = 3,
              **env: str) -> subprocess.Popen:
        env = {"TALLY_FAULT": fault, "TALLY_FAULT_PIDS": str(pidfile),
               "TALLY_FAULT_MARKER": str(tmp_path / "flaky.marker"), **env}
        args = {"database": store.database, "worker_id": worker_id, "child_argv": FAULT_ARGV,
                "child_env": env, "stale_after_s": STALE_S, "worker_loss_retries": worker_loss_retries}
        with open(tmp_path / f"{worker_id}.log", "a") as log:
            started.append(subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], cwd=ROOT,
                                            stderr=log))
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def kill_mid_job(store: Store, worker: subprocess.Popen, job_id: int, pidfile: Path, attempt: int) -> None:
    """SIGKILL the worker while the job's `attempt` runs; its child must go too (stdin's EOF)."""
    wait_for(lambda: len(pids(pidfile)) == attempt and store.get(job_id).status == "running",
             what=f"attempt {attempt} to start")
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    child = pids(pidfile)[-1]
    wait_for(lambda: not alive(child), what="the orphaned child to exit")
    assert store.get(job_id).status == "running"  # as the dead worker left it


def test_a_killed_worker_requeues_its_job_on_restart(store, workers, pidfile):
    job = store.submit(probe="matmul", params={"sleep_s": 0}, timeout_s=60, limit=10)
    kill_mid_job(store, workers("flaky"), job.id, pidfile, attempt=1)
    worker = workers("flaky")
    done = wait_for(lambda: (row := store.get(job.id)).terminal and row, what="the retried job to end")
    assert (done.status, done.attempts) == ("succeeded", 2)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(PATIENCE_S) == 0


def test_a_healthy_job_is_not_blamed_for_its_workers_deaths(store, workers, pidfile, tmp_path):
    """Killing the worker twice in a row requeues the job twice (TALLY_WORKER_LOSS_RETRIES is 3);
    the third run succeeds, and the job's attempts_log tells the story."""
    gate = tmp_path / "gate"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    kill_mid_job(store, workers("gated", TALLY_FAULT_GATE=str(gate)), job.id, pidfile, attempt=1)
    kill_mid_job(store, workers("gated", TALLY_FAULT_GATE=str(gate)), job.id, pidfile, attempt=2)
    workers("gated", TALLY_FAULT_GATE=str(gate))
    wait_for(lambda: len(pids(pidfile)) == 3, what="the third attempt to start")
    gate.touch()
    done = wait_for(lambda: (row := store.get(job.id)).terminal and row, what="the job to end")
    assert (done.status, done.attempts) == ("succeeded", 3)
    assert [e["reason"] for e in done.attempts_log] == ["worker_lost", "worker_lost", "succeeded"]


def test_a_job_whose_workers_keep_dying_fails_as_worker_lost(store, workers, pidfile):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    for attempt in (1, 2):
        kill_mid_job(store, workers("hang", worker_loss_retries=1), job.id, pidfile, attempt=attempt)
    workers("hang", worker_loss_retries=1)
    done = wait_for(lambda: (row := store.get(job.id)).terminal and row, what="the job to fail")
    assert (done.status, done.attempts, done.error["type"]) == ("failed", 2, "WorkerLost")
    assert len(pids(pidfile)) == 2  # no third attempt ran


def test_sigterm_requeues_and_exits_cleanly(store, workers, pidfile):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    worker = workers("hang")
    pid = running_child(store, job.id, pidfile)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(PATIENCE_S) == 0
    assert (store.get(job.id).status, store.get(job.id).attempts) == ("queued", 0)
    assert not alive(pid)


def test_worker_help():
    result = subprocess.run([sys.executable, "-m", "app.jobs.worker", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 0, result.stderr
    assert "--database" in result.stdout and "--worker-id" in result.stdout


# --- two dispatchers on one database and one device ----------------------------------------------------

def test_a_starting_worker_leaves_a_live_workers_job_alone(store, workers, pidfile, tmp_path):
    """Even under the same id: start-up recovery takes only jobs whose heartbeat is stale."""
    gate = tmp_path / "gate"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    workers("gated", "same", TALLY_FAULT_GATE=str(gate))
    wait_for(lambda: len(pids(pidfile)) == 1 and store.get(job.id).status == "running", what="the job to run")
    workers("gated", "same", TALLY_FAULT_GATE=str(gate))
    log = tmp_path / "same.log"
    wait_for(lambda: log.read_text().count("dispatcher same started") == 2, what="the second worker to start")
    idle = "nothing it may run is queued"
    later = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    looked = log.read_text().count(idle)
    # The idle one has looked at the queue twice since (the first of them may have begun before the
    # submit; the other worker is busy with the job): neither may start a second child on the device.
    wait_for(lambda: log.read_text().count(idle) >= looked + 2, what="the idle worker to look twice")
    assert (store.get(job.id).status, store.get(job.id).attempts, len(pids(pidfile))) == ("running", 1, 1)
    assert store.get(later.id).status == "queued"
    gate.touch()
    wait_for(lambda: store.counts()["succeeded"] == 2, what="both jobs to finish")
    assert overlapping(store.page()[0]) == []


def test_a_paused_workers_late_result_is_fenced_off_by_its_claim(store, workers, pidfile, tmp_path):
    """Two workers under one TALLY_WORKER_ID. The first is paused (SIGSTOP) while its child runs; its
    child reports and exits, the report waiting in the paused worker's pipe; past the stale bound the
    second recovers the job and runs it again. The first, resumed, must record nothing (its claim is
    no longer the row's) and must not stop the live attempt."""
    gates = tmp_path / "gate1", tmp_path / "gate2"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    first = workers("gated", "same", TALLY_FAULT_GATE=str(gates[0]))
    wait_for(lambda: len(pids(pidfile)) == 1 and store.get(job.id).status == "running", what="attempt 1")
    first.send_signal(signal.SIGSTOP)
    try:
        gates[0].touch()  # its child reports and exits; the report waits in the paused worker's pipe
        wait_for(lambda: not alive(pids(pidfile)[0]), what="attempt 1's child to exit")
        workers("gated", "same", TALLY_FAULT_GATE=str(gates[1]))
        wait_for(lambda: len(pids(pidfile)) == 2 and store.get(job.id).attempts == 2, what="attempt 2",
                 timeout=PATIENCE_S + STALE_S)
    finally:
        first.send_signal(signal.SIGCONT)
    log = tmp_path / "same.log"
    wait_for(lambda: "no longer running here" in log.read_text() or "was taken from this worker"
             in log.read_text(), what="the resumed worker to find its attempt over")
    live = store.get(job.id)
    assert (live.status, live.attempts, live.result) == ("running", 2, None)
    assert alive(pids(pidfile)[1])  # the live attempt's child runs on
    gates[1].touch()
    done = wait_for(lambda: (row := store.get(job.id)).terminal and row, what="attempt 2 to end")
    assert (done.status, done.attempts) == ("succeeded", 2)
    assert [e["reason"] for e in done.attempts_log] == ["worker_lost", "succeeded"]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # processes and locks: one engine is enough
def test_no_two_children_run_on_one_device_whatever_the_pause(store, workers):
    """Two workers of one box, and a job at a time; the busy worker is paused (SIGSTOP) for less than
    its child's keep-alive deadline (2 s: two thirds of STALE_S), for between that and the stale
    bound, and for past the stale bound (when the other may take the device's lease). A sampler
    reading the process table every 10 ms never finds two children on the box's CPU: a child whose
    worker falls silent stops itself before its lease can be taken, and a claimer waits for any
    process still on its device."""
    device = f"{store.identity}/{socket.gethostname()}:cpu"
    counts: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            counts.append(len(sweep.on_devices([device])))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = {worker_id: workers("ok", worker_id) for worker_id in ("w1", "w2")}
    try:
        # Each child runs on through its worker's pause, and past the pause's end by as long as the
        # other worker may take to recover the job (its recovery runs every STALE_S).
        for pause_s in (1.0, 2.5, 4.0):
            run_s = pause_s + (2 * STALE_S if pause_s > STALE_S else 0) + 1.5
            job = store.submit(probe="matmul", params={"sleep_s": run_s}, timeout_s=60, limit=10)
            running = wait_for(lambda j=job: (row := store.get(j.id)).status == "running" and row,
                               what="the job to start")
            busy = started[running.worker_id]
            busy.send_signal(signal.SIGSTOP)
            try:
                time.sleep(pause_s)  # the pause is what is tried: not a wait for anything
            finally:
                busy.send_signal(signal.SIGCONT)
            done = wait_for(lambda j=job: (row := store.get(j.id)).terminal and row, what="the job to end",
                            timeout=PATIENCE_S + STALE_S)
            assert done.status == "succeeded", (pause_s, done.error, done.attempts_log)
    finally:
        stop.set()
        sampler.join()
    assert max(counts) == 1, f"{counts.count(2)} samples saw two children on {device}"


def test_two_worker_processes_never_run_two_jobs_on_one_device(store, workers):
    ids = [store.submit(probe="matmul", params={"sleep_s": 0.3, "i": i}, timeout_s=60, limit=10).id
           for i in range(6)]
    workers("ok", "w1")
    workers("ok", "w2")
    wait_for(lambda: store.counts()["succeeded"] == len(ids), what="every job to finish")
    rows = store.page()[0]
    assert overlapping(rows) == [] and {job.attempts for job in rows} == {1}
    assert store.held_leases() == []
