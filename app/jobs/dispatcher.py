"""Runs queued jobs one at a time, each in a fresh child interpreter (app.bench.child).

One at a time because the jobs measure a GPU: two at once would share it and both
measurements would be wrong. Each claim also leases its device (app/jobs/leases.py), so
no other dispatcher on the database, whatever its id, runs a job there meanwhile. A child
is a new interpreter, never a fork, so it inherits no CUDA context or lock, and a crash
in it (a segfault in a kernel, an allocator abort) ends that job, not the server.
The protocol is in app/bench/child.py.

A job on several GPUs is run by one dispatcher serving one of them (app/jobs/placement.py says
which, and how a waiting one reserves its GPUs); its child sees them all. However the job
ends (a result, a timeout, a cancel, the child's crash), every process the child started
(its ranks) is ended before the child is reaped (app/jobs/process.py, app/jobs/sweep.py).
"""

import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import logs
from app.jobs import devicelock, gangs, sweep
from app.jobs.fleet import Serves
from app.jobs.gangs import Member
from app.jobs.job import Job
from app.jobs.outcome import Ending, Outcome
from app.jobs.process import Child, error, parse_message
from app.jobs.spanning import GATHER_WAIT_S, HEARTBEAT_EVERY_S, Spanning, own_address
from app.jobs.store import STALE_AFTER_S, WORKER_LOSS_RETRIES, Store
from app.probes.protocol import KEEPALIVE_VAR, PARENT_STALLED_EXIT, Nodes
from app.probes.registry import RESULTS

log = logging.getLogger("tally.jobs")

CHILD_ARGV = (sys.executable, "-m", "app.bench.child")
# The child's imports resolve to this checkout whatever the server's working directory.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROGRESS_EVERY_S = 0.1
# Seconds a child that has exited may take to be read to its end, once the processes it left
# (which may hold its stdout: a rank it forked) are ended; a crash after that.
DRAIN_S = 2.0
def default_worker_id(configured: str | None, gpu: int | None) -> str:
    """A dispatcher's id when none is given: host, process and device, so no two running
    dispatchers share one (TALLY_WORKER_ID, when set, replaces host and process)."""
    base = configured or f"{socket.gethostname()}:{os.getpid()}"
    return f"{base}:{'cpu' if gpu is None else f'gpu{gpu}'}"


def _crashed(child: Child) -> Outcome:
    """A crash, named by the reaped child's exit status, for a child that ended without a report."""
    rc = child.proc.returncode
    name = signal.Signals(-rc).name if rc < 0 and -rc in signal.valid_signals() else None
    how = f"was killed by {name}" if name else f"exited with code {rc}"
    return Outcome(Ending.FINISHED, "crashed", error=error(
        "ChildCrashed", f"the job's process {how} before reporting a result",
        exit_code=rc, signal=name, stderr_tail=child.stderr_tail()))


@dataclass
class Watch:
    """What the watch loop carries from one step to the next. Times are time.monotonic()'s."""

    job: Job
    child: Child
    deadline: float
    next_poll: float
    next_heartbeat: float
    progress_due: float
    """When the newest progress may be written: at most one write per PROGRESS_EVERY_S."""
    next_keepalive: float
    """When the child is next told its parent lives (app/bench/child.py)."""
    pending: dict | None = None
    """The newest progress message, not yet written."""
    exited_at: float | None = None
    """When the child was seen to have exited while its output had not ended."""
    member: Member | None = None
    """This box's part of a job on several boxes; None for a job on one."""
    peer_error: dict | None = None
    """Another box of the job failed or was lost (gangs.blame): the job ends with its error."""

    @property
    def jlog(self) -> logging.LoggerAdapter:
        return logs.for_job(log, self.job.id)


