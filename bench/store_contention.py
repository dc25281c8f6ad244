"""The job store under contention, both databases side by side: worker processes (spawned, each its
own Store on one database) claim and finish every queued job as fast as they can, each on a host
of its own and then all on one host, on a SQLite file and on a throw-away PostgreSQL cluster
(tests/support/pg.py). Every job must be claimed exactly once; prints claims per second.
On PostgreSQL it then times an idle dispatcher's pick-up (submitted to claimed) with a poll of an
hour, so each pick-up is LISTEN/NOTIFY's: median and worst against the 1 s target.

    .venv/bin/python bench/store_contention.py [--jobs 5000] [--workers 8,16] [--databases sqlite,postgresql]
        [--pickups 20]

Claims here do nothing between claim and finish, so this is the store's ceiling, not a fleet's
load: a real job holds its worker for seconds. The cluster runs with fsync off (a test cluster),
SQLite with synchronous=NORMAL (Tally's setting), both on this machine's disk.
"""

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/support/pg.py and tests/support/contention.py, shared with the tests

from tests.support import pg  # noqa: E402
from tests.support.contention import Crew, Run  # noqa: E402

DATABASES = ("sqlite", "postgresql")


def _checked(run: Run) -> Run:
    if sorted(run.claims) != list(range(1, run.jobs + 1)) or set(run.claims.values()) != {1}:
        twice = sorted(job_id for job_id, n in run.claims.items() if n > 1)
        raise SystemExit(f"claims went wrong: {run.jobs - len(run.claims)} jobs never claimed, "
                         f"{len(twice)} claimed more than once ({twice[:10]})")
    return run


PICKUP_TARGET_S = 1.0
"""An idle dispatcher on PostgreSQL starts a submitted job within a second, whatever its poll."""


def _pickups(url: str, samples: int) -> list[float]:
    """Seconds from submit to claim for `samples` jobs, one at a time, each submitted once the
    dispatcher has looked at the empty queue again and waits on its listener."""
    from app.jobs.dispatcher import Dispatcher
    from app.jobs.store import Store
    from tests.support.jobs import FAULT_ARGV
    from tests.support.waiting import wait_for

    store = Store(url)
    dispatcher = Dispatcher(store, "idle", child_argv=FAULT_ARGV, child_env={"TALLY_FAULT": "ok"},
                            poll_s=3600)
    dispatcher.start()
    seconds = []
    looked = 2  # its first wait starts the listener and looks again; the second is on the listener
    try:
        for _ in range(samples):
            wait_for(lambda n=looked: dispatcher.idle_waits >= n, what="an idle wait")
            looked = dispatcher.idle_waits + 1  # after this job, its next look finds the queue empty
            job = store.submit(probe="matmul", params={"sleep_s": 0}, timeout_s=60, limit=1000)
            done = wait_for(lambda j=job: (row := store.get(j.id)).terminal and row, what="the job")
            seconds.append(done.started_at - done.created_at)
    finally:
        dispatcher.stop(30)
        store.close()
    return seconds


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--jobs", type=int, default=5000)
    cli.add_argument("--workers", default="8,16", help="worker counts (default: %(default)s)")
    cli.add_argument("--databases", default=",".join(DATABASES), help="default: %(default)s")
    cli.add_argument("--pickups", type=int, default=20, help="pick-ups timed on PostgreSQL (0: none)")
    args = cli.parse_args()
    databases = [e for e in args.databases.split(",") if e]
    unknown = set(databases) - set(DATABASES)
    if unknown:
        cli.error(f"--databases: {sorted(unknown)} unknown; {list(DATABASES)}")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tally-bench-")))
        server = stack.enter_context(pg.cluster()) if "postgresql" in databases else None
        made = iter(range(1_000_000))

        def fresh(engine: str) -> str:
            return str(tmp / f"{next(made)}.db") if engine == "sqlite" else pg.new_database(server)

        print(f"{args.jobs} jobs claimed and finished; claims per second (wall time)")
        print(f"{'workers':>8} {'hosts':>10} " + " ".join(f"{e:>24}" for e in databases))
        for workers in (int(w) for w in args.workers.split(",")):
            with Crew(workers) as crew:
                for shared_host in (False, True):
                    runs = [_checked(crew.run(fresh(e), jobs=args.jobs, shared_host=shared_host))
                            for e in databases]
                    cells = " ".join(f"{f'{r.claims_per_s:,.0f}/s ({r.wall_s:.1f} s)':>24}" for r in runs)
                    print(f"{workers:>8} {'one' if shared_host else 'each own':>10} {cells}", flush=True)
        if server is not None and args.pickups:
            times = sorted(_pickups(fresh("postgresql"), args.pickups))
            median, worst = times[len(times) // 2], times[-1]
            print(f"idle dispatcher's pick-up on postgresql (poll 1 h), {len(times)} jobs: median "
                  f"{median * 1000:.1f} ms, worst {worst * 1000:.1f} ms; worst/target "
                  f"{worst / PICKUP_TARGET_S:.2f}")


if __name__ == "__main__":
    main()
