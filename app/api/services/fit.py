"""Will it run on my GPU: serving in a few weight formats, LoRA, QLoRA and full fine-tuning,
each answered by its own calculator (services.inference, accounting.finetune)."""

from typing import Any, Literal

from pydantic import Field

from app.accounting import blocks, fit, hardware, models
from app.accounting.errors import InvalidInput
from app.accounting.finetune.spec import FineTune, targets_of
from app.accounting.finetune.stacks import STACKS, StackName
from app.accounting.finetune.step import finetune_step
from app.accounting.hardware import Accelerator
from app.accounting.inference import formats
from app.accounting.training import activations
from app.api.services import inference
from app.api.services.finetune import STACK_DESCRIPTION, RecipeFlags
from app.api.services.time import DEFAULT_MFU
from app.inputs.fields import count, number, sequence_length
from app.inputs.schemas import GpuInput, ModelSpec, engine_model

SERVED = ("bfloat16", "fp8_e4m3", "int8_channel", "awq_int4")
"""Weight formats a serving engine (vLLM) runs; fp8 only where the GPU has an FP8 peak."""
TRAINING = {  # option -> (label, FineTune, precision, paged optimizer); the optimizer is the request's
    "lora": ("LoRA", FineTune("lora", rank=16), "bf16_mixed", False),
    "qlora": ("QLoRA", FineTune("qlora", rank=16, base_format="nf4_double_quant"), "bf16_mixed", True),
    "full": ("Full fine-tuning", FineTune("full"), "bf16_mixed", False),
}
MORE_GPUS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class FitRequest(GpuInput, RecipeFlags):
    model: ModelSpec
    num_gpus: count(1, 1024) = Field(
        1, description="GPUs of this kind: tensor parallel when serving, data parallel (full fine-tuning "
                       "with ZeRO stage 3) when training.")
    seq_len: sequence_length(2, 10_000_000) = Field(
        2048, description="Tokens per sequence: the served context (a prompt and at least one output "
                          "token), or the training sequence.")
    batch_size: count(1, 65_536) = Field(
        1, description="Sequences served at once, or the training micro-batch per GPU.")
    lora_rank: count(1, 65_536) = Field(16, description="LoRA and QLoRA's rank (adapters on peft's default "
                                                                 "targets: q and v, or the fused qkv).")
    recompute: activations.Recompute = Field(
        "selective", description="Training: none, selective, or full (gradient checkpointing).")
    mfu: number(ge=1e-6, le=1) = Field(DEFAULT_MFU, description="Training: share of the dense bf16 peak "
                                                                "a step's FLOPs run at.")
    optimizer: Literal["adamw", "adamw_8bit"] = Field(
        "adamw", description="Training: AdamW's states in fp32, or in 8 bits (bitsandbytes' AdamW8bit).")
    stack: StackName = Field("tally", description="Training: " + STACK_DESCRIPTION)


