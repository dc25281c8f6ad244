"""The checkpoint probe: torch.save of a model's and its optimizer's state dicts, the
file's size beside the memory engine's checkpoint_bytes, and the disk's write and read rates.

The model, its optimizer and its precision are the train_step probe's (TrainStepFields), built
the same way (app/bench/train_step.py); one step runs first so that the optimizer's state exists.
The file goes to a fresh directory under the server's temporary directory (tempfile.gettempdir(),
TMPDIR): a job cannot name a path. Its torch side is app/bench/checkpoint.py; its page's figures
and its table are its faces below. GB = 10^9 bytes.
"""

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from app import numbers
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import count
from app.probes import energy
from app.probes.base import Kind, Least, Need, Probe
from app.probes.faces import Faces, Metric, Table, where
from app.probes.past import Past
from app.probes.results import Environment, Stats
from app.probes.train_step import predict
from app.probes.train_step.faces import FIELDS as TRAIN_STEP_FIELDS
from app.probes.train_step.params import TrainStepFields


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


def need(params: CheckpointParams, kind: Kind) -> Need:
    # The trained model and its optimizer (a train step's peak), then the loaded copy of the file beside them.
    pred = prediction(params, kind == "cuda")
    return pred.memory["total"] + pred.checkpoint.checkpoint_bytes, "params.batch_size"


def scratch(params: CheckpointParams, kind: Kind) -> Need:
    # One file at a time; torch's zip framing adds well under 1% to the tensors
    # (tests/probes/test_probe_io.py).
    return prediction(params, kind == "cuda").checkpoint.checkpoint_bytes * 101 // 100, "params.model"


def least_seconds(params: CheckpointParams, kind: Kind) -> Least:
    return 0.0, "params.repeats"  # a write and a read per repeat, no warm-up


# --- faces ----------------------------------------------------------------------------------------

def headline(r: CheckpointResult) -> list[Metric]:
    return [Metric("write", "write, median (save, flush, fsync)", r.write_bytes_per_s / 1e9, "gb_per_sec"),
            Metric("read", f"read, median (page cache {r.read_cache})", r.read_bytes_per_s / 1e9,
                   "gb_per_sec"),
            Metric("bytes", "checkpoint bytes, predicted vs file", r.relative_error, "signed_fraction",
                   f"{r.file_bytes:,} bytes"),
            Metric("overhead", "serialisation overhead", r.overhead_fraction, "fraction")]


def tables(r: CheckpointResult) -> list:
    said = f"{where(r)}: {r.model} ({r.params:,} params), {r.optimizer}, {r.precision}"
    t, ms, per = r.tensor_bytes, numbers.ms, numbers.per
    rows = [[name.replace("_", " "), f"{n:,}", ""] for name, n in r.predicted.items() if name != "total"]
    rows += [["model tensors", "", f"{t['model']:,}"],
             ["optimizer state tensors", "", f"{t['optimizer_state']:,}"],
             ["overhead (step counters, pickle, zip)", "", f"{r.overhead_bytes:,}"],
             ["total", f"{r.predicted_bytes:,}", f"{r.file_bytes:,}"]]
    speed = [["write (torch.save, flush, fsync)", ms(r.write_s.median), ms(r.write_s.best),
              per(r.write_bytes_per_s, 1e9)],
             [f"read (torch.load, page cache {r.read_cache})", ms(r.read_s.median), ms(r.read_s.best),
              per(r.read_bytes_per_s, 1e9)],
             ["read again (page cache warm)", ms(r.read_warm_s.median), ms(r.read_warm_s.best),
              per(r.read_warm_bytes_per_s, 1e9)]]
    joules = energy.shown([r.write_s, r.read_warm_s])
    if joules:  # the GPU's energy over saves and warm loads run back to back (none for the cold read)
        for row, stats in zip(speed, (r.write_s, r.read_s, r.read_warm_s), strict=True):
            row += energy.cells(stats, rate="GB/J")
    return [said, Table(["bytes", "predicted", "measured"], rows),
            f"error = predicted / measured - 1 = {numbers.percent(r.relative_error, 3, True)}; overhead "
            f"{numbers.percent(r.overhead_fraction, 3)} of the file ({t['step_counters']:,} bytes of step "
            f"counters, {r.tensors} tensors); filesystem {r.directory_filesystem or 'unknown'}",
            Table(["", "median ms", "best ms", "GB/s (median)",
                   *(energy.headers("run", "GB/J") if joules else [])], speed, 1),
            *(f"assumes {a}" for a in r.assumptions), *energy.note(r)]


def bytes_chart(r: CheckpointResult) -> dict:
    """The engine's checkpoint_bytes by kind, stacked, beside the file's bytes by what holds them."""
    scale, unit = (1e9, "GB") if r.file_bytes >= 1e9 else (1e6, "MB")
    pred, t = r.predicted, r.tensor_bytes
    sets = [{"label": "parameters", "data": [pred.get("parameters", 0) / scale, t["model"] / scale]},
            {"label": "master weights", "data": [pred.get("master_weights", 0) / scale, 0]},
            {"label": "optimizer state",
             "data": [pred.get("optimizer_state", 0) / scale, t["optimizer_state"] / scale]},
            {"label": "overhead (step counters, pickle, zip)", "data": [0, r.overhead_bytes / scale]}]
    return {"type": "bars", "labels": ["predicted (checkpoint_bytes)", "measured (the file)"], "y": unit,
            "stacked": True, "log": False, "sets": [s for s in sets if any(s["data"])],
            "caption": f"Bytes, {unit} (10^{9 if unit == 'GB' else 6}): the memory engine's checkpoint_bytes "
                       f"by kind beside the torch.save file's {r.file_bytes:,} bytes by what holds them; "
                       f"predicted / measured - 1 = {numbers.percent(r.relative_error, 3, signed=True)}, the "
                       f"overhead {numbers.percent(r.overhead_fraction, 3)} of the file."}


def speed_chart(r: CheckpointResult) -> dict:
    cold = "after its pages were dropped" if r.read_cache == "dropped" else "page cache kept"
    return {"type": "bars", "labels": ["write (save, flush, fsync)", f"read ({cold})", "read again (warm)"],
            "y": "GB/s", "stacked": False, "log": False,
            "sets": [{"label": "GB/s (median)", "data": [r.write_bytes_per_s / 1e9, r.read_bytes_per_s / 1e9,
                                                         r.read_warm_bytes_per_s / 1e9]}],
            "caption": f"GB/s (10^9 bytes per second), the file's bytes over the median seconds of "
                       f"{r.write_s.iterations} writes and reads, on "
                       f"{r.directory_filesystem or 'an unknown'} filesystem."}


def charts(r: CheckpointResult, past: Past) -> dict[str, dict]:
    return {"bytes": bytes_chart(r), "speed": speed_chart(r)}


PROBE = Probe(
    "checkpoint", "torch.save of a model's and its optimizer's state dicts: the file's bytes against the "
    "memory engine's checkpoint_bytes, and the write and read GB/s", CheckpointParams, CheckpointResult,
    "app.bench.checkpoint:run", need, least_seconds, scratch=scratch,
    faces=Faces(headline=headline, tables=tables, charts=charts, page="probes/checkpoint.html",
                form=(TRAIN_STEP_FIELDS,), compared=("model", "optimizer", "precision")))
