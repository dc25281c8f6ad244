"""What every block answers, and the records it answers in.

A block is one sublayer of a transformer layer: an attention kind or an MLP kind, built from the
TransformerConfig (blocks/__init__.py decides which, layer by layer). For one layer, each answers

- weights(): its tensors, named as llama.cpp's GGUF files name them, with their shapes (out
  dimension first: (rows, cols) = (out_features, in_features); (n_experts, rows, cols) for routed
  experts), the component of the parameter count they belong to, how tensor parallelism splits
  them (Megatron-LM, vLLM), and the module that holds them in transformers' model (LoRA's
  targets); parameters by component and the linear modules are summed from this one list;
- forward_flops(): matmul FLOPs of one forward pass, a multiply-add counted as 2 FLOPs, as
  torch.utils.flop_counter.FlopCounterMode counts them (norms, softmax, activations aside);
- saved(): the tensors autograd keeps for backward, item by item with their element sizes
  (Korthikanti et al. 2022, arXiv:2205.05198, section 4);
- attention only: what one token adds to the cache (K and V, or latent attention's latent) and
  what decoding reads per cached token.
"""

import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal, NamedTuple

from app.accounting.transformer import TransformerConfig

Component = Literal["attention", "router", "routed_experts", "shared_experts", "mlp", "norms",
                    "embeddings", "lm_head"]
COMPONENTS: tuple[Component, ...] = ("embeddings", "attention", "mlp", "router", "routed_experts",
                                     "shared_experts", "norms", "lm_head")
TpSplit = Literal["column", "row", "vocab", "kv", "replicated"]
Causal = Literal["full", "halved"]
Recompute = Literal["none", "selective", "full"]

INDEX_BYTES = 8  # torch's int64 indices (top-k's and the sort's)
FP32 = 4


@dataclass(frozen=True, slots=True)
class Weight:
    """One stored tensor of a block.

    tp_split: column, the output rows split over tensor ranks; row, the input columns (their
    biases are added after the all-reduce, so they are replicated); kv, split by key/value heads
    (past n_kv_heads ranks each keeps one head); vocab, by vocabulary rows; replicated, whole on
    every rank."""

    name: str
    """llama.cpp's GGUF name without the `blk.{layer}.` prefix: attn_q.weight, ffn_down_exps.weight..."""
    shape: tuple[int, ...]
    component: Component
    tp_split: TpSplit
    module: str | None = None
    """The matrix's module in transformers' model: q, k, v, o, qkv, gate, up, gate_up, down (peft's
    target names), experts_gate_up and experts_down (the routed experts' 3-D parameters), router,
    shared_gate, or latent attention's mla_q, mla_q_a, mla_q_b, mla_kv_a, mla_kv_b. Matrices of
    one module (q, k and v of a fused qkv) make one nn.Linear. None for norms and biases."""

    @property
    def params(self) -> int:
        return math.prod(self.shape)


class Linear(NamedTuple):
    """One module's matmul: an nn.Linear of (fan_in, fan_out), or `experts` of them stacked in a
    3-D parameter (transformers 5.x's routed experts)."""

    module: str
    fan_in: int
    fan_out: int
    experts: int = 1


class Item(NamedTuple):
    """One saved tensor: elements = s*b*(per_token + per_token_per_position*s)."""

    name: str
    per_token: int
    per_token_per_position: int  # the s x s attention tensors: a elements per token per position
    bytes_per_element: int
    tensor_parallel: bool  # split by t even without sequence parallelism
    replicated: bool = False  # held whole on every tensor rank, even with sequence parallelism


def one_norm(cfg: TransformerConfig, width: int) -> int:
    """A norm over `width` features: a weight, plus a bias for LayerNorm with biases."""
    if cfg.norm == "layernorm_no_affine":
        return 0
    return width * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


def norm(cfg: TransformerConfig, name: str, width: int) -> list[Weight]:
    """A norm's weight, and its bias for LayerNorm with biases (one_norm counts the same)."""
    n = one_norm(cfg, width)
    if n == 0:
        return []
    weights = [Weight(f"{name}.weight", (width,), "norms", "replicated")]
    if n == 2 * width:
        weights.append(Weight(f"{name}.bias", (width,), "norms", "replicated"))
    return weights


