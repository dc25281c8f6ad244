"""A tiny transformers model's cache after real forwards: the oracle the KV-cache and state tests
read (tests/oracles/test_kv_cache_hf.py, test_state_hf.py)."""

import torch
from transformers import AutoConfig, AutoModelForCausalLM

BATCH = 2
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def generate(raw: dict, dtype: str, prompt: int, steps: int, batch: int = BATCH):
    """The DynamicCache after a forward over `prompt` random tokens and `steps` greedy steps, for
    `batch` sequences of the model `raw` (a config.json as a dict) in `dtype`."""
    torch.manual_seed(0)
    body = {k: v for k, v in raw.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw["model_type"], **body))
    model = model.to(DTYPES[dtype]).eval()
    with torch.no_grad():
        out = model(torch.randint(0, raw["vocab_size"], (batch, prompt)), use_cache=True)
        for _ in range(steps):
            out = model(out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values, use_cache=True)
    return out.past_key_values
