"""One training step of a transformer on one device, timed from a calibration profile, beside
what datasheet defaults say of it.

    calibrated   step = GEMMs + attention core            (surface.py: this device's matmul runs)
                      + ops x seconds_per_op              (every eager op's dispatch)
                      + activation bytes x seconds_per_activation_byte
                      + optimizer bytes x seconds_per_optimizer_byte
    datasheet    step = FLOPs / (dense peak x DEFAULT_MFU)

The GEMMs are the layer's forward GEMMs as the probe's model runs them (q, k, v fused, gate and up
fused: app/accounting/matmul.layer_gemms), each with its dgrad and wgrad, and the LM head's. The
attention core (attention.py: Q K^T and P V over the causal share, and the five of its backward)
is timed on the surface and scaled by SDPA's measured ratio to it where the profile has attention
runs. The remaining terms have one coefficient each, fitted per precision over the campaign's
train_step runs (app/measured/profile.py): eager PyTorch dispatches every op from the host,
elementwise kernels stream the saved activations (the memory engine's count, read and written
again in the backward), and the optimizer streams its parameters, gradients and states once a
step. The counts below are structural (per layer, per tensor), so one coefficient carries across
model shapes.
"""

from dataclasses import dataclass
from typing import Literal

from app.accounting import blocks, flops
from app.accounting import matmul as mm
from app.accounting.calibration import attention as core
from app.accounting.calibration.profile import Profile
from app.accounting.calibration.surface import Surface
from app.accounting.records import RECORD
from app.accounting.training import memory
from app.accounting.transformer import TransformerConfig

DEFAULT_MFU = 0.5
"""What a datasheet-default answer assumes of a step (the training-time calculator's default)."""

# Eager ops of app/bench/models.Transformer, counted from its forward: a layer runs two norms, the
# fused QKV linear, its split and three views, rotary embedding on q and k (four ops each), SDPA,
# a transpose and view, the output linear, two residual adds, the fused gate/up linear, its chunk,
# SiLU, the product and the down linear: 24. Outside the layers: the embedding, the final norm,
# the head, log-softmax, the loss and its mean.
OPS_PER_LAYER = 24
OPS_OUTSIDE_LAYERS = 6
BACKWARD_OPS_PER_FORWARD_OP = 2
"""Autograd runs a node per forward op that touches a gradient and accumulates into leaves."""
# torch.optim with foreach=False (app/bench/train_step.optimizer on a CPU): ops per parameter
# tensor in its single-tensor loop, and the bytes it streams per fp32 parameter (reads and writes
# of the parameter, the gradient and each state).
OPTIMIZER_OPS_PER_TENSOR = {"sgd": 2, "adagrad": 5, "adam": 10, "adamw": 11}
OPTIMIZER_BYTES_PER_PARAM = {"sgd": 12, "adagrad": 20, "adam": 28, "adamw": 28}
MATMUL_DTYPE = {"fp32": "float32", "bf16_autocast": "bfloat16", "bf16": "bfloat16"}
"""The dtype a precision's GEMMs run in (the matmul probe's names)."""


@dataclass(frozen=True, slots=True)
class Counts:
    """What a step does, independent of the device."""

    flops: int
    """Forward and backward matmul FLOPs, as the train_step probe counts them (flops.py)."""
    gemms: tuple[mm.Gemm, ...]
    """Forward, dgrad and wgrad GEMMs of the layers and the head."""
    attention: tuple[core.Core, ...]
    """Each layer's attention core (attention.py), forward and backward."""
    ops: int
    activation_bytes: int
    optimizer_bytes: int

    __pydantic_config__ = RECORD


def counts(cfg: TransformerConfig, *, batch_size: int, seq_len: int, precision: str,
           optimizer: str) -> Counts:
    tokens = batch_size * seq_len
    gemms: list[mm.Gemm] = []
    attention: list[core.Core] = []
    ops = OPS_OUTSIDE_LAYERS
    tensors = 3  # the token embedding, the final norm, the head (tied or not, one more for simplicity)
    for layer, count in blocks.distinct(cfg):
        forward = mm.layer_gemms(layer, tokens)
        gemms += count * (forward + mm.backward_gemms(forward))
        attention += count * [core.core(batch=batch_size, heads=cfg.n_heads, seq_len=seq_len, head_dim=cfg.hd,
                                        window=layer.attention.window)]
        ops += count * OPS_PER_LAYER
        tensors += count * len(layer.weights())
    head = mm.head_gemm(cfg, tokens)
    gemms += [head, *mm.backward_gemms((head,))]
    ops += BACKWARD_OPS_PER_FORWARD_OP * ops + OPTIMIZER_OPS_PER_TENSOR[optimizer] * tensors
    mem = memory.training_memory(model=cfg, params=None, precision=precision, optimizer=optimizer,
                                 batch_size=batch_size, seq_len=seq_len, recompute="selective")
    params = mem.params
    return Counts(flops=flops.transformer(cfg, batch_size, seq_len).step.total, gemms=tuple(gemms),
                  attention=tuple(attention), ops=ops, activation_bytes=mem.activations,
                  optimizer_bytes=OPTIMIZER_BYTES_PER_PARAM[optimizer] * params)


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step's seconds by term. Calibrated: the terms sum to seconds; datasheet: only seconds."""

    mode: Literal["calibrated", "datasheet"]
    seconds: float
    flops: int
    gemm_seconds: float
    attention_seconds: float
    op_seconds: float
    activation_seconds: float
    optimizer_seconds: float
    ops: int
    activation_bytes: int
    optimizer_bytes: int
    sources: tuple[str, ...]
    """Which figure came from which jobs (calibrated), or which peak and efficiency (datasheet)."""

    __pydantic_config__ = RECORD