class Dispatcher(Spanning):
    """Claims queued jobs from `store` as `worker_id` and runs each in a child process.

    Times in seconds: poll_s between looks at the queue and at a running job's cancel flag;
    kill_grace_s between SIGTERM and SIGKILL; stale_after_s without a heartbeat before a running
    job (and its device lease) counts as its dead worker's. `gpu`: the GPU index this dispatcher serves (one
    dispatcher per GPU); it takes jobs naming that GPU or none, and jobs on several GPUs that may
    include it. None serves the CPU, or on a GPU box runs each job on the GPU it names.
    `served`: every GPU of this host that jobs may use (TALLY_GPUS, else NVML's), among which a
    job asking for num_gpus gets its others; default [gpu]. worker_loss_retries: times a job
    whose worker died under it is requeued (TALLY_WORKER_LOSS_RETRIES).
    """

    def __init__(self, store: Store, worker_id: str, child_argv: list[str] | None = None,
                 child_env: dict[str, str] | None = None, poll_s: float = 0.2, kill_grace_s: float = 5,
                 stale_after_s: float = STALE_AFTER_S, gpu: int | None = None,
                 worker_loss_retries: int = WORKER_LOSS_RETRIES, served: list[int] | None = None,
                 host: str | None = None, fleet_device: dict[str, Any] | None = None,
                 address: str | None = None, gather_wait_s: float = GATHER_WAIT_S) -> None:
        self.store = store
        self.worker_id = worker_id
        self.host = host or socket.gethostname()
        # The device it registers in the fleet and serves there (app/jobs/fleet.py); None: it
        # takes only jobs that target no device or model.
        self.fleet_device = fleet_device
        self.serves = None if fleet_device is None else Serves(fleet_device["device"], tuple(
            name for name in (fleet_device.get("name"), fleet_device.get("catalogue_id")) if name))
        self.gpu = gpu
        self.served = list(served) if served is not None else [] if gpu is None else [gpu]
        self.child_argv = list(child_argv or CHILD_ARGV)
        self.child_env = dict(child_env or {})
        self.poll_s = poll_s
        self.kill_grace_s = kill_grace_s
        self.stale_after_s = stale_after_s
        self.worker_loss_retries = worker_loss_retries
        # A job on several boxes: the address the others reach this box at, and how long it waits for them.
        self.address = address or own_address()
        self.gather_wait_s = gather_wait_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Times it has found nothing it may run and begun to wait for work: a caller (a test, a
        # readiness check) sees that the queue has been looked at since it last changed.
        self.idle_waits = 0

    @property
    def keepalive_deadline_s(self) -> float:
        """How long the child waits without a keep-alive before it stops itself. Its last keep-alive
        comes at most a heartbeat's interval after the job's last heartbeat, and another dispatcher
        may take the device's lease stale_after_s after that heartbeat: half what is left between
        them, so the child is gone well before."""
        return (self.stale_after_s - HEARTBEAT_EVERY_S) / 2

    def _env(self, job: Job, keys: list[str], member: Member | None = None) -> dict[str, str]:
        marks = [devicelock.mark(self.store.identity, key) for key in keys]
        env = {**os.environ, **self.child_env, sweep.DEVICES_VAR: sweep.devices_value(marks),
               KEEPALIVE_VAR: f"{self.keepalive_deadline_s:g}"}
        if member is not None:  # where the boxes meet: box 0's published address and port (gangs.py)
            first = next(m for m in self.store.members(job.id) if m.node == 0)
            env |= Nodes(count=job.nodes, node=member.node, ranks_per_node=len(job.ran_on_gpus),
                         endpoint=first.endpoint, run_id=f"tally-{job.id}-{job.attempts}",
                         address=member.address, box=self.host).env()
        if job.ran_on_gpus:
            # The child sees its GPUs alone, as cuda:0..n-1 in ran_on_gpus' order: a probe never
            # picks a device itself. PCI bus order makes CUDA's numbering NVML's (CUDA's default
            # puts the fastest first).
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, job.ran_on_gpus))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        return env

    def start(self) -> None:
        """Run the dispatcher in a daemon thread (the server's embedded worker)."""
        self._thread = threading.Thread(target=self.run_forever, args=(self._stop,),
                                        name=f"tally-dispatcher-{self.worker_id}", daemon=True)
        self._thread.start()

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def request_stop(self) -> None:
        """Ask the thread to stop, without waiting: stop() then waits for it."""
        self._stop.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the running child, requeue its job, end the thread; True once it has ended."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(self.kill_grace_s + 10 if timeout is None else timeout)
        return not self._thread.is_alive()

    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Claim and run jobs until `stop` is set, recovering orphaned jobs first."""
        self._stop = stop = stop or self._stop
        self._recover()
        next_recovery = time.monotonic() + self.stale_after_s
        log.info("dispatcher %s started", self.worker_id)
        if self.fleet_device is not None:
            self.store.register(self.fleet_device | {"worker_id": self.worker_id})
        next_seen = 0.0
        # A database that is down fails every pass of the loop: logged once a minute, not five times a second.
        failing = logs.Repeating(log)
        while not stop.is_set():
            try:
                if time.monotonic() >= next_seen:  # idle or between jobs: /readyz and the fleet read it
                    self._seen()
                    next_seen = time.monotonic() + HEARTBEAT_EVERY_S
                ran = self.run_once()
                if time.monotonic() >= next_recovery:
                    self._recover()
                    next_recovery = time.monotonic() + self.stale_after_s
                failing.stopped("dispatcher %s: the job loop works again", self.worker_id)
            except Exception:  # a locked or broken database must not end the dispatcher
                failing.happened("dispatcher %s: error in the job loop; retrying", self.worker_id)
                ran = False
            if not ran:  # on PostgreSQL a submit wakes it at once; poll_s bounds the wait for the rest
                self.idle_waits += 1
                log.debug("dispatcher %s: nothing it may run is queued; waiting (%d)", self.worker_id,
                          self.idle_waits)
                self.store.wait_for_work(self.poll_s, stop)
        self.store.stop_waiting()
        log.info("dispatcher %s stopped", self.worker_id)

    def _recover(self) -> None:
        # Stale heartbeats only, at start-up too: our id may be shared by a live peer.
        for job_id in self.store.recover(stale_after_s=self.stale_after_s,
                                         loss_retries=self.worker_loss_retries):
            job = self.store.get(job_id)
            logs.for_job(log, job_id).warning("recovered after its worker died: now %s (attempts %d)",
                                              job.status, job.attempts)

    def run_once(self) -> bool:
        """Claim the oldest queued job and run it to its end; False when none was queued."""
        job = self.store.claim(worker_id=self.worker_id, gpu=self.gpu, host=self.host,
                               stale_after_s=self.stale_after_s, served=self.served, serves=self.serves)
        if job is None:
            return self._gather()
        self._run(job)
        return True

    def _run(self, job: Job, member: Member | None = None) -> None:
        jlog = logs.for_job(log, job.id)
        # This box's devices: a job across boxes holds the others' leases too, their own dispatchers' to lock.
        keys = [key for key in self.store.leases_of(job.id) if key.startswith(f"{self.host}:")]
        # The lease is this job's; a process of another job may still hold the device (its dispatcher
        # paused past the stale bound): it stops itself within its keep-alive deadline, or is ended.
        locks, ended = devicelock.take(self.store.identity, keys, wait_s=self.keepalive_deadline_s,
                                       grace_s=self.kill_grace_s)
        if ended:
            jlog.warning("ended %s, another job's processes still on %s", ended, ", ".join(keys))
        if locks is None:
            jlog.error("%s still held by another job's processes; back to the queue", ", ".join(keys))
            self.store.requeue(job.id, claim=job.claim)
            return
        try:
            child = Child(self.child_argv, self._env(job, keys, member), job, pass_fds=locks)
        except OSError as exc:  # a missing interpreter, no pids or fds left: the job cannot start
            jlog.error("could not start its process: %s", exc)
            self.store.finish(job.id, status="crashed", error=error(
                "ChildCrashed", f"the job's process could not start: {exc}", argv=self.child_argv),
                claim=job.claim)
            return
        finally:
            devicelock.release(locks)  # the child holds them now, for as long as it lives
        jlog.info("started: probe=%s attempt=%d pid=%d", job.probe, job.attempts, child.pid)
        try:
            outcome = self._watch(job, child, member)
        except BaseException:
            child.stop(self.kill_grace_s)
            raise
        finally:
            child.close(self.kill_grace_s)
        if outcome.ending is Ending.STOPPING:
            self.store.requeue(job.id, claim=job.claim)
            jlog.info("requeued: the dispatcher is stopping")
            return
        if outcome.ending is Ending.LOST:
            if member is not None:  # the job ended on another box: well (rank 0's result is in), or not
                now = self.store.get(job.id)
                self.store.member_end(job.id, token=member.token,
                                      status="done" if now and now.status == "succeeded" else "stopped")
            return
        if outcome.ending is Ending.CRASHED and child.proc.returncode == PARENT_STALLED_EXIT:
            # It stopped itself because this dispatcher fell silent (paused): not the job's fault.
            jlog.warning("its process stopped itself: no keep-alive for %g s", self.keepalive_deadline_s)
            self.store.lose(job.id, claim=job.claim, loss_retries=self.worker_loss_retries)
            return
        if outcome.ending is Ending.CRASHED:
            outcome = _crashed(child)
        if member is not None and (outcome := self._part_ended(job, member, outcome)) is None:
            return
        if self.store.finish(job.id, status=outcome.status, result=outcome.result, error=outcome.error,
                             claim=job.claim):
            jlog.info("ended: %s", outcome.status)
        else:
            jlog.warning("ended %s, but its row is no longer running here; left as it is", outcome.status)

    def _watch(self, job: Job, child: Child, member: Member | None = None) -> Outcome:
        """Relay the child's messages until it reports, dies, or must be stopped (a child still
        running is stopped), and say how it ended."""
        now = time.monotonic()
        w = Watch(job, child, deadline=child.started + job.timeout_s, next_poll=now + self.poll_s,
                  next_heartbeat=now + HEARTBEAT_EVERY_S, progress_due=now, next_keepalive=now, member=member)
        while True:
            line = self._next_line(w)
            if line is None:
                self._write_progress(job, w.pending)
                return Outcome(Ending.CRASHED)
            if line and (outcome := self._take_message(w, line)):
                return outcome
            now = time.monotonic()
            if not line and (outcome := self._exited(w, now)):
                return outcome
            self._progress_if_due(w, now)
            if outcome := self._past_deadline(w, now) or self._stopping(w) or self._poll_row(w, now):
                return outcome
            self._keepalive_if_due(w, now)
            self._heartbeat_if_due(w, now)

    def _keepalive_if_due(self, w: Watch, now: float) -> None:
        # Before the heartbeat's database write, which may block: the child hears from us still.
        if now >= w.next_keepalive:
            w.next_keepalive = now + min(HEARTBEAT_EVERY_S, self.keepalive_deadline_s / 4)
            w.child.keepalive()

    @staticmethod
    def _next_line(w: Watch) -> bytes | None:
        """The child's next line; b"" when a timer falls due first; None at the end of its output."""
        wakeups = [w.deadline, w.next_poll, w.next_heartbeat, w.next_keepalive] + (
            [w.progress_due] if w.pending else [])
        try:
            return w.child.lines.get(timeout=max(0.0, min(wakeups) - time.monotonic()))
        except queue.Empty:
            return b""

    def _take_message(self, w: Watch, line: bytes) -> Outcome | None:
        """Keep a progress message for the next write (None); a result or an error ends the job,
        and so does a line that is no message (the child is stopped)."""
        try:
            message = parse_message(line)
        except ValueError as why:
            w.jlog.error("protocol error: %s: %r", why, line[:200])
            w.child.stop(self.kill_grace_s)
            return Outcome(Ending.FINISHED, "crashed", error=error(
                "ProtocolError", f"the job's process wrote {why} where a message belongs",
                line=line[:1000].decode("utf-8", "replace"), stderr_tail=w.child.stderr_tail()))
        if message["type"] == "progress":
            w.pending = message
            return None
        self._write_progress(w.job, w.pending)
        if message["type"] == "done":  # a box of a job on several, without rank 0's result
            if w.member is not None:
                return Outcome(Ending.PART_DONE)
            w.child.stop(self.kill_grace_s)
            return Outcome(Ending.FINISHED, "crashed", error=error(
                "ProtocolError", "the job's process reported no result", stderr_tail=w.child.stderr_tail()))
        if message["type"] == "result":
            return self._take_result(w, message["result"])
        return Outcome(Ending.FINISHED, message["status"], error=message["error"])

    @staticmethod
    def _take_result(w: Watch, raw: dict) -> Outcome:
        """The job's result, parsed here into its probe's type once and for all; a report that is
        no such result is the child breaking the protocol, and the job crashed."""
        try:
            result = RESULTS.validate_python(raw)
            if result.probe != w.job.probe:
                raise ValueError(f"a {result.probe} result for a {w.job.probe} job")
        except ValueError as why:  # pydantic's ValidationError is a ValueError
            w.jlog.error("protocol error: the result is not a %s result: %s", w.job.probe, why)
            return Outcome(Ending.FINISHED, "crashed", error=error(
                "ProtocolError", f"the job's process reported a result that is not a {w.job.probe} result: "
                                 f"{str(why)[:2000]}", stderr_tail=w.child.stderr_tail()))
        return Outcome(Ending.FINISHED, "succeeded", result=result)

    def _progress_if_due(self, w: Watch, now: float) -> None:
        # At most one write per PROGRESS_EVERY_S: a chatty probe must not keep the database busy.
        if w.pending and now >= w.progress_due:
            self._write_progress(w.job, w.pending)
            w.pending, w.progress_due = None, now + PROGRESS_EVERY_S

    def _exited(self, w: Watch, now: float) -> Outcome | None:
        """A child that has exited while something it started still holds its output open (a rank
        it forked): those are ended, so its output ends and is read to the end; CRASHED when even
        then it has not ended within DRAIN_S; else None."""
        if w.exited_at is None:
            if not w.child.exited():
                return None
            w.jlog.warning("its process exited before its output ended; ending what it left running")
            w.child.stop(self.kill_grace_s)
            w.exited_at = time.monotonic()
        return Outcome(Ending.CRASHED) if now >= w.exited_at + DRAIN_S else None

    def _past_deadline(self, w: Watch, now: float) -> Outcome | None:
        """A timeout, the child stopped, once the job has run for its timeout_s; else None."""
        if now < w.deadline:
            return None
        w.jlog.warning("timed out after %g s; stopping pid %d", w.job.timeout_s, w.child.pid)
        w.child.stop(self.kill_grace_s)
        return Outcome(Ending.FINISHED, "timeout", error=error(
            "Timeout", f"the job exceeded its time limit of {w.job.timeout_s:g} s",
            timeout_s=w.job.timeout_s, stderr_tail=w.child.stderr_tail()))

    def _stopping(self, w: Watch) -> Outcome | None:
        """STOPPING, the child stopped, once the dispatcher has been asked to stop; else None."""
        if not self._stop.is_set():
            return None
        w.child.stop(self.kill_grace_s)
        return Outcome(Ending.STOPPING)

    def _poll_row(self, w: Watch, now: float) -> Outcome | None:
        """Every poll_s, read the job's row: LOST when it is no longer this worker's, cancelled when
        a cancel was asked for (the child stopped either way); else None."""
        if now < w.next_poll:
            return None
        w.next_poll = now + self.poll_s
        if w.peer_error is not None:
            w.jlog.warning("%s; stopping pid %d", w.peer_error["message"], w.child.pid)
            w.child.stop(self.kill_grace_s)
            return Outcome(Ending.PEER, "failed", error=w.peer_error)
        row = self.store.get(w.job.id)
        if row is None or row.status != "running" or row.claim != w.job.claim:
            w.jlog.warning("was taken from this worker (now %s); stopping pid %d", row and row.status,
                           w.child.pid)
            w.child.stop(self.kill_grace_s)
            return Outcome(Ending.LOST)
        if row.cancel_requested:
            w.jlog.info("cancel requested; stopping pid %d", w.child.pid)
            w.child.stop(self.kill_grace_s)
            return Outcome(Ending.FINISHED, "cancelled",
                           error=error("Cancelled", "the job was cancelled while running"))
        return None

    def _heartbeat_if_due(self, w: Watch, now: float) -> None:
        # The row's heartbeat keeps other workers from recovering the job; seen() keeps /readyz green.
        if now >= w.next_heartbeat:
            w.next_heartbeat = now + HEARTBEAT_EVERY_S
            if not self.store.heartbeat(w.job.id, claim=w.job.claim):
                w.next_poll = now  # its attempt is over (recovered, or ended elsewhere): the poll says how
            if w.member is not None:  # the other boxes: one failed or lost ends the job here too
                everyone = self.store.member_beat(w.job.id, token=w.member.token)
                w.peer_error = gangs.blame(everyone, me=self.host, now=time.time(),
                                           stale_after_s=self.stale_after_s)
                if w.peer_error is not None:
                    w.next_poll = now
            self._seen()

    def _seen(self) -> None:
        """Alive: for /readyz, and for the fleet, whose device is live while it is seen."""
        self.store.seen(worker_id=self.worker_id)
        if self.serves is not None:
            self.store.touch(self.serves.device, worker_id=self.worker_id)

    def _write_progress(self, job: Job, message: dict | None) -> None:
        if message is not None:
            self.store.progress(job.id, done=message["done"], total=message["total"],
                                message=message.get("message", ""), claim=job.claim)
