"""A worker SIGKILLed in the middle of a job, on both databases, with nothing faked: the real
dispatcher (`python -m app.cli worker`) runs the real matmul probe on the CPU, many shapes long.
Killed, it leaves the job running in the table; a second worker, whose stale_after_s is short,
sees the job's heartbeat go stale, requeues it (its attempts_log says worker_lost) and runs it to
success. No job is lost. The times from the kill to the requeue and to the success are printed
(pytest -s)."""

import json
import signal
import subprocess
import sys
import time

from tests.support import ROOT
from tests.support.waiting import wait_for

# Seconds without a heartbeat before the second worker takes the job as its dead worker's (the
# dispatcher beats every second, so a live one is never taken).
STALE_S = 2
# 24 shapes, each warmed up and timed for about a fifth of a second: a few seconds of work, with a
# progress message per shape to kill it in the middle of. (Half of it, 12 shapes of a seventh of a
# second, once ended before the second worker had started on a loaded box.)
PARAMS = {"device": "cpu", "sweep": "custom", "dtypes": ["float32"], "warmup_s": 0.05, "measure_s": 0.15,
          "min_iters": 3, "max_iters": 50,
          "shapes": [{"m": 32 * i, "k": 128, "n": 128} for i in range(1, 25)]}
RESCUER = """
import json, logging, sys
from app.jobs.worker import run
logging.basicConfig(level=logging.INFO)
run(**json.loads(sys.argv[1]))
"""
# The workers' own state: no setting of the test process's environment but the path to the code.
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TALLY_LOG_LEVEL": "info"}


def start(tmp_path, name: str, argv: list[str]) -> subprocess.Popen:
    """A worker process, its log in tmp_path/<name>.log."""
    with open(tmp_path / f"{name}.log", "a") as log:
        return subprocess.Popen([sys.executable, *argv], cwd=tmp_path, env=ENV, stderr=log)


def test_a_sigkilled_workers_job_is_recovered_and_run_to_success_by_another(store, tmp_path):
    job = store.submit(probe="matmul", params=PARAMS, timeout_s=300, limit=10, device="cpu")
    doomed = start(tmp_path, "doomed", ["-m", "app.cli", "worker", "--database", store.database,
                                        "--worker-id", "doomed"])
    rescuer = None
    log = {name: lambda name=name: (tmp_path / f"{name}.log").read_text() for name in ("doomed", "rescuer")}
    try:
        wait_for(lambda: (row := store.get(job.id)).status == "running" and row.progress_done >= 3,
                 timeout=120, what="the job to be a few shapes in", context=log["doomed"])
        args = {"database": store.database, "worker_id": "rescuer", "stale_after_s": STALE_S}
        rescuer = start(tmp_path, "rescuer", ["-c", RESCUER, json.dumps(args)])
        wait_for(lambda: "dispatcher rescuer started" in log["rescuer"](), what="the second worker to start")
        doomed.send_signal(signal.SIGKILL)
        killed = time.time()
        doomed.wait()
        assert store.get(job.id).status == "running"  # as the dead worker left it
        done = wait_for(lambda: (row := store.get(job.id)).terminal and row, timeout=120,
                        what="the recovered job to end", context=log["rescuer"])
    finally:
        for worker in (doomed, rescuer):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
    assert (done.status, done.attempts, done.worker_id) == ("succeeded", 2, "rescuer")
    lost, succeeded = done.attempts_log
    assert (lost["attempt"], lost["worker_id"], lost["reason"]) == (1, "doomed", "worker_lost")
    assert (succeeded["attempt"], succeeded["worker_id"], succeeded["reason"]) == (2, "rescuer", "succeeded")
    assert len(done.result.points) == len(PARAMS["shapes"])  # the whole sweep, measured by the second
    counts = store.counts()
    assert counts["succeeded"] == 1 and sum(counts.values()) == 1 and store.held_leases() == []
    to_requeue, to_success = lost["ended_at"] - killed, done.finished_at - killed
    print(f"\n{store.dialect}: killed -> requeued {to_requeue:.2f} s, -> succeeded {to_success:.2f} s "
          f"(stale after {STALE_S} s; the second run took {done.finished_at - done.started_at:.2f} s)")
    assert 0 < to_requeue < to_success
