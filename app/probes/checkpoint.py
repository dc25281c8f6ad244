"""The checkpoint probe's contract: torch.save of a model's and its optimizer's state dicts, the
file's size beside the memory engine's checkpoint_bytes, and the disk's write and read rates.

The model, its optimizer and its precision are the train_step probe's (TrainStepFields), built
the same way (app/bench/train_step.py); one step runs first so that the optimizer's state exists.
The file goes to a fresh directory under the server's temporary directory (tempfile.gettempdir(),
TMPDIR): a job cannot name a path. Torch-free.
"""

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import count
from app.probes import predict
from app.probes.params import TrainStepFields
from app.probes.results import Environment, Stats


class CheckpointParams(TrainStepFields):
    """model, optimizer, precision (and batch_size, seq_len for the one step before the save) as
    the train_step probe takes them; mode full only: the engine's checkpoint_bytes is a whole
    model's."""

    repeats: count(1, 50) = Field(
        3, description="Writes timed, and cold reads timed, each a fresh file; the medians are reported.")


def prediction(p: CheckpointParams, cuda: bool) -> predict.TrainStepPrediction:
    """The train step's prediction (as the train_step probe makes it); InvalidInput naming
    params.mode for a fine-tune, whose checkpoint the engine's checkpoint_bytes does not describe."""
    if p.mode != "full":
        raise InvalidInput("params.mode", "the checkpoint probe saves a whole model and its optimizer "
                                          "(mode full); the engine's checkpoint_bytes does not describe a "
                                          "fine-tune's")
    return predict.train_step(p, cuda)


def predicted_parts(pred: predict.TrainStepPrediction) -> dict[str, int]:
    """The engine's checkpoint_bytes by kind: parameters, master weights and optimizer state of
    the whole model, bytes per parameter x parameters (app/accounting/training/memory.py)."""
    mem = pred.checkpoint
    per = mem.bytes_per_param_detail
    parts = {"parameters": round(mem.params * per.parameters),
             "master_weights": round(mem.params * per.master_weights),
             "optimizer_state": round(mem.params * per.optimizer_state)}
    return {k: v for k, v in parts.items() if v} | {"total": mem.checkpoint_bytes}


@dataclass(slots=True)
class CheckpointResult:
    probe: Literal["checkpoint"]
    environment: Environment
    model: str
    """"cruncher", a preset's name, or "custom"."""
    params: int
    optimizer: str
    precision: str
    file_bytes: int
    """os.stat's size of the file torch.save wrote (the same every repeat)."""
    predicted_bytes: int
    """The memory engine's checkpoint_bytes for this configuration (parameters, master weights,
    optimizer state; app/accounting/training/memory.py)."""
    predicted: dict[str, int]
    """predicted_bytes by kind, with their total."""
    relative_error: float
    """predicted_bytes / file_bytes - 1."""
    tensor_bytes: dict[str, int]
    """What the file holds, measured on the state dicts (each storage counted once, as torch.save
    writes a shared storage once): model (parameters), optimizer_state (the state tensors but the
    step counters), step_counters (Adam's and Adagrad's per-parameter `step`, a 4-byte float32
    scalar each)."""
    overhead_bytes: int
    """file_bytes - model - optimizer_state: the step counters plus the container (pickle of the
    dicts, keys and param_groups; the zip's headers, central directory and 64-byte alignment)."""
    overhead_fraction: float
    """overhead_bytes / file_bytes."""
    tensors: int
    """Storages written: one zip record each."""
    write_s: Stats
    """Seconds per torch.save to a file object, with its flush and os.fsync inside the timing."""
    read_s: Stats
    """Seconds per torch.load(map_location=the device, weights_only=True) after the file's pages
    were dropped from the page cache (see read_cache)."""
    read_warm_s: Stats
    """The same load again at once, its pages in the page cache: memory speed, not the disk's."""
    write_bytes_per_s: float
    """file_bytes / median write_s."""
    read_bytes_per_s: float
    """file_bytes / median read_s."""
    read_warm_bytes_per_s: float
    read_cache: Literal["dropped", "kept"]
    """dropped: os.posix_fadvise(POSIX_FADV_DONTNEED) after the fsync asked the kernel to evict the
    file's clean pages before each timed read; kept: no posix_fadvise here, so the read may be
    served from the page cache."""
    directory_filesystem: str | None
    """The temporary directory's filesystem type (/proc/mounts), e.g. ext4, overlay, tmpfs: on a
    tmpfs the 'disk' is memory."""
    assumptions: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD
