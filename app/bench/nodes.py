"""Start one box's ranks of a job that spans boxes, with torch.distributed's elastic launcher.

The launcher is torchrun's own (`torch.distributed.launcher.api.elastic_launch`, what
`torchrun` calls): every box's child runs one agent, and the agents meet by the c10d
rendezvous at the endpoint the job names (app/probes/protocol.py's NODES_* variables: the fleet
publishes the first box's address and a free port through the store; under Slurm the batch
script names the allocation's first node). The agents agree on the world, give each box its
node rank and each rank its global rank (node rank x ranks per box + local rank), start the
ranks, and set MASTER_ADDR and MASTER_PORT for their process group: gloo on the CPU, NCCL with
one rank per visible GPU.

Nothing is restarted (max_restarts 0): a rank that fails ends its box's agent, whose peers then
fail in their next collective, and the job ends on every box (the dispatchers say which box was
first, app/jobs/gangs.py). Bounds, so no rank waits forever: the rendezvous' join timeout, the
process group's timeout (app/bench/dist.py), and the job's own time limit.

The worker is app/bench/dist.py's: (rank, world, args, report) -> rank 0's result, with rank 0
the global one; it finds its device from LOCAL_RANK (dist.local_device). The box that holds
global rank 0 gets the result; the others None.
"""

import datetime
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from app.bench import dist as launcher
from app.probes.protocol import Nodes


@record
def _rank_entry(worker: launcher.Worker, args: Any, device_type: str, threads: int) -> Any:
    """One rank under the elastic agent: its environment is set (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT, GROUP_RANK); join the group and run the worker. @record writes an
    exception to the agent's error file, so the agent's failure names its message."""
    launcher.die_with_parent()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.set_num_threads(threads)
    timeout = datetime.timedelta(seconds=launcher.PG_TIMEOUT_S)
    if device_type == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    if os.environ.get(launcher.FAIL_ON_RANK_ENV) == str(rank):
        raise RuntimeError(f"rank {rank} failed on purpose ({launcher.FAIL_ON_RANK_ENV})")
    try:
        return worker(rank, world, args, lambda done, total, message="": None)
    finally:
        dist.destroy_process_group()


class NodeFailed(RuntimeError):
    """A rank of this box failed: its global rank, and its error or signal."""


def _failed(exc: ChildFailedError, box: str) -> NodeFailed:
    """The first of this box's ranks to fail, by time: its message (from @record's error file) or
    the signal that ended it."""
    rank, failure = min(exc.failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    if failure.message and not isinstance(failure.message, str):
        said = (
            failure.message.get("message", "") if isinstance(failure.message, dict) else str(failure.message)
        )
    else:
        said = failure.message or ""
    if failure.exitcode < 0:
        said = f"killed by {failure.signal_name()}" + (f" ({said})" if said else "")
    elif not said:
        said = f"exited with code {failure.exitcode}"
    return NodeFailed(f"rank {rank} on {box}: {said.strip().splitlines()[-1] if said.strip() else said}")


def launch(worker: launcher.Worker, args: Any, *, nodes: Nodes, device_type: str) -> Any | None:
    """Run `worker` on this box's nodes.ranks_per_node ranks of a world of nodes.count boxes; rank
    0's result on the box that holds it, None on the others; NodeFailed when a rank here fails."""
    if device_type == "cuda" and nodes.ranks_per_node > torch.cuda.device_count():
        raise ValueError(
            f"{nodes.ranks_per_node} ranks on this box need as many GPUs; {torch.cuda.device_count()} visible"
        )
    threads = max(1, (os.cpu_count() or 1) // nodes.ranks_per_node)
    config = LaunchConfig(
        min_nodes=nodes.count,
        max_nodes=nodes.count,
        nproc_per_node=nodes.ranks_per_node,
        run_id=nodes.run_id,
        rdzv_backend="c10d",
        rdzv_endpoint=nodes.endpoint,
        # The first box hosts the rendezvous' store; the others join it. Bounded: a box that never
        # comes leaves the others failing after join_timeout, not waiting.
        rdzv_configs={
            "is_host": nodes.node == 0,
            "join_timeout": int(nodes.join_timeout_s),
            "read_timeout": int(nodes.join_timeout_s),
        },
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        local_addr=nodes.address,
        logs_specs=DefaultLogsSpecs(),
        shutdown_timeout=int(launcher.STOP_GRACE_S),
    )
    box = nodes.box or socket.gethostname()
    try:
        returned = elastic_launch(config, _rank_entry)(worker, args, device_type, threads)
    except ChildFailedError as exc:
        raise _failed(exc, box) from None
    # {global rank: what it returned}, this box's ranks only: rank 0's result where it ran here.
    return returned.get(0) if 0 in returned else None
