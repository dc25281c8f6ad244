"""The durable job queue: all of Tally's SQL, here and in the three modules beside it that
keep its parts (schema.py: the tables and migration; leases.py: one job per device;
attempt_log.py: how each attempt ended), and placement.py, the SQL-free rule a claim follows.

Every operation opens its own connection (microseconds for a local file), so a
Store is safe to share between threads and to open from several processes at
once. WAL mode lets readers (the API, a watcher) run beside the one writer;
writes take `BEGIN IMMEDIATE` so a read-then-write such as a claim cannot
interleave with another process's.

Every change of a job's state goes through Store._move, which makes only the moves
app/jobs/job.py's TRANSITIONS table allows.
"""

import contextlib
import json
import logging
import socket
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.contract.registry import ProbeResult
from app.jobs import attempt_log, leases, placement, schema
from app.jobs.job import ACTIVE, STATES, TERMINAL, TRANSITIONS, Job, from_row, result_json
from app.jobs.storage import StoreUnavailable

log = logging.getLogger("tally.jobs")

# What a move may write besides status (its one writer is Store._move) and revision (every write's).
MOVE_COLUMNS = ("attempts", "started_at", "finished_at", "heartbeat_at", "worker_id", "ran_on_gpu",
                "ran_on_gpus", "progress_done", "progress_total", "progress_message", "result", "error",
                "cancel_requested")
# A claimed or requeued job starts its progress over.
FRESH_PROGRESS = {"progress_done": 0, "progress_total": 0, "progress_message": ""}
# Times a job whose worker died under it goes back to the queue (TALLY_WORKER_LOSS_RETRIES);
# such requeues are not the job's fault, so they never count against it as a crash would.
WORKER_LOSS_RETRIES = 3
# Seconds without a heartbeat before a running job (and its device lease) counts as its dead
# worker's: the dispatcher's default, and the lease rule's when a caller names none.
STALE_AFTER_S = 30
# Queued jobs a claim looks at for one whose device is free (older ones whose device is busy wait).
CLAIM_WINDOW = 50
# Seconds a connection waits on another's write lock; writes are short, so only a stuck peer gets near.
BUSY_TIMEOUT_S = 30

