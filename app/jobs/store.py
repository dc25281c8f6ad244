"""The durable job queue: all of Tally's SQL, here and in the modules beside it that keep its
parts (schema.py: the tables and their migrations; database.py: opening the database, and the
transactions each verb runs in; backends.py: each engine's connections, locks and wake-ups;
leases.py: one job per device; attempt_log.py: how each attempt ended), and placement.py, the
SQL-free rule a claim follows.

One store on two databases: a SQLite file (the default, TALLY_DATABASE_PATH) or a PostgreSQL server
that a fleet's workers share (TALLY_DATABASE_URL), through SQLAlchemy 2 Core. Core, because one
query expression compiles for both dialects; `with_for_update(skip_locked=True)` renders FOR
UPDATE SKIP LOCKED on PostgreSQL and nothing on SQLite (whose BEGIN IMMEDIATE already serialises
writers); the dialects' `insert().on_conflict_do_update` replaces SQLite's INSERT OR REPLACE; its
pool keeps PostgreSQL connections; and Alembic's Operations give the migrations portable DDL.

SQLite: every operation opens its own connection (about a millisecond), so a Store is
safe to share between threads and to open from several processes at once. WAL mode lets readers
(the API, a watcher) run beside the one writer; writes take BEGIN IMMEDIATE, so a read-then-write
such as a claim cannot interleave with another process's. PostgreSQL: a claim reads its
candidates FOR UPDATE SKIP LOCKED, so two claimers never block on, or take, the same job, and
holds its host's advisory lock, so one claimer at a time decides that host's leases; submit counts
the queue under an advisory lock of its own; and a submit, or a job put back in the queue
(requeue, recover), NOTIFYs the dispatchers waiting in wait_for_work.

Every change of a job's state goes through Store._move, which makes only the moves
app/jobs/job.py's TRANSITIONS table allows.
"""

import json
import logging
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from app.jobs import attempt_log, backends, fleet, gangs, leases, placement
from app.jobs.database import Database
from app.jobs.fleet import FleetStore, Serves, Targets
from app.jobs.gangs import GangStore
from app.jobs.imported import ImportStore
from app.jobs.job import ACTIVE, STATES, TERMINAL, TRANSITIONS, Job, from_row, result_json
from app.jobs.monitoring import MonitoringStore
from app.jobs.profiles import CalibrationStore, LedgerStore, ProfileStore
from app.jobs.schema import jobs, workers
from app.probes.registry import ProbeResult

log = logging.getLogger("tally.jobs")

# What a move may write besides status (its one writer is Store._move) and revision (every write's).
MOVE_COLUMNS = ("attempts", "started_at", "finished_at", "heartbeat_at", "worker_id", "ran_on_gpu",
                "ran_on_gpus", "ran_on_device", "progress_done", "progress_total", "progress_message",
                "result", "error", "cancel_requested", "claim")
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
# PostgreSQL's advisory locks: submit's count and insert, and a host's claims, one at a time.
SUBMIT_LOCK = "tally:submit"


def _host_lock(host: str) -> str:
    return f"tally:host:{host}"


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


def _held_by(claim: str | None) -> list[sa.ColumnElement[bool]]:
    """The condition that the row is still in the attempt `claim` started (none when no claim is named).

    The fence is the claim's token, not a worker's name: two dispatchers may share a name
    (TALLY_WORKER_ID), and one paused past the stale bound comes back to a job recovered and
    claimed again, maybe under its own name. Its late heartbeat, progress, ending or lease
    release names a token that is no longer the row's, and changes nothing; it learns (False)
    that it lost the job."""
    return [] if claim is None else [jobs.c.claim == claim]


