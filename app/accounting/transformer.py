"""A decoder-only transformer's shape: the one dataclass every calculator reads.

Bounds live on the fields as annotated_types metadata (plain data, no pydantic
import), so the API validates this very dataclass and its schema states them.
Every field added after the first release defaults to the behaviour before it,
so older configs and presets mean what they meant.

Layer-dependent structure (which layers route to experts, which attend in a
window) is derived here once, as tuples indexed by layer, so parameters, FLOPs
and memory read one answer.
"""

import typing
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Annotated, Literal, NamedTuple

from annotated_types import Ge, Le

from app.accounting import structure
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

Mlp = Literal["gelu", "swiglu", "geglu", "relu2"]
Norm = Literal["layernorm", "rmsnorm", "layernorm_no_affine"]
NormLayout = Literal["pre", "post", "sandwich", "parallel", "parallel_shared"]
QkNorm = Literal["none", "head", "projection"]
Position = Literal["learned", "rope"]
Mixer = Literal["attention", "mamba", "mamba2", "gated_delta_net", "attention_mamba2", "none"]

# Norms per block, by layout; q/k norms, MLA's latent norms and the final norm are extra.
NORMS_PER_BLOCK = {"pre": 2, "post": 2, "sandwich": 4, "parallel": 2, "parallel_shared": 1}
GATED = ("swiglu", "geglu")



@cache
def _bounds(cls: type) -> tuple[tuple[str, int, int], ...]:
    """(field, Ge, Le) of each bounded integer field, read from its Annotated metadata."""
    table = []
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        for arg in (hint, *typing.get_args(hint)):
            meta = getattr(arg, "__metadata__", ())
            lo = next((m.ge for m in meta if isinstance(m, Ge)), None)
            hi = next((m.le for m in meta if isinstance(m, Le)), None)
            if lo is not None and hi is not None:
                table.append((name, lo, hi))
    return tuple(table)


def check_bounds(obj: object) -> None:
    """Enforce a dataclass's Annotated bounds, so the engine never holds a config
    the API would refuse, however it was built."""
    for name, lo, hi in _bounds(type(obj)):
        value = getattr(obj, name)
        if value is None:
            continue
        if type(value) is not int:  # bool is an int subclass; refuse it too
            raise InvalidInput(name, f"must be an integer, got {value!r}")
        if not lo <= value <= hi:
            raise InvalidInput(name, f"{value} is outside [{lo}, {hi}]")


