"""Multi-head latent attention (DeepSeek-V2/V3, arXiv:2405.04434 section 2.1): keys and values go
through one low-rank latent, queries through another (or directly, DeepSeek-V2-Lite).

Per layer, with d = d_model, h = n_heads, r_q = q_lora_rank, r = kv_lora_rank, and per head
nope = qk_nope_head_dim, rope = qk_rope_head_dim, v = v_head_dim:
  weights   down projections x -> query latent (r_q, d) and x -> key/value latent with the one
            rotary key shared by all heads (r + rope, d), their norms; up projections to the heads,
            queries (h (nope + rope), r_q or d) and keys/values (h (nope + v), r); output (d, h v).
            attention_bias biases the two down projections and the output, as DeepSeek's does
  FLOPs     2 t d (r_q + r + rope) down, 2 t (r_q h (nope + rope) + r h (nope + v)) up, 2 t h v d
            out; Q @ K^T over nope + rope per head, softmax @ V over v
  cache     "latent": the normed latent and the shared rotary key, r + rope values per token
            (vLLM's MLAAttentionSpec, FlashMLA; transformers 5.23's DynamicCache holds the same two);
            "decompressed": per-head keys and values, h (nope + rope + v) (transformers 4.x)
Down projections and their norms are replicated over tensor ranks (DeepSeek-V3's inference code,
vLLM, Megatron-LM); up projections split by heads.
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
class LatentAttention(Attention):
    kind: ClassVar[str] = "latent"
    window: ClassVar[None] = None
    fine_tune_refusal: ClassVar[str | None] = (
        "fine-tuning latent attention (q_a/q_b, kv_a/kv_b) with frozen parts or adapters is not counted "
        "yet; mode full is")

    @property
    def qk_dim(self) -> int:
        return self.cfg.qk_nope_head_dim + self.cfg.qk_rope_head_dim

    def _weights(self) -> list[Weight]:
        cfg, d, h, bias = self.cfg, self.cfg.d_model, self.cfg.n_heads, self.cfg.has_attn_bias
        weights = []
        if cfg.q_lora_rank:
            r = cfg.q_lora_rank
            weights += linear("attn_q_a", r, d, "attention", "replicated", bias, module="mla_q_a")
            weights += norm(cfg, "attn_q_a_norm", r)
            weights += linear("attn_q_b", h * self.qk_dim, r, "attention", "column", False, module="mla_q_b")
        else:
            weights += linear("attn_q", h * self.qk_dim, d, "attention", "column", False, module="mla_q")
        # The key/value latent and the one rotary key head shared by all heads, in one projection.
        latent = cfg.kv_lora_rank
        weights += linear("attn_kv_a_mqa", latent + cfg.qk_rope_head_dim, d, "attention", "replicated", bias,
                          module="mla_kv_a")
        weights += norm(cfg, "attn_kv_a_norm", latent)
        weights += linear("attn_kv_b", h * (cfg.qk_nope_head_dim + cfg.v_head_dim), latent, "attention",
                          "column", False, module="mla_kv_b")
        weights += linear("attn_output", d, h * cfg.v_head_dim, "attention", "row", bias, module="o",
                          bias_split="replicated")
        return weights

    def projection_flops(self, tokens: int) -> dict[str, int]:
        cfg, d, h = self.cfg, self.cfg.d_model, self.cfg.n_heads
        q_in, kv_up = cfg.q_lora_rank or d, cfg.kv_lora_rank * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        return {"attention_latent": 2 * tokens * d * ((cfg.q_lora_rank or 0) + cfg.kv_lora_rank
                                                      + cfg.qk_rope_head_dim),
                "attention_qkv": 2 * tokens * h * (q_in * self.qk_dim + kv_up),
                "attention_output": 2 * tokens * h * cfg.v_head_dim * d}

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        per_dim = self.cfg.n_heads * pairs_doubled
        return {"attention_scores": per_dim * self.qk_dim, "attention_values": per_dim * self.cfg.v_head_dim}

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        """"decompressed": keys and values per head, as any attention. "latent": the absorbed form
        vLLM and FlashMLA decode with (DeepSeek-V2, section 2.1.3): W_UK folds into the query and
        W_UV into the output, so each head scores kv_lora_rank + qk_rope_head_dim values per cached
        token and sums kv_lora_rank; the two absorptions cost what kv_b_proj on the new token would."""
        cfg = self.cfg
        if mla_cache == "latent":
            per_key = 2 * cfg.kv_lora_rank + cfg.qk_rope_head_dim
        else:
            per_key = self.qk_dim + cfg.v_head_dim
        return 2 * cfg.n_heads * per_key * keys

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        """As vLLM and Megatron-LM shard it: the down projections (and their norms) are replicated
        over tensor ranks, so their tensors split only with sequence parallelism; the per-head up
        projections are split like attention heads."""
        cfg, h, heads = self.cfg, self.cfg.d_model, self.cfg.n_heads
        q_latent, rope = cfg.q_lora_rank or 0, cfg.qk_rope_head_dim
        core = attention_core(cfg, 0 if recompute == "selective" else heads, act_bytes)
        items = [
            Item("attention/norm_input", h, 0, residual_bytes, False),
            # x, read by the down projections (and by the query projection without a query latent)
            Item("attention/qkv_input", h, 0, act_bytes, False),
            # query latent, key/value latent and the one shared rotary key: the down projections'
            # output, which the latent norms keep as their inputs
            Item("attention/latent_down_output", q_latent + cfg.kv_lora_rank + rope, 0, act_bytes, False),
            # the normalised latents, inputs of the up projections
            Item("attention/latent_up_input", q_latent + cfg.kv_lora_rank, 0, act_bytes, False),
            # per head: q and k at nope + rope (the rotary key copied to every head), v at v_head_dim
            Item("attention/q_and_k", 2 * heads * self.qk_dim, 0, act_bytes, True),
            *core,
            Item("attention/v", heads * cfg.v_head_dim, 0, act_bytes, True),
            Item("attention/output_proj_input", heads * cfg.v_head_dim, 0, act_bytes, True),
        ]
        if cfg.dropout:
            items.append(Item("attention/dropout_mask", h, 0, 1, False))
        return items

    def workspace_values(self, tp: int) -> int:
        """The latents (replicated) and, split by heads, q and k at nope + rope, v and the output."""
        cfg, h = self.cfg, self.cfg.n_heads
        heads = h * self.qk_dim * 2 + h * cfg.v_head_dim * 2
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim + (cfg.q_lora_rank or 0) + heads // tp

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        cfg = self.cfg
        if mla_cache == "latent":
            values = cfg.kv_lora_rank + cfg.qk_rope_head_dim
            notes = [f"latent attention cached as the latent: kv_lora_rank {cfg.kv_lora_rank} + "
                     f"qk_rope_head_dim {cfg.qk_rope_head_dim} = {values} values per token per layer "
                     "(vLLM's MLAAttentionSpec and FlashMLA; transformers 5.23 caches the same)"]
            if tp > 1:
                notes.append(f"the latent is not split by heads: each of the {tp} tensor ranks keeps all of "
                             "it")
            return CacheShape("latent", 1, 1, values, values, tuple(notes))
        per_head = self.qk_dim + cfg.v_head_dim
        heads, heads_gpu = cfg.n_heads, max(1, cfg.n_heads // tp)
        values = heads * per_head
        note = (f"latent attention cached decompressed: keys of n_heads x (qk_nope {cfg.qk_nope_head_dim} + "
                f"qk_rope {cfg.qk_rope_head_dim}) and values of n_heads x v_head_dim {cfg.v_head_dim}, "
                f"unpadded: {values} values per token per layer (transformers 4.x's eager cache)")
        return CacheShape("decompressed", heads, heads_gpu, values, heads_gpu * per_head, (note,))
