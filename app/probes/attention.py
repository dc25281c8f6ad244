"""The attention probe: scaled-dot-product attention (torch's SDPA: flash, memory-efficient or
math kernels) forward and forward-with-backward per shape, beside the dense peak and beside this
device's own matmul runs of the same GEMMs. Its runs give a calibration profile its attention
figures (app/accounting/calibration/attention.py). Its torch side is app/bench/attention.py."""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from app import numbers
from app.accounting import dtypes
from app.accounting.calibration import attention as core
from app.accounting.calibration import surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import Input, count
from app.probes.base import Kind, Least, Need, Probe, timer_least
from app.probes.faces import Faces, Metric, Table, compare_lines, skipped, where
from app.probes.ledger import Ledger, Pair, datasheet_peak, positive
from app.probes.params import ProbeParams
from app.probes.results import Environment, Skipped, Stats

AttentionDtype = Literal["float32", "bfloat16", "float16"]
Backend = Literal["auto", "flash", "efficient", "math", "cudnn"]
"""torch.nn.attention.SDPBackend to allow; auto: whichever torch picks (the fastest it supports)."""


class AttentionShape(Input):
    """q, k and v of (batch, heads, seq_len, head_dim)."""

    batch: count(1, 4096)
    heads: count(1, 1024)
    seq_len: count(1, 262_144)
    head_dim: count(1, 512)


@dataclass(frozen=True)
class AttentionSizes:
    shapes: tuple[tuple[int, int, int, int], ...]
    dtype: str


# By device kind: a prefill's sequence lengths at a Llama head size on CUDA; small ones on a CPU
# (so the suite runs without a GPU).
ATTENTION_SIZES = {
    "cuda": AttentionSizes(tuple((4, 16, s, 128) for s in (512, 1024, 2048, 4096, 8192)), "bfloat16"),
    "cpu": AttentionSizes(tuple((2, 4, s, 32) for s in (64, 128, 256, 512)), "float32"),
}


class AttentionParams(ProbeParams):
    shapes: Annotated[list[AttentionShape], Field(max_length=64)] = Field(
        default_factory=list, description="Default: batch 4, 16 heads of 128, sequences 512 to 8192 on "
        "CUDA; batch 2, 4 heads of 32, sequences 64 to 512 on a CPU.")
    dtypes: Annotated[list[AttentionDtype], Field(min_length=1, max_length=3)] | None = Field(
        None, description="Default: bfloat16 on CUDA, float32 on a CPU.")
    causal: bool = Field(True, description="A causal mask (is_causal): a kernel computes the lower triangle.")
    backend: Backend = Field("auto", description="The SDPA kernel allowed; a shape it cannot run is skipped.")
    backward: bool = Field(True, description="Also time the forward with its backward (dq, dk, dv).")


def attention_shapes(params: AttentionParams, kind: str) -> list[tuple[int, int, int, int]]:
    return ([(s.batch, s.heads, s.seq_len, s.head_dim) for s in params.shapes]
            or list(ATTENTION_SIZES[kind].shapes))


def attention_dtypes(params: AttentionParams, kind: str) -> list[str]:
    return list(params.dtypes or (ATTENTION_SIZES[kind].dtype,))


def attention_bytes(b: int, h: int, s: int, d: int, dtype: str) -> int:
    """q, k, v, the output and their three gradients, and the math path's s x s scores with their
    gradient in float32 (the fused kernels keep none)."""
    return 8 * b * h * s * d * dtypes.lookup(dtype).storage_bytes + 2 * b * h * s * s * 4


