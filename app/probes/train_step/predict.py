"""The calculators' view of a train step, torch-free: the server refuses a job that would not
fit by it, the child sets it beside what it measures (peak bytes by phase, FLOPs, parameters)."""

import dataclasses
import importlib.util
from dataclasses import dataclass

from app.accounting import blocks, flops, models
from app.accounting.errors import InvalidInput
from app.accounting.finetune import flops as finetune_flops
from app.accounting.finetune import lora
from app.accounting.finetune import spec as ft
from app.accounting.finetune.memory import finetune_memory
from app.accounting.training import activations, memory, phases
from app.inputs.schemas import engine_model
from app.probes.train_step.params import CruncherSpec, TrainStepParams


@dataclass(frozen=True)
class TrainStepPrediction:
    name: str
    """"cruncher", a preset's name, or "custom"."""
    params: int
    flops_per_step: int
    memory: dict[str, int]
    """Bytes by kind, with their total."""
    config: models.TransformerConfig | None
    mode: str = "full"
    """full, freeze, lora or qlora (TrainStepParams.mode)."""
    trainable_params: int | None = None
    """Parameters the optimizer steps: all of them in mode full."""
    lora_targets: tuple[str, ...] = ()
    """lora, qlora: the targets adapted, peft's default for the family where none were given."""
    checkpoint: memory.TrainingMemory | None = None
    """The memory engine's answer for a full step (mode full), whose checkpoint_bytes and
    per-parameter state bytes the checkpoint probe sets beside a torch.save file; None for a
    fine-tune."""


UNBUILT_TARGETS = ("experts_gate_up", "experts_down")
"""LoRA targets app/bench/lora.py does not build: the routed experts' 3-D parameters."""


NO_BITSANDBYTES = ("mode qlora needs bitsandbytes in the probe's Python (pip install bitsandbytes, one of "
                   "the project's test extras); it is not installed here")


