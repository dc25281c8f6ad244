"""The blocks of a transformer layer, one module per kind, and the one place that decides which
kind each layer has.

Attention kinds: grouped.py (multi-head, grouped-query, multi-query), latent.py (DeepSeek's
multi-head latent attention), windowed.py (a sliding window over either), chunked.py (Llama 4's
chunked local attention over either); token mixers that are not attention but fill its place:
mamba1.py and mamba.py (Mamba's and Mamba-2's state-space blocks), deltanet.py (gated DeltaNet
linear attention); parallel.py, attention and Mamba-2 side by side (Falcon-H1); absent.py, a layer
without a mixer or without an MLP (Nemotron-H). MLP kinds:
dense.py (two matrices), gated.py (three: SwiGLU, GeGLU), experts.py (a mixture of experts, its experts
and shared experts built from the dense or gated kind). base.py holds what each answers: its
weights, parameters, forward FLOPs, saved tensors and, for attention, cache and decode reads.

The calculators (params, flops, training activations and sharding, the KV cache, the weight
list, the roofline, fine-tuning) read `layers(cfg)` and ask each block; none of them tests the
config for a kind. Adding a kind is one module here, its case in attention_of or mlp_of, the
config fields that turn it on (transformer.py), and its tests.
"""

from functools import lru_cache
from typing import NamedTuple

from app.accounting.blocks.absent import NoMixer, NoMlp
from app.accounting.blocks.base import Attention, Linear, Mlp, Weight, by_component, linears, norm
from app.accounting.blocks.chunked import Chunked
from app.accounting.blocks.deltanet import GatedDeltaNet
from app.accounting.blocks.dense import DenseMlp
from app.accounting.blocks.experts import Experts
from app.accounting.blocks.gated import GatedMlp, mlp_kind
from app.accounting.blocks.grouped import GroupedAttention
from app.accounting.blocks.latent import LatentAttention
from app.accounting.blocks.mamba import Mamba2
from app.accounting.blocks.mamba1 import Mamba1
from app.accounting.blocks.parallel import ParallelMixers
from app.accounting.blocks.windowed import Windowed
from app.accounting.transformer import TransformerConfig

__all__ = ["Attention", "Mlp", "Layer", "Weight", "Linear", "GroupedAttention", "LatentAttention", "Windowed",
           "Chunked", "Mamba1", "Mamba2", "GatedDeltaNet", "NoMixer", "NoMlp", "ParallelMixers",
           "DenseMlp", "GatedMlp", "Experts", "attention_of", "mlp_of", "dense_mlp", "layers", "distinct",
           "model_attention", "routed", "tensor_parallel_refusal", "fine_tune_refusal"]

# The norms of one block by layout, as llama.cpp names them (llama-arch.cpp): post-norms are
# post_attention_norm / post_ffw_norm (OLMo 2, Gemma 2's sandwich); a parallel block with one
# shared norm (Falcon-7B) has attn_norm only.
BLOCK_NORMS = {"pre": ("attn_norm", "ffn_norm"), "post": ("post_attention_norm", "post_ffw_norm"),
               "sandwich": ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"),
               "parallel": ("attn_norm", "ffn_norm"), "parallel_shared": ("attn_norm",)}


def attention_of(cfg: TransformerConfig, layer: int) -> Attention:
    """Layer `layer`'s attention: latent where kv_lora_rank is set, grouped heads otherwise, in a
    window or chunk where the config makes that layer local (sliding_window or attention_chunk_size,
    global_every)."""
    mixer = cfg.mixers[layer]
    if mixer == "none":
        return NoMixer(cfg)
    if mixer == "mamba":
        return Mamba1(cfg)
    if mixer == "mamba2":
        return Mamba2(cfg)
    if mixer == "gated_delta_net":
        return GatedDeltaNet(cfg)
    inner = LatentAttention(cfg) if cfg.mla else GroupedAttention(cfg)
    if cfg.windowed_layers[layer]:
        inner = Windowed(cfg, inner, cfg.sliding_window)
    elif cfg.chunked_layers[layer]:
        inner = Chunked(cfg, inner, cfg.attention_chunk_size)
    return ParallelMixers(cfg, inner, Mamba2(cfg)) if mixer == "attention_mamba2" else inner


