"""One job in a child process: `python -m app.bench.child`.

The dispatcher starts this interpreter fresh (never a fork of the server, so no
CUDA context or lock is inherited) and speaks JSON lines with it:

- stdin, one line: {"job_id": int, "probe": str, "params": {...}}. The parent keeps
  stdin open while the job runs; end-of-file means the parent died, and the
  child exits (code 3) rather than run on as an orphan holding the GPU, ending its
  process group (the ranks it started) when it leads one, as the dispatcher starts it.
  After that line the parent writes a keep-alive (a newline) every second or so; with
  TALLY_KEEPALIVE_S set, a child that hears none for that long takes its parent for
  stalled (paused, say) and ends the same way (code 4), before the parent's device
  lease can go stale and another dispatcher start a job on its device.
- stdout, one message per line:
    {"type": "progress", "done": int, "total": int, "message": str}
    {"type": "result", "result": {...}}                      then exit 0
    {"type": "error", "status": "failed" | "oom", "error": {"type", "message", "detail"}}
                                                              then exit 1
    {"type": "done"}    a box of a job on several boxes (app/bench/nodes.py) whose part ended
                        well without rank 0's result, which another box reports; then exit 0
  Anything a library prints goes to stderr, so it cannot corrupt the channel.
  A child that exits without a result or an error line crashed.
"""

import importlib
import json
import os
import select
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from app.probes.protocol import KEEPALIVE_VAR, PARENT_DIED_EXIT, PARENT_STALLED_EXIT

Progress = Callable[[int, int, str], None]


def _load(target: str) -> Callable[[dict, Progress], dict]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def is_oom(exc: BaseException) -> bool:
    """CUDA's allocator error, or the CPU allocator's (which torch raises as RuntimeError)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, MemoryError) or "DefaultCPUAllocator: can't allocate memory" in str(exc)


def memory_figures() -> dict[str, Any]:
    """What the CUDA allocator held when the job ran out, in bytes."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"allocated_bytes": torch.cuda.memory_allocated(), "reserved_bytes": torch.cuda.memory_reserved(),
            "max_allocated_bytes": torch.cuda.max_memory_allocated(), "free_bytes": free,
            "total_bytes": total}


# Set just before the job's last message is written: a parent that then closes stdin (it has what it
# needs) is no longer a dead parent, and the exit code stays the job's (0 or 1), not 3. Without
# it, a parent reading to EOF then closing stdin raced the child's own exit.
_reported = threading.Event()


def _exit_when_parent_dies() -> None:
    deadline_s = float(os.environ.get(KEEPALIVE_VAR) or 0) or None  # None: wait for the end alone
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], deadline_s)
        if not ready:
            code = PARENT_STALLED_EXIT  # no keep-alive for deadline_s: the parent is stalled
            break
        if not os.read(fd, 4096):
            code = PARENT_DIED_EXIT  # end of file: the parent died
            break
    if not _reported.is_set():
        if os.getpgrp() == os.getpid():
            # The dispatcher starts us leading a group of our own, our ranks in it: with the dispatcher
            # gone nobody else will end them. SIGTERM: torch.distributed.run's agent ends its workers,
            # each in a session of its own, when it gets one. Not to us: our exit code says why.
            _signal_group_but_me(signal.SIGTERM)
        os._exit(code)


def _signal_group_but_me(sig: signal.Signals) -> None:
    """`sig` to every other process of our process group (from /proc; elsewhere, to the whole group)."""
    me = os.getpid()
    if not os.path.isdir("/proc"):
        os.killpg(me, sig)
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                group = int(stat.read().rsplit(b")", 1)[1].split()[2])
            if group == me:
                os.kill(int(entry), sig)
        except (OSError, ValueError, IndexError):
            continue


def main(probes: Mapping[str, str] | None = None) -> int:
    """Run the job on stdin. `probes` maps a probe name to its "module:function"; by default the
    registry's entry points, each imported only when run, so this file stays torch-free."""
    if probes is None:
        from app.probes.registry import PROBES
        probes = {name: probe.entry for name, probe in PROBES.items()}
    job = json.loads(sys.stdin.readline())
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    threading.Thread(target=_exit_when_parent_dies, daemon=True).start()

    def emit(message: dict) -> None:
        channel.write(json.dumps(message, allow_nan=False) + "\n")

    def progress(done: int, total: int, message: str = "") -> None:
        emit({"type": "progress", "done": done, "total": total, "message": message})

    try:
        result = _load(probes[job["probe"]])(job["params"], progress)
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none is lost
        oom = is_oom(exc)
        traceback.print_exc()
        _reported.set()  # before the message: the parent may read it and close stdin at once
        emit({"type": "error", "status": "oom" if oom else "failed",
              "error": {"type": type(exc).__name__, "message": str(exc)[:4000],
                        "detail": memory_figures() if oom else {}}})
        return 1
    _reported.set()  # before the message: the parent may read it and close stdin at once
    emit({"type": "done"} if result is None else {"type": "result", "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
