"""transfer: host <-> device copies over a sweep of sizes, pageable and pinned host
memory, each with and without non_blocking. GB/s is 10^9 bytes per second."""

import torch

from app.bench import energy
from app.bench.common import setup, to_json
from app.probes.results import Skipped
from app.probes.transfer import TransferParams, TransferPoint, TransferResult, transfer_sizes

CPU_NOTE = ("No CUDA device: both directions are copies between two pageable host buffers, "
            "which tests the method but measures host memcpy, not a bus.")
CUDA_NOTE = ("Pageable copies stage through a driver buffer; with non_blocking they still "
             "synchronise with the host. Pinned non_blocking copies are truly asynchronous.")


def run(raw: dict, progress) -> dict:
    params, env = setup(TransferParams, raw)
    sizes = transfer_sizes(params, env.device.type)
    memories = ("pageable", "pinned") if env.cuda else ("pageable",)
    skipped = [] if env.cuda else [Skipped("pinned", "pinned host memory needs a CUDA device")]
    points: list[TransferPoint] = []
    total, done = len(sizes) * 2 * len(memories) * 2, 0
    for size in sizes:
        n = max(1, size // 4)
        device_buf = torch.randn(n, device=env.device)
        pageable = torch.randn(n)
        for memory in memories:
            host = pageable.pin_memory() if memory == "pinned" else pageable
            for direction in ("host_to_device", "device_to_host"):
                src, dst = (host, device_buf) if direction == "host_to_device" else (device_buf, host)
                for non_blocking in (False, True):
                    def copy(s=src, d=dst, nb=non_blocking):
                        return d.copy_(s, non_blocking=nb)

                    stats = env.timer.measure(copy)
                    nbytes = n * 4
                    energy.per_unit(stats.energy, bytes_moved=nbytes)  # over the bus, once
                    points.append(TransferPoint(
                        size_bytes=nbytes, direction=direction, host_memory=memory,
                        non_blocking=non_blocking, time=stats, gb_per_sec=nbytes / stats.median / 1e9,
                        best_gb_per_sec=nbytes / stats.best / 1e9))
                    done += 1
                    progress(done, total, f"{direction} {memory} {nbytes} B")
    return to_json(TransferResult(probe="transfer", environment=env.environment(params.seed), points=points,
                                  skipped=skipped, note=CUDA_NOTE if env.cuda else CPU_NOTE))
