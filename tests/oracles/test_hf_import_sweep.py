"""Seeded random small configs of every supported family: Tally's import total
equals the count of the model transformers builds from the same config.json."""

import random

import pytest

from app.accounting.hf import import_config
from tests.support.hf_oracle import hf_param_count

PER_FAMILY = 25


def _heads(rng: random.Random, d: int) -> tuple[int, int]:
    heads = rng.choice([h for h in (1, 2, 4, 8) if d % h == 0])
    return heads, rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0])


def _llama_like(rng: random.Random, family: str) -> dict:
    d = rng.choice([16, 32, 48, 64])
    heads, kv = _heads(rng, d)
    cfg = {"model_type": family, "hidden_size": d, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": rng.randint(1, 130),
           "num_hidden_layers": rng.randint(1, 3), "vocab_size": rng.randint(2, 300),
           "tie_word_embeddings": rng.random() < 0.5, "hidden_act": rng.choice(["silu", "gelu"]),
           "max_position_embeddings": rng.choice([128, 4096])}
    if rng.random() < 0.4:
        cfg["head_dim"] = rng.choice([4, 8, 24])  # need not be hidden_size / heads
    if family == "llama":
        cfg |= {"attention_bias": rng.random() < 0.5, "mlp_bias": rng.random() < 0.5}
    if family == "mistral" and rng.random() < 0.5:
        cfg["sliding_window"] = 64
    return cfg


def _gpt2(rng: random.Random) -> dict:
    d = rng.choice([16, 32, 48, 64])
    cfg = {"model_type": "gpt2", "n_embd": d, "n_head": _heads(rng, d)[0], "n_layer": rng.randint(1, 3),
           "vocab_size": rng.randint(2, 300), "n_positions": rng.choice([8, 64, 1024]),
           "tie_word_embeddings": rng.random() < 0.5,
           "activation_function": rng.choice(["gelu_new", "relu"])}
    if rng.random() < 0.5:
        cfg["n_inner"] = rng.randint(1, 130)
    return cfg


def _gpt_neox(rng: random.Random) -> dict:
    d = rng.choice([16, 32, 48, 64])
    return {"model_type": "gpt_neox", "hidden_size": d, "num_attention_heads": _heads(rng, d)[0],
            "intermediate_size": rng.randint(1, 130), "num_hidden_layers": rng.randint(1, 3),
            "vocab_size": rng.randint(2, 300), "tie_word_embeddings": rng.random() < 0.5,
            "attention_bias": rng.random() < 0.5, "use_parallel_residual": rng.random() < 0.5,
            "rotary_pct": rng.choice([0.25, 0.5, 1.0])}


def _configs() -> list[dict]:
    rng = random.Random(13)
    out = []
    for _ in range(PER_FAMILY):
        out += [_llama_like(rng, "llama"), _llama_like(rng, "mistral"), _llama_like(rng, "qwen2"),
                _gpt2(rng), _gpt_neox(rng)]
    return out


@pytest.mark.parametrize("config", _configs(), ids=lambda c: c["model_type"])
def test_import_total_equals_transformers_count(config):
    assert import_config(config).params.total == hf_param_count(config)
