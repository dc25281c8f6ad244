"""The SQL of a job that spans boxes: its members, gathered all or none.

A job with `nodes` N > 1 is run by one dispatcher on each of N boxes. While it is queued, a
dispatcher that may run it (its targets met, its device free on its box) joins it: a row in
`members` (its box, the address and a free port it publishes, its own token), and the leases of
its devices, so its box runs nothing else meanwhile. The dispatcher whose joining makes N
starts the job for all of them in the same transaction: the job moves to running with one claim
token, every member to running, numbered 0..N-1 in join order, and member 0's address and port
become the rendezvous' endpoint (app/bench/nodes.py). Until then the others wait, beating their
rows; one that has waited its bound (TALLY_GATHER_WAIT_S) leaves, its leases released, so no box
is held by a job that cannot start: all of them or none. A member whose heartbeat is stale (its
dispatcher died while waiting) is dropped by the next one to join.

While it runs, each member beats its row and the job's; each watches the others (Dispatcher,
app/jobs/dispatcher.py): a member that failed, or whose heartbeat went stale (its box lost),
ends the job on every box with that box's error. The rows of a job's last attempt are kept,
for its page; a requeue drops them (the next attempt gathers afresh). Part of the store layer
(app/jobs/store.py); Store inherits GangStore.
"""

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from app.jobs import backends, fleet, leases, placement
from app.jobs.fleet import Serves
from app.jobs.job import Job
from app.jobs.schema import jobs, members
from app.probes.protocol import secondary

GATHER_LOCK = "tally:gather"
# A member's states: waiting to start; running its part; done (its part ended well: the box that
# held rank 0 writes the job's result); failed (its part failed: `error` says how); stopped (the job
# ended on another box, and this one's part was stopped).
MEMBER_STATES = ("waiting", "running", "done", "failed", "stopped")


@dataclass(frozen=True)
class Member:
    job_id: int
    host: str
    node: int
    worker_id: str
    device: str | None
    address: str
    port: int
    token: str
    status: str
    error: dict[str, Any] | None
    joined_at: float
    heartbeat_at: float
    ended_at: float | None

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"


def _member(row: Any) -> Member:
    fields = dict(row)
    fields["error"] = None if fields["error"] is None else json.loads(fields["error"])
    return Member(**fields)


def drop_members(db: sa.Connection, job_id: int) -> None:
    """A job back in the queue gathers afresh: its members' rows go (their leases went with the
    move)."""
    db.execute(members.delete().where(members.c.job_id == job_id))