def linear(name: str, rows: int, cols: int, component: Component, split: TpSplit, bias: bool, *,
           module: str, bias_split: TpSplit | None = None) -> list[Weight]:
    """A (rows, cols) = (out, in) matrix, and its (rows,) bias when there is one."""
    weights = [Weight(f"{name}.weight", (rows, cols), component, split, module)]
    if bias:
        weights.append(Weight(f"{name}.bias", (rows,), component, bias_split or split))
    return weights


def linears(weights: tuple[Weight, ...]) -> tuple[Linear, ...]:
    """The modules of a weight list, in order of first appearance: matrices of one module (a fused
    qkv, a 3-D gate+up of experts) share their input and stack their outputs."""
    found: dict[str, Linear] = {}
    for w in weights:
        if w.module is None:
            continue
        *experts, rows, cols = w.shape
        seen = found.get(w.module)
        found[w.module] = Linear(w.module, cols, rows + (seen.fan_out if seen else 0), *experts)
    return tuple(found.values())


def by_component(weights: tuple) -> dict[str, int]:
    """Parameters per component, in COMPONENTS order, components without tensors left out (a
    block's Weights, or the model's inference.weights.WeightTensors)."""
    totals = dict.fromkeys(COMPONENTS, 0)
    for w in weights:
        totals[w.component] += w.params
    return {c: n for c, n in totals.items() if n}


def score_pairs_doubled(seq_len: int, window: int | None, causal: Causal) -> int:
    """2x the (query, key) pairs one head scores. full: every pair, as eager attention computes
    them, masked or not. halved: the causal triangle at S^2/2 (the diagonal's S/2 left out, as
    the 6ND-era convention does), and in a window w, S^2/2 - (S-w)^2/2."""
    s = seq_len
    if causal == "full":
        return 2 * s * s
    if window is None or window >= s:
        return s * s
    return s * s - (s - window) ** 2


@dataclass(frozen=True)
class Block:
    """A sublayer of one layer, built from the model's config."""

    cfg: TransformerConfig

    def _weights(self) -> list[Weight]:
        raise NotImplementedError

    @cached_property
    def _weight_list(self) -> tuple[Weight, ...]:
        return tuple(self._weights())

    def weights(self) -> tuple[Weight, ...]:
        return self._weight_list

    @cached_property
    def params(self) -> dict[str, int]:
        """Parameters by component (attention, norms; mlp; router, routed_experts, shared_experts)."""
        return by_component(self.weights())

    @cached_property
    def total_params(self) -> int:
        return sum(self.params.values())

    def linears(self) -> tuple[Linear, ...]:
        return linears(self.weights())


class CacheShape(NamedTuple):
    """What one token adds to one layer's cache, in values (times the cache dtype's bytes)."""

    layout: Literal["kv", "latent", "decompressed"]
    heads: int
    """Heads one layer's cache keeps (all tensor ranks)."""
    heads_per_gpu: int
    values: int
    """Values one token adds to one layer (all heads)."""
    values_per_gpu: int
    notes: tuple[str, ...]


