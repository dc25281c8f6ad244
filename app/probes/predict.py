"""The calculators' view of a probe's workload, torch-free: the server uses it to refuse
a job that would not fit, the child sets it beside what it measures."""

import dataclasses
import importlib.util
from dataclasses import dataclass

from app.accounting import dtypes, flops, models
from app.accounting.errors import InvalidInput
from app.accounting.finetune import flops as finetune_flops
from app.accounting.finetune import spec as ft
from app.accounting.finetune.memory import finetune_memory
from app.accounting.inference import kv_cache, roofline, workspace
from app.accounting.training import activations, memory, phases
from app.inputs.schemas import engine_model
from app.probes.params import (
    GENERATE_SIZES,
    CruncherSpec,
    GenerateParams,
    TrainStepParams,
)


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
    _check_buildable(cfg, "train_step")
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
    for i, target in enumerate(p.lora_targets or ()):
        if target in UNBUILT_TARGETS and tune.adapted:
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


def _check_buildable(cfg: models.TransformerConfig, probe: str) -> None:
    for name, (built, what) in UNBUILT.items():
        if getattr(cfg, name) != built:
            raise InvalidInput(f"params.model.{name}", f"the {probe} probe does not build {what} yet")


def _layer_tensors(cfg: models.TransformerConfig, moe_layers: list[bool]) -> list[int]:
    """Elements of the matrices of app/bench/models.Transformer's layers of these kinds (True:
    mixture of experts), which fuse the QKV projection, latent attention's down projections,
    and every gate+up pair."""
    d, up = cfg.d_model, 2 if cfg.gated else 1
    if cfg.mla:
        heads, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        down = (cfg.q_lora_rank or heads * qk) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
        kv_up = cfg.kv_lora_rank * heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        attention = [down * d, (cfg.q_lora_rank or 0) * heads * qk, kv_up, heads * cfg.v_head_dim * d]
    else:
        attention = [(cfg.n_heads * cfg.hd + 2 * cfg.kv_heads * cfg.hd) * d, cfg.n_heads * cfg.hd * d]
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
        widths = {"q": q, "k": kv, "v": kv, "o": q, "gate": mlp, "up": mlp, "down": mlp, "qkv": q + 2 * kv,
                  "gate_up": 2 * mlp}
        return tune.rank * max(max(d, widths[t]) for t in ft.targets_of(cfg, tune))
    plan = ft.graph(cfg, tune)
    tables = [cfg.vocab_size * d] if plan.embedding_trains or plan.head_trains else []
    if plan.embedding_trains and cfg.position == "learned":
        tables.append(cfg.max_seq_len * d)
    trained = [moe for moe, layer in zip(cfg.moe_layers, plan.layers, strict=True) if layer.whole]
    return max(d, *tables, *_layer_tensors(cfg, trained))


def matmul_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """A, B and the output (bfloat16 for float8) resident at once."""
    size = dtypes.lookup(dtype).storage_bytes
    out = 2 if dtype == "float8_e4m3fn" else size
    return (m * k + k * n) * size + m * n * out


def largest_matmul(shapes: list[tuple[int, int, int]], dtypes: list[str]) -> tuple[int, int]:
    """(index of the shape, bytes) of the most memory any one measurement needs."""
    return max(((i, matmul_bytes(*s, d)) for i, s in enumerate(shapes) for d in dtypes), key=lambda x: x[1])


# --- generate: a KV-cache decode of the same Transformer (app/bench/generate.py) ---------------------

@dataclass(frozen=True)
class GeneratePlan:
    """The generate probe's workload on a device kind, its defaults filled in."""

    name: str
    """A preset's name, "custom", or "cpu-default" (GENERATE_SIZES' small CPU model)."""
    config: models.TransformerConfig
    dtype: str
    dtype_bytes: int
    params: int
    weights_bytes: int
    """params x dtype_bytes: every weight in the model's dtype."""
    prompt_lens: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    contexts: tuple[int, ...]
    decode_steps: int
    matmul_size: int
    copy_bytes: int