class GangStore:
    """The gathering half of Store (it needs Store's transactions, its moves and its rows)."""

    def gather(
        self,
        *,
        worker_id: str,
        host: str,
        address: str,
        port: int,
        serves: Serves | None,
        gpu: int | None,
        served: list[int],
        stale_after_s: float,
    ) -> tuple[Job, Member] | None:
        """Join the oldest queued job on several boxes that this dispatcher may run now, and start it
        when this box is the last it needs: (the job, as it is now, and this box's member), or None
        when there is none to join. The job is running when this box completed it; else queued."""
        from app.jobs.store import CLAIM_WINDOW, FRESH_PROGRESS, _host_lock

        mine = [sa.or_(jobs.c.gpu.is_(None), jobs.c.gpu == gpu)] if gpu is not None else []
        with self._write() as db:  # type: ignore[attr-defined]
            backends.lock(db, _host_lock(host))
            backends.lock(db, GATHER_LOCK)  # one joiner at a time counts the members
            rows = db.execute(
                sa.select(
                    jobs.c.id,
                    jobs.c.nodes,
                    jobs.c.attempts,
                    jobs.c.device,
                    jobs.c.gpu,
                    jobs.c.num_gpus,
                    jobs.c.gpus,
                )
                .where(jobs.c.status == "queued", jobs.c.nodes > 1, *mine, *fleet.claimable(serves, host))
                .order_by(jobs.c.id)
                .limit(CLAIM_WINDOW)
            ).all()
            now = time.time()
            busy = leases.busy(leases.of_host(db, host=host), now=now, stale_after_s=stale_after_s)
            for row in rows:
                joined = self._prune(db, row.id, now=now, stale_after_s=stale_after_s)
                if any(m.host == host for m in joined):
                    continue  # one member per box: another dispatcher of this box is in it
                waiting = placement.Waiting(
                    id=row.id,
                    device=row.device,
                    gpu=row.gpu,
                    num_gpus=row.num_gpus or 1,
                    gpus=None if row.gpus is None else json.loads(row.gpus),
                )
                chosen = placement.choose([waiting], claimer=gpu, served=served, busy=busy)
                if chosen is None:
                    continue
                token = secrets.token_hex(16)
                db.execute(
                    members.insert().values(
                        job_id=row.id,
                        host=host,
                        node=len(joined),
                        worker_id=worker_id,
                        device=serves.device if serves else None,
                        address=address,
                        port=port,
                        token=token,
                        status="waiting",
                        joined_at=now,
                        heartbeat_at=now,
                    )
                )
                for unit in chosen.units:
                    leases.take(db, f"{host}:{unit}", job_id=row.id, worker_id=worker_id, now=now)
                if len(joined) + 1 == row.nodes:
                    everyone = sorted(self._members(db, row.id), key=lambda m: (m.joined_at, m.host))
                    for node, m in enumerate(everyone):
                        db.execute(
                            members.update()
                            .where(members.c.job_id == row.id, members.c.host == m.host)
                            .values(node=node, status="running", heartbeat_at=now)
                        )
                    on = chosen.ran_on_gpus
                    self._move(
                        db,
                        row.id,
                        old="queued",
                        new="running",
                        values={  # type: ignore[attr-defined]
                            "attempts": row.attempts + 1,
                            "started_at": now,
                            "heartbeat_at": now,
                            "worker_id": everyone[0].worker_id,
                            "claim": secrets.token_hex(16),
                            "ran_on_gpu": on[0] if len(on) == 1 else None,
                            "ran_on_gpus": json.dumps(on) if on else None,
                            "ran_on_device": everyone[0].device,
                            **FRESH_PROGRESS,
                        },
                    )
                member = next(m for m in self._members(db, row.id) if m.host == host)
                return self._row(db, row.id), member  # type: ignore[attr-defined]
        return None

    @staticmethod
    def _members(db: sa.Connection, job_id: int) -> list[Member]:
        rows = db.execute(
            sa.select(members).where(members.c.job_id == job_id).order_by(members.c.node, members.c.joined_at)
        ).mappings()
        return [_member(row) for row in rows]

    def _prune(self, db: sa.Connection, job_id: int, *, now: float, stale_after_s: float) -> list[Member]:
        """The job's waiting members, less those whose dispatcher has not beaten for stale_after_s
        (dropped, with their leases)."""
        kept = []
        for m in self._members(db, job_id):
            if m.heartbeat_at < now - stale_after_s:
                db.execute(members.delete().where(members.c.job_id == job_id, members.c.host == m.host))
                leases.release_host(db, job_id=job_id, host=m.host)
            else:
                kept.append(m)
        return kept

    def wait_gathered(self, job_id: int, *, token: str) -> tuple[str, Job | None]:
        """A waiting member's beat: ("running", the job) once the job has started with it,
        ("waiting", None) while it gathers, ("gone", None) when it no longer counts this member
        (cancelled, or dropped as stale)."""
        now = time.time()
        with self._write() as db:  # type: ignore[attr-defined]
            m = (
                db.execute(sa.select(members).where(members.c.job_id == job_id, members.c.token == token))
                .mappings()
                .first()
            )
            job = self._row(db, job_id)  # type: ignore[attr-defined]
            if m is None or job is None or job.status not in ("queued", "running"):
                return "gone", None
            if job.status == "running":
                return ("running", job) if m["status"] == "running" else ("gone", None)
            db.execute(
                members.update()
                .where(members.c.job_id == job_id, members.c.token == token)
                .values(heartbeat_at=now)
            )
            leases.renew_host(db, job_id=job_id, host=m["host"], now=now)
            return "waiting", None

    def leave(self, job_id: int, *, token: str) -> bool:
        """A waiting member gives up (its wait is over, or its dispatcher stops): its row and its
        leases go. False when the job started with it meanwhile: it must run its part."""
        with self._write() as db:  # type: ignore[attr-defined]
            backends.lock(db, GATHER_LOCK)
            m = (
                db.execute(sa.select(members).where(members.c.job_id == job_id, members.c.token == token))
                .mappings()
                .first()
            )
            status = db.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar()
            if m is not None and m["status"] == "running" and status == "running":
                return False
            if m is not None:
                db.execute(members.delete().where(members.c.job_id == job_id, members.c.token == token))
                leases.release_host(db, job_id=job_id, host=m["host"])
            return True

    def member_beat(self, job_id: int, *, token: str) -> list[Member]:
        """A running member says it lives; every member of the job, as they are now."""
        with self._write() as db:  # type: ignore[attr-defined]
            db.execute(
                members.update()
                .where(members.c.job_id == job_id, members.c.token == token, members.c.status == "running")
                .values(heartbeat_at=time.time())
            )
            return self._members(db, job_id)

    def member_end(self, job_id: int, *, token: str, status: str, error: dict | None = None) -> None:
        """A member's part ended: done, or failed with `error`."""
        if status not in MEMBER_STATES[2:]:
            raise ValueError(f"a member's part ends {', '.join(MEMBER_STATES[2:])}; got {status!r}")
        with self._write() as db:  # type: ignore[attr-defined]
            db.execute(
                members.update()
                .where(members.c.job_id == job_id, members.c.token == token)
                .values(
                    status=status,
                    error=None if error is None else json.dumps(error, allow_nan=False),
                    ended_at=time.time(),
                )
            )

    def across_boxes(self, *, limit: int = 10) -> list[Job]:
        """The newest jobs on several boxes (queued, running or ended), each with its members."""
        with self._read() as db:  # type: ignore[attr-defined]
            ids = db.execute(sa.select(jobs.c.id).where(jobs.c.nodes > 1).order_by(jobs.c.id.desc())
                             .limit(limit)).scalars().all()
            return [self._row(db, job_id) for job_id in ids]  # type: ignore[attr-defined]

    def members(self, job_id: int) -> list[Member]:
        """The boxes of a job that spans them (its last attempt's), by node."""
        with self._read() as db:  # type: ignore[attr-defined]
            return self._members(db, job_id)


