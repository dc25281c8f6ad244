"""data_loader: random batches from a memory-mapped token file, drawn as the course's get_batch
draws them, copied to the device pageable and pinned, beside the train step they would feed.

get_batch (CS336 assignment 1; nanoGPT's train.py the same): batch_size random offsets i in
[0, tokens - seq_len - 1], x = data[i : i + seq_len], y = data[i + 1 : i + seq_len + 1], stacked
as int64 (torch.from_numpy of .astype(np.int64)), then .to(device)."""

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from app.bench import energy as energy_window
from app.bench import train_step
from app.bench.common import setup, to_json
from app.bench.timer import summarize, sync
from app.probes.data_loader import (
    TOKEN_BYTES,
    DataLoaderParams,
    DataLoaderResult,
    LoaderMode,
    batch_bytes,
    file_bytes,
    train_params,
)
from app.probes.results import Skipped
from app.probes.train_step import predict

CHUNK_TOKENS = 8 * 2**20
"""Tokens generated and written at a time: 16 MiB of uint16, so the child never holds the file."""


def write_tokens(path: Path, tokens: int, dtype: str, vocab: int, rng: np.random.Generator) -> float:
    """Seconds to write `tokens` random ids below `vocab` as `dtype`, fsync included."""
    start = time.perf_counter()
    with open(path, "wb") as f:
        for first in range(0, tokens, CHUNK_TOKENS):
            rng.integers(0, vocab, size=min(CHUNK_TOKENS, tokens - first), dtype=dtype).tofile(f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - start


def get_batch(data: np.ndarray, batch_size: int, seq_len: int, device: torch.device,
              pinned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The course's get_batch: (x, y), each (batch_size, seq_len) int64 on `device`."""
    starts = np.random.randint(0, len(data) - seq_len, size=batch_size)
    x = torch.stack([torch.from_numpy(data[i:i + seq_len].astype(np.int64)) for i in starts])
    y = torch.stack([torch.from_numpy(data[i + 1:i + seq_len + 1].astype(np.int64)) for i in starts])
    if pinned:
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def time_batches(run: Callable[[], object], device: torch.device, timer) -> list[float]:
    """Host seconds per call of `run` with a synchronize after it (its copies done): warmed up and
    counted as the timer counts (warmup_s, measure_s, min_iters..max_iters). No L2 flush: a
    loader's cost is the host's gathering, and the page cache, not a device cache."""
    n = timer.iterations(timer.warm_up(run))
    seconds = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def _train_tokens_per_s(p: DataLoaderParams) -> tuple[float, str]:
    if p.train_tokens_per_s is not None:
        return p.train_tokens_per_s, "params" if p.train_job_id is None else "calibration"
    measured = train_step.run(train_params(p).model_dump(mode="json"), lambda *_: None)
    return measured["tokens_per_sec"], "measured"


def run(raw: dict, progress) -> dict:
    p, env = setup(DataLoaderParams, raw)
    train = train_params(p)
    pred = predict.train_step(train, env.cuda)
    size = file_bytes(p, env.device.type)
    tokens = size // TOKEN_BYTES[p.token_dtype]
    # Ids below the model's vocabulary (the cruncher has none: the dtype's range, to 2^16).
    vocab = min(pred.config.vocab_size if pred.config else 2**16, np.iinfo(p.token_dtype).max + 1)
    modes = ("pageable", "pinned") if env.cuda else ("pageable",)
    skipped = [] if env.cuda else [Skipped("pinned", "pinned host memory needs a CUDA device: on a CPU the "
                                                     "copy is to the CPU itself (a no-op .to)")]
    total = len(modes) + 2
    progress(0, total, "writing the token file")
    times: dict[str, list[float]] = {}
    energies = {}
    with tempfile.TemporaryDirectory(prefix="tally-data-loader-") as tmp:
        path = Path(tmp) / f"tokens.{p.token_dtype}"
        write_s = write_tokens(path, tokens, p.token_dtype, vocab, np.random.default_rng(p.seed))
        data = np.memmap(path, dtype=p.token_dtype, mode="r")
        for i, mode in enumerate(modes):
            progress(1 + i, total, f"get_batch, {mode}")
            def draw(pinned=mode == "pinned", d=data):
                return get_batch(d, p.batch_size, p.seq_len, env.device, pinned)

            times[mode] = time_batches(draw, env.device, env.timer)
            # The GPU board's energy while the host gathers and copies batches (None on a CPU):
            # mostly its idle draw, which is what a loader-bound step costs it.
            energies[mode] = energy_window.back_to_back(
                env.device, [draw], seconds_per_iteration=statistics.median(times[mode]))
        del data  # the memmap closes before its directory goes
    progress(len(modes) + 1, total, "the train step")
    train_rate, source = _train_tokens_per_s(p)
    per_batch = p.batch_size * p.seq_len
    results = []
    for mode in modes:
        stats = summarize(times[mode])
        stats.energy = energy_window.per_unit(energies[mode], tokens=per_batch, bytes_moved=batch_bytes(p))
        rate = per_batch / stats.median
        results.append(LoaderMode(mode=mode, time=stats, batches_per_sec=1 / stats.median,
                                  tokens_per_sec=rate, bytes_per_sec=batch_bytes(p) / stats.median,
                                  headroom=rate / train_rate, keeps_up=rate >= train_rate))
    progress(total, total, "done")
    return to_json(DataLoaderResult(
        probe="data_loader", environment=env.environment(p.seed), file_bytes=size, tokens_in_file=tokens,
        token_dtype=p.token_dtype, batch_size=p.batch_size, seq_len=p.seq_len, tokens_per_batch=per_batch,
        batch_bytes=batch_bytes(p), write_s=write_s, modes=results, train_model=pred.name,
        train_precision=p.precision, train_optimizer=p.optimizer, train_tokens_per_s=train_rate,
        train_source=source, train_job_id=p.train_job_id, skipped=skipped,
        notes=[
            "get_batch as the course writes it: random offsets, x = data[i:i+seq_len], "
            "y = data[i+1:i+seq_len+1], stacked as int64; pinned: pin_memory() then "
            ".to(device, non_blocking=True)",
            "times are host wall-clock per batch with a synchronize after it (the copy done); the loop a "
            "trainer runs would overlap a pinned copy with the GPU's work, this one does not",
            "the token file was just written, so its pages are likely in the page cache: this is the "
            "loader's speed from memory, not from a cold disk",
            "train tokens/s: " + {
                "params": "given in params.train_tokens_per_s",
                "calibration": f"train_step job {p.train_job_id} on this device (median step)",
                "measured": "the train_step probe's step timed in this job (median step)"}[source],
            "headroom = the loader's tokens/s / the train step's; keeps_up when >= 1",
        ]))
