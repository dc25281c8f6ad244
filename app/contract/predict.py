"""The calculators' view of a probe's workload, torch-free: the server uses it to refuse
a job that would not fit, the child sets it beside what it measures."""

import dataclasses
from dataclasses import dataclass

from app.accounting import activations, dtypes, flops, memory, models, stepmemory
from app.accounting.errors import InvalidInput
from app.contract.params import CruncherSpec, TrainStepParams
from app.contract.schemas import engine_model

INT64_BYTES = 8


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
    """Peak bytes of a step (app/accounting/stepmemory.py) for the model train_step builds.
    On CUDA Adam and AdamW run fused, without temporaries."""
    fused = cuda and p.optimizer in ("adam", "adamw")
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
            "transient": stepmemory.activation_gradients(tokens, spec.dim, width.activation),
            "inputs": 4 * tokens * (spec.dim + 1),  # x (B, T, D) and the target (B, T), fp32
        }
        peak = stepmemory.step_peak(parts, largest_param=largest, optimizer=p.optimizer, fused=fused)
        return TrainStepPrediction("cruncher", n, counts.total, peak, None)
    # Dropout off, as in LLM pretraining: SDPA's CPU kernel cannot drop out, and its math
    # fallback would store the s x s scores that the prediction, like FlashAttention, omits.
    cfg = dataclasses.replace(engine_model(spec, field="params.model"), dropout=False)
    _check_buildable(cfg)
    # SDPA never stores the s x s scores: the calculators' "selective" set of saved tensors.
    mem = memory.training_memory(model=cfg, params=None, precision=engine, optimizer=p.optimizer,
                                 batch_size=p.batch_size, seq_len=p.seq_len, recompute="selective")
    parts = {"parameters": mem.parameters, "gradients": mem.gradients, "optimizer_state": mem.optimizer_state,
             "master_weights": mem.master_weights, "weight_copies": mem.weight_copies,
             "activations": mem.activations or 0, "transient": mem.transient or 0,
             "inputs": 2 * INT64_BYTES * tokens}  # token ids and targets
    later = stepmemory.lm_head_phases(parts, vocab_size=cfg.vocab_size, d_model=cfg.d_model,
                                      tied=cfg.tied_embeddings)
    peak = stepmemory.step_peak(parts, largest_param=largest_tensor(cfg), optimizer=p.optimizer, fused=fused,
                                later=later)
    return TrainStepPrediction(spec if isinstance(spec, str) else "custom", models.count_params(cfg).total,
                               flops.transformer(cfg, p.batch_size, p.seq_len).step.total, peak, cfg)


# What app/bench/models.Transformer does not build yet, with the value it does build: a model
# it measured would not be the model the calculators describe.
UNBUILT = {"attn_logit_softcapping": (None, "attention-logit softcapping (no flash kernel takes it)"),
           "final_logit_softcapping": (None, "final-logit softcapping")}


def _check_buildable(cfg: models.TransformerConfig) -> None:
    for name, (built, what) in UNBUILT.items():
        if getattr(cfg, name) != built:
            raise InvalidInput(f"params.model.{name}", f"the train_step probe does not build {what} yet")


def largest_tensor(cfg: models.TransformerConfig) -> int:
    """Elements of the largest parameter of app/bench/models.Transformer, which fuses the
    QKV projection, latent attention's down projections, and every gate+up pair."""
    d, up = cfg.d_model, 2 if cfg.gated else 1
    if cfg.mla:
        heads, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        down = (cfg.q_lora_rank or heads * qk) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
        kv_up = cfg.kv_lora_rank * heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        attention = [down * d, (cfg.q_lora_rank or 0) * heads * qk, kv_up, heads * cfg.v_head_dim * d]
    else:
        attention = [(cfg.n_heads * cfg.hd + 2 * cfg.kv_heads * cfg.hd) * d, cfg.n_heads * cfg.hd * d]
    mlps = [up * cfg.ff * d] if not all(cfg.moe_layers) else []
    if cfg.n_moe_layers:
        mlps += [cfg.n_experts * d, up * cfg.ff_expert * d, up * cfg.ff_shared * d]
    return max(cfg.vocab_size * d, *attention, *mlps)


def matmul_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """A, B and the output (bfloat16 for float8) resident at once."""
    size = dtypes.lookup(dtype).storage_bytes
    out = 2 if dtype == "float8_e4m3fn" else size
    return (m * k + k * n) * size + m * n * out


def largest_matmul(shapes: list[tuple[int, int, int]], dtypes: list[str]) -> tuple[int, int]:
    """(index of the shape, bytes) of the most memory any one measurement needs."""
    return max(((i, matmul_bytes(*s, d)) for i, s in enumerate(shapes) for d in dtypes), key=lambda x: x[1])
