"""A campaign queues all its jobs or none: each is admitted (time limit, memory, least duration)
before any is queued, so a job refused part-way leaves no half campaign in the queue."""

from app.probes import campaign
from app.probes.registry import PROBES
from tests.support.api import assert_names_field


def least(job: dict) -> float:
    probe = PROBES[job["probe"]]
    return probe.least_seconds(probe.params.model_validate(job["params"]), "cpu")[0]


def test_a_job_refused_part_way_leaves_nothing_queued(make_api):
    jobs = campaign.jobs("cpu")
    # A job timeout the first job fits in and a later one cannot: the later one is refused.
    refused = next(i for i, job in enumerate(jobs) if least(job) > least(jobs[0]))
    timeout = (least(jobs[0]) + least(jobs[refused])) / 2
    assert refused > 0 and timeout >= 1
    api = make_api(job_timeout_s=timeout)
    answer = api.post("/api/v1/calibration/campaigns", {})
    assert_names_field(answer, "timeout_s")
    assert api.get("/api/v1/jobs").json()["count"] == 0
    assert api.get("/api/v1/calibration/profiles").json() == []
