"""A job child that misbehaves on request: `python -m tests.support.fault_child`.

It is the real app.bench.child with every probe name mapped to a fault, so the
dispatcher meets the real protocol and the real error handling. TALLY_FAULT picks:
ok, hang, crash (SIGSEGV), oom (torch's CUDA OOM error), fail (ValueError), garbage
(a non-JSON line on the protocol channel), flaky (hangs the first time, then ok; the
first time is remembered by creating the file TALLY_FAULT_MARKER), gated (waits until
the file TALLY_FAULT_GATE exists, then ok: a test opens the gate once the children it
needs are all running, so they are certain to run at the same time), misreport (a result
that is not of its probe's type), ranks (starts processes as a probe's ranks, then does
TALLY_FAULT_THEN: see _ranks), torchrun (ranks started by torch.distributed.run, whose agent
then dies: see _torchrun).
When TALLY_FAULT_PIDS names a file, each child appends its pid to it, so a test can
check that the child is gone.
"""

import dataclasses
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.bench import child
from tests.support.results import reporting


def _hang() -> None:
    threading.Event().wait()


def _ok(probe: str, params: dict, progress: child.Progress) -> dict:
    progress(1, 2, "warming up")
    progress(2, 2, "measuring")
    time.sleep(params.get("sleep_s", 0.05))
    # A result of the probe's own type, reporting its parameters and the GPU the dispatcher gave
    # this child, as a probe's torch would see it (tests/support/results.py's `report` reads them back).
    seen = reporting(probe, echo=params, cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    return dataclasses.asdict(seen)


def _crash() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a test run leaves no core files behind
    os.kill(os.getpid(), signal.SIGSEGV)


def _oom() -> None:
    import torch  # only here: the one fault that needs torch's own exception class

    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def _garbage(progress: child.Progress) -> None:
    # child.main points fd 1 at stderr; its channel lives only in the closures of progress -> emit.
    def cell(function, name: str):
        return function.__closure__[function.__code__.co_freevars.index(name)].cell_contents

    cell(cell(progress, "emit"), "channel").write("this is not JSON\n")
    _hang()


def _flaky(probe: str, params: dict, progress: child.Progress) -> dict:
    marker = os.environ["TALLY_FAULT_MARKER"]
    try:
        open(marker, "x").close()
    except FileExistsError:
        return _ok(probe, params, progress)
    _hang()


def _gated(probe: str, params: dict, progress: child.Progress) -> dict:
    gate = os.environ["TALLY_FAULT_GATE"]
    while not os.path.exists(gate):
        time.sleep(0.01)
    return _ok(probe, params, progress)


# A rank: writes its pid to the file argv[1] once it is set up, then sleeps for ten minutes;
# with argv[2] == "stubborn" it ignores SIGTERM first, so only SIGKILL ends it.
RANK = ("import os, signal, sys, time\n"
        "if sys.argv[2] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "with open(sys.argv[1], 'a') as out: out.write(f'{os.getpid()}\\n')\n"
        "time.sleep(600)\n")


def _ranks(probe: str, params: dict, progress: child.Progress) -> dict:
    """Start four ranks, each writing its pid to the file TALLY_FAULT_RANKS: one in this
    process's group (as torch.multiprocessing starts them), one in a session of its own (as
    torch.distributed.run starts a script's workers), one that ignores SIGTERM, and one forked,
    which holds this child's protocol channel open. Once all four have written, do
    TALLY_FAULT_THEN: hang (for a timeout or a cancel), crash (os._exit(7), the ranks alive), or
    ok (report a result, leaving them running)."""
    pidfile = os.environ["TALLY_FAULT_RANKS"]
    for how in ("plain", "session", "stubborn"):
        subprocess.Popen([sys.executable, "-c", RANK, pidfile, how], start_new_session=how == "session")
    if os.fork() == 0:  # the child's channel fd is inherited: its stdout will not end while this lives
        with open(pidfile, "a") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(600)
        os._exit(0)
    while not os.path.exists(pidfile) or len(Path(pidfile).read_text().split()) < 4:
        time.sleep(0.01)
    match os.environ.get("TALLY_FAULT_THEN", "hang"):
        case "crash":
            os._exit(7)
        case "ok":
            return _ok(probe, params, progress)
    _hang()


def _torchrun(probe: str, params: dict, progress: child.Progress) -> dict:
    """torch.distributed.run starts two ranks (its workers, each in a session of its own); its
    agent is then SIGKILLed, as the kernel's OOM killer might end it, and the child crashes
    (os._exit(7)): the ranks are orphans outside every group the dispatcher knows of."""
    pidfile = os.environ["TALLY_FAULT_RANKS"]
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                              "--standalone", "--no-python", sys.executable, "-c", RANK, pidfile, "plain"])
    while not os.path.exists(pidfile) or len(Path(pidfile).read_text().split()) < 2:
        time.sleep(0.01)
    agent.kill()
    agent.wait()
    os._exit(7)


def fault(probe: str, params: dict, progress: child.Progress) -> dict:
    if pids := os.environ.get("TALLY_FAULT_PIDS"):
        with open(pids, "a") as out:
            out.write(f"{os.getpid()}\n")
    match os.environ.get("TALLY_FAULT", "ok"):
        case "ok":
            return _ok(probe, params, progress)
        case "hang":
            _hang()
        case "crash":
            _crash()
        case "oom":
            _oom()
        case "fail":
            raise ValueError(f"{probe} failed on purpose")
        case "garbage":
            _garbage(progress)
        case "flaky":
            return _flaky(probe, params, progress)
        case "gated":
            return _gated(probe, params, progress)
        case "misreport":
            return {"probe": probe, "seconds": 1.5}
        case "ranks":
            return _ranks(probe, params, progress)
        case "torchrun":
            return _torchrun(probe, params, progress)
        case other:
            raise SystemExit(f"unknown TALLY_FAULT {other!r}")


def _probe(name: str) -> Callable[[dict, child.Progress], dict]:
    def run(params: dict, progress: child.Progress) -> dict:
        return fault(name, params, progress)

    return run


def __getattr__(name: str) -> Callable[[dict, child.Progress], dict]:
    """tests.support.fault_child:<probe> is the fault for that probe, for any probe name."""
    return _probe(name)


class EveryProbe(dict):
    """Every probe name, registered or not, maps to its fault here."""

    def __missing__(self, name: str) -> str:
        return f"tests.support.fault_child:{name}"


if __name__ == "__main__":
    sys.exit(child.main(probes=EveryProbe()))
