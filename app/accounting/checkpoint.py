"""Checkpoints: the seconds to write and read one, and the share of a run spent saving them.

A checkpoint holds the model and the optimizer state together (memory.checkpoint_bytes: the
parameters, master weights and optimizer state, no gradients). Writing it at write_bytes_per_s
takes bytes / write_bytes_per_s seconds; reading it back (a restart) bytes / read_bytes_per_s.

A blocking save (torch.save in the training loop, as the course's loop does) stops training
while it writes: every_n_steps steps of step_s seconds, then write_s of saving, so the share of
wall time spent checkpointing is write_s / (every_n_steps x step_s + write_s). An asynchronous
save hides most of it; that is not what is computed here.
"""

from dataclasses import dataclass

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.accounting.units import GB, GIB


@dataclass(slots=True)
class Schedule:
    """Checkpointing every every_n_steps steps of a run."""

    every_n_steps: int
    step_seconds: float | None
    """Seconds of one training step, as given; null when not given."""
    total_steps: int | None
    """Steps of the whole run, as given; null when not given."""
    checkpoints: int | None
    """total_steps // every_n_steps: saves during the run (none at step 0); null without total_steps."""
    write_seconds_total: float | None
    """checkpoints x write_seconds; null without total_steps."""
    share_of_run: float | None
    """write_seconds / (every_n_steps x step_seconds + write_seconds): the fraction of wall time a
    blocking save takes; null without step_seconds."""
    run_seconds: float | None
    """total_steps x step_seconds + write_seconds_total: the run's wall time with its saves; null
    unless both are given."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class CheckpointTime:
    """One checkpoint's size, its write and read times, and what saving it costs a run."""

    params: int
    """Parameters of the whole model."""
    precision: str
    optimizer: str
    bytes_per_param: float
    """Checkpoint bytes per parameter: parameters + master weights + optimizer state."""
    checkpoint_bytes: int
    """What one checkpoint holds, as POST /api/v1/memory/training's checkpoint_bytes."""
    checkpoint_gb: float
    """checkpoint_bytes / 10^9."""
    checkpoint_gib: float
    """checkpoint_bytes / 2^30."""
    write_bytes_per_s: float
    write_source: str
    """"given", or the checkpoint probe job the rate was measured by."""
    read_bytes_per_s: float
    read_source: str
    write_seconds: float
    """checkpoint_bytes / write_bytes_per_s."""
    read_seconds: float
    """checkpoint_bytes / read_bytes_per_s: a restart's load."""
    keep_last: int
    """Checkpoints kept on disk at once."""
    storage_bytes: int
    """keep_last x checkpoint_bytes."""
    schedule: Schedule | None
    """null without every_n_steps."""
    assumptions: list[str]

    __pydantic_config__ = RECORD


def schedule(*, write_seconds: float, every_n_steps: int, step_seconds: float | None,
             total_steps: int | None) -> Schedule:
    if step_seconds is None and total_steps is None:
        raise InvalidInput("step_seconds", "give step_seconds (for the share of the run) or total_steps (for "
                                           "the number of checkpoints) with every_n_steps")
    count = None if total_steps is None else total_steps // every_n_steps
    total_write = None if count is None else count * write_seconds
    share = None if step_seconds is None else write_seconds / (every_n_steps * step_seconds + write_seconds)
    run = None if step_seconds is None or total_steps is None else total_steps * step_seconds + total_write
    return Schedule(every_n_steps=every_n_steps, step_seconds=step_seconds, total_steps=total_steps,
                    checkpoints=count, write_seconds_total=total_write, share_of_run=share, run_seconds=run)


def checkpoint_time(*, params: int, precision: str, optimizer: str, checkpoint_bytes: int,
                    write_bytes_per_s: float, read_bytes_per_s: float, write_source: str = "given",
                    read_source: str = "given", keep_last: int = 1, every_n_steps: int | None = None,
                    step_seconds: float | None = None, total_steps: int | None = None) -> CheckpointTime:
    write_s = checkpoint_bytes / write_bytes_per_s
    plan = None
    if every_n_steps is not None:
        plan = schedule(write_seconds=write_s, every_n_steps=every_n_steps, step_seconds=step_seconds,
                        total_steps=total_steps)
    elif step_seconds is not None or total_steps is not None:
        raise InvalidInput("every_n_steps", "give every_n_steps: how often a checkpoint is saved")
    assumptions = [
        "a checkpoint holds parameters, master weights and optimizer state (no gradients), as "
        "POST /api/v1/memory/training's checkpoint_bytes; torch.save adds a few kB of keys and headers",
        "one stream at the given rate: a sharded checkpoint written by many ranks at once divides the "
        "time only where the storage's aggregate bandwidth grows with them"]
    if plan is not None:
        assumptions.append("a blocking save: training waits while the checkpoint is written")
    return CheckpointTime(
        params=params, precision=precision, optimizer=optimizer, bytes_per_param=checkpoint_bytes / params,
        checkpoint_bytes=checkpoint_bytes, checkpoint_gb=checkpoint_bytes / GB,
        checkpoint_gib=checkpoint_bytes / GIB, write_bytes_per_s=write_bytes_per_s, write_source=write_source,
        read_bytes_per_s=read_bytes_per_s, read_source=read_source, write_seconds=write_s,
        read_seconds=checkpoint_bytes / read_bytes_per_s, keep_last=keep_last,
        storage_bytes=keep_last * checkpoint_bytes, schedule=plan, assumptions=assumptions)
