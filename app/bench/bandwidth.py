"""bandwidth: a device-to-device copy of a buffer far larger than L2. Each copy reads
size_bytes and writes size_bytes, so it moves 2 x size_bytes."""

import torch

from app.bench import energy, sustain
from app.bench.common import setup, to_json
from app.probes.bandwidth import BandwidthParams, BandwidthResult, bandwidth_bytes


def run(raw: dict, progress) -> dict:
    params, env = setup(BandwidthParams, raw)
    size = bandwidth_bytes(params, env.device.type)
    src = torch.randn(size // 4, device=env.device)
    dst = torch.empty_like(src)
    size = src.numel() * 4  # whole float32 elements
    progress(0, 1, f"copying {size} bytes")
    stats = env.timer.measure(lambda: dst.copy_(src))
    moved = 2 * size
    energy.per_unit(stats.energy, bytes_moved=moved)
    acc = env.catalogue()
    peak = acc.memory_bandwidth_bytes_per_sec if acc else None
    rate = moved / stats.median
    sustained = (sustain.run(env.device, lambda: dst.copy_(src), params.sustain_s, bytes_moved=moved)
                 if params.sustain_s else None)
    progress(1, 1, "done")
    return to_json(BandwidthResult(
        probe="bandwidth", environment=env.environment(params.seed), size_bytes=size, bytes_moved=moved,
        time=stats, gb_per_sec=rate / 1e9, best_gb_per_sec=moved / stats.best / 1e9,
        catalogue_gb_per_sec=None if peak is None else peak / 1e9,
        percent_of_catalogue=None if peak is None else 100 * rate / peak,
        predicted_seconds=None if peak is None else moved / peak, sustained=sustained))
