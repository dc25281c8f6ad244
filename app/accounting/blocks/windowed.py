"""Sliding-window attention (Mistral 7B, Gemma 2 and 3's local layers, Qwen's sliding layers):
another attention kind whose queries each attend to the `window` tokens up to and including
themselves.

It is a blocks/wrapped.Wrapped: the attention it windows, but for
  FLOPs     with causal='halved', S^2/2 - (S-w)^2/2 pairs per head instead of S^2/2 (score_pairs_
            doubled); eager attention ('full') scores every pair, masked or not
  decode    a new token reads at most `window` cached tokens (FlashAttention's window_size, vLLM)
  cache     min(context, window) tokens per sequence (inference/kv_cache.py pages them)
"""

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.blocks.wrapped import Wrapped


@dataclass(frozen=True)
class Windowed(Wrapped):
    window: int
    prefix: ClassVar[str] = "windowed"