class QueueFull(Exception):
    """Raised by submit when `limit` jobs are already queued or running."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the queue is full: {limit} jobs are queued or running")
        self.limit = limit


def _json(value: Any) -> str | None:
    # allow_nan=False: a NaN would be stored but break every JSON client that reads it back.
    return None if value is None else json.dumps(value, allow_nan=False)


def _statuses(status: str | Sequence[str]) -> list[str]:
    statuses = [status] if isinstance(status, str) else list(status)
    unknown = sorted(set(statuses) - set(STATES))
    if unknown:
        raise ValueError(f"unknown job status {unknown}; expected one of {list(STATES)}")
    return statuses


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class Store:
    """The jobs table in the SQLite file at `path` (created, with its schema, if missing)."""

    def __init__(self, path: str | Path) -> None:
        """StoreUnavailable, saying why, when the file cannot be opened, created or written."""
        self.path = Path(path)
        try:
            self._create()
        except sqlite3.Error as e:
            raise StoreUnavailable(self.path, e) from None

    def _create(self) -> None:
        with contextlib.closing(self._open()) as db:
            # Persistent in the file: set once, every later connection is in WAL mode.
            db.execute("PRAGMA journal_mode=WAL")
            schema.migrate(db)
            db.executescript(schema.SCHEMA + leases.SCHEMA)

    def _recreate(self) -> None:
        """The file was deleted under a running server: start a new one rather than answer every
        request with "no such table". Its WAL and shared-memory files belonged to the old one."""
        log.warning("the job database %s is gone; creating a new, empty one", self.path)
        for leftover in ("-wal", "-shm"):
            Path(f"{self.path}{leftover}").unlink(missing_ok=True)
        self._create()

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; _write says BEGIN IMMEDIATE itself.
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        # NORMAL in WAL mode: a power cut may lose the last commits, never corrupt the file.
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():  # one stat: connecting would silently create an empty file
            self._recreate()
        db = self._open()
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                # SQLite has already rolled back after some errors (SQLITE_FULL): a second
                # ROLLBACK would raise and hide the error that matters.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def seen(self, *, worker_id: str) -> None:
        """A dispatcher says it is alive (idle or busy), for readiness checks."""
        with self._write() as db:
            db.execute("INSERT INTO workers (worker_id, seen_at) VALUES (?, ?) ON CONFLICT (worker_id) "
                       "DO UPDATE SET seen_at = excluded.seen_at", (worker_id, time.time()))

    def live_workers(self, *, within_s: float) -> list[str]:
        """Dispatchers seen in the last within_s seconds."""
        with self._connect() as db:
            rows = db.execute("SELECT worker_id FROM workers WHERE seen_at >= ? ORDER BY worker_id",
                              (time.time() - within_s,)).fetchall()
        return [r[0] for r in rows]

    @staticmethod
    def _row(db: sqlite3.Connection, job_id: int) -> Job | None:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else from_row(row)

    @staticmethod
    def _move(db: sqlite3.Connection, job_id: int, *, old: str, new: str, values: dict[str, Any],
              worker_id: str | None = None, reason: str | None = None) -> bool:
        """Move job `job_id` from state `old` to `new`, writing `values` (column: value) with it.

        A move out of `running` ends an attempt: its entry goes on the job's attempts_log, with
        `reason` (default: the new status), and its device lease is released.

        The only writer of `status`: a move TRANSITIONS lacks raises ValueError, writing nothing.
        False, changing nothing, when the row is not in `old` or, with worker_id, no longer held by
        that worker (another may have recovered it as stale and claimed it since).
        """
        if new not in TRANSITIONS.get(old, ()):
            raise ValueError(f"a job cannot move from {old!r} to {new!r}; from {old!r} it may go to "
                             f"{sorted(TRANSITIONS.get(old, ()))}")
        unknown = sorted(set(values) - set(MOVE_COLUMNS))
        if unknown:
            raise ValueError(f"a move cannot write {unknown}; only {list(MOVE_COLUMNS)}")
        # Column names come from MOVE_COLUMNS alone; every value is a bound parameter.
        assignments = "".join(f", {column} = ?" for column in values)
        logged = []
        if old == "running":
            assignments += f", attempts_log = {attempt_log.APPEND}"
            logged = [values.get("finished_at") or time.time(), reason or new]
        cursor = db.execute(
            f"UPDATE jobs SET status = ?{assignments}, revision = revision + 1 "
            "WHERE id = ? AND status = ? AND (? IS NULL OR worker_id = ?)",
            [new, *values.values(), *logged, job_id, old, worker_id, worker_id])
        moved = cursor.rowcount == 1
        if moved and old == "running":  # the job's child is gone: its device is free for the next
            leases.release(db, job_id=job_id)
        return moved

    def journal_mode(self) -> str:
        with self._connect() as db:
            return db.execute("PRAGMA journal_mode").fetchone()[0]

    def submit(self, *, probe: str, params: dict, timeout_s: float, limit: int, device: str | None = None,
               gpu: int | None = None, num_gpus: int = 1, gpus: Sequence[int] | None = None) -> Job:
        """Queue a job (for GPU `gpu` only, when given; on num_gpus GPUs, or on the GPUs `gpus`
        names, app/jobs/placement.py), or raise QueueFull when `limit` jobs are queued or running."""
        if gpus is not None:
            num_gpus = len(gpus)
        with self._write() as db:
            active = db.execute(f"SELECT COUNT(*) FROM jobs WHERE status IN ({_marks(ACTIVE)})",
                                ACTIVE).fetchone()[0]
            if active >= limit:
                raise QueueFull(limit)
            cursor = db.execute(
                "INSERT INTO jobs (probe, params, status, timeout_s, created_at, device, gpu, num_gpus, "
                "gpus) VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
                (probe, _json(params), timeout_s, time.time(), device, gpu, num_gpus,
                 None if gpus is None else _json(sorted(gpus))))
            return self._row(db, cursor.lastrowid)

    def get(self, job_id: int) -> Job | None:
        with self._connect() as db:
            return self._row(db, job_id)

    def page(self, *, probe: str | None = None, status: str | Sequence[str] | None = None, limit: int = 50,
             offset: int = 0) -> tuple[list[Job], int]:
        """Newest first, and how many jobs match the filter in all."""
        where, args = [], []
        if probe is not None:
            where.append("probe = ?")
            args.append(probe)
        if status is not None:
            statuses = _statuses(status)
            where.append(f"status IN ({_marks(statuses)})")
            args.extend(statuses)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._connect() as db:
            # One read transaction, so the page and the total describe the same moment.
            db.execute("BEGIN")
            total = db.execute(f"SELECT COUNT(*) FROM jobs {clause}", args).fetchone()[0]
            rows = db.execute(f"SELECT * FROM jobs {clause} ORDER BY id DESC LIMIT ? OFFSET ?",
                              [*args, limit, offset]).fetchall()
            db.execute("COMMIT")
        return [from_row(row) for row in rows], total

    def claim(self, *, worker_id: str, gpu: int | None = None, host: str | None = None,
              stale_after_s: float = STALE_AFTER_S, served: Sequence[int] = ()) -> Job | None:
        """Take the oldest queued job that `worker_id` may start now, lease all its devices
        (app/jobs/leases.py) and mark the job running; None when no such job waits.

        A dispatcher of GPU `gpu` takes the jobs that name that GPU or none, and those on several
        GPUs that include it; one without a GPU (gpu None) takes any, and runs a job that names a
        GPU on that GPU. `served`: this host's GPUs, among which a job asking for num_gpus finds
        its free ones. Which job and where, and the reservation that keeps a job on several GPUs
        from starving: app/jobs/placement.py. `host` (default this machine's name) names the
        devices in the leases; a lease older than stale_after_s is free.
        """
        host = host or socket.gethostname()
        mine, args = ("AND (gpu IS NULL OR gpu = ?)", (gpu,)) if gpu is not None else ("", ())
        with self._write() as db:
            # Read once the write lock is held: a claim that waited on a finishing job's transaction
            # must not start before that job's finished_at.
            now = time.time()
            rows = db.execute(f"SELECT id, attempts, gpu, device, num_gpus, gpus FROM jobs "
                              f"WHERE status = 'queued' {mine} ORDER BY id LIMIT ?",
                              (*args, CLAIM_WINDOW)).fetchall()
            queue = [placement.Waiting(id=row["id"], device=row["device"], gpu=row["gpu"],
                                       num_gpus=row["num_gpus"] or 1,
                                       gpus=None if row["gpus"] is None else json.loads(row["gpus"]))
                     for row in rows]
            busy = leases.busy(db, host=host, now=now, stale_after_s=stale_after_s)
            chosen = placement.choose(queue, claimer=gpu, served=served, busy=busy)
            if chosen is None:
                return None
            job_id = chosen.job.id
            for unit in chosen.units:  # every device, in this one transaction: all of them or none
                leases.take(db, f"{host}:{unit}", job_id=job_id, worker_id=worker_id, now=now)
            on = chosen.ran_on_gpus
            attempts = next(row["attempts"] for row in rows if row["id"] == job_id)
            self._move(db, job_id, old="queued", new="running", values={
                "attempts": attempts + 1, "started_at": now, "heartbeat_at": now, "worker_id": worker_id,
                "ran_on_gpu": on[0] if len(on) == 1 else None, "ran_on_gpus": _json(on) if on else None,
                **FRESH_PROGRESS})
            return self._row(db, job_id)

    def progress(self, job_id: int, *, done: int, total: int, message: str = "",
                 worker_id: str | None = None) -> bool:
        """Record a running job's progress (a heartbeat too); False when it is no longer running
        (for that worker)."""
        now = time.time()
        with self._write() as db:
            cursor = db.execute(
                "UPDATE jobs SET progress_done = ?, progress_total = ?, progress_message = ?, "
                "heartbeat_at = ?, revision = revision + 1 "
                "WHERE id = ? AND status = 'running' AND (? IS NULL OR worker_id = ?)",
                (done, total, message, now, job_id, worker_id, worker_id))
            if cursor.rowcount == 1:
                leases.renew(db, job_id=job_id, now=now)
            return cursor.rowcount == 1

    def heartbeat(self, job_id: int, *, worker_id: str | None = None) -> bool:
        """Say the job's worker is alive, renewing its device lease; False when the job is no
        longer running (for that worker)."""
        now = time.time()
        with self._write() as db:
            cursor = db.execute(
                "UPDATE jobs SET heartbeat_at = ?, revision = revision + 1 "
                "WHERE id = ? AND status = 'running' AND (? IS NULL OR worker_id = ?)",
                (now, job_id, worker_id, worker_id))
            if cursor.rowcount == 1:
                leases.renew(db, job_id=job_id, now=now)
            return cursor.rowcount == 1

    def finish(self, job_id: int, *, status: str, result: ProbeResult | None = None,  # type: ignore[valid-type]
               error: dict | None = None, worker_id: str | None = None) -> bool:
        """Record a running job's end; False, changing nothing, when it was not running (for that worker)."""
        if status not in TERMINAL:
            raise ValueError(f"finish needs a terminal status, one of {sorted(TERMINAL)}; got {status!r}")
        with self._write() as db:
            return self._move(db, job_id, old="running", new=status, worker_id=worker_id, values={
                "result": None if result is None else result_json(result), "error": _json(error),
                "finished_at": time.time()})

    def cancel(self, job_id: int) -> Job | None:
        """Queued: cancelled now. Running: flagged, and its dispatcher stops it. Terminal: unchanged."""
        with self._write() as db:
            self._move(db, job_id, old="queued", new="cancelled",
                       values={"finished_at": time.time(), "cancel_requested": 1})
            # Not a move: the job stays running until its dispatcher has stopped the child.
            db.execute("UPDATE jobs SET cancel_requested = 1, revision = revision + 1 "
                       "WHERE id = ? AND status = 'running' AND cancel_requested = 0", (job_id,))
            return self._row(db, job_id)

    def recover(self, *, stale_after_s: float, loss_retries: int = WORKER_LOSS_RETRIES) -> list[int]:
        """Jobs left running by a dead worker: requeued up to `loss_retries` times each (attempts
        ending so are logged as worker_lost), then failed as WorkerLost. Never `crashed`: that
        says the job's own child died, and these jobs were never seen to fail.

        A job is orphaned when its heartbeat is older than `stale_after_s`, whoever holds it, and
        only then: a worker id says nothing of life (two live dispatchers may share one, and a
        starting worker must not take the job a live one runs). One whose cancellation was asked
        for is cancelled. Returns the ids recovered, oldest first.
        """
        stale_before = time.time() - stale_after_s
        with self._write() as db:
            rows = db.execute(
                "SELECT id, attempts, cancel_requested, attempts_log FROM jobs WHERE status = 'running' "
                "AND (heartbeat_at IS NULL OR heartbeat_at < ?) ORDER BY id",
                (stale_before,)).fetchall()
            for row in rows:
                losses = attempt_log.worker_losses(row["attempts_log"]) + 1  # this one too
                if row["cancel_requested"]:
                    self._end(db, row["id"], status="cancelled", error=None, reason=attempt_log.WORKER_LOST)
                elif losses <= loss_retries:
                    self._requeue(db, row["id"], attempts=row["attempts"], reason=attempt_log.WORKER_LOST)
                else:
                    self._end(db, row["id"], status="failed", error=attempt_log.lost_too_often(
                        losses, loss_retries), reason=attempt_log.WORKER_LOST)
        return [row["id"] for row in rows]

    @classmethod
    def _end(cls, db: sqlite3.Connection, job_id: int, *, status: str, error: dict | None,
             reason: str | None = None) -> None:
        cls._move(db, job_id, old="running", new=status, reason=reason,
                  values={"error": _json(error), "finished_at": time.time()})

    @classmethod
    def _requeue(cls, db: sqlite3.Connection, job_id: int, *, attempts: int, reason: str) -> None:
        cls._move(db, job_id, old="running", new="queued", reason=reason, values={
            "attempts": attempts, "started_at": None, "heartbeat_at": None, "worker_id": None,
            "ran_on_gpu": None, "ran_on_gpus": None, **FRESH_PROGRESS})

    def requeue(self, job_id: int) -> bool:
        """Graceful shutdown: a running job goes back to the queue, this attempt not counted.

        One whose cancellation was asked for is cancelled instead; nobody wants it run again.
        """
        with self._write() as db:
            job = self._row(db, job_id)
            if job is None or job.status != "running":
                return False
            if job.cancel_requested:
                self._end(db, job_id, status="cancelled", error=None)
            else:
                self._requeue(db, job_id, attempts=max(job.attempts - 1, 0), reason=attempt_log.REQUEUED)
            return True

    def held_leases(self) -> list[tuple[str, int]]:
        """(device, job id) of every device lease held, live or stale."""
        with self._connect() as db:
            return leases.held(db)

    def counts(self) -> dict[str, int]:
        """Jobs per status, every status present."""
        with self._connect() as db:
            rows = db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        return {status: 0 for status in STATES} | {status: n for status, n in rows}

    def queue_depth(self) -> int:
        """Jobs queued or running: the figure `limit` bounds in submit."""
        with self._connect() as db:
            return db.execute(f"SELECT COUNT(*) FROM jobs WHERE status IN ({_marks(ACTIVE)})",
                              ACTIVE).fetchone()[0]

    def latest(self, *, probe: str, device: str | None = None, status: str = "succeeded",
               limit: int = 20) -> list[Job]:
        """The newest jobs of `probe` in `status` (of `device`, when given): calibration's measurements."""
        where, args = ["probe = ?", "status = ?"], [probe, *_statuses(status)]
        if device is not None:
            where.append("device = ?")
            args.append(device)
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM jobs WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
                              [*args, limit]).fetchall()
        return [from_row(row) for row in rows]
