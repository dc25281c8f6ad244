"""Start `ranks` processes on torch.distributed and bring back rank 0's answer.

The job's child (app/bench/child.py) calls `launch`; each rank is a fresh interpreter
(torch.multiprocessing's spawn start method: no CUDA context or lock is inherited) that joins a
process group over loopback (MASTER_ADDR 127.0.0.1, a port free when chosen): NCCL with one rank
per visible GPU on CUDA, gloo on the CPU. Rank 0's progress is relayed to the job as it comes.

Failure, never a hang: a rank that raises sends its exception's type and message up the queue,
and the parent then stops every other rank (one blocked in a collective waiting for the dead
one included) and raises an exception of the same name and message, which the child reports as
the job's error. A rank that dies without a word (a signal, a crash) is found by its exit code.
The process group's own timeout bounds a collective that waits on a rank that is alive but
stuck. Ranks stay in the child's session and process group (nothing calls setsid), so the
dispatcher's killpg ends them with the child; on Linux each also asks the kernel to kill it
when its parent dies (PR_SET_PDEATHSIG), so a child killed alone leaves no rank behind.
"""

import builtins
import contextlib
import ctypes
import datetime
import os
import queue
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from app.bench import contention
from app.probes.results import Contention

Progress = Callable[[int, int, str], None]
Report = Callable[[int, int, str], None]
"""(done, total, message): rank 0's progress, relayed to the job; other ranks' calls are dropped."""
Worker = Callable[[int, int, Any, Report], Any]
"""(rank, world_size, args, report) -> rank 0's result (a picklable value, e.g. a dict). A
module-level function: spawned interpreters import it by name."""

PG_TIMEOUT_S = 600.0
"""The process group's timeout: a collective waiting this long on a peer fails, not hangs. Long
enough for the others to wait at a barrier while rank 0 times a step alone (data_parallel_step);
the job's own time limit (600 s by default) ends the job sooner when it is the shorter."""
STOP_GRACE_S = 5.0
"""After SIGTERM, how long a rank has to exit before SIGKILL."""
FAIL_ON_RANK_ENV = "TALLY_DIST_FAIL_RANK"
"""Tests only: the rank named here raises RuntimeError once its process group is up."""
PR_SET_PDEATHSIG = 1
SILENT_GRACE_S = 0.5
"""After a rank's error, how long to look for a peer killed by a signal, the error's likely cause."""


class RankDied(RuntimeError):
    """A rank exited without reporting a result or an error (a signal, a crash)."""


