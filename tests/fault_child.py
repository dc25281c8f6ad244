"""A job child that misbehaves on request: `python -m tests.fault_child`.

It is the real app.bench.child with every probe name mapped to a fault, so the
dispatcher meets the real protocol and the real error handling. TALLY_FAULT picks:
ok, hang, crash (SIGSEGV), oom (torch's CUDA OOM error), fail (ValueError), garbage
(a non-JSON line on the protocol channel), flaky (hangs the first time, then ok; the
first time is remembered by creating the file TALLY_FAULT_MARKER), gated (waits until
the file TALLY_FAULT_GATE exists, then ok: a test opens the gate once the children it
needs are all running, so they are certain to run at the same time), misreport (a result
that is not of its probe's type).
When TALLY_FAULT_PIDS names a file, each child appends its pid to it, so a test can
check that the child is gone.
"""

import dataclasses
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable

from app.bench import child
from tests.results import reporting


def _hang() -> None:
    threading.Event().wait()


def _ok(probe: str, params: dict, progress: child.Progress) -> dict:
    progress(1, 2, "warming up")
    progress(2, 2, "measuring")
    time.sleep(params.get("sleep_s", 0.05))
    # A result of the probe's own type, reporting its parameters and the GPU the dispatcher gave
    # this child, as a probe's torch would see it (tests/results.py's `report` reads them back).
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
        case other:
            raise SystemExit(f"unknown TALLY_FAULT {other!r}")


def _probe(name: str) -> Callable[[dict, child.Progress], dict]:
    def run(params: dict, progress: child.Progress) -> dict:
        return fault(name, params, progress)

    return run


def __getattr__(name: str) -> Callable[[dict, child.Progress], dict]:
    """tests.fault_child:<probe> is the fault for that probe, for any probe name."""
    return _probe(name)


class EveryProbe(dict):
    """Every probe name, registered or not, maps to its fault here."""

    def __missing__(self, name: str) -> str:
        return f"tests.fault_child:{name}"


if __name__ == "__main__":
    sys.exit(child.main(probes=EveryProbe()))
