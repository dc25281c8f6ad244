"""What one GPU holds of a model under tensor, pipeline and expert parallelism, as
Megatron-LM lays it out (and vLLM for inference): parameters by stage, split into the
routed experts and everything else, whose optimizer states ZeRO shards over different
groups of ranks.

Expert parallelism follows Megatron-LM and DeepSpeed-MoE: expert_parallel ranks inside
the data-parallel ones each hold n_experts / expert_parallel routed experts of every
mixture-of-experts layer, and the ranks holding the same experts, data_parallel /
expert_parallel of them, form the group that averages their gradients and over which
ZeRO shards their states (Megatron-LM's expert data-parallel group, world size /
(expert tensor parallel x expert parallel x pipeline parallel), with the expert tensor
parallel size defaulting to tensor_parallel).
"""

import math
from functools import lru_cache
from typing import Literal

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.params import norm_params
from app.accounting.transformer import TransformerConfig

Stage = Literal["only", "first", "last"]


def kv_replicas(cfg: TransformerConfig, tp: int) -> int:
    """Copies of each key/value head over the tensor ranks: 1 while tp <= n_kv_heads, else
    tp / n_kv_heads, each rank keeping one head (Megatron-LM, vLLM's QKVParallelLinear); 1 for
    latent attention, whose up projections split by query heads."""
    return blocks.model_attention(cfg).kv_replicas(tp)


@lru_cache(maxsize=2048)
def _layer_on_gpu(layer: blocks.Layer, tp: int, ep: int) -> tuple[int, int]:
    """(parameters outside the routed experts, routed-expert parameters) one GPU holds of a
    layer, from its weights' tensor-parallel split (blocks.base.Weight.tp_split).

    Split over tp as Megatron-LM and vLLM do: attention's projections by heads, MLPs and
    shared experts by their hidden width (K/V heads replicated past n_kv_heads ranks).
    Replicated: norms (block, q/k and latent norms), the biases after row-parallel layers,
    routers, the shared-expert gate, and latent attention's down projections. Routed
    experts split over tp like MLPs and over the expert_parallel ranks.
    """
    replicas = layer.attention.kv_replicas(tp)
    sharded = replicated = routed = 0
    for w in layer.weights():
        if w.component == "routed_experts":
            routed += w.params
        elif w.tp_split == "replicated":
            replicated += w.params
        else:
            sharded += w.params * (replicas if w.tp_split == "kv" else 1)
    return math.ceil(sharded / tp) + replicated, math.ceil(routed / (tp * ep))


def stage_layers(cfg: TransformerConfig, pp: int) -> tuple[tuple[Stage, range], ...]:
    """Layer indices of the only stage, or of the first and the last. Each of pp > 1 stages
    is taken to hold ceil(n_layers / pp) layers: the first from layer 0, the last up to the
    final layer (the busiest split when pp does not divide n_layers)."""
    n = cfg.n_layers
    if pp == 1:
        return (("only", range(n)),)
    held = math.ceil(n / pp)
    return (("first", range(held)), ("last", range(n - held, n)))


@lru_cache(maxsize=1024)
def stage_params(cfg: TransformerConfig, tp: int, pp: int, ep: int = 1) -> tuple[tuple[Stage, int, int], ...]:
    """(stage, parameters outside routed experts, routed-expert parameters) one GPU holds
    on the first and last pipeline stage (or the only one), layer by layer.

    Linear weights, the vocabulary-parallel embedding and LM head split over tp
    (Megatron-LM); norms and the biases after row-parallel layers are replicated.
    With tied embeddings and pp > 1 the last stage keeps its own copy to tie.
    """
    layers = blocks.layers(cfg)
    token = math.ceil(cfg.vocab_size * cfg.d_model / tp)
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    head = token if (not cfg.tied_embeddings or pp > 1) else 0
    outside = {"only": token + position + norm_params(cfg) + head, "first": token + position,
               "last": norm_params(cfg) + head}
    out = []
    for stage, held in stage_layers(cfg, pp):
        kinds = [_layer_on_gpu(layers[i], tp, ep) for i in held]
        out.append((stage, sum(k[0] for k in kinds) + outside[stage], sum(k[1] for k in kinds)))
    return tuple(out)


def check_parallel(model: TransformerConfig | None, *, tp: int, pp: int, dp: int, ep: int) -> None:
    """Refuse layouts no framework runs, naming the degree to change."""
    if ep > 1:
        if model is None or not model.moe:
            raise InvalidInput("expert_parallel", "shards routed experts; it needs a model with n_experts"
                               + (", not a bare parameter count" if model is None else ""))
        if model.n_experts % ep:
            raise InvalidInput("expert_parallel", f"{ep} must divide n_experts ({model.n_experts})")
        if dp % ep:
            raise InvalidInput("expert_parallel", f"{ep} must divide data_parallel ({dp}): experts are "
                               "sharded over ranks inside data parallelism")
    if model is None:
        return
    if model.n_heads % tp:
        raise InvalidInput("tensor_parallel", f"{tp} must divide n_heads ({model.n_heads})")
    why = blocks.model_attention(model).tensor_parallel_refusal(tp)
    if why:
        raise InvalidInput("tensor_parallel", why)
    if pp > model.n_layers:
        raise InvalidInput("pipeline_parallel", f"{pp} exceeds n_layers ({model.n_layers})")
