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

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    device TEXT PRIMARY KEY,
    job_id INTEGER NOT NULL,
    worker_id TEXT,
    heartbeat_at REAL NOT NULL
);
"""


def busy(db: sqlite3.Connection, *, host: str, now: float, stale_after_s: float) -> set[str]:
    """The units ("gpu<N>", "cpu", "*") of `host` under a live lease (read inside the claim's write
    transaction); app/jobs/placement.py reads them."""
    prefix = f"{host}:"
    rows = db.execute("SELECT device FROM leases WHERE substr(device, 1, ?) = ? AND heartbeat_at >= ?",
                      (len(prefix), prefix, now - stale_after_s)).fetchall()
    return {row[0][len(prefix):] for row in rows}


def take(db: sqlite3.Connection, key: str, *, job_id: int, worker_id: str, now: float) -> None:
    # REPLACE: a stale lease on the key is its dead holder's, and is taken over.
    db.execute("INSERT OR REPLACE INTO leases (device, job_id, worker_id, heartbeat_at) VALUES (?, ?, ?, ?)",
               (key, job_id, worker_id, now))


def renew(db: sqlite3.Connection, *, job_id: int, now: float) -> None:
    db.execute("UPDATE leases SET heartbeat_at = ? WHERE job_id = ?", (now, job_id))


def release(db: sqlite3.Connection, *, job_id: int) -> None:
    db.execute("DELETE FROM leases WHERE job_id = ?", (job_id,))


def held(db: sqlite3.Connection) -> list[tuple[str, int]]:
    """(device, job id) of every lease, live or stale, by device."""
    return [(row[0], row[1]) for row in db.execute("SELECT device, job_id FROM leases ORDER BY device")]
