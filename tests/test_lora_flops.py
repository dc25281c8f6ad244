"""A LoRA step's FLOPs, exact against FlopCounterMode on peft's own wrapping of transformers'
models: forward, and backward through frozen weights (input gradients only, and only where an
input requires one) and the adapters. Eager attention; mixture-of-experts models on the CPU with
eager experts (routing needs real numbers), the rest on the meta device."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.finetune.flops import lora_step_flops
from app.accounting.finetune.lora import HF_NAMES
from app.accounting.hf.read import import_config
from tests.hf_oracle import one_thread
from tests.test_lora_peft import FAMILIES

MOE = {"mixtral", "qwen2_moe"}
TARGET_SETS = [("q", "v"), ("v",), ("k", "o"), ("q", "k", "v", "o", "gate", "up", "down"), ("down",),
               ("up",)]


def counted(config: dict, rank: int, targets: tuple[str, ...], batch: int, seq: int) -> tuple[int, int]:
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    moe = config["model_type"] in MOE
    with one_thread():
        torch.manual_seed(0)
        with torch.device("cpu" if moe else "meta"):
            extra = {"experts_implementation": "eager"} if moe else {}
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
        wrapped = get_peft_model(model, LoraConfig(r=rank, target_modules=[HF_NAMES[t] for t in targets]))
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cpu" if moe else "meta")
        with FlopCounterMode(display=False) as forward:
            logits = wrapped(input_ids=ids).logits
        with FlopCounterMode(display=False) as backward:
            logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


# Mixtral's MLPs are all routed experts, fused 3-D parameters no target name matches (the refusal
# is test_lora_peft's): it takes the attention target sets only.
CASES = [(name, targets) for name in FAMILIES for targets in TARGET_SETS
         if not (name == "mixtral" and set(targets) & {"gate", "up", "down"})]


@pytest.mark.parametrize(("name", "targets"), CASES, ids=[f"{n}-{'-'.join(t)}" for n, t in CASES])
def test_lora_step_flops_match_flop_counter_mode(name, targets):
    cfg = import_config(FAMILIES[name]).config
    ours = lora_step_flops(cfg, batch_size=2, seq_len=24, rank=4, targets=targets)
    forward, backward = counted(FAMILIES[name], 4, targets, 2, 24)
    assert (ours.forward, ours.backward) == (forward, backward)
    assert ours.backward < 2 * ours.forward  # frozen weights skip their weight gradients
