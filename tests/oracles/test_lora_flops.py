"""A fine-tuning step's FLOPs, exact against FlopCounterMode on peft's own wrapping of transformers'
models: forward, and backward through frozen weights (input gradients only, and only where an
input requires one) and the adapters. Eager attention; mixture-of-experts models on the CPU with
eager experts (routing needs real numbers), the rest on the meta device."""

import pytest
import torch
from peft import get_peft_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.finetune.flops import step_flops
from app.accounting.finetune.lora import HF_NAMES
from app.accounting.finetune.spec import FineTune
from app.accounting.hf.read import import_config
from tests.support.hf_oracle import one_thread
from tests.support.lora import FAMILIES, FUSED, lora_config

MOE = {"mixtral", "qwen2_moe"}
TARGET_SETS = [("q", "v"), ("v",), ("k", "o"), ("q", "k", "v", "o", "gate", "up", "down"), ("down",),
               ("up",)]


def counted(config: dict, rank: int, targets: tuple[str, ...] | None, batch: int, seq: int, *,
            saved: tuple[str, ...] = (), frozen: tuple[str, ...] | None = None,
            names: dict[str, str] = HF_NAMES) -> tuple[int, int]:
    """Forward and backward FLOPs of peft's LoRA (targets, modules_to_save=saved) or, with
    `frozen` (module paths), of the model with those parts' requires_grad off."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    moe = config["model_type"] in MOE
    with one_thread():
        torch.manual_seed(0)
        with torch.device("cpu" if moe else "meta"):
            extra = {"experts_implementation": "eager"} if moe else {}
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
        if frozen is None:
            wrapped = get_peft_model(model, lora_config(rank, targets, saved, names))
        else:
            wrapped = model
            for path in frozen:
                model.get_submodule(path).requires_grad_(False)
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


@pytest.mark.parametrize("rank", [4, 8])
@pytest.mark.parametrize(("name", "targets"), CASES, ids=[f"{n}-{'-'.join(t)}" for n, t in CASES])
def test_lora_step_flops_match_flop_counter_mode(name, targets, rank):
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("lora", rank=rank, targets=targets), batch_size=2, seq_len=24)
    forward, backward = counted(FAMILIES[name], rank, targets, 2, 24)
    assert (ours.forward, ours.backward) == (forward, backward)
    assert ours.backward < 2 * ours.forward  # frozen weights skip their weight gradients


@pytest.mark.parametrize("saved", [("lm_head",), ("embed_tokens",), ("embed_tokens", "lm_head")])
@pytest.mark.parametrize("name", ["llama", "qwen2_moe"])
def test_lora_with_modules_to_save_matches_flop_counter_mode(name, saved):
    """A trained head adds its weight gradient; a trained embedding makes every layer's input
    require a gradient from the start."""
    cfg = import_config(FAMILIES[name]).config
    spec = FineTune("lora", rank=4, targets=("v",), train_embeddings="embed_tokens" in saved,
                    train_head="lm_head" in saved)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 4, ("v",), 2, 24, saved=saved)


FREEZES = [(True, True, 0), (True, True, 1), (False, False, 1), (True, False, 2), (False, True, 0)]


@pytest.mark.parametrize(("embeddings", "head", "layers"), FREEZES)
@pytest.mark.parametrize("name", ["llama", "gemma2", "qwen2_moe"])
def test_frozen_parts_match_flop_counter_mode(name, embeddings, head, layers):
    """Frozen weights skip their weight gradients; frozen layers ahead of any trained one, with
    the embedding frozen, skip their input gradients too."""
    cfg = import_config(FAMILIES[name]).config
    if cfg.tied_embeddings and embeddings != head:
        return  # refused, naming the field (test_freeze)
    frozen = [f"model.layers.{i}" for i in range(layers)]
    frozen += ["model.embed_tokens"] * embeddings + ["lm_head"] * head
    spec = FineTune("freeze", freeze_embeddings=embeddings, freeze_head=head, freeze_layers=layers)
    ours = step_flops(cfg, spec, batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 0, (), 2, 24, frozen=tuple(frozen))


@pytest.mark.parametrize("name", ["llama", "mixtral"])
def test_full_fine_tune_is_three_forwards(name):
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("full"), batch_size=2, seq_len=24)
    nothing_frozen = step_flops(cfg, FineTune("freeze"), batch_size=2, seq_len=24)
    assert ours.total == nothing_frozen.total == 3 * ours.forward
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 0, (), 2, 24, frozen=())


EXPERT_SETS = [("experts_gate_up",), ("experts_down",), ("experts_gate_up", "experts_down"),
               ("v", "experts_down"), ("q", "gate", "experts_gate_up")]


@pytest.mark.parametrize("targets", EXPERT_SETS, ids="-".join)
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_expert_adapters_match_flop_counter_mode(name, targets):
    """peft folds expert adapters into the 3-D weights: the merge forward, the merged weight's
    gradient like a trained expert's, and dA, dB from it."""
    if name == "mixtral" and "gate" in targets:
        return  # every Mixtral MLP is routed: no gate_proj (refused, test_lora_peft)
    cfg = import_config(FAMILIES[name]).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    assert (ours.forward, ours.backward) == counted(FAMILIES[name], 4, targets, 2, 24)


@pytest.mark.parametrize("every", [False, True], ids=["default", "every-matrix"])
@pytest.mark.parametrize("name", ["gpt2", "phi3"])
def test_fused_projections_match_flop_counter_mode(name, every):
    """One adapter over GPT-2's c_attn (a Conv1D) or Phi-3's qkv_proj and gate_up_proj."""
    config, names = FUSED[name]
    targets = tuple(names) if every else None
    cfg = import_config(config).config
    ours = step_flops(cfg, FineTune("lora", rank=4, targets=targets), batch_size=2, seq_len=24)
    theirs = ("qkv",) if name == "phi3" and not every else targets  # peft has no phi3 default
    assert (ours.forward, ours.backward) == counted(config, 4, theirs, 2, 24, names=names)
