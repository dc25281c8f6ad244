"""Device leases: the SQL that keeps two jobs off one device, whatever the dispatchers' ids.

A claim takes the lease of every device its job will run on (one row per GPU for a job on
several; all of them or none), in the same write transaction (Store.claim), so two dispatchers
on one database, started however, cannot both run a job there: one would disturb the other's
measurement. The job's heartbeat renews its leases, any move out of `running` releases them
(Store._move), and a lease whose heartbeat is older than the claimer's stale_after_s counts as
free: its holder died without releasing it.

A device is named "<host>:gpu<N>", "<host>:cpu", or "<host>:*" for a job whose device is not
known to be one GPU (a CUDA job with no GPU named runs on the child's default device): that
one excludes, and is excluded by, every other lease of its host. Which are free, and which a
claim takes, is app/jobs/placement.py's rule over `busy`.
"""

import sqlalchemy as sa

from app.jobs import backends
from app.jobs.schema import leases


def of_host(db: sa.Connection, *, host: str) -> dict[str, float]:
    """{unit ("gpu<N>", "cpu", "*"): its lease's heartbeat, unix seconds} for every lease of `host`,
    live or stale (read inside the claim's write transaction, which then reads the clock)."""
    prefix = f"{host}:"
    # substr, not LIKE: a host name may hold "_" or "%", and SQLite's LIKE ignores case.
    rows = db.execute(sa.select(leases.c.device, leases.c.heartbeat_at).where(_of_host(host))).all()
    return {device[len(prefix):]: heartbeat_at for device, heartbeat_at in rows}


def busy(held: dict[str, float], *, now: float, stale_after_s: float) -> set[str]:
    """The units of `held` under a live lease at `now`; app/jobs/placement.py reads them."""
    return {unit for unit, heartbeat_at in held.items() if heartbeat_at >= now - stale_after_s}


def take(db: sa.Connection, key: str, *, job_id: int, worker_id: str, now: float) -> None:
    # Overwrite: a stale lease on the key is its dead holder's, and is taken over.
    row = {"device": key, "job_id": job_id, "worker_id": worker_id, "heartbeat_at": now}
    backends.upsert(db, leases, row, key="device")


def renew(db: sa.Connection, *, job_id: int, now: float) -> None:
    db.execute(leases.update().where(leases.c.job_id == job_id).values(heartbeat_at=now))


def _of_host(host: str) -> sa.ColumnElement[bool]:
    prefix = f"{host}:"
    return sa.func.substr(leases.c.device, 1, len(prefix)) == prefix


def renew_host(db: sa.Connection, *, job_id: int, host: str, now: float) -> None:
    """A job on several boxes (app/jobs/gangs.py): renew one box's leases of it."""
    db.execute(leases.update().where(leases.c.job_id == job_id, _of_host(host)).values(heartbeat_at=now))


def release_host(db: sa.Connection, *, job_id: int, host: str) -> None:
    db.execute(leases.delete().where(leases.c.job_id == job_id, _of_host(host)))


def release(db: sa.Connection, *, job_id: int) -> None:
    db.execute(leases.delete().where(leases.c.job_id == job_id))


def held(db: sa.Connection) -> list[tuple[str, int]]:
    """(device, job id) of every lease, live or stale, by device."""
    # Sorted here, not by ORDER BY: PostgreSQL's collation may order text otherwise than SQLite's bytes.
    rows = db.execute(sa.select(leases.c.device, leases.c.job_id))
    return sorted((device, job_id) for device, job_id in rows)
