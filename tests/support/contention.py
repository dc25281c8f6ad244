"""Claimers in contention on one job database: worker processes (multiprocessing spawn, each with
its own Store on the same database) claim and finish every queued job as fast as they can. Used by
tests/jobs/test_store_contention.py and bench/store_contention.py.

The processes are started once (a Crew) and serve one run after another, so a run times claims,
not interpreter start-ups: a run starts once every worker has opened its store, and ends when the
last has found the queue empty.
"""

import multiprocessing
import time
from dataclasses import dataclass

from app.jobs.store import Store


@dataclass(frozen=True)
class Run:
    """One run's outcome. Times in seconds (time.monotonic, one clock for every process here)."""

    jobs: int
    workers: int
    shared_host: bool
    wall_s: float
    claims: dict[int, int]
    """Job id: how many times it was claimed, over every worker."""
    per_worker: list[int]
    """Jobs each worker claimed."""

    @property
    def claims_per_s(self) -> float:
        return sum(self.claims.values()) / self.wall_s


def _host(index: int, workers: int, shared_host: bool) -> tuple[str, int, list[int]]:
    """(host, GPU, the host's GPUs) of worker `index`: GPU `index` of one box with a GPU per worker,
    or the one GPU of a host of its own."""
    return ("box", index, list(range(workers))) if shared_host else (f"host{index}", 0, [0])


def _work(index: int, workers: int, inbox, outbox, barrier) -> None:
    """A worker process: for each run's database, claim and finish jobs until none is queued."""
    from tests.support.results import result_for  # here: the spawned process's own import

    result = result_for("matmul")
    while (spec := inbox.get()) is not None:
        database, shared_host = spec
        host, gpu, served = _host(index, workers, shared_host)
        store = Store(database)
        claimed: list[int] = []
        barrier.wait()
        while True:
            job = store.claim(worker_id=f"{host}:gpu{gpu}", gpu=gpu, host=host, served=served)
            if job is None:
                # None also when the queued jobs left are all in other claimers' SKIP LOCKED windows.
                if store.counts()["queued"] == 0:
                    break
                continue
            claimed.append(job.id)
            store.finish(job.id, status="succeeded", result=result, claim=job.claim)
        outbox.put((index, claimed, time.monotonic()))
        store.close()


class Crew:
    """`workers` spawned processes, ready for runs; a context manager that ends them."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.workers = workers
        self.inbox, self.outbox = context.Queue(), context.Queue()
        self.barrier = context.Barrier(workers + 1)  # the workers, ready, and this process
        self.processes = [context.Process(target=_work, daemon=True,
                                          args=(i, workers, self.inbox, self.outbox, self.barrier))
                          for i in range(workers)]
        for process in self.processes:
            process.start()

    def run(self, database: str, *, jobs: int, shared_host: bool, timeout_s: float = 600) -> Run:
        """Queue `jobs` jobs in the empty `database`, and have the crew claim and finish them all."""
        store = Store(database)
        try:
            for _ in range(jobs):
                store.submit(probe="matmul", params={}, timeout_s=60, limit=jobs, device="cuda")
        finally:
            store.close()
        for _ in self.processes:  # each takes one, then waits at the barrier for the others
            self.inbox.put((database, shared_host))
        self.barrier.wait(timeout_s)
        started = time.monotonic()
        ended, claims, per_worker = started, {}, [0] * self.workers
        for _ in self.processes:
            index, claimed, end = self.outbox.get(timeout=timeout_s)
            ended, per_worker[index] = max(ended, end), len(claimed)
            for job_id in claimed:
                claims[job_id] = claims.get(job_id, 0) + 1
        return Run(jobs=jobs, workers=self.workers, shared_host=shared_host, wall_s=ended - started,
                   claims=claims, per_worker=per_worker)

    def __enter__(self) -> "Crew":
        return self

    def __exit__(self, *exc: object) -> None:
        for _ in self.processes:
            self.inbox.put(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
