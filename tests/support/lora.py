"""LoRA's oracle: small families typed for peft to wrap, and the LoraConfig a target set means."""

from peft import LoraConfig

from app.accounting.finetune.lora import EXPERT_TARGETS, HF_NAMES
from tests.support.hf_configs_dense import SMALL
from tests.support.hf_configs_moe import SMALL as MOE

FAMILIES = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
                "num_attention_heads": 8, "num_key_value_heads": 1, "vocab_size": 100, "sliding_window": 16},
    "qwen2": {"model_type": "qwen2", "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 120},
    "qwen3": SMALL["qwen3"],  # head_dim 24, not hidden_size / heads
    "gemma2": SMALL["gemma2"],
    "mixtral": MOE["mixtral"],
    "qwen2_moe": MOE["qwen2_moe"],  # a shared expert and a dense layer among the routed ones
}


def lora_config(rank: int, targets: tuple[str, ...] | None, saved: tuple[str, ...] = (),
                names: dict[str, str] = HF_NAMES) -> LoraConfig:
    """Module targets by name (peft matches a name as the end of a module's path), expert targets
    as the 3-D parameters peft's target_parameters wraps; None is peft's default for the family."""
    if targets is None:
        return LoraConfig(r=rank, modules_to_save=list(saved) or None)
    modules = [names[t] for t in targets if t not in EXPERT_TARGETS]
    parameters = [names[t] for t in targets if t in EXPERT_TARGETS]
    return LoraConfig(r=rank, target_modules=modules or None, target_parameters=parameters or None,
                      modules_to_save=list(saved) or None)


# Families that fuse projections into one module, with their module names (a dotted tail where
# the same name sits in attention and the MLP: GPT-2's c_proj).
FUSED = {
    "gpt2": ({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
              "n_positions": 64},
             {"qkv": "c_attn", "o": "attn.c_proj", "up": "c_fc", "down": "mlp.c_proj"}),
    "gpt_neox": ({"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100},
                 {"qkv": "query_key_value", "o": "attention.dense", "up": "dense_h_to_4h",
                  "down": "dense_4h_to_h"}),
    "falcon": ({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "vocab_size": 100, "new_decoder_architecture": True, "num_kv_heads": 2},
               {"qkv": "query_key_value", "o": "self_attention.dense", "up": "dense_h_to_4h",
                "down": "dense_4h_to_h"}),
    "phi3": ({"model_type": "phi3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "pad_token_id": 0},
             {"qkv": "qkv_proj", "o": "o_proj", "gate_up": "gate_up_proj", "down": "down_proj"}),
}