def mlp_of(cfg: TransformerConfig, layer: int) -> Mlp:
    """Layer `layer`'s MLP: experts where the config routes that layer (n_experts, first_dense_layers,
    moe_every, mlp_only_layers), else a gated or two-matrix MLP of d_ff."""
    if layer in cfg.mlp_free_layers:
        return NoMlp(cfg)
    return Experts(cfg) if cfg.moe_layers[layer] else dense_mlp(cfg)


def dense_mlp(cfg: TransformerConfig) -> Mlp:
    """The model's MLP of d_ff: gated (three matrices) for swiglu and geglu, else two."""
    return mlp_kind(cfg)(cfg, cfg.ff, bias=cfg.has_mlp_bias)


class Layer(NamedTuple):
    """One transformer layer: its norms (by the config's norm layout), attention and MLP."""

    attention: Attention
    mlp: Mlp

    def weights(self) -> tuple[Weight, ...]:
        return _layer_weights(self)

    @property
    def params(self) -> dict[str, int]:
        return _layer_params(self)

    def linears(self) -> tuple[Linear, ...]:
        return _layer_linears(self)


@lru_cache(maxsize=4096)
def _layer_weights(layer: Layer) -> tuple[Weight, ...]:
    """Order within a block is immaterial: llama.cpp sorts a block's tensors by name."""
    cfg = layer.attention.cfg
    names = BLOCK_NORMS[cfg.norm_layout]
    if cfg.norm_layout == "pre" and not all(part.present for part in layer):
        # A missing sublayer has no norm before it (structure.py: pre only); llama.cpp calls a layer's
        # one norm attn_norm, whichever block follows it (Nemotron-H's MLP and expert layers).
        names = names[:sum(part.present for part in layer)]
    if "gated_delta_net" in cfg.mixers and cfg.norm_layout == "pre":
        # llama.cpp's qwen3next (src/models/qwen3next.cpp) reads its pre-MLP norm as attn_post_norm,
        # and convert_hf_to_gguf.py writes post_attention_layernorm under that name.
        names = ("attn_norm", "post_attention_norm")
    norms = [w for name in names for w in norm(cfg, name, cfg.d_model)]
    return (*norms, *layer.attention.weights(), *layer.mlp.weights())


@lru_cache(maxsize=4096)
def _layer_params(layer: Layer) -> dict[str, int]:
    return by_component(layer.weights())


@lru_cache(maxsize=4096)
def _layer_linears(layer: Layer) -> tuple[Linear, ...]:
    return linears(layer.weights())


@lru_cache(maxsize=1024)
def layers(cfg: TransformerConfig) -> tuple[Layer, ...]:
    """Every layer's blocks, in order."""
    return tuple(Layer(attention_of(cfg, i), mlp_of(cfg, i)) for i in range(cfg.n_layers))


@lru_cache(maxsize=1024)
def distinct(cfg: TransformerConfig) -> tuple[tuple[Layer, int], ...]:
    """Each distinct layer with how many layers are it, in order of first appearance: what a sum
    over layers needs (a dense model has one; Gemma 3 with experts would have four)."""
    counts: dict[Layer, int] = {}
    for layer in layers(cfg):
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(counts.items())


def model_attention(cfg: TransformerConfig) -> Attention:
    """The attention kind every attention layer shares, its window aside: what one token adds to a
    layer's cache, how key/value heads replicate over tensor ranks. In a hybrid, the first layer that
    attends (a model of state-space layers only answers its first layer, which caches nothing)."""
    every = layers(cfg)
    attending = (layer.attention for layer in every if layer.attention.mixes_by_attention)
    return next(attending, every[0].attention)


def tensor_parallel_refusal(cfg: TransformerConfig, tp: int) -> str | None:
    """Why `tp` tensor ranks cannot split some layer's token mixer, or None."""
    return next((why for layer, _ in distinct(cfg) if (why := layer.attention.tensor_parallel_refusal(tp))),
                None)


def fine_tune_refusal(cfg: TransformerConfig) -> str | None:
    """Why some layer's token mixer cannot be counted fine-tuned, or None."""
    return next((why for layer, _ in distinct(cfg) if (why := layer.attention.fine_tune_refusal)), None)


def routed(cfg: TransformerConfig) -> Mlp | None:
    """The mixture-of-experts block every routed layer shares, or None for a dense model."""
    return next((layer.mlp for layer in layers(cfg) if layer.mlp.routes), None)
