"""Chunked local attention (Llama 4's rope layers): the sequence is cut into aligned chunks of C
tokens (attention_chunk_size) and each query attends to the keys of its own chunk up to itself,
transformers' chunked_causal_mask_function: key // C == query // C, key <= query.

It is a blocks/wrapped.Wrapped: the attention it chunks, but for
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
from typing import ClassVar

from app.accounting.blocks.base import Causal
from app.accounting.blocks.wrapped import Wrapped


@dataclass(frozen=True)
class Chunked(Wrapped):
    chunk: int
    window: None = None  # no sliding window: a chunk's start is fixed, not the query's distance
    prefix: ClassVar[str] = "chunked"

    def pairs_doubled(self, seq_len: int, causal: Causal) -> int:
        if causal == "full":
            return 2 * seq_len * seq_len
        whole, rest = divmod(seq_len, self.chunk)
        return whole * self.chunk * self.chunk + rest * rest

    def tokens_kept(self, context: int) -> int:
        return (context - 1) % self.chunk + 1