def train_step(p: TrainStepParams, cuda: bool, *, zero_stage: int = 0, data_parallel: int = 1,
               ) -> TrainStepPrediction:
    """Peak bytes of a step (app/accounting/training/phases.py) for the model train_step builds, on
    one of data_parallel ranks whose model states ZeRO stage zero_stage shards (memory.py).
    On CUDA Adam and AdamW run fused, without temporaries."""
    fused = cuda and p.optimizer in ("adam", "adamw")
    engine = p.precision  # the training calculators' precision of the same name
    stepped = data_parallel if zero_stage else 1  # the optimizer steps its shard of each tensor
    tokens = p.batch_size * p.seq_len
    spec = p.model
    if isinstance(spec, CruncherSpec):
        if p.mode != "full":
            raise InvalidInput("params.mode", f"mode {p.mode} fine-tunes a transformer (a preset or an "
                                              "inline config); the cruncher trains whole (mode full)")
        if p.precision == "bf16":
            raise InvalidInput("params.precision", "bf16 trains a transformer (QLoRA's precision); the "
                                                   "cruncher trains in fp32 or bf16_autocast")
        dims = (spec.dim,) * (spec.num_layers + 1) + (1,)
        counts = flops.mlp(tokens, list(dims))
        width = memory.PRECISIONS[engine]
        saved = activations.linear_stack(tokens, dims, width.activation, input_copied=engine != "fp32")
        n = counts.params
        largest = spec.dim * spec.dim if spec.num_layers else spec.dim
        # A bare count: the states as the engine shards them, activations from the stack above.
        mem = memory.training_memory(model=None, params=n, precision=engine, optimizer=p.optimizer,
                                     batch_size=p.batch_size, seq_len=p.seq_len, zero_stage=zero_stage,
                                     data_parallel=data_parallel)
        parts = {
            "parameters": mem.parameters, "gradients": mem.gradients, "optimizer_state": mem.optimizer_state,
            "master_weights": mem.master_weights, "weight_copies": mem.weight_copies,
            "activations": sum(saved.values()),
            "transient": phases.activation_gradients(tokens, spec.dim, width.activation),
            "inputs": 4 * tokens * (spec.dim + 1),  # x (B, T, D) and the target (B, T), fp32
        }
        peak = phases.step_peak(parts, largest_param=-(-largest // stepped), optimizer=p.optimizer,
                                    fused=fused)
        return TrainStepPrediction("cruncher", n, counts.total, peak, None, trainable_params=n,
                                   checkpoint=mem)
    # Dropout off, as in LLM pretraining: SDPA's CPU kernel cannot drop out, and its math
    # fallback would store the s x s scores that the prediction, like FlashAttention, omits.
    cfg = dataclasses.replace(engine_model(spec, field="params.model"), dropout=False)
    check_buildable(cfg, "train_step")
    if p.mode != "full":
        return _fine_tune_step(p, cfg, engine=engine, fused=fused)
    # SDPA never stores the s x s scores: the calculators' "selective" set of saved tensors.
    try:
        mem = memory.training_memory(model=cfg, params=None, precision=engine, optimizer=p.optimizer,
                                     batch_size=p.batch_size, seq_len=p.seq_len, recompute="selective",
                                     zero_stage=zero_stage, data_parallel=data_parallel,
                                     fused_optimizer=fused, largest_param=-(-largest_tensor(cfg) // stepped))
    except InvalidInput as e:  # the engine names its own argument (seq_len); the request's is under params
        raise InvalidInput(f"params.{e.field}", e.message) from None
    peak = phases.breakdown(mem)  # the step's phases, composed by the engine as /memory/training's
    n = models.count_params(cfg).total
    return TrainStepPrediction(spec if isinstance(spec, str) else "custom", n,
                               flops.transformer(cfg, p.batch_size, p.seq_len).step.total, peak, cfg,
                               trainable_params=n, checkpoint=mem)


def fine_tune(p: TrainStepParams) -> ft.FineTune:
    """The engine's description of the fine-tune the probe builds (app/bench/lora.py)."""
    return ft.FineTune(mode=p.mode, rank=p.lora_rank, targets=None if p.lora_targets is None else
                       tuple(p.lora_targets),
                       freeze_embeddings=p.freeze_embeddings, freeze_head=p.freeze_head,
                       freeze_layers=p.freeze_layers, base_format=p.base_format)


def _fine_tune_step(p: TrainStepParams, cfg: models.TransformerConfig, *, engine: str,
                    fused: bool) -> TrainStepPrediction:
    """The same phases as a full step over finetune_memory's parts: the frozen weights held
    throughout, the optimizer's temporaries sized by the largest trainable tensor, and the LM
    head's weight gradient only where the head trains."""
    tune = fine_tune(p)
    if p.mode == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
        raise InvalidInput("params.mode", NO_BITSANDBYTES)
    if p.mode == "qlora" and set(cfg.mixers) - {"attention", "none"}:
        # transformers' bitsandbytes integration stores the mixers' in_proj and out_proj in 4 bits too
        raise InvalidInput("params.mode", "the train_step probe stores attention's and the MLPs' matrices "
                                          "quantized, not a Mamba or DeltaNet layer's yet")
    # Where peft maps gate, up and down onto the routed experts (qwen3_moe: lora.experts_take_mlp_names),
    # those are expert adapters too, which the probe does not build either.
    unbuilt = UNBUILT_TARGETS + (("gate", "up", "down") if lora.experts_take_mlp_names(cfg) else ())
    for i, target in enumerate(p.lora_targets or ()):
        if target in unbuilt and tune.adapted:
            raise InvalidInput(f"params.lora_targets.{i}", f"the train_step probe does not build {target} "
                                                           "yet (peft's target_parameters on routed experts)")
    try:
        mem = finetune_memory(cfg, tune, precision=engine, optimizer=p.optimizer, batch_size=p.batch_size,
                              seq_len=p.seq_len, recompute="selective", fused_optimizer=fused,
                              largest_param=largest_trainable(cfg, tune))
        counted = finetune_flops.step_flops(cfg, tune, batch_size=p.batch_size, seq_len=p.seq_len)
    except InvalidInput as e:  # the engine names its own argument; the request's is under params
        raise InvalidInput(f"params.{e.field}", e.message) from None
    peak = phases.breakdown(mem)  # the step's phases, composed by the engine as /finetune's
    name = p.model if isinstance(p.model, str) else "custom"
    return TrainStepPrediction(name, models.count_params(cfg).total, counted.total, peak, cfg, mode=p.mode,
                               trainable_params=mem.trainable_params,
                               lora_targets=ft.targets_of(cfg, tune) if tune.adapted else ())

# What app/bench/models.Transformer does not build yet, with the value it does build: a model
# it measured would not be the model the calculators describe.
UNBUILT = {"attn_logit_softcapping": (None, "attention-logit softcapping (no flash kernel takes it)"),
           "final_logit_softcapping": (None, "final-logit softcapping")}


def check_buildable(cfg: models.TransformerConfig, probe: str, unbuilt: dict | None = None) -> None:
    """InvalidInput naming the first field whose value the probe's model would not build (UNBUILT,
    and the probe's own `unbuilt` of the same form)."""
    for name, (built, what) in (UNBUILT | (unbuilt or {})).items():
        if getattr(cfg, name) != built:
            raise InvalidInput(f"params.model.{name}", f"the {probe} probe does not build {what} yet")
    if ("none" in cfg.layer_mixers or cfg.mlp_free_layers) and cfg.norm_layout != "pre":
        raise InvalidInput("params.model.norm_layout", f"the {probe} probe builds layers without a mixer or "
                                                       "an MLP in the pre layout only")


def _layer_tensors(cfg: models.TransformerConfig, moe_layers: list[bool]) -> list[int]:
    """Elements of the matrices of app/bench/models.Transformer's layers of these kinds (True:
    mixture of experts), which fuse the QKV projection, latent attention's down projections,
    and every gate+up pair, and the Mamba mixers' matrices where layers have them."""
    d, up = cfg.d_model, 2 if cfg.gated else 1
    if cfg.mla:
        heads, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        down = (cfg.q_lora_rank or heads * qk) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
        kv_up = cfg.kv_lora_rank * heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        attention = [down * d, (cfg.q_lora_rank or 0) * heads * qk, kv_up, heads * cfg.v_head_dim * d]
    else:
        gate = cfg.n_heads * cfg.hd if cfg.attn_output_gate else 0
        attention = [(cfg.n_heads * cfg.hd + 2 * cfg.kv_heads * cfg.hd + gate) * d, cfg.n_heads * cfg.hd * d]
    for layer, _ in blocks.distinct(cfg):  # the state-space mixers hold the engine's own tensors
        mixer = getattr(layer.attention, "ssm", layer.attention)  # Falcon-H1's beside its attention
        if mixer.present and not mixer.mixes_by_attention:
            attention += [w.params for w in mixer.weights()]
    mlps = [up * cfg.ff * d] if not all(moe_layers) else []
    if any(moe_layers):
        mlps += [cfg.n_experts * d, up * cfg.ff_expert * d, up * cfg.ff_shared * d]
    return attention + mlps if moe_layers else []


def largest_tensor(cfg: models.TransformerConfig) -> int:
    """Elements of the largest parameter of app/bench/models.Transformer."""
    return max(cfg.vocab_size * cfg.d_model, *_layer_tensors(cfg, list(cfg.moe_layers)))


def largest_trainable(cfg: models.TransformerConfig, tune: ft.FineTune) -> int:
    """Elements of the largest tensor the optimizer steps: an adapter's A (r x in) or B (out x r),
    or, frozen parts aside, the tables, the head, the trained layers' matrices, the final norm."""
    d = cfg.d_model
    if tune.adapted:
        q, kv = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
        mlp = cfg.ff if not all(cfg.moe_layers) else cfg.ff_shared
        widths = {"q": q * (2 if cfg.attn_output_gate else 1), "k": kv, "v": kv, "o": q, "gate": mlp,
                  "up": mlp, "down": mlp, "qkv": q + 2 * kv, "gate_up": 2 * mlp}
        return tune.rank * max(max(d, widths[t]) for t in ft.targets_of(cfg, tune))
    plan = ft.graph(cfg, tune)
    tables = [cfg.vocab_size * d] if plan.embedding_trains or plan.head_trains else []
    if plan.embedding_trains and cfg.position == "learned":
        tables.append(cfg.max_seq_len * d)
    trained = [moe for moe, layer in zip(cfg.moe_layers, plan.layers, strict=True) if layer.whole]
    return max(d, *tables, *_layer_tensors(cfg, trained))
