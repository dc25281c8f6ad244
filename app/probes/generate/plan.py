"""The calculators' view of a generate job, torch-free: its workload with the defaults filled in,
the bytes each moment holds (the server refuses a job that would not fit by them) and the
roofline's time of each pass (the child sets it beside what it measures)."""

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.accounting import dtypes, models
from app.accounting.errors import InvalidInput
from app.accounting.inference import kv_cache, roofline, workspace
from app.inputs.schemas import engine_model
from app.probes.generate.params import GENERATE_SIZES, GenerateParams
from app.probes.matmul import matmul_bytes
from app.probes.train_step.predict import check_buildable


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
    modes: tuple[str, ...] = ("eager",)
    """eager, and graph where the model's decode has fixed shapes (app/bench/graphed.py)."""


# What the cached decode (app/bench/decode.py) does not build, beside what train_step does not.
DECODE_UNBUILT = {"layer_mixers": ((), "Mamba or gated DeltaNet layers (their state) in its cached decode"),
                  "mlp_free_layers": ((), "layers without an MLP in its cached decode"),
                  "attn_output_gate": (False, "gated attention's output gate"),
                  "attention_sinks": (False, "attention sinks in its cached decode"),
                  "attention_chunk_size": (None, "chunked attention in its cached decode")}


def served_model(model: Any, cuda: bool, probe: str, unbuilt: dict) -> tuple[str, models.TransformerConfig]:
    """(its name, its config) of a serving probe's `model` parameter, the device kind's default when
    None ("cpu-default": GENERATE_SIZES' small CPU model); refused naming params.model where the
    probe does not build a part of it."""
    sizes = GENERATE_SIZES["cuda" if cuda else "cpu"]
    if model is None and isinstance(sizes.model, dict):
        name, cfg = "cpu-default", models.TransformerConfig(**sizes.model)
    else:
        spec = sizes.model if model is None else model
        name = spec if isinstance(spec, str) else "custom"
        cfg = engine_model(spec, field="params.model")
    cfg = dataclasses.replace(cfg, dropout=False)
    check_buildable(cfg, probe, unbuilt)
    return name, cfg


def generate(p: GenerateParams, cuda: bool) -> GeneratePlan:
    """Resolve the defaults of `p` for CUDA or the CPU; InvalidInput naming the parameter when
    the probe cannot run it."""
    sizes = GENERATE_SIZES["cuda" if cuda else "cpu"]
    name, cfg = served_model(p.model, cuda, "generate", DECODE_UNBUILT)
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
    graphable = graph_refusal(cfg)
    if p.modes and "graph" in p.modes and graphable:
        raise InvalidInput("params.modes", f"graph mode needs fixed shapes: {graphable}; use eager")
    # By default graph mode runs only on CUDA, where capture costs milliseconds; a CPU's graph is
    # torch.compile, whose inductor build takes tens of seconds per batch shape.
    modes = tuple(dict.fromkeys(p.modes)) if p.modes else ("eager", "graph") if cuda and not graphable \
        else ("eager",)
    return GeneratePlan(name, cfg, dtype, width, n, n * width, lengths["prompt_lens"],
                        tuple(p.batch_sizes or sizes.batch_sizes), lengths["contexts"], p.decode_steps,
                        sizes.matmul_size, sizes.copy_bytes, modes)


def graph_refusal(cfg: models.TransformerConfig) -> str | None:
    """Why this model's decode step cannot be captured (app/bench/graphed.py), or None."""
    if cfg.mla:
        return "latent attention's absorbed decode is data-dependent here"
    if cfg.moe:
        return "the experts' routing sizes its matmuls on the host"
    return None


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