def generate(p: GenerateParams, cuda: bool) -> GeneratePlan:
    """Resolve the defaults of `p` for CUDA or the CPU; InvalidInput naming the parameter when
    the probe cannot run it."""
    sizes = GENERATE_SIZES["cuda" if cuda else "cpu"]
    if p.model is None and isinstance(sizes.model, dict):
        name, cfg = "cpu-default", models.TransformerConfig(**sizes.model)
    else:
        spec = sizes.model if p.model is None else p.model
        name = spec if isinstance(spec, str) else "custom"
        cfg = engine_model(spec, field="params.model")
    cfg = dataclasses.replace(cfg, dropout=False)
    _check_buildable(cfg, "generate")
    if cfg.mla and cfg.layers.n_windowed:
        raise InvalidInput("params.model.sliding_window", "the generate probe does not build windowed "
                                                          "latent attention")
    dtype = p.dtype or sizes.dtype
    lengths = {"prompt_lens": tuple(p.prompt_lens or sizes.prompt_lens),
               "contexts": tuple(p.contexts or sizes.contexts)}
    for field, values in lengths.items():
        given = getattr(p, field) is not None
        for i, n in enumerate(values):
            if n > cfg.max_seq_len:
                raise InvalidInput(f"params.{field}.{i}" if given else f"params.{field}",
                                   f"{n} tokens exceed the model's max_seq_len ({cfg.max_seq_len})")
    for i, c in enumerate(lengths["contexts"]):
        if c <= p.decode_steps:  # the cache holds a prompt of at least one token before the timed steps
            raise InvalidInput(f"params.contexts.{i}" if p.contexts else "params.decode_steps",
                               f"a context of {c} tokens leaves no prompt before {p.decode_steps} decode "
                               "steps; each context must exceed decode_steps")
    width = int(dtypes.lookup(dtype).storage_bytes)
    n = models.count_params(cfg).total
    return GeneratePlan(name, cfg, dtype, width, n, n * width, lengths["prompt_lens"],
                        tuple(p.batch_sizes or sizes.batch_sizes), lengths["contexts"], p.decode_steps,
                        sizes.matmul_size, sizes.copy_bytes)


def kv_bytes(plan: GeneratePlan, *, context: int, batch: int) -> int:
    """The unpaged cache of `batch` sequences at `context` tokens, latent attention as the latent."""
    return kv_cache.kv_cache(plan.config, context=context, batch=batch, model_dtype=plan.dtype,
                             block_size=None, mla_cache="latent").total_bytes


# Residual-width tensors (tokens x d_model) the probe's eager PyTorch holds at a layer's peak
# beyond the two the workspace counts (the residual and its normed copy), by norm layout: the
# layer's input, which the loop that called it still references, and the sublayer's output
# beside its own input; parallel blocks also hold the attention output, and a second norm.
EAGER_RESIDUALS = {"pre": 2, "sandwich": 2, "post": 1, "parallel": 3, "parallel_shared": 2}
ROPE_TABLE_BYTES = 4
"""cos and sin per position and rotary dimension, in fp32 (app/bench/models.rope_tables)."""
ABSORBED_SCORE_BYTES = 8
"""Absorbed latent decode (app/bench/decode.py) keeps each head's fp32 scores over the cached
tokens and their softmax at once; FlashMLA keeps neither, so the workspace counts none."""


def serving_memory(plan: GeneratePlan, *, tokens: int, sequences: int, batch: int,
                   context: int) -> dict[str, int]:
    """Bytes live during a forward of `tokens` tokens over `sequences` sequences, with a cache of
    `batch` sequences at `context` tokens allocated: weights, cache, the serving calculators'
    workspace (app/accounting/inference/workspace.py), what eager PyTorch holds beyond it, and
    their total. The eager extra is EAGER_RESIDUALS and the RoPE tables, added to the layer's
    phases (attention, MLP), not the sampler's."""
    cfg = plan.config
    ws = workspace.workspace(cfg, tokens=tokens, sequences=sequences, act_bytes=plan.dtype_bytes)
    rotary = cfg.qk_rope_head_dim if cfg.mla else cfg.hd if cfg.position == "rope" else 0
    held = (EAGER_RESIDUALS[cfg.norm_layout] * tokens * cfg.d_model * plan.dtype_bytes
            + 2 * tokens * rotary * ROPE_TABLE_BYTES)
    if cfg.mla and tokens == sequences:  # one new token per sequence: the absorbed decode path
        held += sequences * cfg.n_heads * context * ABSORBED_SCORE_BYTES
    peak = max(ws.attention_bytes + held, ws.mlp_bytes + held, ws.logits_bytes)
    parts = {"weights": plan.weights_bytes, "kv_cache": kv_bytes(plan, context=context, batch=batch),
             "workspace": ws.bytes, "eager": peak - ws.bytes}
    return parts | {"total": sum(parts.values())}


