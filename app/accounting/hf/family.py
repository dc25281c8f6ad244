"""What a supported model_type is to the import: its reader, the count-changing keys it
reads, and how its config.json spells each TransformerConfig field (to name errors)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Reader = Callable[[dict[str, Any], list[str]], dict[str, Any]]
"""(config.json, warnings to append to) -> TransformerConfig fields."""


@dataclass(frozen=True)
class Family:
    model_type: str
    read: Reader
    honoured: frozenset[str]
    """Keys of keys.COUNT_KEYS this family's transformers class reads."""
    key_names: dict[str, str] = field(default_factory=dict)
    """TransformerConfig field -> config.json key, so an engine refusal names the key."""


LLAMA_KEY_NAMES = {"n_layers": "num_hidden_layers", "d_model": "hidden_size",
                   "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
                   "d_ff": "intermediate_size", "vocab_size": "vocab_size",
                   "max_seq_len": "max_position_embeddings", "head_dim": "head_dim"}
LLAMA_KEYS = frozenset(("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                        "tie_word_embeddings"))
