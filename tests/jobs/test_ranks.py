"""However a job ends, every process its child started (a probe's ranks) ends with it.

tests/support/fault_child.py's `ranks` fault starts four, as probes' launchers do: one in the child's
process group (torch.multiprocessing), one in a session of its own (torch.distributed.run's
workers), one that ignores SIGTERM, and one forked, holding the child's protocol channel open.
Each writes its pid to a file; the test reads them and checks that none is left running.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.probes.protocol import PARENT_DIED_EXIT
from app.jobs import sweep
from app.jobs.dispatcher import Dispatcher
from app.jobs.store import Store
from tests.support.jobs import FAULT_ARGV, alive, pids
from tests.support.waiting import PATIENCE_S, wait_for

RANKS = 4


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "tally.db")


def ranks_dispatcher(store: Store, rankfile: Path, then: str, fault: str = "ranks") -> Dispatcher:
    env = {"TALLY_FAULT": fault, "TALLY_FAULT_THEN": then, "TALLY_FAULT_RANKS": str(rankfile)}
    return Dispatcher(store, "ranks-worker", child_argv=FAULT_ARGV, child_env=env, poll_s=0.05,
                      kill_grace_s=1)


def assert_all_gone(rankfile: Path, ranks: int = RANKS) -> None:
    started = pids(rankfile)
    assert len(started) == ranks, started
    # The dispatcher waits for them before it reaps the child; a moment's grace for the kernel.
    wait_for(lambda: not [pid for pid in started if alive(pid)], timeout=5, what="every rank to end")


def test_a_timeout_ends_every_rank(store, tmp_path):
    rankfile = tmp_path / "ranks.pids"
    job = store.submit(probe="matmul", params={}, timeout_s=4, limit=10)
    assert ranks_dispatcher(store, rankfile, "hang").run_once()
    assert store.get(job.id).status == "timeout"
    assert_all_gone(rankfile)


def test_a_cancel_ends_every_rank(store, tmp_path):
    rankfile = tmp_path / "ranks.pids"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    worker = threading.Thread(target=ranks_dispatcher(store, rankfile, "hang").run_once)
    worker.start()
    wait_for(lambda: len(pids(rankfile)) == RANKS, what="the ranks to start")
    assert all(alive(pid) for pid in pids(rankfile))  # running until the cancel, not ended by chance
    store.cancel(job.id)
    worker.join(PATIENCE_S)
    assert store.get(job.id).status == "cancelled"
    assert_all_gone(rankfile)


def test_a_crashed_child_leaves_no_rank_behind(store, tmp_path):
    """The child exits by itself while its ranks live, and one of them holds its stdout open: the
    dispatcher sees the exit, ends the ranks, and records the crash with the child's own code."""
    rankfile = tmp_path / "ranks.pids"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    assert ranks_dispatcher(store, rankfile, "crash").run_once()
    after = store.get(job.id)
    assert (after.status, after.error["detail"]["exit_code"]) == ("crashed", 7)
    assert_all_gone(rankfile)


def test_ranks_left_by_a_job_that_succeeded_are_ended(store, tmp_path):
    rankfile = tmp_path / "ranks.pids"
    job = store.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    assert ranks_dispatcher(store, rankfile, "ok").run_once()
    assert store.get(job.id).status == "succeeded"
    assert_all_gone(rankfile)


def test_ranks_of_torch_distributed_run_whose_agent_died_are_ended(store, tmp_path):
    """torch.distributed.run gives each worker of a script or binary a session of its own
    (start_new_session=True in its SubprocessHandler), so once its agent is dead no process group
    holds them: the token in their inherited environment is what finds them."""
    rankfile = tmp_path / "ranks.pids"
    job = store.submit(probe="matmul", params={}, timeout_s=120, limit=10)
    assert ranks_dispatcher(store, rankfile, "crash", fault="torchrun").run_once()
    after = store.get(job.id)
    assert (after.status, after.error["detail"]["exit_code"]) == ("crashed", 7), after.error
    assert_all_gone(rankfile, ranks=2)


def test_the_token_finds_a_process_outside_the_group_and_nothing_else():
    token = sweep.new_token()
    env = {"PATH": "/usr/bin:/bin", sweep.TOKEN_VAR: token}
    inside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                              start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=env | {sweep.TOKEN_VAR: sweep.new_token()}, start_new_session=True)
    try:
        wait_for(lambda: inside.pid in sweep.members(group=None, token=token), what="the process to show")
        assert sweep.members(group=None, token=token) == [inside.pid]  # not the other token's, nor ours
        assert sorted(sweep.members(group=other.pid, token=token)) == sorted([inside.pid, other.pid])
        sweep.signal_all(sweep.signal.SIGKILL, group=None, token=token)
        assert inside.wait(PATIENCE_S) == -9 and other.poll() is None
    finally:
        for proc in (inside, other):
            proc.kill()
            proc.wait()


def test_a_child_whose_dispatcher_died_ends_the_ranks_in_its_group(tmp_path):
    """The dispatcher is SIGKILLed: its child reads end-of-file on stdin and SIGTERMs the rest of its
    own group on the way out. Ranks outside the group (a session of their own), or deaf to SIGTERM, are past
    its reach; a dispatcher's sweep ends those, so this test ends them itself."""
    rankfile = tmp_path / "ranks.pids"
    env = {**os.environ, "TALLY_FAULT": "ranks", "TALLY_FAULT_THEN": "hang",
           "TALLY_FAULT_RANKS": str(rankfile)}
    child = subprocess.Popen(FAULT_ARGV, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                             start_new_session=True)  # as Child starts it
    try:
        child.stdin.write(json.dumps({"job_id": 1, "probe": "matmul", "params": {}}).encode() + b"\n")
        child.stdin.flush()
        wait_for(lambda: len(pids(rankfile)) == RANKS, what="the ranks to start")
        in_group = [pid for pid in pids(rankfile) if os.getpgid(pid) == child.pid and not deaf(pid)]
        assert len(in_group) == 2  # the plain rank and the forked one
        child.stdin.close()  # what the dispatcher's death looks like from here
        assert child.wait(PATIENCE_S) == PARENT_DIED_EXIT  # its own code: it spares itself its SIGTERM
        wait_for(lambda: not [pid for pid in in_group if alive(pid)], timeout=5,
                 what="the group's ranks to end")
    finally:
        for pid in pids(rankfile):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def deaf(pid: int) -> bool:
    """Whether the process ignores SIGTERM (/proc/<pid>/status's SigIgn mask, bit 15 - 1)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored >> (signal.SIGTERM - 1) & 1)