def node_failed(m: Member) -> dict[str, Any]:
    """The job's error when box `m`'s part failed: its error, named by its box."""
    said = (m.error or {}).get("message", "its part failed")
    return {
        "type": "NodeFailed",
        "message": f"box {m.host} (node {m.node}): {said}",
        "detail": {"box": m.host, "node": m.node, "error": m.error},
    }


def box_lost(m: Member, *, now: float) -> dict[str, Any]:
    silent = now - m.heartbeat_at
    return {
        "type": "BoxLost",
        "message": f"box {m.host} (node {m.node}) was lost: its dispatcher has not "
        f"been heard for {silent:.0f} s",
        "detail": {"box": m.host, "node": m.node, "silent_s": silent},
    }


def blame(everyone: list[Member], *, me: str, now: float, stale_after_s: float) -> dict[str, Any] | None:
    """The error that ends the job on every box, from what the other members say: a box whose part
    failed by a fault of its own (not the echo of another's, protocol.secondary), else a box
    whose dispatcher fell silent for stale_after_s, else a box whose part failed at all; None
    while no other box has failed."""
    peers = [m for m in everyone if m.host != me]
    failed = [m for m in peers if m.status == "failed"]
    for m in failed:
        if not secondary((m.error or {}).get("message", "")):
            return node_failed(m)
    for m in peers:
        if m.status == "running" and m.heartbeat_at < now - stale_after_s:
            return box_lost(m, now=now)
    return node_failed(failed[0]) if failed else None