class State(NamedTuple):
    """What one sequence keeps in one state-space or linear-attention layer, constant in context, in
    values (all heads): the causal convolution's last inputs, and the recurrent state."""

    conv_channels: int
    """Channels the convolution keeps inputs of (Mamba-2: inner + 2 x groups x state)."""
    conv_kernel: int
    """The convolution's width K: transformers keeps K inputs per channel, vLLM K - 1."""
    recurrent: int
    """The recurrent state's values (Mamba-2: heads x head_dim x state)."""
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Attention(Block):
    """An attention kind. Concrete kinds answer their projections' FLOPs, their core's FLOPs over
    the (query, key) pairs scored, and what decoding reads per cached token; `window` (None: the
    whole sequence) caps the pairs and the tokens kept."""

    def projection_flops(self, tokens: int) -> dict[str, int]:
        """attention_latent, attention_qkv and attention_output over `tokens` tokens."""
        raise NotImplementedError

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        """attention_scores (Q @ K^T) and attention_values (softmax @ V) for `pairs_doubled`, 2x
        the (query, key) pairs one head scores, summed over the batch."""
        raise NotImplementedError

    def pairs_doubled(self, seq_len: int, causal: Causal) -> int:
        """2x the (query, key) pairs one head scores over one sequence (score_pairs_doubled)."""
        return score_pairs_doubled(seq_len, self.window, causal)

    def forward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        """One forward over batch x seq_len tokens."""
        pairs = batch * self.pairs_doubled(seq_len, causal)
        return self.projection_flops(batch * seq_len) | self.core_flops(pairs)

    def tokens_kept(self, context: int) -> int:
        """Tokens of a `context`-token sequence the layer attends to (and caches) for the next."""
        return context if self.window is None else min(context, self.window)

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        """FLOPs of one new token's query against `keys` cached tokens: scores and weighted sum."""
        raise NotImplementedError

    def decode_flops(self, *, context: int, mla_cache: str) -> int:
        """One decoded token against a `context`-token cache (its window's part of it)."""
        return self.decode_core_flops(self.tokens_kept(context), mla_cache)

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        """Tensors the sublayer keeps for backward, its norm's input first (the layer's norm
        layout changes them after). recompute selective drops the s x s core."""
        raise NotImplementedError

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        raise NotImplementedError

    def workspace_values(self, tp: int) -> int:
        """Values per token a serving forward holds at once beside the residual stream, on one of
        `tp` tensor ranks: the projections' outputs (FlashAttention keeps no score matrix)."""
        raise NotImplementedError

    def backward_flops(self, *, batch: int, seq_len: int, causal: Causal) -> dict[str, int]:
        """One backward over batch x seq_len tokens: every matmul's two operand gradients, 2x the
        forward, unless a kind says otherwise."""
        return {k: 2 * v for k, v in self.forward_flops(batch=batch, seq_len=seq_len, causal=causal).items()}

    def state(self) -> State | None:
        """The constant-size state one sequence keeps (state-space and linear attention), or None."""
        return None

    mixes_by_attention: ClassVar[bool] = True
    """False for the token mixers that are not softmax attention (Mamba-2, gated DeltaNet): they keep
    no per-token cache."""

    present: ClassVar[bool] = True
    """False for a layer's missing token mixer (blocks/absent.py): no norm before it."""

    def kv_replicas(self, tp: int) -> int:
        """Copies of each key/value projection's head over `tp` tensor ranks."""
        return 1

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        """Why `tp` tensor ranks cannot split this attention (n_heads aside), or None."""
        return None

    fine_tune_refusal: ClassVar[str | None] = None
    """Why frozen parts or adapters cannot be counted for this kind, or None."""


def attention_core(cfg: TransformerConfig, heads: int, act_bytes: int) -> list[Item]:
    """The s x s softmax output (and its dropout), `heads` per token per position; none (0)
    when selective recompute drops it, as FlashAttention never stores it."""
    items = [Item("attention/softmax_output", 0, heads, act_bytes, True)]
    if cfg.dropout:
        items += [Item("attention/softmax_dropout_mask", 0, heads, 1, True),
                  Item("attention/softmax_dropout_output", 0, heads, act_bytes, True)]
    return items


@dataclass(frozen=True)
class Mlp(Block):
    """An MLP kind: a dense MLP, or a mixture of experts (`routes`)."""

    routes: ClassVar[bool] = False
    present: ClassVar[bool] = True
    """False for a layer's missing MLP (blocks/absent.py): no norm before it."""

    def forward_flops(self, tokens: int) -> dict[str, int]:
        """mlp, or router, routed_experts and shared_experts, over `tokens` tokens."""
        raise NotImplementedError

    def saved(self, *, act_bytes: int, residual_bytes: int) -> list[Item]:
        raise NotImplementedError

    def workspace_bytes(self, *, tokens: int, act_bytes: int, tp: int) -> int:
        """Bytes a serving forward of `tokens` tokens holds at once in this MLP, beside the residual
        stream, on one of `tp` tensor ranks."""
        raise NotImplementedError

    @property
    def routed_active_params(self) -> int:
        """Routed-expert parameters one token reads (top_k experts); 0 without experts."""
        return 0

    @property
    def buffers(self) -> int:
        """Non-parameter tensors of the checkpoint (DeepSeek-V3's router score correction)."""
        return 0
