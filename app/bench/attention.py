"""attention: torch's scaled_dot_product_attention forward, and forward with backward, per shape
and dtype, under the SDPA kernel the parameters allow."""

import contextlib

import torch
import torch.nn.functional as F

from app.accounting.calibration.attention import core
from app.bench.common import setup, to_json
from app.bench.matmul import TORCH_DTYPES
from app.probes.attention import (
    BACKWARD_FACTOR,
    AttentionParams,
    AttentionPoint,
    AttentionResult,
    attention_dtypes,
    attention_shapes,
)
from app.probes.ledger import datasheet_peak
from app.probes.results import Skipped


def kernel(backend: str):
    """A context that allows only `backend` (torch.nn.attention.sdpa_kernel); a no-op for auto."""
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    names = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}
    return sdpa_kernel([names[backend]])


def run(raw: dict, progress) -> dict:
    params, env = setup(AttentionParams, raw)
    kind = env.device.type
    shapes, names = attention_shapes(params, kind), attention_dtypes(params, kind)
    points, skipped, total, done = [], [], len(shapes) * len(names), 0
    progress(0, total, "starting")
    for name in names:
        for b, h, s, d in shapes:
            what = f"{name} b{b} h{h} s{s} d{d}"
            q, k, v = (torch.randn(b, h, s, d, device=env.device, dtype=TORCH_DTYPES[name],
                                   requires_grad=True) for _ in range(3))
            grad = torch.randn_like(q)

            def forward(q=q, k=k, v=v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=params.causal)

            def step(q=q, k=k, v=v, grad=grad):
                # autograd.grad returns the gradients without accumulating them into .grad
                return torch.autograd.grad(forward(q, k, v), (q, k, v), grad)

            try:
                with kernel(params.backend):
                    with torch.no_grad():
                        fwd = env.timer.measure(forward)
                    both = env.timer.measure(step) if params.backward else None
            except RuntimeError as e:  # the allowed kernel does not run this shape or dtype here
                skipped.append(Skipped(what, str(e).splitlines()[0][:300]))
                continue
            finally:
                done += 1
                progress(done, total, what)
            flops = round(core(batch=b, heads=h, seq_len=s, head_dim=d, causal=params.causal).forward_flops)
            points.append(AttentionPoint(
                batch=b, heads=h, seq_len=s, head_dim=d, dtype=name, causal=params.causal,
                forward_flops=flops,
                forward=fwd, forward_backward=both, forward_flop_per_sec=flops / fwd.median,
                forward_backward_flop_per_sec=None if both is None else BACKWARD_FACTOR * flops / both.median,
                peak_flop_per_sec=None))
            del q, k, v, grad
    environment = env.environment(params.seed)  # after the runs: it ends the contention watch
    for p in points:
        peak = datasheet_peak(environment, p.dtype)
        p.peak_flop_per_sec = None if peak is None else peak[0]
    return to_json(AttentionResult(probe="attention", environment=environment, backend=params.backend,
                                   points=points, skipped=skipped))
