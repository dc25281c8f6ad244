"""FLOPs of imported Hugging Face configs, exact against FlopCounterMode on the transformers
model built from the same config.json (meta device, eager attention, which computes every
score): forward and backward, at two sequence lengths, per family Tally imports."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

# Small config.json bodies, typed here, one per family the import reads.
CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
              "max_position_embeddings": 512, "tie_word_embeddings": False},
    "mistral": {"model_type": "mistral", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 500,
                "max_position_embeddings": 512, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 3,
              "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 700,
              "max_position_embeddings": 512, "tie_word_embeddings": True},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 300,
             "n_positions": 256},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300,
                 "max_position_embeddings": 256},
}


def counted(config: dict, batch: int, seq: int) -> tuple[int, int]:
    """(forward, backward) FLOPs FlopCounterMode counts for one training step's passes."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    cfg = AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        logits = model(input_ids=ids).logits
    with FlopCounterMode(display=False) as backward:
        logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


@pytest.mark.parametrize("seq", [32, 96])
@pytest.mark.parametrize("family", list(CONFIGS))
def test_imported_config_flops_match_flop_counter_mode(api, family, seq):
    config = api.ok("/api/v1/models/import", CONFIGS[family])["config"]
    answer = api.ok("/api/v1/flops/transformer", {"model": config, "batch_size": 2, "seq_len": seq,
                                                  "causal": "full"})
    forward, backward = counted(CONFIGS[family], 2, seq)
    assert answer["forward"]["total"] == forward
    assert answer["backward"]["total"] == backward
