"""The job queue (app/jobs/store.py), the dispatcher, and the standalone worker.

Children are tests/fault_child.py: the real child protocol with probes that misbehave on
request. Waits poll against generous deadlines; nothing here asserts a speed.
"""

import inspect
import itertools
import json
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.contract.results import Skipped
from app.jobs import job as job_module
from app.jobs import store as store_module
from app.jobs.dispatcher import Dispatcher
from app.jobs.job import STATES, TERMINAL, TRANSITIONS, Job
from app.jobs.store import QueueFull, Store
from tests.results import report, result_for
from tests.waiting import PATIENCE_S, wait_for

SKIPPED = Skipped("float8_e4m3fn", "on purpose")

ROOT = Path(__file__).resolve().parent.parent
FAULT_ARGV = [sys.executable, "-m", "tests.fault_child"]


def alive(pid: int) -> bool:
    """Running, not merely a zombie that nobody has reaped yet (a container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "tally.db")


@pytest.fixture
def pidfile(tmp_path) -> Path:
    return tmp_path / "children.pids"


def dispatcher(store: Store, fault: str, pidfile: Path | None = None, **env: str) -> Dispatcher:
    child_env = {"TALLY_FAULT": fault, **env} | ({"TALLY_FAULT_PIDS": str(pidfile)} if pidfile else {})
    return Dispatcher(store, "test-worker", child_argv=FAULT_ARGV, child_env=child_env, poll_s=0.05,
                      kill_grace_s=2)


# --- the store ---------------------------------------------------------------------------------------

def test_submit_claim_finish(store):
    job = store.submit(probe="matmul", params={"m": 4}, timeout_s=60, limit=10, device="cuda:0")
    assert (job.status, job.attempts, job.params, job.device) == ("queued", 0, {"m": 4}, "cuda:0")
    claimed = store.claim(worker_id="w1")
    assert (claimed.id, claimed.status, claimed.attempts, claimed.worker_id) == (job.id, "running", 1, "w1")
    assert claimed.started_at >= job.created_at and claimed.heartbeat_at is not None
    assert store.claim(worker_id="w1") is None
    assert store.progress(job.id, done=3, total=10, message="step 3")
    assert store.finish(job.id, status="succeeded", result=result_for("matmul", skipped=[SKIPPED]))
    done = store.get(job.id)
    assert (done.status, done.error) == ("succeeded", None)
    assert done.result == result_for("matmul", skipped=[SKIPPED])
    assert done.result.skipped[0].reason == "on purpose"  # typed: attributes, not keys
    assert done.progress_done == 3
    assert done.terminal and done.finished_at >= done.started_at
    assert done.revision > claimed.revision > job.revision
    assert store.get(job.id + 1) is None


def test_claim_takes_the_oldest(store):
    first, second = (store.submit(probe="matmul", params={"n": n}, timeout_s=60, limit=10) for n in range(2))
    assert store.claim(worker_id="w").id == first.id
    assert store.claim(worker_id="w").id == second.id


def test_submit_refuses_beyond_the_limit(store):
    jobs = [store.submit(probe="matmul", params={}, timeout_s=60, limit=2) for _ in range(2)]
    store.claim(worker_id="w")  # running jobs count against the limit too
    with pytest.raises(QueueFull) as refused:
        store.submit(probe="matmul", params={}, timeout_s=60, limit=2)
    assert refused.value.limit == 2 and "2" in str(refused.value)
    assert store.queue_depth() == 2
    store.finish(jobs[0].id, status="succeeded", result=result_for("matmul"))
    assert store.submit(probe="matmul", params={}, timeout_s=60, limit=2).status == "queued"


def test_list_filters_paginates_and_counts(store):
    matmuls = [store.submit(probe="matmul", params={"i": i}, timeout_s=60, limit=100).id for i in range(5)]
    bandwidths = [store.submit(probe="bandwidth", params={"i": i}, timeout_s=60, limit=100).id
                  for i in range(3)]
    page, total = store.page(probe="matmul", limit=2, offset=1)
    assert [job.id for job in page] == matmuls[::-1][1:3] and total == 5
    everything, total = store.page()
    assert [job.id for job in everything] == sorted(matmuls + bandwidths, reverse=True) and total == 8
    store.claim(worker_id="w")
    store.cancel(bandwidths[0])
    running, total = store.page(status="running")
    assert [job.id for job in running] == [matmuls[0]] and total == 1
    some, total = store.page(status=["running", "cancelled"], limit=1)
    assert [job.id for job in some] == [bandwidths[0]] and total == 2
    assert store.page(probe="transfer") == ([], 0)
    with pytest.raises(ValueError, match="unknown job status"):
        store.page(status="done")


def test_cancel_a_queued_job_at_once(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    cancelled = store.cancel(job.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert store.claim(worker_id="w") is None
    assert store.cancel(job.id).revision == cancelled.revision  # terminal: unchanged
    assert store.cancel(job.id + 1) is None


def test_cancel_a_running_job_flags_it_and_a_late_finish_is_a_no_op(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w")
    flagged = store.cancel(job.id)
    assert (flagged.status, flagged.cancel_requested) == ("running", True)
    assert store.finish(job.id, status="cancelled")
    assert not store.finish(job.id, status="succeeded", result=result_for("matmul"))
    assert not store.progress(job.id, done=1, total=1) and not store.heartbeat(job.id)
    after = store.get(job.id)
    assert (after.status, after.result) == ("cancelled", None)


def test_writes_guarded_by_worker_id(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w1")
    assert not store.finish(job.id, status="succeeded", result=result_for("matmul"), worker_id="w2")
    assert store.finish(job.id, status="succeeded", result=result_for("matmul"), worker_id="w1")


def test_finish_needs_a_terminal_status(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w")
    with pytest.raises(ValueError, match="terminal"):
        store.finish(job.id, status="queued")


def test_the_transition_table_is_the_one_the_docstring_draws():
    drawn: dict[str, set[str]] = {state: set() for state in STATES}
    for old, new in re.findall(r"^    (\w+) +-> (\w+) ", job_module.__doc__, re.MULTILINE):
        drawn[old].add(new)
    assert drawn == {state: set(moves) for state, moves in TRANSITIONS.items()}
    never_left = re.search(r"TERMINAL states \(([^)]*)\) are never left", job_module.__doc__)
    assert set(never_left.group(1).split(", ")) == TERMINAL
    assert all(not TRANSITIONS[state] for state in TERMINAL)
    # _move's UPDATE is the one statement that writes status (submit's INSERT only creates a row).
    assert inspect.getsource(store_module).count("SET status") == 1


def test_a_move_the_table_lacks_is_refused(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    with store._write() as db, pytest.raises(ValueError, match="cannot move from 'queued' to 'succeeded'"):
        store._move(db, job.id, old="queued", new="succeeded", values={})
    store.claim(worker_id="w")
    assert store.finish(job.id, status="succeeded", result=result_for("matmul"))
    with store._write() as db, pytest.raises(ValueError, match="cannot move from 'succeeded' to 'running'"):
        store._move(db, job.id, old="succeeded", new="running", values={"worker_id": "w"})
    with store._write() as db, pytest.raises(ValueError, match="cannot write"):
        store._move(db, job.id, old="running", new="failed", values={"probe": "bandwidth"})
    after = store.get(job.id)
    assert (after.status, after.probe, after.result) == ("succeeded", "matmul", result_for("matmul"))


def test_recover_requeues_once_then_marks_crashed(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w1")
    assert store.recover(worker_id="w1", stale_after_s=3600) == [job.id]
    requeued = store.get(job.id)
    assert (requeued.status, requeued.attempts, requeued.worker_id) == ("queued", 1, None)
    assert store.claim(worker_id="w1").attempts == 2
    assert store.recover(worker_id="w1", stale_after_s=3600) == [job.id]
    crashed = store.get(job.id)
    assert crashed.status == "crashed" and crashed.error["type"] == "Interrupted"
    assert "interrupted 2 times" in crashed.error["message"]
    assert store.page() == ([crashed], 1)  # kept, never deleted


def test_recover_takes_stale_jobs_of_other_workers_only(store):
    fresh, stale = (store.submit(probe="matmul", params={}, timeout_s=60, limit=10) for _ in range(2))
    store.claim(worker_id="alive")
    store.claim(worker_id="dead")
    with store._write() as db:  # a heartbeat from long ago
        db.execute("UPDATE jobs SET heartbeat_at = 0 WHERE id = ?", (stale.id,))
    assert store.recover(worker_id="me", stale_after_s=30) == [stale.id]
    assert store.recover(worker_id=None, stale_after_s=30) == []
    assert store.get(fresh.id).status == "running"


def test_requeue_does_not_count_the_attempt(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="w")
    assert store.requeue(job.id)
    assert (store.get(job.id).status, store.get(job.id).attempts) == ("queued", 0)
    assert not store.requeue(job.id)
    store.claim(worker_id="w")
    store.cancel(job.id)
    assert store.requeue(job.id) and store.get(job.id).status == "cancelled"


def test_counts_and_latest(store):
    ids = [store.submit(probe="matmul", params={"i": i}, timeout_s=60, limit=10, device=f"cuda:{i % 2}").id
           for i in range(4)]
    for _ in ids[:3]:
        job = store.claim(worker_id="w")
        store.finish(job.id, status="succeeded", result=result_for("matmul"))
    counts = store.counts()
    assert set(counts) == set(STATES) and counts["succeeded"] == 3 and counts["queued"] == 1
    assert sum(counts.values()) == 4 and counts["oom"] == 0
    assert [job.id for job in store.latest(probe="matmul")] == ids[2::-1]
    assert [job.id for job in store.latest(probe="matmul", device="cuda:0", limit=1)] == [ids[2]]
    assert store.latest(probe="bandwidth") == []


def test_wal_mode(store):
    assert store.journal_mode() == "wal"
    assert Store(store.path).journal_mode() == "wal"


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


def overlapping(jobs: list[Job]) -> list[tuple[int, int]]:
    """The pairs of ended jobs whose runs, [started_at, finished_at] from their rows, share a moment.

    A dispatcher claims its next job only after recording the last one's end, so the rows alone
    show whether two ever ran at once, however briefly: no sampling that could miss it.
    """
    return [(a.id, b.id) for a, b in itertools.combinations(jobs, 2)
            if a.started_at < b.finished_at and b.started_at < a.finished_at]


def test_one_job_at_a_time_under_concurrent_submits(store):
    running = dispatcher(store, "ok")
    running.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            jobs = pool.map(lambda i: store.submit(probe="matmul", params={"i": i, "sleep_s": 0},
                                                   timeout_s=60, limit=100), range(50))
            ids = [job.id for job in jobs]
        wait_for(lambda: store.counts()["succeeded"] == 50, what="50 jobs to finish")
    finally:
        running.stop(PATIENCE_S)
    assert sorted(ids) == list(range(1, 51))
    rows = store.page(limit=100)[0]
    assert {job.attempts for job in rows} == {1}  # one run each, so each row's times are its only run
    assert overlapping(rows) == []
    assert {report(job)["echo"]["i"] for job in rows} == set(range(50))


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
import json, sys
from app.jobs.worker import run
run(**json.loads(sys.argv[1]))
"""


@pytest.fixture
def workers(tmp_path, pidfile):
    """start(fault) -> a worker process on tmp_path's database, as worker id w1; all killed at the end."""
    started: list[subprocess.Popen] = []

    def start(fault: str) -> subprocess.Popen:
        env = {"TALLY_FAULT": fault, "TALLY_FAULT_PIDS": str(pidfile),
               "TALLY_FAULT_MARKER": str(tmp_path / "flaky.marker")}
        args = {"database": str(tmp_path / "tally.db"), "worker_id": "w1", "child_argv": FAULT_ARGV,
                "child_env": env}
        started.append(subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], cwd=ROOT))
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


def test_a_job_interrupted_twice_is_crashed(store, workers, pidfile):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    kill_mid_job(store, workers("hang"), job.id, pidfile, attempt=1)
    kill_mid_job(store, workers("hang"), job.id, pidfile, attempt=2)
    workers("hang")
    done = wait_for(lambda: (row := store.get(job.id)).terminal and row, what="the job to be marked crashed")
    assert (done.status, done.attempts, done.error["type"]) == ("crashed", 2, "Interrupted")
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