@dataclass(slots=True)
class AttentionPoint:
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool
    forward_flops: int
    """The core's forward FLOPs: 4 x b x h x s^2 x d at its causal share (attention.py)."""
    forward: Stats
    forward_backward: Stats | None
    """The forward, then torch.autograd.grad of q, k, v; null with backward off."""
    forward_flop_per_sec: float
    forward_backward_flop_per_sec: float | None
    """3.5 x the forward's FLOPs (two GEMMs forward, five backward) over the median time."""
    peak_flop_per_sec: float | None
    """The catalogue's (or this CPU's) dense peak in the dtype; null where neither is known."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class AttentionResult:
    probe: Literal["attention"]
    environment: Environment
    backend: str
    """The SDPA kernel allowed ("auto": torch's choice)."""
    points: list[AttentionPoint]
    skipped: list[Skipped]

    __pydantic_config__ = RECORD


def need(params: AttentionParams, kind: Kind) -> Need:
    shapes = attention_shapes(params, kind)
    i, most = max(((i, attention_bytes(*s, d)) for i, s in enumerate(shapes)
                   for d in attention_dtypes(params, kind)), key=lambda x: x[1])
    return most, f"params.shapes.{i}" if params.shapes else "params.shapes"


def least_seconds(params: AttentionParams, kind: Kind) -> Least:
    passes = 2 if params.backward else 1
    runs = len(attention_shapes(params, kind)) * len(attention_dtypes(params, kind)) * passes
    return timer_least(params, runs)


BACKWARD_FACTOR = 3.5
"""Forward and backward GEMMs over the forward's: (2 + 5) / 2."""


def label(p: AttentionPoint) -> str:
    return f"{p.dtype} b{p.batch} h{p.heads} s{p.seq_len} d{p.head_dim}" + (" causal" if p.causal else "")


def headline(r: AttentionResult) -> list[Metric]:
    if not r.points:
        return []
    best = max(r.points, key=lambda p: p.forward_flop_per_sec)
    out = [Metric("forward", "forward, best shape", best.forward_flop_per_sec, "flop_per_sec", label(best))]
    trained = [p for p in r.points if p.forward_backward_flop_per_sec]
    if trained:
        top = max(trained, key=lambda p: p.forward_backward_flop_per_sec or 0)
        out.append(Metric("forward_backward", "forward and backward, best shape",
                          top.forward_backward_flop_per_sec, "flop_per_sec", label(top)))
    if best.peak_flop_per_sec:
        out.append(Metric("of_peak", "of the dense peak (forward, best shape)",
                          best.forward_flop_per_sec / best.peak_flop_per_sec, "fraction"))
    return out


def tables(r: AttentionResult) -> list:
    rows = []
    for p in r.points:
        both = p.forward_backward_flop_per_sec
        rows.append([p.dtype, str(p.batch), str(p.heads), str(p.seq_len), str(p.head_dim),
                     numbers.ms(p.forward.median), numbers.sig(p.forward_flop_per_sec / 1e12),
                     numbers.ms(p.forward_backward.median if p.forward_backward else None),
                     numbers.sig(None if both is None else both / 1e12),
                     numbers.percent(p.forward_flop_per_sec / p.peak_flop_per_sec
                                     if p.peak_flop_per_sec else None)])
    headers = ["dtype", "batch", "heads", "seq", "head dim", "forward ms", "forward TFLOP/s",
               "fwd+bwd ms", "fwd+bwd TFLOP/s", "forward of peak"]
    causal = "yes" if r.points and r.points[0].causal else "no"
    return [where(r), f"SDPA kernel: {r.backend}; causal: {causal}",
            Table(headers, rows, 1), *skipped(r)]


def differences(a: AttentionResult, b: AttentionResult) -> list[str]:
    return [] if a.backend == b.backend else [f"SDPA kernel: A {a.backend}, B {b.backend}"]


def overlay(a: AttentionResult, b: AttentionResult) -> dict:
    return compare_lines(a, b, lambda r: r.points, lambda p: f"{p.dtype} d{p.head_dim}", lambda p: p.seq_len,
                         lambda p: p.forward_flop_per_sec / 1e12, x_label="sequence length",
                         y_label="forward TFLOP/s",
                         caption="Forward TFLOP/s against sequence length: run A solid, run B dashed.")


def _core(p: AttentionPoint) -> core.Core:
    return core.core(batch=p.batch, heads=p.heads, seq_len=p.seq_len, head_dim=p.head_dim, causal=p.causal)


def _datasheet_pairs(params: Any, result: AttentionResult) -> list[Pair]:
    """Each shape's forward (and forward with backward) at the dense peak, as the training
    calculators' FLOPs-over-peak time it."""
    pairs = []
    for p in result.points:
        peak = p.peak_flop_per_sec or (datasheet_peak(result.environment, p.dtype) or (None,))[0]
        if not peak:
            continue
        pairs.append(Pair("attention_forward_seconds", "time", p.forward_flops / peak, p.forward.median,
                          label(p)))
        if p.forward_backward is not None:
            pairs.append(Pair("attention_step_seconds", "time", BACKWARD_FACTOR * p.forward_flops / peak,
                              p.forward_backward.median, label(p)))
    return positive(pairs)


def _calibrated_pairs(params: Any, result: AttentionResult, profile: Profile) -> list[Pair]:
    """Each shape on the profile's matmul surface, scaled by its attention runs' ratio (attention.py)."""
    pairs = []
    for dtype in {p.dtype for p in result.points}:
        try:
            surf = surface.fit(list(profile.matmul), dtype)
        except InvalidInput:
            continue
        curve = core.fit(profile.attention, surf)
        for p in (p for p in result.points if p.dtype == dtype):
            c = _core(p)
            pairs.append(Pair("attention_forward_seconds", "time", c.seconds(surf, curve, backward=False),
                              p.forward.median, label(p)))
            if p.forward_backward is not None:
                pairs.append(Pair("attention_step_seconds", "time", c.seconds(surf, curve, backward=True),
                                  p.forward_backward.median, label(p)))
    return positive(pairs)


PROBE = Probe(
    "attention", "scaled-dot-product attention (SDPA) forward and backward per shape, beside the dense peak",
    AttentionParams, AttentionResult, "app.bench.attention:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, form=(), differences=differences, overlay=overlay),
    ledger=Ledger(_datasheet_pairs, _calibrated_pairs))
