"""Sliding-window attention (Mistral 7B, Gemma 2 and 3's local layers, Qwen's sliding layers):
another attention kind whose queries each attend to the `window` tokens up to and including
themselves.

It has the weights, saved tensors and per-token cache of the attention it windows; what changes:
  FLOPs     with causal='halved', S^2/2 - (S-w)^2/2 pairs per head instead of S^2/2 (score_pairs_
            doubled); eager attention ('full') scores every pair, masked or not
  decode    a new token reads at most `window` cached tokens (FlashAttention's window_size, vLLM)
  cache     min(context, window) tokens per sequence (inference/kv_cache.py pages them)
"""

from dataclasses import dataclass

from app.accounting.blocks.base import Attention, CacheShape, Item, Recompute, Weight


@dataclass(frozen=True)
class Windowed(Attention):
    inner: Attention
    window: int

    @property
    def kind(self) -> str:
        return f"windowed {self.inner.kind}"

    @property
    def fine_tune_refusal(self) -> str | None:  # type: ignore[override]
        return self.inner.fine_tune_refusal

    def weights(self) -> tuple[Weight, ...]:
        return self.inner.weights()

    def projection_flops(self, tokens: int) -> dict[str, int]:
        return self.inner.projection_flops(tokens)

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return self.inner.core_flops(pairs_doubled)

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return self.inner.decode_core_flops(keys, mla_cache)

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        return self.inner.saved(act_bytes=act_bytes, residual_bytes=residual_bytes, recompute=recompute,
                                tp=tp)

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return self.inner.cache(mla_cache=mla_cache, tp=tp)

    def workspace_values(self, tp: int) -> int:
        return self.inner.workspace_values(tp)

    def kv_replicas(self, tp: int) -> int:
        return self.inner.kv_replicas(tp)

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        return self.inner.tensor_parallel_refusal(tp)
