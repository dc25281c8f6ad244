"""Attention with grouped key/value heads: multi-head (n_kv_heads = n_heads), grouped-query and
multi-query (n_kv_heads = 1). n_heads query heads of head_dim; each of n_kv_heads K and V heads
is read by n_heads / n_kv_heads of them.

Per layer, with d = d_model, q = n_heads x head_dim, kv = n_kv_heads x head_dim:
  weights   q (q, d), k and v (kv, d), output (d, q); biases on q/k/v with qkv_bias, on the
            output with attn_bias; q/k norms of head_dim (one each, shared by the heads) or over
            the whole projection (qk_norm)
  FLOPs     2 t d (q + 2 kv) for q/k/v, 2 t q d for the output; Q @ K^T and softmax @ V cost
            2 x head_dim per head per scored pair each
  cache     K and V: 2 x n_kv_heads x head_dim values per token
  gate      with attn_output_gate (Qwen3-Next), q's projection is 2q wide: its second half, through a
            sigmoid, scales the attention output before o (2 t d q more FLOPs; sigmoid(gate) and
            the ungated output saved, q values each)
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.base import (
    Attention,
    CacheShape,
    Item,
    Recompute,
    Weight,
    attention_core,
    linear,
    norm,
)


@dataclass(frozen=True)
class GroupedAttention(Attention):
    kind: ClassVar[str] = "grouped"
    window: ClassVar[None] = None

    @property
    def q_width(self) -> int:
        return self.cfg.n_heads * self.cfg.hd

    @property
    def kv_width(self) -> int:
        return self.cfg.kv_heads * self.cfg.hd

    def _weights(self) -> list[Weight]:
        cfg, d = self.cfg, self.cfg.d_model
        q, kv, bias = self.q_width, self.kv_width, cfg.has_qkv_bias
        q_rows = 2 * q if cfg.attn_output_gate else q  # Qwen3-Next's q_proj: the queries, then the gate
        # GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value, Phi-3's qkv_proj: one module.
        qkv = {"q": "qkv", "k": "qkv", "v": "qkv"} if cfg.fused_qkv else {"q": "q", "k": "k", "v": "v"}
        weights = (linear("attn_q", q_rows, d, "attention", "column", bias, module=qkv["q"])
                   + linear("attn_k", kv, d, "attention", "kv", bias, module=qkv["k"])
                   + linear("attn_v", kv, d, "attention", "kv", bias, module=qkv["v"])
                   + linear("attn_output", d, q, "attention", "row", cfg.has_attn_bias, module="o",
                            bias_split="replicated"))
        if cfg.attention_sinks:  # one logit per query head, cut with the heads (llama.cpp's attn_sinks)
            weights.append(Weight("attn_sinks.weight", (cfg.n_heads,), "attention", "column"))
        if cfg.qk_norm == "head":
            weights += norm(cfg, "attn_q_norm", cfg.hd) + norm(cfg, "attn_k_norm", cfg.hd)
        elif cfg.qk_norm == "projection":
            weights += norm(cfg, "attn_q_norm", q) + norm(cfg, "attn_k_norm", kv)
        return weights

    def projection_flops(self, tokens: int) -> dict[str, int]:
        d, q, kv = self.cfg.d_model, self.q_width, self.kv_width
        q_rows = 2 * q if self.cfg.attn_output_gate else q
        return {"attention_latent": 0, "attention_qkv": 2 * tokens * d * (q_rows + 2 * kv),
                "attention_output": 2 * tokens * q * d}

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        # (B, h, S, hd) @ (B, h, hd, S): every query head reads its (shared) K and V.
        per_dim = self.cfg.n_heads * pairs_doubled
        return {"attention_scores": per_dim * self.cfg.hd, "attention_values": per_dim * self.cfg.hd}

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return 2 * self.cfg.n_heads * 2 * self.cfg.hd * keys

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        """K and V kept at n_kv_heads width (as SDPA and FlashAttention do with grouped-query
        attention); past n_kv_heads ranks each rank keeps one K/V head: max(kv, t) heads over t."""
        cfg, h = self.cfg, self.cfg.d_model
        hq, hkv = self.q_width, max(cfg.kv_heads, tp) * cfg.hd
        core = attention_core(cfg, 0 if recompute == "selective" else cfg.n_heads, act_bytes)
        items = [Item("attention/norm_input", h, 0, residual_bytes, False),
                 Item("attention/qkv_input", h, 0, act_bytes, False)]
        if cfg.qk_norm != "none":  # q and k as projected, beside the normalised ones
            items.append(Item("attention/q_and_k_before_norm", hq + hkv, 0, act_bytes, True))
        items += [Item("attention/q_and_k", hq + hkv, 0, act_bytes, True), *core,
                  Item("attention/v", hkv, 0, act_bytes, True),
                  Item("attention/output_proj_input", hq, 0, act_bytes, True)]
        if cfg.attn_output_gate:  # sigmoid(gate) * output: the gate's input and the ungated output
            items.append(Item("attention/output_gate_and_ungated_output", 2 * hq, 0, act_bytes, True))
        if cfg.dropout:
            items.append(Item("attention/dropout_mask", h, 0, 1, False))
        return items

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        cfg = self.cfg
        heads, heads_gpu = cfg.kv_heads, max(1, cfg.kv_heads // tp)
        values = 2 * heads * cfg.hd
        kind = "multi-query" if heads == 1 else "multi-head" if heads == cfg.n_heads else "grouped-query"
        notes = [f"{kind} attention: K and V for {heads} key/value heads of head_dim {cfg.hd}: "
                 f"2 x {heads} x {cfg.hd} = {values} values per token per layer"]
        if tp > heads:
            notes.append(f"tensor_parallel {tp} exceeds n_kv_heads ({heads}): each rank keeps one head, "
                         f"replicated {tp // heads} times (vLLM: max(1, n_kv_heads // tensor_parallel))")
        if mla_cache == "decompressed":
            notes.append("mla_cache is ignored: this model has no latent attention")
        return CacheShape("kv", heads, heads_gpu, values, 2 * heads_gpu * cfg.hd, tuple(notes))

    def workspace_values(self, tp: int) -> int:
        gate = self.q_width if self.cfg.attn_output_gate else 0
        return (2 * self.q_width + gate + 2 * self.kv_width) // tp  # q (and gate), k, v and the output

    def kv_replicas(self, tp: int) -> int:
        """1 while tp <= n_kv_heads, else tp / n_kv_heads, each rank keeping one head (Megatron-LM,
        vLLM's QKVParallelLinear)."""
        return 1 if tp <= self.cfg.kv_heads else tp // self.cfg.kv_heads

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        kv = self.cfg.kv_heads
        if tp % kv if tp > kv else kv % tp:
            return (f"{tp} must divide n_kv_heads ({kv}) or be a multiple of it (each rank then keeps a "
                    "replica of one key/value head)")
        return None
