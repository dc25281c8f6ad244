"""One node's part of a probe that a cluster's launcher started, not Tally's dispatchers:
`python -m app.bench.launched`. `tally slurm`'s batch script runs it on every node of the
allocation with srun (app/cli/slurm.py); no MPI is needed.

Two ways:
- across the nodes (a probe whose ranks may span boxes: collectives): every node's task learns
  its place from Slurm (SLURM_NODEID, SLURM_NNODES, SLURMD_NODENAME), meets the others by the
  c10d rendezvous at --endpoint (the first node's address and a port free there), and starts its
  ranks as the fleet's boxes do (app/bench/nodes.py). The node that holds rank 0 writes the one
  result;
- --each: every task runs the probe alone on its node (one task per GPU, Slurm giving each its
  own), and writes its own result with its device (a burn-in across a partition).

Each result is written as POST /api/v1/import/job's body (app/api/services/imported.py) into
--out, which `tally import` posts to a server. Progress goes to stderr, where srun gathers it.
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.probes.protocol import Nodes


def _entry(probe: str):
    from app.bench.child import _load
    from app.probes.registry import PROBES

    return _load(PROBES[probe].entry)


def _progress(done: int, total: int, message: str = "") -> None:
    print(f"{os.environ.get('SLURMD_NODENAME', '')}: {done}/{total} {message}", file=sys.stderr, flush=True)


def node_address(name: str) -> str:
    """The address Slurm knows node `name` by (its NodeAddr), else what its name resolves to."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        shown = subprocess.run(
            ["scontrol", "show", "node", "-o", name], capture_output=True, text=True, timeout=30
        ).stdout
        for field in shown.split():
            if field.startswith("NodeAddr="):
                return field.removeprefix("NodeAddr=")
    try:
        return socket.gethostbyname(name)
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _gpu() -> int | None:
    """The GPU Slurm gave this task (its first visible), by NVML's index; None on a CPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else None


def run(
    probe: str, params: dict[str, Any], *, out: Path, each: bool, endpoint: str | None, env: dict[str, str]
) -> Path | None:
    """This task's part; the file it wrote, or None (another node holds rank 0's result)."""
    from app import device

    box = env.get("SLURMD_NODENAME") or socket.gethostname()
    count, node = int(env.get("SLURM_NNODES", "1")), int(env.get("SLURM_NODEID", "0"))
    job_id = env.get("SLURM_JOB_ID")
    across = count > 1 and not each
    if across:
        if endpoint is None:
            raise SystemExit("launched: --endpoint is needed for a probe across nodes")
        nodes = Nodes(
            count=count,
            node=node,
            ranks_per_node=int(env.get("TALLY_RANKS_PER_NODE") or 0),
            endpoint=endpoint,
            run_id=f"slurm-{job_id or 'job'}",
            address=node_address(box),
            box=box,
        )
        os.environ.update(nodes.env())
    gpu = _gpu()
    if gpu is not None:  # the child sees its GPUs as cuda:0.. in NVML's order, as under a dispatcher
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    started = time.time()
    result = _entry(probe)(params, _progress)
    if result is None:
        return None
    boxes = (result.get("spanning") or {}).get("boxes") if across else None
    body = {
        "probe": probe,
        "params": params,
        "result": result,
        "launcher": "slurm",
        "external_id": job_id,
        "started_at": started,
        "finished_at": time.time(),
        "boxes": [{"box": b, "node": i} for i, b in enumerate(boxes or [box])],
        "device": None if across else device.fleet_device(box, gpu),
    }
    out.mkdir(parents=True, exist_ok=True)
    name = f"{box}-gpu{gpu}" if gpu is not None else box
    path = out / (f"{name}.json" if each else "result.json")
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(body, allow_nan=False))
    partial.replace(path)  # whole or absent: `tally import` never reads half a file
    return path


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m app.bench.launched", description=__doc__.split("\n\n")[0])
    cli.add_argument("--probe", required=True)
    cli.add_argument("--params", default="{}", help="the probe's parameters, JSON")
    cli.add_argument("--out", type=Path, required=True, help="where the result goes (a shared directory)")
    cli.add_argument("--endpoint", help="host:port of the rendezvous (across nodes)")
    cli.add_argument("--each", action="store_true", help="every task runs the probe alone on its node")
    args = cli.parse_args(argv)
    wrote = run(
        args.probe,
        json.loads(args.params),
        out=args.out,
        each=args.each,
        endpoint=args.endpoint,
        env=dict(os.environ),
    )
    if wrote is not None:
        print(f"wrote {wrote}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
