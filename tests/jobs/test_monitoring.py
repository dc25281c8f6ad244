"""The reads /metrics makes at each scrape (app/jobs/monitoring.py), on both databases: the marks
that change when a job joins the succeeded ones, and each device's newest burn-in that ended, read
without its result."""

from app.jobs.fleet import Serves, Targets
from tests.support.results import result_for

GPU = {"device": "GPU-1", "host": "box-a", "kind": "cuda", "gpu_index": 0, "name": "NVIDIA H200",
       "catalogue_id": "h200"}


SERVES = Serves("GPU-1", ("NVIDIA H200",))


def ended(store, probe: str, *, status: str = "succeeded") -> int:
    job = store.submit(probe=probe, params={}, timeout_s=60, limit=100, targets=Targets(device="GPU-1"))
    running = store.claim(worker_id="w", gpu=0, host="box-a", served=[0], serves=SERVES)
    assert running.id == job.id
    error = None if status == "succeeded" else {"type": "E", "message": "m", "detail": {}}
    store.finish(job.id, status=status, claim=running.claim, error=error,
                 result=result_for(probe) if status == "succeeded" else None)
    return job.id


def test_the_marks_move_when_a_job_succeeds_on_a_device(store):
    store.register(GPU)
    assert store.measured_mark() == (0, 0) and store.measured_ids() == []
    first = ended(store, "bandwidth")
    ended(store, "bandwidth", status="failed")
    outside = store.submit(probe="bandwidth", params={}, timeout_s=60, limit=100)  # no fleet device
    running = store.claim(worker_id="plain", host="box-z")
    store.finish(outside.id, status="succeeded", claim=running.claim, result=result_for("bandwidth"))
    second = ended(store, "bandwidth")
    assert store.measured_mark() == (2, second) and store.measured_ids() == [second, first]
    assert [j.id for j in store.jobs_by_id([second, first, 10**9])] == [first, second]
    assert store.jobs_by_id([first])[0].result is not None


def test_each_devices_newest_ended_burn_in_is_read_without_its_result(store):
    store.register(GPU)
    c, (member,) = store.start_campaign(probe="burn_in", params={}, timeout_s=60, limit=100,
                                        outlier_fraction=0.1)
    running = store.claim(worker_id="w", gpu=0, host="box-a", served=[0], serves=SERVES)
    store.finish(member.id, status="succeeded", claim=running.claim, result=result_for("burn_in"))
    failed = ended(store, "burn_in", status="failed")
    cancelled = store.submit(probe="burn_in", params={}, timeout_s=60, limit=100,
                             targets=Targets(device="GPU-1"))
    store.cancel(cancelled.id)
    (last,) = store.last_ended(probe="burn_in")
    assert (last.id, last.status, last.ran_on_device, last.result) == (failed, "failed", "GPU-1", None)
    assert store.succeeded_in([c.id, 10**9]) == {c.id: (1, member.id)}
    assert store.succeeded_in([]) == {}
