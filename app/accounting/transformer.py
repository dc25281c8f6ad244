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

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

Mlp = Literal["gelu", "swiglu", "geglu"]
Norm = Literal["layernorm", "rmsnorm", "layernorm_no_affine"]
NormLayout = Literal["pre", "post", "sandwich", "parallel", "parallel_shared"]
QkNorm = Literal["none", "head", "projection"]
Position = Literal["learned", "rope"]

# Norms per block, by layout; q/k norms, MLA's latent norms and the final norm are extra.
NORMS_PER_BLOCK = {"pre": 2, "post": 2, "sandwich": 4, "parallel": 2, "parallel_shared": 1}
GATED = ("swiglu", "geglu")

_MLA = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MOE_ONLY = ("top_k", "d_ff_expert", "d_ff_shared")


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
    """gelu: two matrices (up, down). swiglu and geglu: three (gate, up, down)."""
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
    """With sliding_window: layer i (from 0) attends globally when (i+1) is a multiple of
    this, the others in the window (Gemma 2: 2, Gemma 3: 6); null windows every layer
    (Mistral 7B v0.1)."""
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

    __pydantic_config__ = RECORD

    def __post_init__(self) -> None:
        check_bounds(self)
        _check_structure(self)

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
        if self.mlp == "gelu":
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
    def moe_layers(self) -> tuple[bool, ...]:
        """Per layer: routes to experts (True) or keeps a dense MLP."""
        return self.layers.moe

    @property
    def windowed_layers(self) -> tuple[bool, ...]:
        """Per layer: attends within sliding_window (True) or to the whole sequence."""
        return self.layers.windowed

    @property
    def n_moe_layers(self) -> int:
        return self.layers.n_moe

    def resolved(self) -> "TransformerConfig":
        """The same model with every null default filled in."""
        return _resolved(self)


_FIELDS = tuple(TransformerConfig.__dataclass_fields__)


def _check_structure(c: TransformerConfig) -> None:
    """Refuse configs no model has, naming the field to change."""
    if c.n_heads % c.kv_heads:
        raise InvalidInput("n_kv_heads", f"{c.kv_heads} must divide n_heads ({c.n_heads})")
    if c.head_dim is None and not c.mla and c.d_model % c.n_heads:
        raise InvalidInput("n_heads", f"{c.n_heads} must divide d_model ({c.d_model}) unless head_dim is set")
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = getattr(c, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value < 1e6):
            raise InvalidInput(name, f"must be a positive number below 1e6, or null; got {value!r}"[:120])
    if c.global_every is not None and c.sliding_window is None:
        raise InvalidInput("global_every", "needs sliding_window (the window of the other layers)")
    if c.mla:
        if c.transformers_caches_all_heads:
            raise InvalidInput("transformers_caches_all_heads", "latent attention caches the latent, not "
                                                                "per-head keys and values; use false")
        if c.qk_norm != "none":
            raise InvalidInput("qk_norm", "latent attention has its own latent norms; use 'none'")
        for name in _MLA[1:]:
            if getattr(c, name) is None:
                raise InvalidInput(name, "is required with kv_lora_rank (multi-head latent attention)")
    else:
        for name in _MLA:
            if getattr(c, name) is not None:
                raise InvalidInput(name, "is a latent-attention width; it needs kv_lora_rank")
    _check_experts(c)
    if c.attention_sinks and c.kv_lora_rank is not None:
        raise InvalidInput("attention_sinks", "are counted for grouped-query attention; latent attention has "
                                              "none")


def _check_experts(c: TransformerConfig) -> None:
    if type(c.mlp_only_layers) is not tuple or any(
            type(i) is not int or not 0 <= i < c.n_layers for i in c.mlp_only_layers):
        raise InvalidInput("mlp_only_layers", f"must list layer indices in [0, {c.n_layers - 1}]")
    if not c.moe:
        for name in _MOE_ONLY:
            if getattr(c, name) is not None:
                raise InvalidInput(name, "describes experts; it needs n_experts")
        for name, neutral in (("n_shared_experts", 0), ("shared_expert_gate", False),
                              ("first_dense_layers", 0), ("moe_every", 1), ("mlp_only_layers", ()),
                              ("router_score_correction", False), ("expert_bias", False),
                              ("router_bias", False)):
            if getattr(c, name) != neutral:
                raise InvalidInput(name, "describes experts; it needs n_experts")
        return
    if c.top_k is None:
        raise InvalidInput("top_k", "is required with n_experts (routed experts per token)")
    if c.top_k > c.n_experts:
        raise InvalidInput("top_k", f"{c.top_k} exceeds n_experts ({c.n_experts})")
    if c.n_shared_experts == 0 and (c.d_ff_shared is not None or c.shared_expert_gate):
        name = "d_ff_shared" if c.d_ff_shared is not None else "shared_expert_gate"
        raise InvalidInput(name, "describes shared experts; it needs n_shared_experts >= 1")


class LayerKinds(NamedTuple):
    moe: tuple[bool, ...]
    windowed: tuple[bool, ...]
    n_moe: int
    n_windowed: int


@lru_cache(maxsize=1024)
def _layer_kinds(c: TransformerConfig) -> LayerKinds:
    moe = windowed = (False,) * c.n_layers
    if c.moe:
        dense = set(c.mlp_only_layers)
        moe = tuple(i >= c.first_dense_layers and (i + 1) % c.moe_every == 0 and i not in dense
                    for i in range(c.n_layers))
    if c.sliding_window is not None:
        every = c.global_every
        windowed = tuple(every is None or (i + 1) % every != 0 for i in range(c.n_layers))
    return LayerKinds(moe, windowed, sum(moe), sum(windowed))


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
