"""`tally slurm`: run a probe across a Slurm allocation, and bring its result to a Tally server.

It writes an sbatch script, and with --submit hands it to sbatch (--wait: and follows the job to
its end). The script runs one task per node with srun, each `python -m app.bench.launched`
(app/bench/launched.py): across the nodes, they meet by torch.distributed's c10d rendezvous at
the first node's address and a port free there, as torchrun does; no MPI is needed. With
`burn-in` (or --each), every node (every GPU, with --gpus-per-node) runs the probe alone instead.
The results land in --results, a directory every node sees; with --server the script then posts
them (`tally import`, the token from TALLY_API_TOKEN in the environment sbatch exports), else it
says the command that would. Exit 0 when the script is written (and the job completed, with
--wait), 1 when the job ended otherwise, 2 on bad usage or parameters."""

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""This checkout: the nodes import Tally from it (a directory they share, as the results')."""

ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)
"""Slurm's job states that are over (squeue(1), JOB STATE CODES)."""
POLL_S = 1.0


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    cli = commands.add_parser(name, help=help_text, description=__doc__.split("\n\n")[1])
    cli.add_argument("probe", help="the probe (collectives across nodes; burn-in: burn_in on each node)")
    cli.add_argument("--params", default="{}", help="the probe's parameters, JSON (default: its own)")
    cli.add_argument("--nodes", type=int, default=2, help="nodes of the allocation (default: %(default)s)")
    cli.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="GPUs per node: ranks per node across nodes, tasks per node with --each (default: "
        "none, the CPU)",
    )
    cli.add_argument("--partition", help="the Slurm partition (default: the cluster's)")
    cli.add_argument("--time", type=int, default=30, help="the job's limit in minutes (default: %(default)s)")
    cli.add_argument(
        "--each",
        action="store_true",
        help="every node (GPU) runs the probe alone, and the results are one campaign",
    )
    cli.add_argument(
        "--results",
        type=Path,
        default=Path("tally-results"),
        help="a directory every node sees, for the results (default: ./%(default)s)",
    )
    cli.add_argument("--server", help="post the results to this Tally server when the job ends")
    cli.add_argument(
        "--outlier-fraction",
        type=float,
        default=0.10,
        help="--each: flag a device this far below its model's median (default: %(default)s)",
    )
    cli.add_argument("--script", type=Path, help="where to write the script (default: ./tally-PROBE.sbatch)")
    cli.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter on the nodes, with Tally and torch (default: this one)",
    )
    cli.add_argument("--submit", action="store_true", help="submit it with sbatch")
    cli.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="with --submit: follow the job until it ends, at most this long",
    )


def script(
    *,
    probe: str,
    params: dict,
    nodes: int,
    gpus_per_node: int,
    each: bool,
    results: Path,
    python: str,
    partition: str | None = None,
    time_min: int = 30,
    server: str | None = None,
    outlier_fraction: float = 0.10,
) -> str:
    """The sbatch script's text. Paths are made absolute: the batch step runs in its own cwd."""
    results = results.resolve()
    tasks = max(1, gpus_per_node) if each else 1
    lines = [
        "#!/bin/bash",
        f"# Written by `tally slurm`: {probe} {'on each node' if each else f'across {nodes} nodes'}.",
        f"#SBATCH --job-name=tally-{probe}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={tasks}",
        f"#SBATCH --time={time_min}",
        f"#SBATCH --output={results}/slurm-%j.out",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
        if each:
            lines.append("#SBATCH --gpus-per-task=1")
    q = shlex.quote
    out = f"{results}/$SLURM_JOB_ID"
    lines += [
        "set -euo pipefail",
        f"export PYTHONPATH={q(str(PROJECT_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f'out="{out}"',
        'mkdir -p "$out"',
    ]
    step = [
        q(python),
        "-m",
        "app.bench.launched",
        "--probe",
        q(probe),
        "--params",
        q(json.dumps(params)),
        "--out",
        '"$out"',
    ]
    if each:
        step.append("--each")
    else:
        # The rendezvous: the first node's address (Slurm's NodeAddr) and a port free there; this
        # batch step runs on that node.
        lines += [
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'head_addr=$(scontrol show node -o "$head" | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
            f'port=$({q(python)} -c \'import socket; s = socket.socket(); s.bind(("", 0)); '
            "print(s.getsockname()[1])')",
            f"export TALLY_RANKS_PER_NODE={gpus_per_node}",
        ]
        step += ["--endpoint", '"$head_addr:$port"']
    lines.append("srun --kill-on-bad-exit=1 " + " ".join(step))
    importing = [q(python), "-m", "app.cli", "import", '"$out"']
    if each:
        importing += ["--campaign", "--outlier-fraction", str(outlier_fraction)]
    if server:
        lines.append(" ".join(importing + ["--server", q(server)]))
    else:
        lines.append(f'echo "results in $out: tally import $out{" --campaign" if each else ""} --server URL"')
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.probes.registry import PROBES

    probe = "burn_in" if args.probe == "burn-in" else args.probe
    each = args.each or args.probe == "burn-in"
    if probe not in PROBES:
        print(f"tally slurm: no probe {probe!r}; one of {', '.join(sorted(PROBES))}", file=sys.stderr)
        return 2
    if args.nodes < 1 or args.gpus_per_node < 0 or args.time < 1:
        print(
            "tally slurm: --nodes and --time must be at least 1, --gpus-per-node at least 0", file=sys.stderr
        )
        return 2
    if args.nodes > 1 and not each and not PROBES[probe].spans_boxes:
        spans = ", ".join(sorted(n for n, p in PROBES.items() if p.spans_boxes))
        print(
            f"tally slurm: the {probe} probe runs on one node: use --each, or one of {spans}", file=sys.stderr
        )
        return 2
    try:
        raw = json.loads(args.params)
        raw.setdefault("device", "cuda" if args.gpus_per_node else "cpu")
        params = PROBES[probe].params.model_validate(raw).model_dump(mode="json")
    except (ValueError, ValidationError) as e:
        print(f"tally slurm: --params: {e}", file=sys.stderr)
        return 2
    text = script(
        probe=probe,
        params=params,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        each=each,
        results=args.results,
        python=args.python,
        partition=args.partition,
        time_min=args.time,
        server=args.server,
        outlier_fraction=args.outlier_fraction,
    )
    path = args.script or Path(f"tally-{probe}.sbatch")
    args.results.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    if not args.submit:
        print(f"submit it with: sbatch {path}")
        return 0
    sent = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True)
    if sent.returncode != 0:
        print(f"tally slurm: sbatch: {sent.stderr.strip()}", file=sys.stderr)
        return 1
    job_id = sent.stdout.strip().split(";")[0]
    print(f"submitted Slurm job {job_id}; its output: {args.results.resolve()}/slurm-{job_id}.out")
    if args.wait is None:
        return 0
    state = wait(job_id, args.wait)
    print(f"Slurm job {job_id}: {state}")
    return 0 if state == "COMPLETED" else 1


def wait(job_id: str, timeout_s: float) -> str:
    """The job's state once it has ended (scontrol's JobState), or the last seen at the deadline."""
    deadline = time.monotonic() + timeout_s
    state = "UNKNOWN"
    while True:
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True
        ).stdout
        for field in shown.split():
            if field.startswith("JobState="):
                state = field.removeprefix("JobState=")
        if state in ENDED or time.monotonic() >= deadline:
            return state
        time.sleep(POLL_S)
