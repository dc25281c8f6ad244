"""A dispatcher's part in a job across boxes (app/jobs/gangs.py keeps its SQL): joining it,
waiting for the other boxes, and what the job records when this box's part ends. Dispatcher
(app/jobs/dispatcher.py) inherits Spanning; its watch loop looks at the other boxes every
heartbeat (gangs.blame), and its child is told where the boxes meet (protocol.Nodes)."""

import logging
import socket
import threading
import time
from dataclasses import replace

from app import logs
from app.jobs import gangs
from app.jobs.fleet import Serves
from app.jobs.gangs import Member
from app.jobs.job import Job
from app.jobs.outcome import Ending, Outcome
from app.jobs.store import Store
from app.probes.protocol import secondary

log = logging.getLogger("tally.jobs")

HEARTBEAT_EVERY_S = 1.0
"""Seconds between a dispatcher's heartbeats (its job's row, its box's membership, its device)."""
GATHER_WAIT_S = 120.0
"""Seconds a box that joined a job on several boxes waits for the others before it leaves
(TALLY_GATHER_WAIT_S, app/jobs/gangs.py)."""


def own_address() -> str:
    """The address the other boxes reach this one at, when TALLY_NODE_ADDRESS names none: its host
    name's; where that is loopback (Debian maps the host name to 127.0.1.1 in /etc/hosts), the
    address of the interface its default route leaves by (a UDP socket's connect picks it and
    sends nothing); else loopback, which reaches boxes on this machine only."""
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError:
        named = "127.0.0.1"
    if not named.startswith("127."):
        return named
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): routed by the default route, never sent to
            routed = s.getsockname()[0]
        except OSError:
            return named
    return routed if not routed.startswith(("127.", "0.")) else named


def free_port() -> int:
    """A TCP port free on this box now: the rendezvous' store binds it when the job starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Spanning:
    """The gathering half of Dispatcher (it needs the dispatcher's store, names, bounds and _run)."""

    store: Store
    worker_id: str
    host: str
    address: str
    gather_wait_s: float
    stale_after_s: float
    poll_s: float
    gpu: int | None
    served: list[int]
    serves: Serves | None
    _stop: threading.Event

    def _gather(self) -> bool:
        """Join a job on several boxes (app/jobs/gangs.py), wait for the others, and run this box's
        part; False when there is none to join."""
        joined = self.store.gather(worker_id=self.worker_id, host=self.host, address=self.address,
                                   port=free_port(), serves=self.serves, gpu=self.gpu, served=self.served,
                                   stale_after_s=self.stale_after_s)
        if joined is None:
            return False
        job, member = joined
        jlog = logs.for_job(log, job.id)
        if job.status != "running":
            jlog.info("joined as one of %d boxes; waiting for the others (at most %g s)", job.nodes,
                      self.gather_wait_s)
            job = self._wait_gathered(job, member)
            if job is None:
                return True
        member = next(m for m in self.store.members(job.id) if m.token == member.token)
        jlog.info("all %d boxes are here; this one is node %d", job.nodes, member.node)
        self._run(job, member)
        return True

    def _wait_gathered(self, job: Job, member: Member) -> Job | None:
        """Beat this box's membership until the job starts (the job), or until it has waited
        gather_wait_s or the dispatcher stops (it leaves: None)."""
        jlog = logs.for_job(log, job.id)
        deadline = time.monotonic() + self.gather_wait_s
        next_seen = 0.0
        while True:
            state, started = self.store.wait_gathered(job.id, token=member.token)
            if state == "running":
                return started
            if state == "gone":
                jlog.info("no longer gathering this box (cancelled, or it was taken for lost)")
                return None
            if time.monotonic() >= deadline or self._stop.is_set():
                if self.store.leave(job.id, token=member.token):
                    jlog.info("left: the other boxes did not come within %g s", self.gather_wait_s)
                    return None
                continue  # it started meanwhile: run this box's part
            if time.monotonic() >= next_seen:
                self._seen()
                next_seen = time.monotonic() + HEARTBEAT_EVERY_S
            self._stop.wait(self.poll_s)

    def _part_ended(self, job: Job, member: Member, outcome: Outcome) -> Outcome | None:
        """A job on several boxes: record how this box's part ended, and say what the job records,
        or None when this box records nothing (its part ended well, and rank 0's result is another
        box's; or the job is over elsewhere)."""
        token = member.token
        if outcome.ending is Ending.PART_DONE or outcome.status == "succeeded":
            self.store.member_end(job.id, token=token, status="done")
            return None if outcome.ending is Ending.PART_DONE else outcome
        if outcome.ending is Ending.PEER or outcome.status == "cancelled":
            self.store.member_end(job.id, token=token, status="stopped")
            return outcome
        self.store.member_end(job.id, token=token, status="failed", error=outcome.error)
        mine = replace(member, status="failed", error=outcome.error)
        if not secondary((outcome.error or {}).get("message", "")):
            return replace(outcome, error=gangs.node_failed(mine))
        # Its error echoes another box's failure (a closed connection): wait for the others to say
        # which box failed first, or to fall silent, keeping the job alive meanwhile.
        deadline = time.monotonic() + self.stale_after_s + HEARTBEAT_EVERY_S
        while time.monotonic() < deadline and not self._stop.is_set():
            if not self.store.heartbeat(job.id, claim=job.claim):
                return None  # ended on another box, which said why
            found = gangs.blame(self.store.members(job.id), me=self.host, now=time.time(),
                                stale_after_s=self.stale_after_s)
            if found is not None:
                return Outcome(Ending.FINISHED, "failed", error=found)
            self._stop.wait(self.poll_s)
        return replace(outcome, error=gangs.node_failed(mine))
