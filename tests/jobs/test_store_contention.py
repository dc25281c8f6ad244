"""Eight worker processes, each with its own Store on one database, claim and finish 500 jobs at
once, on both databases: each on a host of its own (PostgreSQL: SKIP LOCKED keeps them apart), and
all on one host (its advisory lock makes them decide its leases one at a time). Every job is
claimed exactly once and ends succeeded. The figures are printed (pytest -s); larger runs:
bench/store_contention.py."""

import pytest

from app.jobs.store import Store
from tests.support.contention import Crew

WORKERS = 8
JOBS = 500


@pytest.fixture(scope="module")
def crew():
    with Crew(WORKERS) as started:
        yield started


@pytest.mark.parametrize("shared_host", [False, True], ids=["own-hosts", "one-host"])
def test_every_job_is_claimed_exactly_once(crew, database, shared_host):
    run = crew.run(str(database), jobs=JOBS, shared_host=shared_host)
    store = Store(database)
    try:
        where = "one host" if shared_host else "their own hosts"
        print(f"\n{store.dialect}, {WORKERS} workers on {where}: {JOBS} jobs in {run.wall_s:.2f} s, "
              f"{run.claims_per_s:.0f} claims/s, per worker {run.per_worker}")
        assert sorted(run.claims) == list(range(1, JOBS + 1))
        assert set(run.claims.values()) == {1}  # never twice
        jobs, total = store.page(limit=JOBS)
        assert total == JOBS and {(job.status, job.attempts) for job in jobs} == {("succeeded", 1)}
        assert store.held_leases() == []
        assert sum(run.per_worker) == JOBS and sum(n > 0 for n in run.per_worker) >= 2  # they did contend
        if shared_host:  # each ran only on its own GPU of the box
            assert all(job.ran_on_gpus == [int(job.worker_id.rsplit("gpu", 1)[1])] for job in jobs)
    finally:
        store.close()
