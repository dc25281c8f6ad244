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
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.accounting import blocks
from app.accounting.errors import InvalidInput
from app.accounting.params import norm_params
from app.accounting.transformer import TransformerConfig

Stage = Literal["only", "first", "middle", "last"]


def kv_replicas(cfg: TransformerConfig, tp: int) -> int:
    """Copies of each key/value head over the tensor ranks: 1 while tp <= n_kv_heads, else
    tp / n_kv_heads, each rank keeping one head (Megatron-LM, vLLM's QKVParallelLinear); 1 for
    latent attention, whose up projections split by query heads."""
    return blocks.model_attention(cfg).kv_replicas(tp)


@lru_cache(maxsize=2048)
def layer_on_gpu(layer: blocks.Layer, tp: int, ep: int) -> tuple[int, int]:
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


@dataclass(frozen=True, slots=True)
class PipeStage:
    """One pipeline stage: its kind (what it holds outside the layers), its rank in the pipeline
    and its layer indices."""

    kind: Stage
    index: int
    layers: range


def split_layers(n_layers: int, pp: int, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Decoder layers on each of pp stages, first to last.

    Given first and/or last (Megatron-LM's --decoder-first-pipeline-num-layers and
    --decoder-last-pipeline-num-layers), the middle stages share the rest, differing by at most a
    layer, the later ones taking the extra (they hold fewer micro-batches in flight). Given
    neither, the stages differ by at most a layer and the short ones are the first and the last
    (which also hold the embedding and the LM head, as Llama 3 405B's 126 layers on 16 stages: 7 on
    the first and the last, 8 on the others; Llama 3 paper, section 3.3.2), then the earliest
    middle stages (which hold the most micro-batches in flight under 1F1B)."""
    if pp == 1:
        for name, v in (("first_stage_layers", first), ("last_stage_layers", last)):
            if v is not None and v != n_layers:
                raise InvalidInput(name, "a stage split needs pipeline_parallel > 1")
        return (n_layers,)
    if pp > n_layers:
        raise InvalidInput("pipeline_parallel", f"{pp} exceeds n_layers ({n_layers})")
    if first is None and last is None:
        q, r = divmod(n_layers, pp)
        sizes = [q + 1 if r else q] * pp
        if r:
            for i in [0, pp - 1, *range(1, pp - 1)][:pp - r]:
                sizes[i] = q
        return tuple(sizes)
    middles = pp - 2
    rest = n_layers - (first or 0) - (last or 0)
    if first is None or last is None:  # the other end takes a middle stage's share
        if rest < middles + 1:
            given = "first_stage_layers" if last is None else "last_stage_layers"
            raise InvalidInput(given, f"{first or last} leaves {rest} of {n_layers} layers for {pp - 1} stages: "
                                      "each needs one")
        share = -(-rest // (middles + 1))
        first, last = (first, share) if last is None else (share, last)
        rest = n_layers - first - last
    if first < 1 or last < 1:
        raise InvalidInput("first_stage_layers" if first < 1 else "last_stage_layers", "must be at least 1")
    if middles == 0:
        if rest:
            raise InvalidInput("first_stage_layers", f"with 2 stages, first and last stage layers must sum to "
                                                     f"n_layers ({n_layers}), got {first} + {last}")
        return (first, last)
    if rest < middles:
        raise InvalidInput("first_stage_layers", f"first ({first}) and last ({last}) stage layers leave "
                                                 f"{rest} for {middles} middle stages: each needs one")
    q, r = divmod(rest, middles)
    return (first, *([q] * (middles - r) + [q + 1] * r), last)


def interleaves(split: tuple[int, ...], v: int) -> bool:
    """Whether v model chunks per rank (Megatron-LM's interleaved schedule) lay over `split`: v
    divides every stage's layers, or, counting the embedding as a layer of the first stage and the
    loss as one of the last (Megatron-LM's --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split; Llama 3 405B's 126 layers on 16 stages of 8 chunks,
    whose first chunk holds only the embedding and last only the head and loss: Llama 3 paper,
    section 3.3.2), every stage's slots."""
    if v == 1:
        return True
    if len(split) < 2:
        return False
    if all(n % v == 0 for n in split):
        return True
    slots = (split[0] + 1, *split[1:-1], split[-1] + 1)
    return all(n % v == 0 for n in slots)


def stage_layers(cfg: TransformerConfig, pp: int, split: tuple[int, ...] | None = None) -> tuple[PipeStage, ...]:
    """The stages whose memory can be the peak: the only one, or the first, the last, and the
    earliest middle stage of each layer count (a later one of the same count holds fewer
    micro-batches in flight). `split`: layers per stage (split_layers); None its default."""
    n = cfg.n_layers
    if pp == 1:
        return (PipeStage("only", 0, range(n)),)
    sizes = split or split_layers(n, pp)
    starts = [sum(sizes[:i]) for i in range(pp)]
    out, seen = [PipeStage("first", 0, range(sizes[0]))], set()
    for i in range(1, pp - 1):
        if sizes[i] not in seen:
            seen.add(sizes[i])
            out.append(PipeStage("middle", i, range(starts[i], starts[i] + sizes[i])))
    out.append(PipeStage("last", pp - 1, range(starts[-1], n)))
    return tuple(out)


@lru_cache(maxsize=1024)
def stage_params(cfg: TransformerConfig, tp: int, pp: int, ep: int = 1,
                 split: tuple[int, ...] | None = None) -> tuple[tuple[PipeStage, int, int], ...]:
    """(stage, parameters outside routed experts, routed-expert parameters) one GPU holds
    on each stage stage_layers names (the only one, or the first, middles and last), layer by layer.

    Linear weights, the vocabulary-parallel embedding and LM head split over tp
    (Megatron-LM); norms and the biases after row-parallel layers are replicated.
    With tied embeddings and pp > 1 the last stage keeps its own copy to tie.
    """
    layers = blocks.layers(cfg)
    token = math.ceil(cfg.vocab_size * cfg.d_model / tp)
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    head = token if (not cfg.tied_embeddings or pp > 1) else 0
    outside = {"only": token + position + norm_params(cfg) + head, "first": token + position, "middle": 0,
               "last": norm_params(cfg) + head}
    out = []
    for stage in stage_layers(cfg, pp, split):
        kinds = [layer_on_gpu(layers[i], tp, ep) for i in stage.layers]
        out.append((stage, sum(k[0] for k in kinds) + outside[stage.kind], sum(k[1] for k in kinds)))
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
    why = blocks.tensor_parallel_refusal(model, tp)
    if why:
        raise InvalidInput("tensor_parallel", why)
    if pp > model.n_layers:
        raise InvalidInput("pipeline_parallel", f"{pp} exceeds n_layers ({model.n_layers})")
