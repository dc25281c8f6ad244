"""A model's weight tensors, one record each, named as llama.cpp's GGUF files name them.

Shapes are as stored, output dimension first: (rows, cols) = (out_features, in_features), as
PyTorch's nn.Linear holds a weight and GGUF writes it (ne[1], ne[0]); (n_experts, rows, cols)
for a layer's routed experts, one 3-D tensor per projection as GGUF stores them (ffn_*_exps,
llama.cpp's convert_hf_to_gguf.py stacks the experts); (n,) for norms and biases. Embeddings
are (vocab_size, d_model).

Every tensor carries the component of count_params' breakdown it belongs to (token and position
embeddings are both `embeddings`), so the tensors of a component sum to that count exactly, and
how tensor parallelism splits it, as vLLM's parallel layers and Megatron-LM do:
- column: the output rows split over the ranks (q, gate/up projections, latent attention's up
  projections, and their biases);
- row: the input columns split (attention output, down projections); their biases are added
  after the all-reduce, so they are replicated;
- vocab: the embedding and the LM head split by vocabulary rows (VocabParallelEmbedding);
- kv: k/v projections split by key/value heads; past n_kv_heads ranks each keeps one head
  (vLLM's QKVParallelLinear replicates it);
- replicated: norms, routers, the shared-expert gate, latent attention's down projections
  (DeepSeek-V3's inference code keeps them whole on every rank), the learned position table
  (Megatron-LM's LanguageModelEmbedding), and the biases of row-parallel layers.
This is the split app.accounting.training.sharding counts parameters by.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.accounting.params import one_norm
from app.accounting.transformer import TransformerConfig

Component = Literal["attention", "router", "routed_experts", "shared_experts", "mlp", "norms",
                    "embeddings", "lm_head"]
COMPONENTS: tuple[Component, ...] = ("embeddings", "attention", "mlp", "router", "routed_experts",
                                     "shared_experts", "norms", "lm_head")
TpSplit = Literal["column", "row", "vocab", "kv", "replicated"]

# The norms of one block by layout, as llama.cpp names them (llama-arch.cpp): post-norms are
# post_attention_norm / post_ffw_norm (OLMo 2, Gemma 2's sandwich); a parallel block with one
# shared norm (Falcon-7B) has attn_norm only.
_BLOCK_NORMS = {"pre": ("attn_norm", "ffn_norm"), "post": ("post_attention_norm", "post_ffw_norm"),
                "sandwich": ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"),
                "parallel": ("attn_norm", "ffn_norm"), "parallel_shared": ("attn_norm",)}


@dataclass(frozen=True, slots=True)
class WeightTensor:
    """One stored tensor of the model."""

    name: str
    """llama.cpp's GGUF name without the `blk.{layer}.` prefix: attn_q.weight, ffn_down_exps.weight,
    attn_q.bias, token_embd.weight..."""
    layer: int | None
    """The block it belongs to (from 0); None for embeddings, the final norm and the LM head."""
    shape: tuple[int, ...]
    """(rows, cols) = (out, in); (n_experts, rows, cols) for routed experts; (n,) for 1-D."""
    params: int
    component: Component
    tp_split: TpSplit

    @property
    def gguf_name(self) -> str:
        return self.name if self.layer is None else f"blk.{self.layer}.{self.name}"

    @property
    def matrix(self) -> bool:
        """A weight matrix (or a stack of them): the tensors a format quantizes."""
        return len(self.shape) >= 2


# (name, shape, component, tp_split) of one block, before the layer index is attached; _Sized
# adds the parameter count after the shape.
_Spec = tuple[str, tuple[int, ...], Component, TpSplit]
_Sized = tuple[str, tuple[int, ...], int, Component, TpSplit]


def _norm(cfg: TransformerConfig, name: str, width: int) -> list[_Spec]:
    """A norm's weight, and its bias for LayerNorm with biases (params.one_norm counts the same)."""
    n = one_norm(cfg, width)
    if n == 0:
        return []
    specs: list[_Spec] = [(f"{name}.weight", (width,), "norms", "replicated")]
    if n == 2 * width:
        specs.append((f"{name}.bias", (width,), "norms", "replicated"))
    return specs


def _linear(name: str, rows: int, cols: int, component: Component, split: TpSplit,
            bias: bool, bias_split: TpSplit | None = None) -> list[_Spec]:
    specs: list[_Spec] = [(f"{name}.weight", (rows, cols), component, split)]
    if bias:
        specs.append((f"{name}.bias", (rows,), component, bias_split or split))
    return specs


