"""matmul: TFLOP/s of (m, k) @ (k, n) per shape and dtype, beside the catalogue's dense peak."""

from contextlib import contextmanager

import torch

from app.accounting import flops, hardware
from app.bench import energy, sustain
from app.bench.common import setup, to_json
from app.probes.matmul import MatmulParams, MatmulPoint, MatmulResult, matmul_dtypes, matmul_shapes
from app.probes.results import Skipped

TORCH_DTYPES = {"float32": torch.float32, "tfloat32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16, "float8_e4m3fn": torch.float8_e4m3fn}


def dtypes(params: MatmulParams, device: torch.device) -> tuple[list[str], list[Skipped]]:
    cuda = device.type == "cuda"
    wanted = matmul_dtypes(params, device.type)
    run, skipped = [], []
    for name in wanted:
        if name == "tfloat32" and not cuda:
            skipped.append(Skipped(name, "TF32 is a CUDA tensor-core mode; on CPU it is float32"))
        elif name == "float8_e4m3fn" and cuda and torch.cuda.get_device_capability(device) < (8, 9):
            skipped.append(Skipped(name, "float8 matmuls need compute capability 8.9 or newer"))
        else:
            run.append(name)
    return run, skipped


@contextmanager
def tf32(allowed: bool):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def operands(m: int, k: int, n: int, dtype: str, device: torch.device):
    """The timed closure. float8 goes through torch._scaled_mm with unit scales and a
    bfloat16 output; it wants B column-major and every dimension a multiple of 16."""
    if dtype == "float8_e4m3fn":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=device, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(k, n, device=device, dtype=TORCH_DTYPES[dtype])
    return lambda: torch.matmul(a, b)


def run(raw: dict, progress) -> dict:
    params, env = setup(MatmulParams, raw)
    shapes = matmul_shapes(params, env.device.type)
    names, skipped = dtypes(params, env.device)
    acc = env.catalogue()
    points, total, done = [], len(shapes) * len(names), 0
    progress(0, total, "starting")
    for name in names:
        peak = acc.peak_flop_per_sec.get(hardware.peak_key(name)) if acc else None
        for m, k, n in shapes:
            if name == "float8_e4m3fn" and (m % 16 or k % 16 or n % 16):
                skipped.append(Skipped(f"{name} {m}x{k}x{n}", "torch._scaled_mm needs multiples of 16"))
            else:
                with tf32(name == "tfloat32"):
                    stats = env.timer.measure(operands(m, k, n, name, env.device))
                count = flops.matmul(m, k, n).flops
                energy.per_unit(stats.energy, flops=count)
                rate = count / stats.median
                points.append(MatmulPoint(
                    m=m, k=k, n=n, dtype=name, flops=count, time=stats, flop_per_sec=rate,
                    best_flop_per_sec=count / stats.best, peak_flop_per_sec=peak,
                    mfu=None if peak is None else rate / peak,
                    predicted_seconds_at_peak=None if peak is None else count / peak))
            done += 1
            progress(done, total, f"{name} {m}x{k}x{n}")
    best = {}
    for p in points:
        if p.dtype not in best or p.flop_per_sec > best[p.dtype].flop_per_sec:
            best[p.dtype] = p
    sustained = None
    if params.sustain_s and best:
        top = best[next(name for name in names if name in best)]
        with tf32(top.dtype == "tfloat32"):
            sustained = sustain.run(env.device, operands(top.m, top.k, top.n, top.dtype, env.device),
                                    params.sustain_s, flops=top.flops)
    return to_json(MatmulResult(probe="matmul", environment=env.environment(params.seed), points=points,
                                best=best, skipped=skipped, sustained=sustained))
