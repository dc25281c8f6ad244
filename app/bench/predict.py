"""The calculators' view of a probe's workload, torch-free: the server uses it to refuse
a job that would not fit, the child sets it beside what it measures."""

import dataclasses
from dataclasses import dataclass

from app.accounting import activations, flops, memory, models
from app.api.schemas import engine_model
from app.bench.specs import CruncherSpec, TrainStepParams

# Model-sized temporaries one optimizer step makes, in units of the largest parameter
# tensor: the per-tensor (foreach=False) loops allocate sqrt(v) and its quotient for Adam,
# sqrt(sum) for Adagrad, one tensor at a time. Fused Adam on CUDA allocates none.
STEP_TEMPORARIES = {"sgd": 0, "adagrad": 1, "adam": 2, "adamw": 2}
ELEMENT_BYTES = {"float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}
INT64_BYTES = 4 * 2


@dataclass(frozen=True)
class TrainStepPrediction:
    name: str
    """"cruncher", a preset's name, or "custom"."""
    params: int
    flops_per_step: int
    memory: dict[str, int]
    """Bytes by kind, with their total."""
    config: models.TransformerConfig | None


def train_step(p: TrainStepParams, cuda: bool) -> TrainStepPrediction:
    """Peak bytes of a step: the larger of the start of backward (states, activations and the
    loss gradients) and the optimizer step (states and the optimizer's temporaries)."""
    engine = "bf16_autocast" if p.precision == "bf16_autocast" else "fp32"
    tokens = p.batch_size * p.seq_len
    spec = p.model
    if isinstance(spec, CruncherSpec):
        dims = (spec.dim,) * (spec.num_layers + 1) + (1,)
        counts = flops.mlp(tokens, list(dims))
        per = memory.state_bytes_per_param(engine, p.optimizer)
        width = memory.PRECISIONS[engine]
        saved = activations.linear_stack(tokens, dims, width.activation, input_copied=engine != "fp32")
        n = counts.params
        largest = spec.dim * spec.dim if spec.num_layers else spec.dim
        parts = {
            "parameters": n * int(per.parameters), "gradients": n * int(per.gradients),
            "optimizer_state": round(n * per.optimizer_state), "master_weights": 0,
            "weight_copies": n * width.weight_copy, "activations": sum(saved.values()),
            # Backward starts with two activation gradients in flight: dL/d(output), dL/d(input).
            "transient": 2 * tokens * spec.dim * width.activation,
            "inputs": 4 * tokens * (spec.dim + 1),  # x (B, T, D) and the target (B, T), fp32
        }
        return TrainStepPrediction("cruncher", n, counts.total, _peak(parts, largest, p, cuda, {}), None)
    # Dropout off, as in LLM pretraining: SDPA's CPU kernel cannot drop out, and its math
    # fallback would store the s x s scores that the prediction, like FlashAttention, omits.
    cfg = dataclasses.replace(engine_model(spec, field="params.model"), dropout=False)
    # SDPA never stores the s x s scores: the calculators' "selective" set of saved tensors.
    mem = memory.training_memory(model=cfg, params=None, precision=engine, optimizer=p.optimizer,
                                 batch_size=p.batch_size, seq_len=p.seq_len, recompute="selective")
    parts = {"parameters": mem.parameters, "gradients": mem.gradients, "optimizer_state": mem.optimizer_state,
             "master_weights": mem.master_weights, "weight_copies": mem.weight_copies,
             "activations": mem.activations or 0, "transient": mem.transient or 0,
             "inputs": 2 * INT64_BYTES * tokens}  # token ids and targets
    return TrainStepPrediction(spec if isinstance(spec, str) else "custom", models.count_params(cfg).total,
                               flops.transformer(cfg, p.batch_size, p.seq_len).step.total,
                               _peak(parts, largest_tensor(cfg), p, cuda, _backward_phases(cfg, parts)), cfg)


def largest_tensor(cfg: models.TransformerConfig) -> int:
    """Elements of the largest parameter of app/bench/models.Transformer, which fuses the
    QKV and the gate+up projections."""
    up = (2 if cfg.mlp == "swiglu" else 1) * cfg.ff
    return max(cfg.vocab_size, cfg.n_heads * cfg.hd + 2 * cfg.kv_heads * cfg.hd, up) * cfg.d_model


def _states(parts: dict[str, int]) -> int:
    return (parts["parameters"] + parts["gradients"] + parts["optimizer_state"] + parts["master_weights"]
            + parts["inputs"])


def _backward_phases(cfg: models.TransformerConfig, parts: dict[str, int]) -> dict[str, int]:
    """Two later moments of the backward pass. The LM head's weight gradient (vocab x d,
    fp32) appears while every activation and the logits' gradient are still held; with tied
    embeddings autograd keeps it until the embedding's own gradient arrives at the very
    end, and adds the two into a third tensor before accumulating."""
    head_grad = 4 * cfg.vocab_size * cfg.d_model
    held = parts["weight_copies"] + parts["activations"] + parts["transient"] // 2
    return {"lm_head_weight_gradient": _states(parts) + held + head_grad,
            "end_of_backward": _states(parts) + (3 if cfg.tied_embeddings else 1) * head_grad}


def _peak(parts: dict[str, int], largest: int, p: TrainStepParams, cuda: bool,
          later: dict[str, int]) -> dict[str, int]:
    """The phases whose live bytes can be the step's peak, and the largest of them."""
    fused = cuda and p.optimizer in ("adam", "adamw")
    temporaries = 0 if fused else STEP_TEMPORARIES[p.optimizer] * largest * 4  # fp32 master parameters
    phases = {"start_of_backward": sum(parts.values()), **later,
              # autocast's weight copies are gone by then
              "optimizer_step": _states(parts) + temporaries}
    return parts | {"optimizer_temporaries": temporaries} | phases | {"total": max(phases.values())}


def matmul_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """A, B and the output (bfloat16 for float8) resident at once."""
    out = 2 if dtype == "float8_e4m3fn" else ELEMENT_BYTES[dtype]
    return (m * k + k * n) * ELEMENT_BYTES[dtype] + m * n * out


def largest_matmul(shapes: list[tuple[int, int, int]], dtypes: list[str]) -> tuple[int, int]:
    """(index of the shape, bytes) of the most memory any one measurement needs."""
    return max(((i, matmul_bytes(*s, d)) for i, s in enumerate(shapes) for d in dtypes), key=lambda x: x[1])
