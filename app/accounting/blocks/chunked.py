"""Chunked local attention (Llama 4's rope layers): the sequence is cut into aligned chunks of C
tokens (attention_chunk_size) and each query attends to the keys of its own chunk up to itself,
transformers' chunked_causal_mask_function: key // C == query // C, key <= query.

It has the weights, saved tensors and per-token cache of the attention it chunks; what changes:
  FLOPs     with causal='halved', C^2/2 pairs per head for each whole chunk of an S-token sequence
            and r^2/2 for the last r = S mod C tokens (the diagonal left out, as score_pairs_doubled
            does); eager attention ('full') scores every pair, masked or not
  decode    the token at position c (1-based) reads the (c - 1) mod C + 1 tokens of its chunk
  cache     vLLM's ChunkedLocalAttentionManager skips the tokens before the current chunk
            (get_num_skipped_tokens = computed // C x C, vllm/v1/core/single_type_kv_cache_manager.py
            at 129ab7c6) and frees their whole blocks; transformers keeps a chunked layer as a sliding
            window of C tokens (cache_utils: "chunked_attention" -> DynamicSlidingWindowLayer with
            sliding_window = attention_chunk_size), up to C - 1 tokens of earlier chunks included
            (inference/kv_cache.py counts both)
"""

from dataclasses import dataclass

from app.accounting.blocks.base import Attention, CacheShape, Causal, Item, Recompute, Weight


@dataclass(frozen=True)
class Chunked(Attention):
    inner: Attention
    chunk: int
    window: None = None  # no sliding window: a chunk's start is fixed, not the query's distance

    @property
    def kind(self) -> str:
        return f"chunked {self.inner.kind}"

    @property
    def fine_tune_refusal(self) -> str | None:  # type: ignore[override]
        return self.inner.fine_tune_refusal

    def weights(self) -> tuple[Weight, ...]:
        return self.inner.weights()

    def pairs_doubled(self, seq_len: int, causal: Causal) -> int:
        if causal == "full":
            return 2 * seq_len * seq_len
        whole, rest = divmod(seq_len, self.chunk)
        return whole * self.chunk * self.chunk + rest * rest

    def projection_flops(self, tokens: int) -> dict[str, int]:
        return self.inner.projection_flops(tokens)

    def core_flops(self, pairs_doubled: int) -> dict[str, int]:
        return self.inner.core_flops(pairs_doubled)

    def tokens_kept(self, context: int) -> int:
        return (context - 1) % self.chunk + 1

    def decode_core_flops(self, keys: int, mla_cache: str) -> int:
        return self.inner.decode_core_flops(keys, mla_cache)

    def saved(self, *, act_bytes: int, residual_bytes: int, recompute: Recompute, tp: int) -> list[Item]:
        return self.inner.saved(
            act_bytes=act_bytes, residual_bytes=residual_bytes, recompute=recompute, tp=tp
        )

    def cache(self, *, mla_cache: str, tp: int) -> CacheShape:
        return self.inner.cache(mla_cache=mla_cache, tp=tp)

    def workspace_values(self, tp: int) -> int:
        return self.inner.workspace_values(tp)

    def kv_replicas(self, tp: int) -> int:
        return self.inner.kv_replicas(tp)

    def tensor_parallel_refusal(self, tp: int) -> str | None:
        return self.inner.tensor_parallel_refusal(tp)
