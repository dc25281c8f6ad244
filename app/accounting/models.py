"""Decoder-only transformer configurations, their parameter counts, and presets.

Bounds live on the fields as annotated_types metadata (plain data, no pydantic
import), so the API validates this very dataclass and its schema states them.
"""

import tomllib
import typing
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Annotated, Literal

from annotated_types import Ge, Le

from app.accounting import names
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

Mlp = Literal["gelu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm"]
Position = Literal["learned", "rope"]


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


@dataclass(frozen=True, slots=True)
class TransformerConfig:
    """A decoder-only transformer. Defaults follow GPT-2 (GELU, LayerNorm, biases,
    tied embeddings, learned positions)."""

    n_layers: Annotated[int, Ge(1), Le(1024)]
    d_model: Annotated[int, Ge(1), Le(131_072)]
    n_heads: Annotated[int, Ge(1), Le(1024)]
    vocab_size: Annotated[int, Ge(1), Le(10_000_000)]
    n_kv_heads: Annotated[int, Ge(1), Le(1024)] | None = None
    """Key/value heads for grouped-query attention; null means n_heads (multi-head)."""
    d_ff: Annotated[int, Ge(1), Le(1_048_576)] | None = None
    """MLP hidden width; null means 4*d_model for gelu, and LLaMA's rule for swiglu
    (8*d_model/3 rounded up to a multiple of 256)."""
    mlp: Mlp = "gelu"
    """gelu: two matrices (up, down). swiglu: three (gate, up, down)."""
    norm: Norm = "layernorm"
    """layernorm has a weight, and a bias when `bias` is true; rmsnorm has a weight only."""
    bias: bool = True
    """Biases on every linear layer (except the LM head) and on LayerNorm; attn_bias,
    mlp_bias and qkv_bias override it for their layers."""
    qkv_bias: bool | None = None
    """Biases on the q/k/v projections only (Qwen2); null means `attn_bias`."""
    attn_bias: bool | None = None
    """Biases on attention's q/k/v and output projections (HF attention_bias); null means
    `bias`. qkv_bias, when set, overrides it for q/k/v."""
    mlp_bias: bool | None = None
    """Biases on the MLP's linear layers (HF mlp_bias); null means `bias`."""
    tied_embeddings: bool = True
    """The LM head reuses the token embedding matrix; counted once."""
    position: Position = "learned"
    """learned adds a max_seq_len x d_model table; rope has no parameters."""
    max_seq_len: Annotated[int, Ge(1), Le(10_000_000)] = 1024
    head_dim: Annotated[int, Ge(1), Le(131_072)] | None = None
    """Per-head width; null means d_model / n_heads."""
    dropout: bool = False
    """Dropout in training; it adds 1-byte masks to activation memory."""

    __pydantic_config__ = RECORD

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.n_heads % self.kv_heads:
            raise InvalidInput("n_kv_heads", f"{self.kv_heads} must divide n_heads ({self.n_heads})")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise InvalidInput(
                "n_heads", f"{self.n_heads} must divide d_model ({self.d_model}) unless head_dim is set")

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
    def has_attn_bias(self) -> bool:
        """A bias on the attention output projection (and on q/k/v unless qkv_bias says)."""
        return self.bias if self.attn_bias is None else self.attn_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.bias if self.mlp_bias is None else self.mlp_bias

    @property
    def has_qkv_bias(self) -> bool:
        return self.has_attn_bias if self.qkv_bias is None else self.qkv_bias

    def resolved(self) -> "TransformerConfig":
        """The same model with every null default filled in."""
        return _resolved(self)


