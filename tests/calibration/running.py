"""Campaign jobs (app/probes/campaign.py) run in this process by the probes' own functions, as
tests/probes/test_probes.py runs them, and stored as finished jobs."""

from typing import Any

from app.bench import attention, bandwidth, generate, matmul, train_step, transfer
from app.jobs.store import Store
from app.measured import doubts
from app.probes.registry import RESULTS
from tests.support.bench_jobs import finished

RUN = {
    "matmul": matmul.run,
    "attention": attention.run,
    "bandwidth": bandwidth.run,
    "transfer": transfer.run,
    "generate": generate.run,
    "train_step": train_step.run,
}
TRIES = 3
"""A campaign queues a run again when another process shared the host with it (app/measured/doubts.py):
this shared two-core box has neighbours."""


def quiet(*_: Any) -> None:
    return None


def measured(job: dict) -> Any:
    """The job's result, run again (up to TRIES times) while other work shared the host."""
    for _ in range(TRIES):
        result = RESULTS.validate_python(RUN[job["probe"]](job["params"], quiet))
        if not doubts.contended(result):
            break
    return result


def run(store: Store, jobs: list[dict]) -> list[int]:
    """Runs each job whose probe RUN knows and stores it; the job ids."""
    return [finished(store, measured(job), job["params"]) for job in jobs if job["probe"] in RUN]