class Store(Database, FleetStore, GangStore, ImportStore, ProfileStore, CalibrationStore, LedgerStore,
            MonitoringStore):
    """The job tables in `database`: a SQLite file's path, or a URL (postgresql://... through
    psycopg 3, or sqlite:///path); created, with their schema, where missing, and brought to
    the latest schema where older (app/jobs/schema.py). Opening, connections and waiting for
    work: app/jobs/database.py."""

    def seen(self, *, worker_id: str) -> None:
        """A dispatcher says it is alive (idle or busy), for readiness checks."""
        with self._write() as db:
            backends.upsert(db, workers, {"worker_id": worker_id, "seen_at": time.time()}, key="worker_id")

    def workers_seen(self) -> list[tuple[str, float]]:
        """Every dispatcher that ever said it was alive, with when it last did (unix seconds)."""
        with self._read() as db:
            rows = db.execute(sa.select(workers.c.worker_id, workers.c.seen_at).order_by(workers.c.worker_id))
            return [(worker_id, seen_at) for worker_id, seen_at in rows]

    def live_workers(self, *, within_s: float) -> list[str]:
        """Dispatchers seen in the last within_s seconds."""
        with self._read() as db:
            since = time.time() - within_s
            rows = db.execute(sa.select(workers.c.worker_id).where(workers.c.seen_at >= since))
            return sorted(worker_id for (worker_id,) in rows)

    @staticmethod
    def _row(db: sa.Connection, job_id: int) -> Job | None:
        row = db.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().first()
        if row is None:
            return None
        job = from_row(row)
        return job if job.nodes == 1 else replace(job, members=tuple(GangStore._members(db, job_id)))

    @staticmethod
    def _move(db: sa.Connection, job_id: int, *, old: str, new: str, values: dict[str, Any],
              claim: str | None = None, reason: str | None = None) -> bool:
        """Move job `job_id` from state `old` to `new`, writing `values` (column: value) with it.

        A move out of `running` ends an attempt: its entry goes on the job's attempts_log, with
        `reason` (default: the new status), and its device lease is released.

        The only writer of `status`: a move TRANSITIONS lacks raises ValueError, writing nothing.
        False, changing nothing, when the row is not in `old` or, with `claim`, no longer in the
        attempt that claim started (it may have been recovered as stale and claimed again since).
        """
        if new not in TRANSITIONS.get(old, ()):
            raise ValueError(f"a job cannot move from {old!r} to {new!r}; from {old!r} it may go to "
                             f"{sorted(TRANSITIONS.get(old, ()))}")
        unknown = sorted(set(values) - set(MOVE_COLUMNS))
        if unknown:
            raise ValueError(f"a move cannot write {unknown}; only {list(MOVE_COLUMNS)}")
        changes = dict(values)
        if old == "running":
            # The row as it is before the move, locked until the move commits (PostgreSQL; SQLite's
            # write lock is already held), so the attempt's entry is the one that is ending.
            row = db.execute(sa.select(jobs.c.status, jobs.c.worker_id, jobs.c.attempts, jobs.c.started_at,
                                       jobs.c.attempts_log, jobs.c.claim)
                             .where(jobs.c.id == job_id).with_for_update()).first()
            if row is None or row.status != old or (claim is not None and row.claim != claim):
                return False
            changes["claim"] = None  # the attempt is over: no write may name its token again
            changes["attempts_log"] = attempt_log.append(
                row.attempts_log, attempt=row.attempts, worker_id=row.worker_id, started_at=row.started_at,
                ended_at=values.get("finished_at") or time.time(), reason=reason or new)
        update = jobs.update().where(jobs.c.id == job_id, jobs.c.status == old, *_held_by(claim))
        moved = db.execute(update.values(status=new, revision=jobs.c.revision + 1, **changes)).rowcount == 1
        if moved and (old == "running" or new in TERMINAL):
            # The job's child is gone (or never came: a job on several boxes cancelled while they
            # gathered): its devices are free for the next.
            leases.release(db, job_id=job_id)
        if moved and new == "queued":  # a job to claim again: wake the idle dispatchers
            gangs.drop_members(db, job_id)  # on several boxes: the next attempt gathers afresh
            backends.notify(db)
        return moved

    def submit(self, *, probe: str, params: dict, timeout_s: float, limit: int, device: str | None = None,
               gpu: int | None = None, num_gpus: int = 1, gpus: Sequence[int] | None = None,
               targets: Targets | None = None, nodes: int = 1) -> Job:
        """Queue a job (for GPU `gpu` only, when given; on num_gpus GPUs, or on the GPUs `gpus`
        names, app/jobs/placement.py; for the fleet's `targets`; on `nodes` boxes, num_gpus on each,
        app/jobs/gangs.py), or raise QueueFull when `limit` jobs are queued or running."""
        with self._write() as db:
            job_id = self._insert(db, probe=probe, params=params, timeout_s=timeout_s, limit=limit,
                                  device=device, gpu=gpu, num_gpus=num_gpus, gpus=gpus,
                                  targets=targets or Targets(), nodes=nodes)
            self.saw_id("jobs", job_id)
            return self._row(db, job_id)

    @staticmethod
    def _insert(db: sa.Connection, *, probe: str, params: dict, timeout_s: float, limit: int,
                device: str | None, gpu: int | None = None, num_gpus: int = 1,
                gpus: Sequence[int] | None = None, targets: Targets, campaign_id: int | None = None,
                nodes: int = 1) -> int:
        """One queued job's row, in the caller's write transaction; QueueFull past `limit`."""
        if gpus is not None:
            num_gpus = len(gpus)
        backends.lock(db, SUBMIT_LOCK)  # two submitters must not both see room for one more
        active = db.execute(sa.select(sa.func.count()).select_from(jobs)
                            .where(jobs.c.status.in_(ACTIVE))).scalar_one()
        if active >= limit:
            raise QueueFull(limit)
        inserted = db.execute(jobs.insert().values(
            probe=probe, params=_json(params), status="queued", timeout_s=timeout_s,
            created_at=time.time(), device=device, gpu=gpu, num_gpus=num_gpus,
            gpus=None if gpus is None else _json(sorted(gpus)), target_host=targets.host,
            target_device=targets.device, target_model=targets.model, campaign_id=campaign_id,
            nodes=nodes if nodes > 1 else None))
        backends.notify(db)
        return inserted.inserted_primary_key[0]

    def get(self, job_id: int) -> Job | None:
        with self._read() as db:
            return self._row(db, job_id)

    def page(self, *, probe: str | None = None, status: str | Sequence[str] | None = None, limit: int = 50,
             offset: int = 0) -> tuple[list[Job], int]:
        """Newest first, and how many jobs match the filter in all."""
        where = []
        if probe is not None:
            where.append(jobs.c.probe == probe)
        if status is not None:
            where.append(jobs.c.status.in_(_statuses(status)))
        # One snapshot, so the page and the total describe the same moment.
        with self._read(snapshot=True) as db:
            total = db.execute(sa.select(sa.func.count()).select_from(jobs).where(*where)).scalar_one()
            rows = db.execute(sa.select(jobs).where(*where).order_by(jobs.c.id.desc()).limit(limit)
                              .offset(offset)).mappings().all()
        return [from_row(row) for row in rows], total

    def claim(self, *, worker_id: str, gpu: int | None = None, host: str | None = None,
              stale_after_s: float = STALE_AFTER_S, served: Sequence[int] = (),
              serves: Serves | None = None) -> Job | None:
        """Take the oldest queued job that `worker_id` may start now, lease all its devices
        (app/jobs/leases.py) and mark the job running; None when no such job waits.

        A dispatcher of GPU `gpu` takes the jobs that name that GPU or none, and those on several
        GPUs that include it; one without a GPU (gpu None) takes any, and runs a job that names a
        GPU on that GPU. `served`: this host's GPUs, among which a job asking for num_gpus finds
        its free ones. Which job and where, and the reservation that keeps a job on several GPUs
        from starving: app/jobs/placement.py. `host` (default this machine's name) names the
        devices in the leases; a lease older than stale_after_s is free. `serves`: the device this
        dispatcher serves in the fleet, for the jobs that target a host, a device or a model
        (app/jobs/fleet.py); without it, only jobs that target none.
        """
        host = host or socket.gethostname()
        mine = [sa.or_(jobs.c.gpu.is_(None), jobs.c.gpu == gpu)] if gpu is not None else []
        mine += fleet.claimable(serves, host)
        mine.append(sa.or_(jobs.c.nodes.is_(None), jobs.c.nodes <= 1))  # on several boxes: gather()
        with self._write() as db:
            backends.lock(db, _host_lock(host))  # one claimer at a time decides this host's leases
            # SKIP LOCKED: a job another claimer is taking is left to it, never waited on.
            rows = db.execute(sa.select(jobs.c.id, jobs.c.attempts, jobs.c.gpu, jobs.c.device,
                                        jobs.c.num_gpus, jobs.c.gpus)
                              .where(jobs.c.status == "queued", *mine).order_by(jobs.c.id)
                              .limit(CLAIM_WINDOW).with_for_update(skip_locked=True)).all()
            held = leases.of_host(db, host=host)
            # Read once every lock is held and the leases are read: a claim that waited on a finishing
            # job's transaction (SQLite's write lock; PostgreSQL's lease rows, seen once that job has
            # committed) must not start before that job's finished_at.
            now = time.time()
            queue = [placement.Waiting(id=row.id, device=row.device, gpu=row.gpu, num_gpus=row.num_gpus or 1,
                                       gpus=None if row.gpus is None else json.loads(row.gpus))
                     for row in rows]
            busy = leases.busy(held, now=now, stale_after_s=stale_after_s)
            chosen = placement.choose(queue, claimer=gpu, served=served, busy=busy)
            if chosen is None:
                return None
            job_id = chosen.job.id
            for unit in chosen.units:  # every device, in this one transaction: all of them or none
                leases.take(db, f"{host}:{unit}", job_id=job_id, worker_id=worker_id, now=now)
            on = chosen.ran_on_gpus
            attempts = next(row.attempts for row in rows if row.id == job_id)
            self._move(db, job_id, old="queued", new="running", values={
                "attempts": attempts + 1, "started_at": now, "heartbeat_at": now, "worker_id": worker_id,
                "claim": secrets.token_hex(16),
                "ran_on_gpu": on[0] if len(on) == 1 else None, "ran_on_gpus": _json(on) if on else None,
                "ran_on_device": serves.device if serves else None, **FRESH_PROGRESS})
            return self._row(db, job_id)

    def _beat(self, job_id: int, claim: str | None, **values: Any) -> bool:
        """Write `values` and a heartbeat on a running job (in the attempt `claim` started), renewing
        its leases."""
        now = time.time()
        with self._write() as db:
            beat = db.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.status == "running",
                                                  *_held_by(claim))
                              .values(heartbeat_at=now, revision=jobs.c.revision + 1, **values)).rowcount == 1
            if beat:
                leases.renew(db, job_id=job_id, now=now)
            return beat

    def progress(self, job_id: int, *, done: int, total: int, message: str = "",
                 claim: str | None = None) -> bool:
        """Record a running job's progress (a heartbeat too); False when it is no longer running
        (in the attempt `claim` started)."""
        return self._beat(job_id, claim, progress_done=done, progress_total=total,
                          progress_message=message)

    def heartbeat(self, job_id: int, *, claim: str | None = None) -> bool:
        """Say the job's worker is alive, renewing its device lease; False when the job is no
        longer running (in the attempt `claim` started)."""
        return self._beat(job_id, claim)

    def finish(self, job_id: int, *, status: str, result: ProbeResult | None = None,  # type: ignore[valid-type]
               error: dict | None = None, claim: str | None = None) -> bool:
        """Record a running job's end; False, changing nothing, when it was not running (in the
        attempt `claim` started)."""
        if status not in TERMINAL:
            raise ValueError(f"finish needs a terminal status, one of {sorted(TERMINAL)}; got {status!r}")
        with self._write() as db:
            return self._move(db, job_id, old="running", new=status, claim=claim, values={
                "result": None if result is None else result_json(result), "error": _json(error),
                "finished_at": time.time()})

    def cancel(self, job_id: int) -> Job | None:
        """Queued: cancelled now. Running: flagged, and its dispatcher stops it. Terminal: unchanged."""
        with self._write() as db:
            self._move(db, job_id, old="queued", new="cancelled",
                       values={"finished_at": time.time(), "cancel_requested": 1})
            # Not a move: the job stays running until its dispatcher has stopped the child.
            db.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.status == "running",
                                           jobs.c.cancel_requested == 0)
                       .values(cancel_requested=1, revision=jobs.c.revision + 1))
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
        recovered = []
        with self._write() as db:
            # SKIP LOCKED: a row another recoverer (or a late heartbeat) holds is left to it.
            stale = sa.or_(jobs.c.heartbeat_at.is_(None), jobs.c.heartbeat_at < stale_before)
            rows = db.execute(sa.select(jobs.c.id, jobs.c.attempts, jobs.c.cancel_requested,
                                        jobs.c.attempts_log)
                              .where(jobs.c.status == "running", stale)
                              .order_by(jobs.c.id).with_for_update(skip_locked=True)).all()
            for row in rows:
                if self._lose(db, row, loss_retries=loss_retries):
                    recovered.append(row.id)
        return recovered

    def lose(self, job_id: int, *, claim: str, loss_retries: int = WORKER_LOSS_RETRIES) -> bool:
        """The attempt `claim` started ended for want of its worker, not by the job's fault (its
        child stopped itself when its dispatcher stalled): requeued or failed as `recover` does;
        False when that attempt is over already."""
        with self._write() as db:
            row = db.execute(sa.select(jobs.c.id, jobs.c.attempts, jobs.c.cancel_requested, jobs.c.attempts_log)
                             .where(jobs.c.id == job_id, jobs.c.status == "running", jobs.c.claim == claim)
                             .with_for_update()).first()
            return row is not None and self._lose(db, row, loss_retries=loss_retries, claim=claim)

    @classmethod
    def _lose(cls, db: sa.Connection, row: Any, *, loss_retries: int, claim: str | None = None) -> bool:
        lost = attempt_log.WORKER_LOST
        losses = attempt_log.worker_losses(row.attempts_log) + 1  # this one too
        if row.cancel_requested:
            return cls._end(db, row.id, status="cancelled", error=None, reason=lost, claim=claim)
        if losses <= loss_retries:
            return cls._requeue(db, row.id, attempts=row.attempts, reason=lost, claim=claim)
        return cls._end(db, row.id, status="failed", error=attempt_log.lost_too_often(losses, loss_retries),
                        reason=lost, claim=claim)

    @classmethod
    def _end(cls, db: sa.Connection, job_id: int, *, status: str, error: dict | None,
             reason: str | None = None, claim: str | None = None) -> bool:
        return cls._move(db, job_id, old="running", new=status, reason=reason, claim=claim,
                         values={"error": _json(error), "finished_at": time.time()})

    @classmethod
    def _requeue(cls, db: sa.Connection, job_id: int, *, attempts: int, reason: str,
                 claim: str | None = None) -> bool:
        return cls._move(db, job_id, old="running", new="queued", reason=reason, claim=claim, values={
            "attempts": attempts, "started_at": None, "heartbeat_at": None, "worker_id": None,
            "ran_on_gpu": None, "ran_on_gpus": None, **FRESH_PROGRESS})

    def requeue(self, job_id: int, *, claim: str | None = None) -> bool:
        """Graceful shutdown: a running job goes back to the queue, this attempt not counted.

        One whose cancellation was asked for is cancelled instead; nobody wants it run again.
        With `claim`, only while the job is still in the attempt that claim started.
        """
        with self._write() as db:
            job = self._row(db, job_id)
            if job is None or job.status != "running" or (claim is not None and job.claim != claim):
                return False
            if job.cancel_requested:
                return self._end(db, job_id, status="cancelled", error=None, claim=claim)
            return self._requeue(db, job_id, attempts=max(job.attempts - 1, 0), reason=attempt_log.REQUEUED,
                                 claim=claim)

    def leases_of(self, job_id: int) -> list[str]:
        """The devices ("box:gpu0", "box:cpu", "box:*") whose leases job `job_id` holds."""
        return [device for device, holder in self.held_leases() if holder == job_id]

    def held_leases(self) -> list[tuple[str, int]]:
        """(device, job id) of every device lease held, live or stale."""
        with self._read() as db:
            return leases.held(db)

    def counts(self) -> dict[str, int]:
        """Jobs per status, every status present."""
        with self._read() as db:
            rows = db.execute(sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status)).all()
        return {status: 0 for status in STATES} | {status: n for status, n in rows}

    def queue_depth(self) -> int:
        """Jobs queued or running: the figure `limit` bounds in submit."""
        with self._read() as db:
            return db.execute(sa.select(sa.func.count()).select_from(jobs)
                              .where(jobs.c.status.in_(ACTIVE))).scalar_one()

    def latest(self, *, probe: str, device: str | None = None, status: str = "succeeded",
               limit: int = 20) -> list[Job]:
        """The newest jobs of `probe` in `status` (of `device`, when given): calibration's measurements."""
        where = [jobs.c.probe == probe, jobs.c.status.in_(_statuses(status))]
        if device is not None:
            where.append(jobs.c.device == device)
        with self._read() as db:
            rows = db.execute(sa.select(jobs).where(*where).order_by(jobs.c.id.desc())
                              .limit(limit)).mappings().all()
        return [from_row(row) for row in rows]
