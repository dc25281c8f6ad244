"""train_step: time forward, backward and optimizer step of a real model, measure its
peak memory, and set the calculators' prediction for the same configuration beside both."""

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from app.bench import energy, lora, sustain
from app.bench.common import Setup, setup, to_json
from app.bench.livebytes import LiveBytes
from app.bench.models import Cruncher, Transformer
from app.probes.results import MemoryComparison
from app.probes.train_step import predict
from app.probes.train_step.params import TrainStepParams
from app.probes.train_step.result import TrainStepResult

LR = 1e-3
PEAK_KEY = {"fp32": "float32", "bf16_autocast": "bfloat16", "bf16": "bfloat16"}
COMPUTE_DTYPE = {"fp32": torch.float32, "bf16_autocast": torch.bfloat16, "bf16": torch.bfloat16}


@dataclass
class Workload:
    """A model, its batch, its loss, and the calculators' view of it."""

    model: nn.Module
    batch: tuple[torch.Tensor, ...]
    prediction: predict.TrainStepPrediction

    def loss(self) -> torch.Tensor:
        if self.prediction.config is None:  # the cruncher (self.model may wrap it: DDP, FSDP2)
            x, y = self.batch
            return F.mse_loss(self.model(x), y)
        ids, targets = self.batch
        logits = self.model(ids).float()  # (B, S, vocab) in fp32, as transformers' loss upcasts them
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def workload(p: TrainStepParams, device: torch.device) -> Workload:
    prediction = predict.train_step(p, device.type == "cuda")
    with torch.device(device):
        if prediction.config is None:
            spec = p.model
            model = Cruncher(spec.dim, spec.num_layers)
            batch = (torch.randn(p.batch_size, p.seq_len, spec.dim), torch.randn(p.batch_size, p.seq_len))
        else:
            cfg = prediction.config
            model = Transformer(cfg)
            if p.precision == "bf16":
                model.to(torch.bfloat16)
            # bitsandbytes computes in the matmuls' dtype, as QLoRA's bnb_4bit_compute_dtype sets it.
            lora.fine_tune(model, p, prediction.lora_targets, COMPUTE_DTYPE[p.precision])
            batch = (torch.randint(cfg.vocab_size, (p.batch_size, p.seq_len)),
                     torch.randint(cfg.vocab_size, (p.batch_size, p.seq_len)))
    assert sum(t.nbytes for t in batch) == prediction.memory["inputs"]
    return Workload(model, batch, prediction)