def answer(body: FitRequest) -> fit.FitAnswer:
    cfg = engine_model(body.model)
    if body.seq_len > cfg.max_seq_len:
        raise InvalidInput("seq_len", f"{body.seq_len} tokens exceed the model's {cfg.max_seq_len} positions")
    acc = body.accelerator()
    options, left_out = [], []
    half = _half(acc)
    for fmt in _served_formats(body):
        if fmt == "fp8_e4m3" and "float8" not in acc.peak_flop_per_sec:
            continue
        fmt = half if fmt == "bfloat16" else fmt
        try:
            options.append(_served(body, fmt))
        except InvalidInput as e:
            # AWQ's groups must divide the matrices, and tensor parallel the heads and shards: that
            # format is left out, said, and the rest answered (FSDP training shards on any count)
            if e.field not in ("group_size", "tensor_parallel", "num_gpus"):
                raise
            left_out.append(f"{fmt} left out: {e.message}")
    for i, row in enumerate(options):  # served, largest format first: a smaller one that fits
        smaller = next((o for o in options[i + 1:] if o.fits), None)
        if not row.fits and smaller is not None:
            row.advice = f"fits in {_name(smaller.option)}"
            row.advice_change = {"option": smaller.option}
    refusal = blocks.fine_tune_refusal(cfg)
    if refusal is None:
        options += [_trained(body, cfg, acc, option) for option in TRAINING]
    else:  # serving answered; training said not counted rather than the whole answer refused
        left_out.append(f"training left out: {refusal}")
    name = body.model if isinstance(body.model, str) else "custom"
    return fit.FitAnswer(
        model=name, gpu=acc.id, gpu_name=acc.name, num_gpus=body.num_gpus, gpu_memory_bytes=acc.memory_bytes,
        seq_len=body.seq_len, batch_size=body.batch_size, options=options,
        summary=fit.summary(options, {o.option: _name(o.option) for o in options if o.kind == "inference"}),
        assumptions=[
            "serving: as vllm serve budgets it (gpu_memory_utilization 0.9 of the device's total, less its profile "
            "run's activation peak and its memory outside torch), tensor_parallel num_gpus, "
            "time per output token at batch_size sequences decoding at seq_len (POST /api/v1/inference/*)",
            f"training: {'bf16' if half == 'bfloat16' else 'fp16 (no bf16 path on this GPU)'} mixed precision, "
            "the optimizer asked for; LoRA and QLoRA rank lora_rank on "
            "peft's default targets for the family (q and v, or the fused qkv), QLoRA over NF4 with double "
            "quantization and a paged optimizer (POST /api/v1/finetune); over num_gpus > 1 every way "
            "shards its weights, frozen ones too, with ZeRO stage 3 (FSDP's full sharding, as peft's "
            "FSDP recipes run LoRA and QLoRA), batch_size sequences on each GPU",
            f"training memory follows stack {body.stack} ({STACKS[body.stack].label}): what the loss keeps "
            "of the logits and where checkpointed activations live (POST /api/v1/finetune's assumptions list "
            "its rules)",
            "training time counts the step's matmul FLOPs, the recompute's included, at mfu of the dense "
            "bf16 peak, and QLoRA's dequantization of its NF4 base before each matmul at the memory "
            "bandwidth (app/accounting/finetune/timing.py)",
            "advice tries, in order: serving, a smaller weight format, a shorter context, more GPUs; "
            "training, gradient checkpointing, batch 1, a smaller format (LoRA over an NF4 base, 8-bit "
            "AdamW states for full fine-tuning), a shorter sequence, more GPUs with ZeRO stage 3; each "
            "is checked before it is given, and advice_change is it as a change to this request",
            hardware.memory_note(acc),
            *left_out])


def _name(option: str) -> str:
    """A serving option's weight format as people name it, short: "AWQ 4-bit (GEMM)", "FP8 E4M3"."""
    return formats.FORMATS[option.removeprefix("inference-")].name.split(",")[0]


def _served_formats(body: FitRequest) -> list[str]:
    """SERVED, and the format a preset's published checkpoint stores where it is another (gpt-oss's
    MXFP4, DeepSeek-V3's FP8 blocks): what vLLM serves it in. Largest first, as the advice reads them."""
    published = models.find(body.model).published_format if isinstance(body.model, str) else None
    chosen = [*SERVED, *([published] if published and published not in SERVED else [])]
    return sorted(chosen, key=lambda f: -formats.FORMATS[f].bits_per_weight)


def _half(acc: Any) -> str:
    """The 16-bit dtype a GPU serves in: bfloat16, or float16 on a part without it (a V100, a T4),
    as vLLM casts a bfloat16 model to float16 there."""
    return "bfloat16" if "bfloat16" in acc.peak_flop_per_sec else "float16"


def _serving(body: FitRequest, fmt: str, gpus: int, **extra) -> dict:
    return dict(model=body.model, gpu=body.gpu, gpu_overrides=body.gpu_overrides, weight_format=fmt,
                num_gpus=gpus, tensor_parallel=gpus, dtype=_half(body.accelerator()), **extra)


