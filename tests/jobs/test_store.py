"""The job queue (app/jobs/store.py): submitting, claiming, finishing, cancelling, recovering,
and the table of state moves every change goes through (app/jobs/job.py). Every test that takes
`store` runs on SQLite and on PostgreSQL (tests/jobs/conftest.py)."""

import ast
import inspect
import re

import pytest

from app.jobs import attempt_log, backends, database, fleet, leases, schema
from app.jobs import job as job_module
from app.jobs import store as store_module
from app.jobs.job import STATES, TERMINAL, TRANSITIONS
from app.jobs.store import QueueFull, Store
from app.probes.results import Skipped
from tests.support.results import result_for

SKIPPED = Skipped("float8_e4m3fn", "on purpose")


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
    store.requeue(first.id)  # the device is free again, and the first job is still the oldest
    assert store.claim(worker_id="w").id == first.id
    store.finish(first.id, status="failed", error={"type": "E", "message": "m", "detail": {}})
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


def test_writes_after_a_claim_are_fenced_by_its_token_not_the_workers_name(store):
    """A worker paused past the stale bound comes back to a job recovered and claimed again, here
    under its own name: its late writes name its old claim, and change nothing."""
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    first = store.claim(worker_id="same")
    assert first.claim and store.heartbeat(job.id, claim=first.claim)
    assert store.recover(stale_after_s=-1) == [job.id]  # its heartbeat counts as stale: back in the queue
    second = store.claim(worker_id="same")
    assert (second.id, second.attempts, second.worker_id) == (job.id, 2, "same") and second.claim != first.claim
    stale = first.claim
    assert not store.heartbeat(job.id, claim=stale)
    assert not store.progress(job.id, done=1, total=2, claim=stale)
    assert not store.finish(job.id, status="succeeded", result=result_for("matmul"), claim=stale)
    assert not store.requeue(job.id, claim=stale)
    row = store.get(job.id)
    assert (row.status, row.attempts, row.claim, row.progress_done) == ("running", 2, second.claim, 0)
    assert store.held_leases() != []  # the live attempt's lease is still held
    assert store.finish(job.id, status="succeeded", result=result_for("matmul"), claim=second.claim)
    ended = store.get(job.id)
    assert ended.status == "succeeded" and ended.claim is None and store.held_leases() == []
    assert [entry["attempt"] for entry in ended.attempts_log] == [1, 2]


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
    # _move's UPDATE is the one statement that writes status (_insert only creates a queued row, for
    # submit and for a campaign's jobs).
    assert writes_of_status(store_module) == ["_insert", "_move"]
    others = (leases, attempt_log, backends, database, schema, fleet)
    assert [writes_of_status(module) for module in others] == [[]] * len(others)


def writes_of_status(module) -> list[str]:
    """The functions of `module` that give `status` a value in a SQLAlchemy .values(...) call."""
    found = []
    for function in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(function, ast.FunctionDef):
            found += [function.name for call in ast.walk(function) if isinstance(call, ast.Call)
                      and isinstance(call.func, ast.Attribute) and call.func.attr == "values"
                      and any(keyword.arg == "status" for keyword in call.keywords)]
    return sorted(found)


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


def stale(store: Store, job_id: int) -> None:
    """Make the job's heartbeat (and so its device lease) one from long ago: its worker died."""
    with store._write() as db:
        db.execute(schema.jobs.update().where(schema.jobs.c.id == job_id).values(heartbeat_at=0))
        db.execute(schema.leases.update().where(schema.leases.c.job_id == job_id).values(heartbeat_at=0))


def test_worker_losses_are_retried_then_fail_as_worker_lost_never_crashed(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    for attempt in (1, 2, 3):
        claimed = store.claim(worker_id=f"w{attempt}")
        assert claimed.attempts == attempt
        stale(store, job.id)
        assert store.recover(stale_after_s=30, loss_retries=2) == [job.id]
        if attempt < 3:
            requeued = store.get(job.id)
            assert (requeued.status, requeued.attempts, requeued.worker_id) == ("queued", attempt, None)
    lost = store.get(job.id)
    assert lost.status == "failed" and lost.error["type"] == "WorkerLost"
    assert lost.error["detail"] == {"worker_losses": 3, "retries": 2}
    assert [(e["attempt"], e["worker_id"], e["reason"]) for e in lost.attempts_log] == [
        (1, "w1", "worker_lost"), (2, "w2", "worker_lost"), (3, "w3", "worker_lost")]
    assert all(e["started_at"] <= e["ended_at"] for e in lost.attempts_log)
    assert store.page() == ([lost], 1)  # kept, never deleted


def test_every_attempts_end_is_logged(store):
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    store.claim(worker_id="a")
    store.requeue(job.id)
    store.claim(worker_id="b")
    store.finish(job.id, status="crashed", error={"type": "ChildCrashed", "message": "m", "detail": {}})
    assert [(e["attempt"], e["worker_id"], e["reason"]) for e in store.get(job.id).attempts_log] == [
        (1, "a", "requeued"), (1, "b", "crashed")]


def test_recover_takes_stale_jobs_only_whoever_holds_them(store):
    fresh, old = (store.submit(probe="matmul", params={}, timeout_s=60, limit=10) for _ in range(2))
    store.claim(worker_id="alive", gpu=0)
    store.claim(worker_id="dead", gpu=1)
    stale(store, old.id)
    assert store.recover(stale_after_s=30) == [old.id]
    assert store.recover(stale_after_s=30) == []
    assert store.get(fresh.id).status == "running"


def test_one_job_per_device_whatever_the_worker_ids(store):
    """A claim leases its device: a second dispatcher (or a second one with the same id) finds it
    busy until the job ends, or until the lease's heartbeat is stale."""
    first, second, cpu = (store.submit(probe="matmul", params={}, timeout_s=60, limit=10, device=device)
                          for device in ("cuda", "cuda", "cpu"))
    assert store.claim(worker_id="a", gpu=0, host="box").id == first.id
    for worker_id in ("a", "b"):
        assert store.claim(worker_id=worker_id, gpu=0, host="box").id == cpu.id
        store.requeue(cpu.id)
    assert store.claim(worker_id="b", gpu=1, host="box").id == second.id  # another GPU: side by side
    assert store.held_leases() == [("box:gpu0", first.id), ("box:gpu1", second.id)]
    store.requeue(second.id)
    assert store.claim(worker_id="b", host="box").id == cpu.id  # its CPU is free
    assert store.claim(worker_id="b", host="box") is None  # the job naming no GPU waits for all of them
    assert store.claim(worker_id="b", gpu=0, host="box") is None
    assert store.claim(worker_id="b", gpu=0, host="other").id == second.id  # another host
    store.finish(first.id, status="failed", error={"type": "E", "message": "m", "detail": {}})
    assert ("box:gpu0", first.id) not in store.held_leases()
    stale(store, cpu.id)
    assert store.claim(worker_id="b", gpu=1, host="box") is None  # nothing left queued
    store.requeue(second.id)
    assert store.claim(worker_id="b", host="box").id == second.id  # the stale CPU lease is free


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


def test_wal_mode(tmp_path):
    store = Store(tmp_path / "tally.db")
    assert store.journal_mode() == "wal"
    assert Store(store.path).journal_mode() == "wal"


