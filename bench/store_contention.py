"""The job store under contention, both databases side by side: worker processes (spawned, each its
own Store on one database) claim and finish every queued job as fast as they can, each on a host
of its own and then all on one host, on a SQLite file and on a throw-away PostgreSQL cluster
(tests/support/pg.py). Every job must be claimed exactly once; prints claims per second.

    .venv/bin/python bench/store_contention.py [--jobs 5000] [--workers 8,16] [--databases sqlite,postgresql]

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


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--jobs", type=int, default=5000)
    cli.add_argument("--workers", default="8,16", help="worker counts (default: %(default)s)")
    cli.add_argument("--databases", default=",".join(DATABASES), help="default: %(default)s")
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


if __name__ == "__main__":
    main()