def optimizer(name: str, params, device: torch.device) -> torch.optim.Optimizer:
    """Fused Adam/AdamW on CUDA and per-tensor loops elsewhere: neither allocates
    model-sized temporaries, which foreach would (the calculators count none)."""
    fused = device.type == "cuda"
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR, foreach=False)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=LR, foreach=False)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=LR, fused=True) if fused else cls(params, lr=LR, foreach=False)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own part of a tensor FSDP2 shards (a DTensor), or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def resident(work: Workload, opt: torch.optim.Optimizer,
             model: nn.Module | None = None) -> list[torch.Tensor]:
    """The tensors held across a step: the batch, the parameters (of `model` when it wraps
    work.model), their gradients and the optimizer's state."""
    tensors = list(work.batch) + lora.quant_state_tensors(work.model)
    for param in (model or work.model).parameters():
        tensors += [local(param)] + ([local(param.grad)] if param.grad is not None else [])
    for state in opt.state.values():
        tensors += [local(v) for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def phases(work: Workload, opt: torch.optim.Optimizer, device: torch.device, precision: str,
           model: nn.Module | None = None) -> tuple[list, list[torch.Tensor]]:
    """[forward, backward, optimizer step] of one training step of `model` (work.model, or a
    wrapper of it: DDP, FSDP2), and the list the losses are appended to."""
    autocast = precision == "bf16_autocast"
    losses: list[torch.Tensor] = []
    pending: list[torch.Tensor] = []
    call = work.loss if model is None else Workload(model, work.batch, work.prediction).loss

    def forward() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            pending.append(call())

    def backward() -> None:
        loss = pending.pop()
        loss.backward()
        losses.append(loss.detach())

    def step() -> None:
        opt.step()
        # Gradients stay allocated between steps, as DDP and FSDP buffers do.
        opt.zero_grad(set_to_none=False)

    return [forward, backward, step], losses


def run(raw: dict, progress) -> dict:
    p, env = setup(TrainStepParams, raw)
    work = workload(p, env.device)
    if p.compile:  # the optimizer steps the module's own parameters; the wrapper shares them
        work = replace(work, model=torch.compile(work.model))
    pred = work.prediction
    opt = optimizer(p.optimizer, lora.trainable(work.model), env.device)
    (forward, backward, step), losses = phases(work, opt, env.device, p.precision)

    total = p.warmup_steps + p.steps
    progress(0, total, "warm-up")
    if env.cuda:  # the first steps allocate gradients and optimizer state
        for _ in range(p.warmup_steps):
            forward(), backward(), step()
        torch.cuda.synchronize(env.device)
        torch.cuda.reset_peak_memory_stats(env.device)
    fwd, bwd, opt_step, whole = env.timer.measure_phases(
        [forward, backward, step], warmup_runs=0 if env.cuda else p.warmup_steps, iterations=p.steps,
        progress=lambda i: progress(p.warmup_steps + i, total, f"step {i}/{p.steps}"))
    comparison = _memory(env, work, opt, [forward, backward, step])
    sustained = (sustain.run(env.device, lambda: (forward(), backward(), step()), p.sustain_s,
                             flops=pred.flops_per_step) if p.sustain_s else None)

    tokens = p.batch_size * p.seq_len
    energy.per_unit(whole.energy, tokens=tokens, flops=pred.flops_per_step)
    achieved = pred.flops_per_step / whole.median
    acc = env.catalogue()
    peak = acc.peak_flop_per_sec.get(PEAK_KEY[p.precision]) if acc else None
    return to_json(TrainStepResult(
        probe="train_step", environment=env.environment(p.seed), model=pred.name, params=pred.params,
        batch_size=p.batch_size, seq_len=p.seq_len, tokens_per_step=tokens, optimizer=p.optimizer,
        precision=p.precision, step=whole, forward=fwd, backward=bwd, optimizer_step=opt_step,
        tokens_per_sec=tokens / whole.median, flops_per_step=pred.flops_per_step,
        flops_per_step_6nd=6.0 * pred.params * tokens, achieved_flop_per_sec=achieved,
        peak_flop_per_sec=peak, mfu=None if peak is None else achieved / peak, memory=comparison,
        loss_first=losses[0].item(), loss_last=losses[-1].item(),
        assumptions=[
            "FLOPs are the calculators' exact matmul count for forward and backward (attention "
            "over the full s x s, as FlopCounterMode counts SDPA); elementwise work is not counted",
            "MFU uses the catalogue's dense peak for " + PEAK_KEY[p.precision],
            "gradients stay allocated between steps (zero_grad(set_to_none=False))",
            "transformers train with dropout off, whatever the config says",
            *lora.assumptions(p, pred.lora_targets),
            *(["torch.compile: the first warm-up steps compile; peak memory is eager PyTorch's prediction beside "
               "inductor's measurement"] if p.compile else []),
        ], mode=p.mode, trainable_params=sum(param.numel() for param in lora.trainable(work.model)),
        sustained=sustained, compiled=p.compile))


def peak_bytes(device: torch.device, held: list[torch.Tensor], step: list, *,
               flush_bytes: int) -> tuple[int, int | None, str]:
    """(peak bytes, reserved bytes or None, how): CUDA's allocator peak since the last reset, less
    the timer's L2-flush buffer (`flush_bytes`, live throughout but the probe's, not the model's),
    or on the CPU the peak of live tensor storage over one more run of `step`'s phases,
    `held` counted from the start. cuBLAS's workspaces (32 MiB each for cuBLAS and cuBLASLt on
    Hopper, torch's default) stay in the CUDA figure: a real run holds them too."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device) - flush_bytes, torch.cuda.max_memory_reserved(device),
                "torch.cuda.max_memory_allocated over the timed steps, after reset_peak_memory_stats, less "
                "the timer's flush buffer")
    tracker = LiveBytes()
    for tensor in held:
        tracker.track(tensor)
    with tracker:
        for phase in step:
            phase()
    return tracker.peak, None, "peak live tensor storage over one more step, tracked op by op (LiveBytes)"


def _memory(env: Setup, work: Workload, opt, step) -> MemoryComparison:
    measured, reserved, method = peak_bytes(env.device, resident(work, opt), step,
                                            flush_bytes=env.timer.flush_bytes)
    predicted = work.prediction.memory
    return MemoryComparison(predicted=predicted, measured_peak_allocated=measured, measured_reserved=reserved,
                            relative_error=predicted["total"] / measured - 1, method=method)