def _attention(cfg: TransformerConfig) -> list[_Spec]:
    """q/k/v/output projections with their biases, or latent attention's down and up projections
    (DeepSeek-V2/V3 as llama.cpp's convert names them), and the norms inside attention."""
    d, bias = cfg.d_model, cfg.has_attn_bias
    if not cfg.mla:
        q, kv = cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
        specs = (_linear("attn_q", q, d, "attention", "column", cfg.has_qkv_bias)
                 + _linear("attn_k", kv, d, "attention", "kv", cfg.has_qkv_bias)
                 + _linear("attn_v", kv, d, "attention", "kv", cfg.has_qkv_bias)
                 + _linear("attn_output", d, q, "attention", "row", bias, "replicated"))
        if cfg.qk_norm == "head":
            specs += _norm(cfg, "attn_q_norm", cfg.hd) + _norm(cfg, "attn_k_norm", cfg.hd)
        elif cfg.qk_norm == "projection":
            specs += _norm(cfg, "attn_q_norm", q) + _norm(cfg, "attn_k_norm", kv)
        return specs
    h, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    specs = []
    if cfg.q_lora_rank:
        r = cfg.q_lora_rank
        specs += _linear("attn_q_a", r, d, "attention", "replicated", bias) + _norm(cfg, "attn_q_a_norm", r)
        specs += _linear("attn_q_b", h * qk, r, "attention", "column", False)
    else:
        specs += _linear("attn_q", h * qk, d, "attention", "column", False)
    # The key/value latent and the one rotary key head shared by all heads, in one projection.
    latent = cfg.kv_lora_rank
    specs += _linear("attn_kv_a_mqa", latent + cfg.qk_rope_head_dim, d, "attention", "replicated", bias)
    specs += _norm(cfg, "attn_kv_a_norm", latent)
    specs += _linear("attn_kv_b", h * (cfg.qk_nope_head_dim + cfg.v_head_dim), latent, "attention",
                     "column", False)
    specs += _linear("attn_output", d, h * cfg.v_head_dim, "attention", "row", bias, "replicated")
    return specs


def _mlp(cfg: TransformerConfig, width: int, suffix: str, component: Component, bias: bool) -> list[_Spec]:
    """gate (when gated), up and down projections of hidden `width`; the down bias is replicated."""
    d = cfg.d_model
    specs = _linear(f"ffn_gate{suffix}", width, d, component, "column", bias) if cfg.gated else []
    specs += _linear(f"ffn_up{suffix}", width, d, component, "column", bias)
    specs += _linear(f"ffn_down{suffix}", d, width, component, "row", bias, "replicated")
    return specs


def _experts(cfg: TransformerConfig) -> list[_Spec]:
    """A mixture-of-experts layer: the router (llama.cpp's ffn_gate_inp), the routed experts as
    stacked (n_experts, rows, cols) tensors, the shared experts as one MLP, and Qwen2-MoE's
    d_model -> 1 shared-expert gate. Experts and routers have no biases (params.py)."""
    d, e, f = cfg.d_model, cfg.n_experts, cfg.ff_expert
    specs: list[_Spec] = [("ffn_gate_inp.weight", (e, d), "router", "replicated")]
    if cfg.gated:
        specs.append(("ffn_gate_exps.weight", (e, f, d), "routed_experts", "column"))
    specs += [("ffn_up_exps.weight", (e, f, d), "routed_experts", "column"),
              ("ffn_down_exps.weight", (e, d, f), "routed_experts", "row")]
    if cfg.ff_shared:
        specs += _mlp(cfg, cfg.ff_shared, "_shexp", "shared_experts", False)
        if cfg.shared_expert_gate:
            specs.append(("ffn_gate_inp_shexp.weight", (1, d), "shared_experts", "replicated"))
    return specs


@lru_cache(maxsize=2048)
def _block(cfg: TransformerConfig, moe: bool) -> tuple[_Sized, ...]:
    """One block's tensors (block norms, attention, MLP or experts) with their sizes. Order within
    a block is immaterial: llama.cpp sorts a block's tensors by name (weight_name_comparer)."""
    norms = [s for name in _BLOCK_NORMS[cfg.norm_layout] for s in _norm(cfg, name, cfg.d_model)]
    ffn = _experts(cfg) if moe else _mlp(cfg, cfg.ff, "", "mlp", cfg.has_mlp_bias)
    specs = norms + _attention(cfg) + ffn
    out = []
    for name, shape, component, split in specs:
        size = 1
        for dim in shape:
            size *= dim
        out.append((name, shape, size, component, split))
    return tuple(out)


@lru_cache(maxsize=1024)
def model_tensors(cfg: TransformerConfig) -> tuple[WeightTensor, ...]:
    """Every weight tensor of the model, in GGUF's order: token (and position) embeddings, the
    blocks, the final norm, then the LM head unless it is tied to the token embedding (GGUF then
    has no output.weight). Parameters sum to count_params(cfg).total, component by component.
    DeepSeek-V3's router score-correction bias is a buffer, not a parameter, and is left out."""
    d = cfg.d_model
    tensors = [WeightTensor("token_embd.weight", None, (cfg.vocab_size, d), cfg.vocab_size * d,
                            "embeddings", "vocab")]
    if cfg.position == "learned":
        tensors.append(WeightTensor("position_embd.weight", None, (cfg.max_seq_len, d), cfg.max_seq_len * d,
                                    "embeddings", "replicated"))
    blocks = {False: _block(cfg, False), True: _block(cfg, True) if cfg.moe else ()}
    for layer, moe in enumerate(cfg.moe_layers):
        tensors += [WeightTensor(name, layer, shape, size, component, split)
                    for name, shape, size, component, split in blocks[moe]]
    tensors += [WeightTensor(name, None, shape, shape[0], component, split)
                for name, shape, component, split in _norm(cfg, "output_norm", d)]
    if not cfg.tied_embeddings:
        tensors.append(WeightTensor("output.weight", None, (cfg.vocab_size, d), cfg.vocab_size * d,
                                    "lm_head", "vocab"))
    return tuple(tensors)


def by_component(tensors: tuple[WeightTensor, ...]) -> dict[Component, int]:
    """Parameters per component, in COMPONENTS order, components without tensors left out."""
    totals = dict.fromkeys(COMPONENTS, 0)
    for t in tensors:
        totals[t.component] += t.params
    return {c: n for c, n in totals.items() if n}