def prefill_memory(plan: GeneratePlan, prompt: int) -> dict[str, int]:
    """One prompt's prefill into a cache of its own length."""
    return serving_memory(plan, tokens=prompt, sequences=1, batch=1, context=prompt)


def decode_memory(plan: GeneratePlan, batch: int, context: int) -> dict[str, int]:
    """A decode step of `batch` sequences, one token each, the last at `context`."""
    return serving_memory(plan, tokens=batch, sequences=batch, batch=batch, context=context)


def fill_memory(plan: GeneratePlan, batch: int, context: int) -> dict[str, int]:
    """Filling a decode point's cache: each sequence's prompt (context - decode_steps tokens)
    prefilled alone into its row."""
    return serving_memory(plan, tokens=context - plan.decode_steps, sequences=1, batch=batch, context=context)


def prefill_pass(plan: GeneratePlan, hw: roofline.Hardware, prompt: int) -> roofline.Pass:
    """One prompt on the roofline: its FLOPs (the LM head on the last position), the weights
    read once and its cache written once."""
    return roofline.prefill_pass(plan.config, hw, prompt=prompt, sequences=1,
                                 weights_bytes=plan.weights_bytes,
                                 cache_bytes=kv_bytes(plan, context=prompt, batch=1),
                                 act_bytes=plan.dtype_bytes, tensor_parallel=1)


def decode_bytes(plan: GeneratePlan, batch: int, context: int) -> int:
    """Bytes one decode step moves, as the serving calculators count them: the weights read once
    (of the routed experts, only those the batch's tokens pick: roofline.experts_read), every
    sequence's cache read at `context` tokens and its new entries written."""
    cfg = plan.config
    count = models.count_params(cfg)
    # count.embedding is the token and position tables plus an untied head (vocab x d_model).
    tables = count.embedding - (0 if cfg.tied_embeddings else cfg.vocab_size * cfg.d_model)
    return roofline.decode_step_bytes(cfg, weights_bytes=plan.weights_bytes,
                                      routed_bytes=count.routed_experts * plan.dtype_bytes,
                                      embedding_bytes=tables * plan.dtype_bytes, batch=batch,
                                      cache_bytes=kv_bytes(plan, context=context, batch=1),
                                      new_bytes=kv_bytes(plan, context=1, batch=1))


def decode_pass(plan: GeneratePlan, hw: roofline.Hardware, batch: int, context: int) -> roofline.Pass:
    """One decode step of `batch` sequences writing their token at `context` (latent attention
    absorbed, reading the latent cache)."""
    step_flops = batch * roofline.decode_flops(plan.config, context=context, mla_cache="latent")
    return roofline.run(hw, flops=step_flops, bytes=decode_bytes(plan, batch, context), tensor_parallel=1,
                        comm_seconds=0.0)


def generate_need(p: GenerateParams, cuda: bool) -> tuple[int, str]:
    """The most bytes any moment of the job holds, and the parameter that sets them: the
    ceilings' matmul or copy (freed before the model is built), a prefill, or a decode point
    (its cache filled a prompt at a time, then stepped); the model when its weights are most
    of it."""
    plan = generate(p, cuda)
    size = plan.matmul_size
    need = [(max(matmul_bytes(size, size, size, plan.dtype), 2 * plan.copy_bytes), "params.device")]
    need += [(prefill_memory(plan, n)["total"], "params.prompt_lens") for n in plan.prompt_lens]
    need += [(max(decode_memory(plan, b, c)["total"], fill_memory(plan, b, c)["total"]), "params.batch_sizes")
             for b in plan.batch_sizes for c in plan.contexts]
    most, field = max(need, key=lambda x: x[0])
    return most, "params.model" if 2 * plan.weights_bytes >= most else field
