"""A benchmark job as the store returns it: its row, with its parameters decoded and its
result parsed once into the probe's result type (app/probes/registry.py).

A job's states and the only moves between them (TRANSITIONS; every change of state goes
through Store._move, which refuses any other):

    queued  -> running     claim: a dispatcher takes it, and the leases of its devices
    queued  -> cancelled   cancel: before it ran (alone, or with its campaign)
    queued  -> failed      expire_lost: the device, host or model it targets was lost for good (DeviceLost)
    running -> succeeded   finish: the child reported a result
    running -> failed      finish: the probe raised; recover: its workers died too often (WorkerLost)
    running -> timeout     finish: it outlived its timeout_s and was stopped
    running -> oom         finish: the probe ran out of device memory
    running -> crashed     finish: the child died by itself or broke the protocol
    running -> cancelled   finish: stopped on request; requeue or recover: its cancel was asked for
    running -> queued      requeue: its dispatcher is stopping; recover: its worker died, retries left

The TERMINAL states (succeeded, failed, timeout, oom, crashed, cancelled) are never left.
`revision` grows on every update of a row, so a watcher can tell a row changed without
comparing every field.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.probes.registry import RESULTS, ProbeResult

STATES = ("queued", "running", "succeeded", "failed", "timeout", "oom", "crashed", "cancelled")
TERMINAL = frozenset(STATES[2:])
ACTIVE = ("queued", "running")
# The module docstring draws this table; tests/jobs/test_jobs.py holds the two to each other.
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": TERMINAL | {"queued"},
    **{state: frozenset() for state in STATES[2:]},
}


@dataclass(frozen=True)
class Job:
    """One row, JSON columns decoded. Times are unix seconds."""

    id: int
    probe: str
    params: dict[str, Any]
    status: str
    attempts: int
    timeout_s: float
    created_at: float
    started_at: float | None
    finished_at: float | None
    progress_done: int
    progress_total: int
    progress_message: str
    result: ProbeResult | None  # type: ignore[valid-type]
    """The probe's result type (MatmulResult, TrainStepResult ...), once the job has succeeded."""
    error: dict[str, Any] | None
    worker_id: str | None
    heartbeat_at: float | None
    cancel_requested: bool
    revision: int
    device: str | None
    gpu: int | None
    """The one GPU index the job asked for; None: any dispatcher may take it (or it asked for
    several: num_gpus, gpus)."""
    ran_on_gpu: int | None
    """The GPU index its dispatcher gave a one-GPU job's child (CUDA_VISIBLE_DEVICES); None on
    the CPU, before it starts, and for a job on several GPUs (ran_on_gpus lists them)."""
    attempts_log: list[dict[str, Any]]
    """How each ended attempt ended, oldest first (app/jobs/attempts.py)."""
    num_gpus: int
    """How many GPUs the job asked for: 1 unless it asked for more."""
    gpus: list[int] | None
    """The GPU indices the job named (as many as num_gpus); None: any num_gpus free ones."""
    ran_on_gpus: list[int]
    """Every GPU its child was given, ascending (NVML's PCI bus order, so the child's cuda:0..n-1
    are these in turn); [ran_on_gpu] for a one-GPU job; empty on the CPU or before it starts."""
    target_host: str | None = None
    """Only a dispatcher of this host may take it (the fleet's host name)."""
    target_device: str | None = None
    """Only the dispatcher of this device: a GPU's NVML UUID, or "<host>:cpu"."""
    target_model: str | None = None
    """Only a GPU of this model: its catalogue id ("h100") or its name as NVML gives it."""
    campaign_id: int | None = None
    ran_on_device: str | None = None
    """The device its dispatcher serves (a UUID, or "<host>:cpu"); None before it starts, and for a
    dispatcher that serves no one device."""
    claim: str | None = None
    """The running attempt's token, new at each claim: the writes of that attempt name it, so a
    writer whose attempt was taken from it (a paused worker, recovered as dead) changes nothing.
    Never shown by the API."""
    nodes: int = 1
    """The boxes it spans (app/jobs/gangs.py): one dispatcher on each runs its part."""
    members: tuple[Any, ...] = ()
    """Those boxes (app/jobs/gangs.Member, by node) when the store read the job alone; empty in a
    page of jobs, and for a job on one box."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def from_row(row: Mapping[str, Any]) -> Job:
    fields = dict(row)
    for name in ("params", "error"):
        if fields[name] is not None:
            fields[name] = json.loads(fields[name])
    if fields["result"] is not None:
        fields["result"] = RESULTS.validate_json(fields["result"])
    fields["cancel_requested"] = bool(fields["cancel_requested"])
    fields["attempts_log"] = json.loads(fields["attempts_log"] or "[]")
    # A row from before jobs could ask for several GPUs (NULLs): one GPU, the one it names or ran on.
    fields["num_gpus"] = fields["num_gpus"] or 1
    fields["nodes"] = fields.get("nodes") or 1
    fields["gpus"] = None if fields["gpus"] is None else json.loads(fields["gpus"])
    ran = fields["ran_on_gpus"]
    fields["ran_on_gpus"] = (json.loads(ran) if ran is not None
                             else [] if fields["ran_on_gpu"] is None else [fields["ran_on_gpu"]])
    return Job(**fields)


def result_json(result: ProbeResult) -> str:  # type: ignore[valid-type]
    """How the store keeps a result: its type's JSON, which never holds a NaN or an infinity."""
    return json.dumps(RESULTS.dump_python(result, mode="json"), allow_nan=False)