@lru_cache(maxsize=1024)
def _resolved(self: TransformerConfig) -> TransformerConfig:
    return TransformerConfig(
        n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
        vocab_size=self.vocab_size, n_kv_heads=self.kv_heads, d_ff=self.ff, mlp=self.mlp,
        norm=self.norm, bias=self.bias, qkv_bias=self.has_qkv_bias, attn_bias=self.has_attn_bias,
        mlp_bias=self.has_mlp_bias,
        tied_embeddings=self.tied_embeddings, position=self.position,
        max_seq_len=self.max_seq_len, head_dim=self.hd, dropout=self.dropout)


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameters by component; tied embeddings are counted once."""

    total: int
    embedding: int
    """Token and position embeddings, and an untied LM head."""
    non_embedding: int
    """total - embedding: the N of Kaplan et al. (2020)."""
    token_embedding: int
    position_embedding: int
    lm_head: int
    """0 when tied to the token embedding."""
    attention: int
    """All layers: q, k, v and output projections with their biases."""
    mlp: int
    norms: int
    """All per-layer norms plus the final norm."""
    per_layer: int

    __pydantic_config__ = RECORD


def attention_params(cfg: TransformerConfig) -> int:
    d, q_width, kv_width = cfg.d_model, cfg.n_heads * cfg.hd, cfg.kv_heads * cfg.hd
    weights = d * q_width + 2 * d * kv_width + q_width * d
    biases = (q_width + 2 * kv_width) * cfg.has_qkv_bias + d * cfg.has_attn_bias
    return weights + biases


def mlp_params(cfg: TransformerConfig) -> int:
    d, f = cfg.d_model, cfg.ff
    if cfg.mlp == "swiglu":
        return 3 * d * f + (2 * f + d) * cfg.has_mlp_bias
    return 2 * d * f + (f + d) * cfg.has_mlp_bias


def norm_params(cfg: TransformerConfig) -> int:
    """One norm: a weight, plus a bias for LayerNorm with biases."""
    return cfg.d_model * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


@lru_cache(maxsize=1024)
def count_params(cfg: TransformerConfig) -> ParamCount:
    token = cfg.vocab_size * cfg.d_model
    position = cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0
    lm_head = 0 if cfg.tied_embeddings else cfg.vocab_size * cfg.d_model
    attn, mlp, norm = attention_params(cfg), mlp_params(cfg), norm_params(cfg)
    per_layer = attn + mlp + 2 * norm
    norms = cfg.n_layers * 2 * norm + norm  # two per block, one final
    total = token + position + lm_head + cfg.n_layers * (attn + mlp) + norms
    embedding = token + position + lm_head
    return ParamCount(
        total=total, embedding=embedding, non_embedding=total - embedding,
        token_embedding=token, position_embedding=position, lm_head=lm_head,
        attention=cfg.n_layers * attn, mlp=cfg.n_layers * mlp, norms=norms, per_layer=per_layer,
    )


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    description: str
    source: str
    config: TransformerConfig


@dataclass(frozen=True, slots=True)
class PresetSummary:
    """A named model with its resolved config and parameter count."""

    name: str
    description: str
    source: str
    config: TransformerConfig
    params: ParamCount

    __pydantic_config__ = RECORD


def summarize(p: Preset) -> PresetSummary:
    return PresetSummary(p.name, p.description, p.source, p.config.resolved(), count_params(p.config))


@cache
def presets() -> dict[str, Preset]:
    """Named models from data/models.toml, in file order."""
    raw = tomllib.loads(resources.files("app.accounting").joinpath("data/models.toml").read_text())
    table = {}
    for entry in raw["model"]:
        entry = dict(entry)
        name, description, source = entry.pop("name"), entry.pop("description"), entry.pop("source")
        table[name] = Preset(name, description, source, TransformerConfig(**entry))
    return table


MODELS_LISTING = "GET /api/v1/models"


def find(name: str, *, field: str = "model") -> Preset:
    """The preset called `name`; a near miss is refused with the closest names."""
    try:
        return presets()[name]
    except KeyError:
        raise InvalidInput(field, names.unknown("preset", name, presets(), MODELS_LISTING)) from None


def preset(name: str, *, field: str = "model") -> TransformerConfig:
    return find(name, field=field).config
