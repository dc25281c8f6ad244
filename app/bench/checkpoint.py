"""checkpoint: torch.save of a model's and its optimizer's state dicts after one training step,
the file's size against the memory engine's checkpoint_bytes, and the write and read rates.

The model and optimizer are the train_step probe's (its workload, optimizer and phases), so the
state saved is the state that probe trains. GB/s is 10^9 bytes per second."""

import os
import tempfile
import time
from pathlib import Path

import torch

from app.bench import energy as energy_window
from app.bench import train_step
from app.bench.common import setup, to_json
from app.bench.timer import summarize, sync
from app.probes.checkpoint import CheckpointParams, CheckpointResult, predicted_parts, prediction

STEP_KEY = "step"
"""Adam's, AdamW's and Adagrad's per-parameter step count: a 0-d float32 tensor each."""


def _storages(tensors) -> tuple[int, int]:
    """(bytes, count) of the distinct storages under `tensors`: torch.save writes each once (a tied
    embedding and head share one)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values()), len(seen)


def _measured(model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict[str, int], int]:
    model_bytes, n_model = _storages(model.state_dict().values())
    state = [(k, v) for s in opt.state.values() for k, v in s.items() if isinstance(v, torch.Tensor)]
    opt_bytes, n_opt = _storages(v for k, v in state if k != STEP_KEY)
    step_bytes, n_step = _storages(v for k, v in state if k == STEP_KEY)
    counted = {"model": model_bytes, "optimizer_state": opt_bytes, "step_counters": step_bytes}
    return counted, n_model + n_opt + n_step


def _write(obj: dict, path: Path, device: torch.device) -> float:
    """Seconds for torch.save into an open file, its flush and os.fsync: the bytes are on the disk."""
    sync(device)
    start = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - start


def _drop_cache(path: Path) -> bool:
    """Ask the kernel to evict the file's (clean, fsynced) pages; False where posix_fadvise is missing."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def _read(path: Path, device: torch.device) -> float:
    start = time.perf_counter()
    loaded = torch.load(path, map_location=device, weights_only=True)
    sync(device)
    seconds = time.perf_counter() - start
    del loaded
    return seconds


def _filesystem(directory: str) -> str | None:
    """The type of the filesystem mounted deepest above `directory`, from /proc/mounts."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    real = os.path.realpath(directory)
    best = max((m for m in mounts if real == m[0] or real.startswith(m[0].rstrip("/") + "/")),
               key=lambda m: len(m[0]), default=None)
    return None if best is None else best[1]


def run(raw: dict, progress) -> dict:
    p, env = setup(CheckpointParams, raw)
    pred = prediction(p, env.cuda)
    train = train_step.TrainStepParams.model_validate(p.model_dump(mode="json", exclude={"repeats"}))
    work = train_step.workload(train, env.device)
    opt = train_step.optimizer(p.optimizer, work.model.parameters(), env.device)
    (forward, backward, step), _ = train_step.phases(work, opt, env.device, p.precision)
    progress(0, 2 * p.repeats + 1, "one training step")
    forward(), backward(), step()  # the optimizer's state exists from its first step
    sync(env.device)
    tensors, n_tensors = _measured(work.model, opt)
    obj = {"model": work.model.state_dict(), "optimizer": opt.state_dict()}

    writes, reads, warm = [], [], []
    dropped = True
    with tempfile.TemporaryDirectory(prefix="tally-checkpoint-") as tmp:
        for i in range(p.repeats):
            path = Path(tmp) / f"checkpoint-{i}.pt"
            writes.append(_write(obj, path, env.device))
            size = path.stat().st_size
            progress(2 * i + 1, 2 * p.repeats + 1, f"write {i + 1}/{p.repeats}")
            dropped = _drop_cache(path) and dropped
            reads.append(_read(path, env.device))
            warm.append(_read(path, env.device))
            path.unlink()  # one file on the disk at a time
            progress(2 * i + 2, 2 * p.repeats + 1, f"read {i + 1}/{p.repeats}")
        write_s, read_s, read_warm_s = summarize(writes), summarize(reads), summarize(warm)
        # The GPU board's energy over saves and (warm) loads run back to back (None on a CPU):
        # what a checkpoint costs the GPU that waits for it, per save and per load.
        path = Path(tmp) / "checkpoint-energy.pt"
        write_s.energy = energy_window.per_unit(energy_window.back_to_back(
            env.device, [lambda: _write(obj, path, env.device)], seconds_per_iteration=write_s.median),
            bytes_moved=size)
        read_warm_s.energy = energy_window.per_unit(energy_window.back_to_back(
            env.device, [lambda: _read(path, env.device)], seconds_per_iteration=read_warm_s.median),
            bytes_moved=size)
        directory = tmp
    overhead = size - tensors["model"] - tensors["optimizer_state"]
    return to_json(CheckpointResult(
        probe="checkpoint", environment=env.environment(p.seed), model=pred.name, params=pred.params,
        optimizer=p.optimizer, precision=p.precision, file_bytes=size,
        predicted_bytes=pred.checkpoint.checkpoint_bytes, predicted=predicted_parts(pred),
        relative_error=pred.checkpoint.checkpoint_bytes / size - 1, tensor_bytes=tensors,
        overhead_bytes=overhead, overhead_fraction=overhead / size, tensors=n_tensors,
        write_s=write_s, read_s=read_s, read_warm_s=read_warm_s,
        write_bytes_per_s=size / write_s.median, read_bytes_per_s=size / read_s.median,
        read_warm_bytes_per_s=size / read_warm_s.median, read_cache="dropped" if dropped else "kept",
        directory_filesystem=_filesystem(os.path.dirname(directory)),
        assumptions=[
            "one training step ran before the save, so the optimizer's state exists",
            'the file is torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}) in '
            "torch's zip format; each storage is written once (a tied embedding and head share one)",
            "write: torch.save, flush and os.fsync inside the timing; from "
            + ("GPU memory, so the device-to-host copy is timed too" if env.cuda else "host memory"),
            "read: torch.load(map_location=" + env.device.type + ", weights_only=True), after "
            + ("posix_fadvise(POSIX_FADV_DONTNEED) evicted the file's pages (the kernel may keep some; a "
               "disk's own cache is not flushed)" if dropped else "no eviction: the page cache may serve it"),
            "the predicted bytes hold no step counters, pickle or zip framing: that is the overhead",
        ]))