def _served(body: FitRequest, fmt: str) -> fit.FitOption:
    s, b = body.seq_len, body.batch_size
    request = inference.InferenceMemoryRequest(**_serving(body, fmt, body.num_gpus), context=s, concurrency=b)
    mem, cap = inference.memory(request), inference.serving_capacity(request)
    output = min(128, max(1, s // 2))
    timed = inference.serving_time(inference.InferenceTimeRequest(
        **_serving(body, fmt, body.num_gpus), prompt_tokens=s - output, output_tokens=output,
        concurrency=b))
    advice = None
    if not mem.fits:
        advice = fit.first_fitting(
            ([(f"fits at a context of {cap.max_context} tokens", {"seq_len": cap.max_context}, lambda: True)]
             if cap.max_context >= 2 else [])
            + [(f"fits on {n} GPUs (tensor_parallel {n})", {"num_gpus": n}, lambda n=n: _serves_on(body, fmt, n))
               for n in MORE_GPUS if n > body.num_gpus and n <= 64])
    name = formats.FORMATS[fmt].name
    return fit.FitOption(
        option=f"inference-{fmt}", kind="inference", label=f"Inference, {name}",
        settings={"weight_format": fmt, "tensor_parallel": body.num_gpus, **mem.engine.settings},
        fits=mem.fits, total_bytes=mem.total_bytes, usable_bytes=mem.usable_bytes,
        bytes_by_kind={"weights": mem.weights_bytes, "kv_cache": mem.kv_cache_bytes,
                       "workspace": mem.workspace_bytes, "overhead": mem.overhead_bytes},
        largest_batch=cap.max_sequences, largest_context=cap.max_context if cap.max_context >= 1 else 0,
        seconds=timed.inter_token_latency_s, time_unit="per output token",
        tokens_per_sec=timed.output_tokens_per_sec, advice=advice and advice[0],
        advice_change=advice and advice[1])


def _serves_on(body: FitRequest, fmt: str, gpus: int) -> bool:
    try:
        request = inference.InferenceMemoryRequest(**_serving(body, fmt, gpus), context=body.seq_len,
                                                   concurrency=body.batch_size)
        return inference.memory(request).fits
    except InvalidInput:  # heads that gpus does not divide
        return False


def _spec(body: FitRequest, option: str) -> FineTune:
    spec = TRAINING[option][1]
    return FineTune(spec.mode, rank=body.lora_rank, base_format=spec.base_format) if spec.adapted else spec


def _runner(body: FitRequest, cfg, acc: Accelerator, option: str):
    """The option's step as the request asks for it, any of its settings changed by keyword."""
    _, spec, precision, paged = TRAINING[option]
    spec = _spec(body, option)
    if _half(acc) == "float16":  # no bfloat16 path (a V100): fp16 mixed precision, as AMP runs there
        precision = "fp16_mixed"

    def run(*, b: int = body.batch_size, s: int = body.seq_len, recompute: str = body.recompute,
            gpus: int = body.num_gpus, opt: str = body.optimizer):
        zero_stage = 3 if gpus > 1 else 0  # FSDP's full sharding: the frozen base too
        return finetune_step(cfg, spec, precision=precision, optimizer=opt, batch_size=b, seq_len=s,
                             recompute=recompute, paged_optimizer=paged and opt in ("adamw", "adamw_8bit"),
                             data_parallel=gpus, zero_stage=zero_stage, gpu=acc, mfu=body.mfu,
                             stack=body.stack, options=body.options())

    return run


def _trained(body: FitRequest, cfg, acc: Accelerator, option: str) -> fit.FitOption:
    label, _, precision, paged = TRAINING[option]
    spec, optimizer = _spec(body, option), body.optimizer
    adapters = {}
    if spec.adapted:
        adapters = {"lora_rank": spec.rank, "lora_targets": ",".join(targets_of(cfg, spec))}
    run = _runner(body, cfg, acc, option)

    def fits(**kw) -> bool:
        return bool(run(**kw).memory.fits)

    step = run()
    m = step.memory
    most = _largest_batch(run(b=1).memory, run(b=2).memory, acc.memory_bytes, paged=paged)
    if body.stack != "tally":  # a chunked loss (Unsloth's chunk count) is not linear in the batch
        most = _edge(lambda b: fits(b=b), most)
    longest = max(fit.largest(lambda s: fits(s=s), 1, cfg.max_seq_len), 0)
    advice = None
    if not m.fits:
        changes: list = []
        if body.recompute != "full":
            changes.append(("fits with gradient checkpointing (recompute full)", {"recompute": "full"},
                            lambda: fits(recompute="full")))
        if body.batch_size > 1:
            changes.append(("fits at batch size 1 with gradient checkpointing",
                            {"batch_size": 1, "recompute": "full"}, lambda: fits(b=1, recompute="full")))
        # a smaller format: the base in NF4 (LoRA -> QLoRA, paged as that option is), or Adam's states in 8 bits
        if option == "lora":
            changes.append(("fits as QLoRA (an NF4 base)", {"option": "qlora"},
                            lambda: bool(_runner(body, cfg, acc, "qlora")().memory.fits)))
        if optimizer != "adamw_8bit":
            changes.append(("fits with 8-bit AdamW states and gradient checkpointing",
                            {"optimizer": "adamw_8bit", "recompute": "full"},
                            lambda: fits(opt="adamw_8bit", recompute="full")))
        if longest >= 2:
            changes.append((f"fits at a sequence of {longest} tokens", {"seq_len": longest}, lambda: True))
        for n in MORE_GPUS:
            if n > body.num_gpus:
                changes.append((f"fits on {n} GPUs with ZeRO stage 3 (FSDP) and gradient checkpointing",
                                {"num_gpus": n, "recompute": "full"}, lambda n=n: fits(gpus=n, recompute="full")))
        advice = fit.first_fitting(changes)
    return fit.FitOption(
        option=option, kind="training", label=label,
        settings={"precision": precision, "optimizer": optimizer, "paged_optimizer": paged,
                  "recompute": body.recompute, "zero_stage": 3 if body.num_gpus > 1 else 0,
                  "stack": body.stack,
                  "data_parallel": body.num_gpus,
                  **adapters,
                  **({"base_format": spec.base_format} if spec.mode == "qlora" else {})},
        fits=bool(m.fits), total_bytes=m.total, usable_bytes=acc.memory_bytes,
        bytes_by_kind={"frozen_weights": m.frozen_weights,
                       "trainable_weights": m.parameters + m.weight_copies,
                       "gradients": m.gradients, "optimizer_state": m.optimizer_state,
                       "master_weights": m.master_weights, "activations": m.activations,
                       "transient": m.transient, "inputs": m.inputs,
                       "peak_phase_extra": m.total - m.start_of_backward},
        largest_batch=int(most), largest_context=longest, seconds=step.time.seconds, time_unit="per step",
        tokens_per_sec=step.time.tokens_per_sec,
        advice=None if m.fits else advice[0] if advice else "does not fit on 1024 GPUs with ZeRO stage 3",
        advice_change=advice and advice[1])


def _edge(fits, guess: int, limit: int = 1_000_000) -> int:
    """The largest batch that fits, near `guess`: down from it while it does not fit, else up in
    doubling steps and back by bisection, so that `fits` holds there and not one further."""
    if guess > 0 and not fits(guess):
        return max(fit.largest(fits, 1, guess - 1), 0) if guess > 1 else 0
    low, step = guess, 1
    while low + step <= limit and fits(low + step):
        low, step = low + step, step * 2
    return fit.largest(fits, low + 1, min(low + step, limit + 1) - 1) if step > 1 else low


def _largest_batch(one, two, memory_bytes: int, *, paged: bool) -> int:
    """The most sequences per GPU whose step fits, from the step at batch 1 and 2: each phase's
    bytes are linear in the batch, and every phase must fit (a paged optimizer's state may leave)."""
    caps = []
    for phase, at_one in one.phases.items():
        slope, fixed = two.phases[phase] - at_one, 2 * at_one - two.phases[phase]
        room = memory_bytes - fixed + (one.optimizer_state if paged else 0)
        if slope > 0:
            caps.append(room // slope)
        elif room < 0:
            caps.append(0)
    return max(0, min(caps)) if any(two.phases[p] > one.phases[p] for p in one.phases) else 0