def free_port() -> int:
    """A loopback port free now (the OS picks it); the ranks bind it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def largest(n: int, device: torch.device) -> int:
    """The largest of every rank's n (an all-reduce): a count of runs every rank then makes, so
    none waits in a collective for a rank that stopped sooner."""
    t = torch.tensor([n], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def local_device(device_type: str) -> torch.device:
    """This rank's device: on CUDA the GPU of its LOCAL_RANK (both launchers set it: its index on
    its own box), else the CPU."""
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if device_type == "cuda" \
        else torch.device("cpu")


def backend(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # no prctl: the dispatcher's killpg still ends it
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _rank_main(rank: int, world: int, port: int, device_type: str, threads: int, worker: Worker, args: Any,
               messages: Any) -> None:
    """One rank: join the group, run the worker, send rank 0's result (or any rank's error)."""
    die_with_parent()
    if os.getppid() == 1:  # the parent died before the death signal was armed
        os._exit(3)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(threads)

    def report(done: int, total: int, message: str = "") -> None:
        if rank == 0:
            messages.put(("progress", rank, (done, total, message)))

    try:
        if device_type == "cuda":
            torch.cuda.set_device(rank)
            dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
                                    device_id=torch.device("cuda", rank))
        else:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
        if os.environ.get(FAIL_ON_RANK_ENV) == str(rank):
            raise RuntimeError(f"rank {rank} failed on purpose ({FAIL_ON_RANK_ENV})")
        result = worker(rank, world, args, report)
        if rank == 0:
            messages.put(("result", rank, result))
        dist.destroy_process_group()
        messages.put(("done", rank, None))
    except BaseException as exc:  # noqa: BLE001 - the parent must hear of every failure
        traceback.print_exc()
        messages.put(("error", rank, (type(exc).__name__, str(exc)[:4000])))
        messages.close()
        messages.join_thread()  # put() hands the message to a feeder thread: let it write before exiting
        os._exit(1)  # no destroy: a peer may be dead, and the group's teardown would wait on it


def _error(rank: int, name: str, message: str) -> BaseException:
    """An exception named as the rank's was, its message prefixed with the rank: the child
    reports type(exc).__name__ and str(exc). The CUDA allocator's keeps its class, so the job
    is marked oom as it would be on one GPU."""
    text = f"rank {rank}: {message}"
    if name == "OutOfMemoryError" and torch.cuda.is_available():
        return torch.cuda.OutOfMemoryError(text)
    known = getattr(builtins, name, None)
    if isinstance(known, type) and issubclass(known, Exception):
        try:
            return known(text)
        except TypeError:  # an exception that wants other arguments
            pass
    return type(name, (RuntimeError,), {})(text)


def _stop(processes: list) -> None:
    """SIGTERM every live rank, then SIGKILL those still there after the grace."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def neighbours(watch: contention.Watch, pids: list[int]) -> Contention | None:
    """What else used the host's CPUs since `watch` began, the ranks (`pids`) not counted."""
    if not watch.before:
        return None
    return contention.judge(watch.before, contention.cpu_times(), seconds=time.monotonic() - watch.started,
                            exclude={os.getpid(), *pids}, load_before=watch.load_before,
                            load_after=contention.loadavg(), cpu_count=os.cpu_count() or 1)


def launch(worker: Worker, args: Any, *, ranks: int, device_type: str, progress: Progress,
           threads_per_rank: int | None = None, pids: list[int] | None = None) -> Any:
    """Run `worker` on `ranks` processes; rank 0's result, or the first failing rank's error.
    CUDA: rank r drives GPU r of those visible (CUDA_VISIBLE_DEVICES lists the job's). `pids`,
    when given, receives the ranks' process ids (to tell them from the host's other load)."""
    if ranks < 2:
        raise ValueError(f"ranks must be at least 2, got {ranks}")
    if device_type == "cuda" and ranks > torch.cuda.device_count():
        raise ValueError(f"{ranks} ranks need {ranks} GPUs; {torch.cuda.device_count()} visible")
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // ranks)
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    port = free_port()
    processes = [ctx.Process(target=_rank_main, args=(r, ranks, port, device_type, threads, worker, args,
                                                      messages), daemon=True) for r in range(ranks)]
    for p in processes:
        p.start()
        if pids is not None:
            pids.append(p.pid)
    result, have_result, done = None, False, set()
    try:
        while len(done) < ranks:
            try:
                kind, rank, payload = messages.get(timeout=0.2)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(processes) if p.exitcode not in (None, 0)]
                if dead:
                    time.sleep(0.2)  # an error sent just before the exit may still be in the pipe
                    try:
                        kind, rank, payload = messages.get_nowait()
                    except queue.Empty:
                        r, code = dead[0]
                        raise RankDied(f"rank {r} exited with code {code} and no error") from None
                elif all(p.exitcode == 0 for p in processes) and messages.empty():
                    break
                else:
                    continue
            if kind == "progress":
                progress(*payload)
            elif kind == "result":
                result, have_result = payload, True
            elif kind == "done":
                done.add(rank)
            else:
                # A peer killed by a signal says nothing; the others then fail on its closed
                # connection. Name the dead one, whose death is the cause.
                time.sleep(SILENT_GRACE_S)
                silent = [(r, p.exitcode) for r, p in enumerate(processes) if (p.exitcode or 0) < 0]
                if silent:
                    r, code = silent[0]
                    raise RankDied(f"rank {r} exited with code {code} and no error; then rank {rank}: "
                                   f"{payload[0]}: {payload[1]}")
                raise _error(rank, *payload)
    finally:
        _stop(processes)
        messages.close()
    if not have_result:
        raise RankDied("rank 0 finished without a result")
    return result