Width = Annotated[int, Ge(1), Le(1_048_576)]


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer. Defaults follow GPT-2 (GELU, LayerNorm, biases,
    tied embeddings, learned positions, dense MLPs, full attention)."""

    n_layers: Annotated[int, Ge(1), Le(1024)]
    d_model: Annotated[int, Ge(1), Le(131_072)]
    n_heads: Annotated[int, Ge(1), Le(1024)]
    vocab_size: Annotated[int, Ge(1), Le(10_000_000)]
    n_kv_heads: Annotated[int, Ge(1), Le(1024)] | None = None
    """Key/value heads for grouped-query attention; null means n_heads (multi-head), 1 is
    multi-query."""
    d_ff: Width | None = None
    """MLP hidden width of a dense layer; null means 4*d_model for gelu, and LLaMA's rule
    for gated MLPs (8*d_model/3 rounded up to a multiple of 256)."""
    mlp: Mlp = "gelu"
    """gelu and relu2 (squared ReLU, Nemotron-H): two matrices (up, down). swiglu and geglu: three
    (gate, up, down)."""
    norm: Norm = "layernorm"
    """layernorm has a weight, and a bias when `bias` is true; rmsnorm has a weight only;
    layernorm_no_affine (OLMo) has no parameters."""
    bias: bool = True
    """Biases on every linear layer (except the LM head) and on LayerNorm; attn_bias,
    mlp_bias and qkv_bias override it for their layers."""
    qkv_bias: bool | None = None
    """Biases on the q/k/v projections only (Qwen2); null means `attn_bias`."""
    attn_bias: bool | None = None
    """Biases on attention's q/k/v and output projections (HF attention_bias); null means
    `bias`. qkv_bias, when set, overrides it for q/k/v. With latent attention it biases the
    two down projections and the output, as DeepSeek's attention_bias does."""
    mlp_bias: bool | None = None
    """Biases on the MLP's linear layers (HF mlp_bias); null means `bias`. Experts and
    routers never have biases here."""
    tied_embeddings: bool = True
    """The LM head reuses the token embedding matrix; counted once."""
    position: Position = "learned"
    """learned adds a max_seq_len x d_model table; rope has no parameters."""
    max_seq_len: Annotated[int, Ge(1), Le(1 << 24)] = 1024  # Llama 4 Scout's is 10,485,760
    head_dim: Annotated[int, Ge(1), Le(131_072)] | None = None
    """Per-head width; null means d_model / n_heads."""
    dropout: bool = False
    """Dropout in training; it adds 1-byte masks to activation memory."""
    norm_layout: NormLayout = "pre"
    """pre: a norm before attention and before the MLP (2 per block). post: the same two
    applied to each sublayer's output before the residual add (OLMo 2). sandwich: both
    (4 per block, Gemma 2 and 3). parallel: attention and MLP read the same residual,
    each through its own norm (GPT-NeoX, Falcon-40B; 2 per block). parallel_shared: one
    norm feeds both (Falcon-7B; 1 per block)."""
    qk_norm: QkNorm = "none"
    """Norms on queries and keys after projection. head: one head_dim-wide weight shared by
    all heads, for q and for k (Qwen3, Gemma 3). projection: over the whole projection,
    n_heads*head_dim for q and n_kv_heads*head_dim for k (OLMo 2)."""
    fused_qkv: bool = False
    """q, k and v are one nn.Linear (GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value,
    Phi-3's qkv_proj). The same parameters and FLOPs; it decides what LoRA can wrap."""
    fused_gate_up: bool = False
    """Gate and up are one nn.Linear (Phi-3's gate_up_proj); as fused_qkv."""
    sliding_window: Annotated[int, Ge(1), Le(10_000_000)] | None = None
    """Tokens a windowed layer attends to (the query and the window-1 before it); null is
    full attention everywhere. No parameters; halves FLOPs only with causal='halved'."""
    global_every: Annotated[int, Ge(1), Le(1024)] | None = None
    """With sliding_window (or attention_chunk_size): layer i (from 0) attends globally when (i+1) is
    a multiple of this, the others in the window or chunk (Gemma 2: 2, Gemma 3: 6, Llama 4: 4); null
    windows every layer (Mistral 7B v0.1)."""
    attention_chunk_size: Annotated[int, Ge(1), Le(10_000_000)] | None = None
    """Chunked local attention (Llama 4's rope layers): the sequence is cut into aligned chunks of
    this many tokens and a query attends to the keys of its own chunk up to itself. No parameters;
    with causal='halved' a layer scores (C^2/2 per whole chunk, r^2/2 for the rest), and a cache
    keeps the current chunk's tokens. Not with sliding_window."""
    attn_logit_softcapping: float | None = None
    """tanh cap on attention logits (Gemma 2): elementwise, no parameters, no matmul FLOPs."""
    final_logit_softcapping: float | None = None
    """tanh cap on the LM head's logits (Gemma 2): elementwise, no parameters."""
    q_lora_rank: Width | None = None
    """Multi-head latent attention (DeepSeek-V2/V3): queries go through this low-rank
    latent; null projects them directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: Width | None = None
    """Latent attention's key/value latent width; setting it turns latent attention on and
    needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim. n_kv_heads and head_dim are
    then unused."""
    qk_nope_head_dim: Width | None = None
    """Per-head query/key width without rotary positions (latent attention)."""
    qk_rope_head_dim: Width | None = None
    """Per-head query width with rotary positions; the key's rope part is one head shared by
    all (latent attention)."""
    v_head_dim: Width | None = None
    """Per-head value width (latent attention)."""
    n_experts: Annotated[int, Ge(1), Le(65_536)] | None = None
    """Routed experts per mixture-of-experts layer; null is a dense model."""
    top_k: Annotated[int, Ge(1), Le(65_536)] | None = None
    """Routed experts each token uses; required with n_experts, at most n_experts."""
    d_ff_expert: Width | None = None
    """Hidden width of one routed expert (HF moe_intermediate_size); null means d_ff."""
    n_shared_experts: Annotated[int, Ge(0), Le(65_536)] = 0
    """Experts every token uses besides its routed ones (DeepSeek, Qwen2-MoE)."""
    d_ff_shared: Width | None = None
    """Total hidden width of the shared experts, built as one MLP; null means
    n_shared_experts * d_ff_expert (DeepSeek)."""
    shared_expert_gate: bool = False
    """A d_model -> 1 sigmoid gate on the shared expert's output (Qwen2-MoE)."""
    first_dense_layers: Annotated[int, Ge(0), Le(1024)] = 0
    """The first layers keep a dense MLP of width d_ff (DeepSeek's first_k_dense_replace)."""
    moe_every: Annotated[int, Ge(1), Le(1024)] = 1
    """Layer i routes when (i+1) is a multiple of this (Qwen's decoder_sparse_step)."""
    mlp_only_layers: tuple[int, ...] = ()
    """Layer indices (from 0) that keep a dense MLP (Qwen's mlp_only_layers)."""
    expert_bias: bool = False
    """Biases on every routed expert's matrices, (2 x d_ff_expert) on gate and up and d_model on
    down (gpt-oss's gate_up_proj_bias and down_proj_bias): a token's k experts read theirs."""
    router_bias: bool = False
    """A bias of n_experts on the router's logits (gpt-oss's router.bias)."""
    attention_sinks: bool = False
    """A learned logit per query head joins each softmax and takes its share of the weight, its
    value none (gpt-oss's sinks): n_heads parameters a layer, no matmul FLOPs, no cache."""
    router_score_correction: bool = False
    """DeepSeek-V3's e_score_correction_bias: n_experts floats per MoE layer that steer
    selection. transformers keeps it as a buffer, not a parameter, so it is reported as
    `buffers`, outside the parameter total (as in the checkpoint's parameter count)."""
    transformers_caches_all_heads: bool = False
    """transformers broadcasts each key/value head to its n_heads / n_kv_heads query heads before
    writing its cache (Falcon with new_decoder_architecture: K and V of [b, n_heads, s, head_dim]),
    so its DynamicCache holds n_heads heads where vLLM's holds n_kv_heads. Read only by the KV
    cache's engine "transformers"; no parameters or FLOPs."""

    layer_mixers: tuple[Mixer, ...] = ()
    """Per layer (from 0), its token mixer: attention (as the attention fields above say), mamba (a
    Mamba-1 selective state-space block: ssm_inner, ssm_dt_rank, ssm_state_size...: Jamba), mamba2
    (a Mamba-2 state-space block, the ssm_* fields: Bamba, Nemotron-H), attention_mamba2 (both side by
    side on one norm, their outputs summed: Falcon-H1), none (an MLP only) or gated_delta_net
    (gated DeltaNet linear attention, the linear_* fields: Qwen3-Next). Empty is attention in every
    layer. Windows, chunks and attention_sinks apply to the attention layers only."""
    mlp_free_layers: tuple[int, ...] = ()
    """Layer indices (from 0) without an MLP (Nemotron-H's mixer-only layers); with layer_mixers
    "none" a layer may have an MLP and no mixer. Such layers have no norm before the missing part."""
    attn_output_gate: bool = False
    """Qwen3-Next's gated attention: q_proj is twice as wide and its second half, through a sigmoid,
    gates the attention output per head: n_heads x head_dim more rows in q (2 t d q FLOPs more)."""
    ssm_state_size: Width | None = None
    """Mamba-2's state per head channel (N, HF mamba_d_state / ssm_state_size)."""
    ssm_heads: Annotated[int, Ge(1), Le(65_536)] | None = None
    """Mamba-2 heads (H, HF mamba_n_heads); the inner width is ssm_heads x ssm_head_dim."""
    ssm_head_dim: Width | None = None
    """Channels per Mamba-2 head (P, HF mamba_d_head / mamba_head_dim)."""
    ssm_inner: Width | None = None
    """Mamba-1's inner width (I, Jamba's mamba_expand x hidden_size)."""
    ssm_dt_rank: Width | None = None
    """Mamba-1's time-step rank (R, HF mamba_dt_rank; "auto" is cdiv(hidden_size, 16))."""
    ssm_dt_bc_norms: bool = False
    """Mamba-1 with RMSNorms on dt (R), B and C (N) inside the mixer (Jamba's dt_layernorm,
    b_layernorm and c_layernorm)."""
    ssm_groups: Annotated[int, Ge(1), Le(65_536)] = 1
    """Groups sharing B and C (G, HF mamba_n_groups / n_groups); divides ssm_heads."""
    ssm_conv_kernel: Annotated[int, Ge(1), Le(1024)] = 4
    """The causal depthwise convolution's width (HF mamba_d_conv / conv_kernel)."""
    ssm_chunk_size: Annotated[int, Ge(1), Le(65_536)] = 256
    """The chunked scan's chunk (HF mamba_chunk_size / chunk_size): its FLOPs depend on it."""
    ssm_out_bias: bool | None = None
    """A bias on Mamba-2's out_proj; null means ssm_proj_bias (Falcon-H1's projectors_bias)."""
    ssm_norm: bool = True
    """Mamba-2's gated RMSNorm before out_proj (Falcon-H1 has it only with mamba_rms_norm)."""
    ssm_conv_bias: bool = True
    """A bias on the convolution (HF mamba_conv_bias / use_conv_bias)."""
    ssm_proj_bias: bool = False
    """Biases on in_proj and out_proj (HF mamba_proj_bias / use_bias)."""
    linear_key_heads: Annotated[int, Ge(1), Le(65_536)] | None = None
    """Gated DeltaNet's query/key heads (HF linear_num_key_heads)."""
    linear_value_heads: Annotated[int, Ge(1), Le(65_536)] | None = None
    """Gated DeltaNet's value heads (HF linear_num_value_heads), a multiple of linear_key_heads."""
    linear_key_head_dim: Width | None = None
    """Gated DeltaNet's query/key head width (HF linear_key_head_dim)."""
    linear_value_head_dim: Width | None = None
    """Gated DeltaNet's value head width (HF linear_value_head_dim)."""
    linear_conv_kernel: Annotated[int, Ge(1), Le(1024)] = 4
    """Gated DeltaNet's causal depthwise convolution width (HF linear_conv_kernel_dim)."""

    __pydantic_config__ = RECORD

    def __post_init__(self) -> None:
        check_bounds(self)
        structure.check(self)

    def __hash__(self) -> int:
        # Every calculator looks its config up in lru caches (counts, layer kinds, plans);
        # hashing 36 fields each time cost more than the arithmetic. Frozen, so hash once.
        # (No slots, so the instance has a __dict__ to keep it in; it is not a field.)
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f) for f in _FIELDS))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # str hashes differ between processes: a pickled config hashes afresh where it lands.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hd(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def ff(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        if not self.gated:
            return 4 * self.d_model
        return -(-(8 * self.d_model // 3) // 256) * 256

    @property
    def gated(self) -> bool:
        return self.mlp in GATED

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def moe(self) -> bool:
        return self.n_experts is not None

    @property
    def ff_expert(self) -> int:
        return self.d_ff_expert or self.ff

    @property
    def ff_shared(self) -> int:
        if self.d_ff_shared is not None:
            return self.d_ff_shared if self.n_shared_experts else 0
        return self.n_shared_experts * self.ff_expert

    @property
    def has_attn_bias(self) -> bool:
        """A bias on the attention output projection (and on q/k/v unless qkv_bias says)."""
        return self.bias if self.attn_bias is None else self.attn_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.bias if self.mlp_bias is None else self.mlp_bias

    @property
    def has_qkv_bias(self) -> bool:
        return self.has_attn_bias if self.qkv_bias is None else self.qkv_bias

    @property
    def layers(self) -> "LayerKinds":
        """Which layers route to experts and which attend in a window, derived once."""
        return _layer_kinds(self)

    @property
    def mixers(self) -> tuple[str, ...]:
        """Per layer, its token mixer (layer_mixers, or attention everywhere)."""
        return self.layer_mixers or ("attention",) * self.n_layers

    @property
    def moe_layers(self) -> tuple[bool, ...]:
        """Per layer: routes to experts (True) or keeps a dense MLP."""
        return self.layers.moe

    @property
    def windowed_layers(self) -> tuple[bool, ...]:
        """Per layer: attends within sliding_window (True) or to the whole sequence."""
        return self.layers.windowed

    @property
    def chunked_layers(self) -> tuple[bool, ...]:
        """Per layer: attends within its attention_chunk_size chunk (True) or to the whole sequence."""
        return self.layers.chunked

    @property
    def n_moe_layers(self) -> int:
        return self.layers.n_moe

    def resolved(self) -> "TransformerConfig":
        """The same model with every null default filled in."""
        return _resolved(self)


_FIELDS = tuple(TransformerConfig.__dataclass_fields__)


class LayerKinds(NamedTuple):
    moe: tuple[bool, ...]
    windowed: tuple[bool, ...]
    n_moe: int
    n_windowed: int
    chunked: tuple[bool, ...]
    n_chunked: int


@lru_cache(maxsize=1024)
def _layer_kinds(c: TransformerConfig) -> LayerKinds:
    moe = windowed = chunked = (False,) * c.n_layers
    if c.moe:
        dense = set(c.mlp_only_layers)
        dense |= set(c.mlp_free_layers)
        moe = tuple(i >= c.first_dense_layers and (i + 1) % c.moe_every == 0 and i not in dense
                    for i in range(c.n_layers))
    every = c.global_every
    attends = c.mixers
    local = tuple(attends[i] in ("attention", "attention_mamba2") and (every is None or (i + 1) % every != 0)
                  for i in range(c.n_layers))
    if c.sliding_window is not None:
        windowed = local
    elif c.attention_chunk_size is not None:
        chunked = local
    return LayerKinds(moe, windowed, sum(moe), sum(windowed), chunked, sum(chunked))


@lru_cache(maxsize=1024)
def _resolved(c: TransformerConfig) -> TransformerConfig:
    fills = dict(n_kv_heads=c.kv_heads, d_ff=c.ff, qkv_bias=c.has_qkv_bias, attn_bias=c.has_attn_bias,
                 mlp_bias=c.has_mlp_bias, head_dim=None if c.mla else c.hd)
    if c.moe:
        fills |= dict(d_ff_expert=c.ff_expert)
        if c.n_shared_experts:
            fills |= dict(d_ff_shared=c.ff_shared)
    values = {name: getattr(c, name) for name in c.__dataclass_fields__} | fills
    return TransformerConfig(**values)