def datasheet(c: Counts, *, peak_flop_per_sec: float, peak_source: str, mfu: float = DEFAULT_MFU) -> StepTime:
    seconds = c.flops / (peak_flop_per_sec * mfu)
    return StepTime("datasheet", seconds, c.flops, 0.0, 0.0, 0.0, 0.0, 0.0, c.ops, c.activation_bytes,
                    c.optimizer_bytes, (f"FLOPs / ({peak_source} x MFU {mfu:g})",))


def known(c: Counts, surface: Surface, curve: core.Curve | None) -> tuple[float, float]:
    """(GEMM seconds, attention core seconds) of a step: what the matmul surface and SDPA's runs
    time, before the fitted terms."""
    gemm = sum(surface.seconds(g.m, g.k, g.n, g.groups) for g in c.gemms)
    return gemm, sum(a.seconds(surface, curve, backward=True) for a in c.attention)


def calibrated(c: Counts, profile: Profile, surface: Surface, precision: str, *,
               field: str = "calibration") -> StepTime:
    fit = profile.overheads(precision, field=field)
    curve = core.fit(profile.attention, surface)
    gemm, attention = known(c, surface, curve)
    op_s = c.ops * fit.seconds_per_op
    act_s = c.activation_bytes * fit.seconds_per_activation_byte
    opt_s = c.optimizer_bytes * fit.seconds_per_optimizer_byte
    jobs = sorted({j for s in profile.matmul if s.dtype == surface.dtype for j in s.jobs})
    core_said = (f"attention core: SDPA's ratio to those GEMMs (attention jobs {_ids(curve.jobs)})"
                 if curve is not None else
                 f"attention core: as bare GEMMs ({profile.label} has no {surface.dtype} attention runs)")
    sources = (f"GEMMs and attention core: the {surface.dtype} matmul surface of {profile.label} "
               f"(matmul jobs {_ids(jobs)})", core_said,
               f"per op, per activation byte, per optimizer byte: the {precision} train step fit of "
               f"{profile.label} (train_step jobs {_ids(fit.jobs)}, rms error {fit.rms_relative_error:.1%})",
               *profile.flags)
    return StepTime("calibrated", gemm + attention + op_s + act_s + opt_s, c.flops, gemm, attention, op_s,
                    act_s, opt_s, c.ops, c.activation_bytes, c.optimizer_bytes, sources)


def _ids(jobs) -> str:
    return ", ".join(str(j) for j in jobs) or "none"


def finetuned(whole: StepTime, *, flops: int, trainable_fraction: float) -> StepTime:
    """A fine-tune's step from the calibrated full step of the same model and batch: its GEMM and
    attention time scaled by the FLOPs it does of the full step's (frozen weights skip their weight
    gradients, adapters add their own: app/accounting/finetune/flops.py counts them exactly), the
    optimizer's by the share of parameters it steps; the per-op and activation terms as the full
    step's (the same layers run forward and back). Not counted: the adapters' own ops, a
    recompute's redone forward, QLoRA's dequantization."""
    ratio = flops / whole.flops
    gemm, attention = whole.gemm_seconds * ratio, whole.attention_seconds * ratio
    optimizer = whole.optimizer_seconds * trainable_fraction
    seconds = gemm + attention + whole.op_seconds + whole.activation_seconds + optimizer
    said = (f"fine-tune: GEMMs and attention core scaled by its FLOPs ({ratio:.3g} of the full step's), "
            f"the optimizer by the parameters it steps ({trainable_fraction:.3g}); ops and activations as "
            "the full step's")
    stepped = round(whole.optimizer_bytes * trainable_fraction)
    return StepTime("calibrated", seconds, flops, gemm, attention, whole.op_seconds, whole.activation_seconds,
                    optimizer, whole.ops, whole.activation_bytes, stepped, (*whole.sources, said))
