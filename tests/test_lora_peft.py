"""LoRA's trainable parameters, exact against peft: each family's config.json (typed here, or in
tests/hf_configs_*.py) built by transformers on the meta device, wrapped by peft's LoraConfig with
several ranks and target sets, and its trainable parameters counted as peft counts them
(requires_grad after get_peft_model). Tally reads the same config.json through its import."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.errors import InvalidInput
from app.accounting.finetune.lora import EXPERT_TARGETS, HF_NAMES, lora_params
from app.accounting.hf.read import import_config
from tests.test_flops_hf_moe import CONFIGS as MOE
from tests.test_hf_dense import SMALL

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
TARGET_SETS = [("q", "v"), ("q", "k", "v", "o"), ("q", "k", "v", "o", "gate", "up", "down"), ("down",)]


def peft_trainable(config: dict, rank: int, targets: tuple[str, ...],
                   saved: tuple[str, ...] = ()) -> tuple[int, int]:
    """(trainable, all) parameters of the peft-wrapped model, as print_trainable_parameters counts;
    `saved` are modules_to_save."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    wrapped = get_peft_model(model, lora_config(rank, targets, saved))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in wrapped.parameters())


def lora_config(rank: int, targets: tuple[str, ...], saved: tuple[str, ...] = ()) -> LoraConfig:
    """Module targets by name, expert targets as the 3-D parameters peft's target_parameters wraps."""
    modules = [HF_NAMES[t] for t in targets if t not in EXPERT_TARGETS]
    parameters = [HF_NAMES[t] for t in targets if t in EXPERT_TARGETS]
    return LoraConfig(r=rank, target_modules=modules or None, target_parameters=parameters or None,
                      modules_to_save=list(saved) or None)


@pytest.mark.parametrize("targets", TARGET_SETS, ids="-".join)
@pytest.mark.parametrize("rank", [4, 16])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_trainable_parameters_equal_peft(name, rank, targets):
    cfg = import_config(FAMILIES[name]).config
    if name == "mixtral" and set(targets) & {"gate", "up", "down"}:
        # transformers 5.x fuses Mixtral's experts into 3-D parameters: no gate/up/down_proj
        # module for a target name to match. peft refuses when no target matches and skips the
        # missing names otherwise; Tally refuses a name that matches nothing, naming it, and
        # counts what peft wraps once it is left out.
        with pytest.raises(InvalidInput, match="routed expert") as refused:
            lora_params(cfg, rank=rank, targets=targets)
        first = next(i for i, t in enumerate(targets) if t in ("gate", "up", "down"))
        assert refused.value.field == f"lora_targets.{first}"
        matched = tuple(t for t in targets if t not in ("gate", "up", "down"))
        if not matched:
            with pytest.raises(ValueError):
                peft_trainable(FAMILIES[name], rank, targets)
            return
        assert lora_params(cfg, rank=rank, targets=matched).trainable_params == peft_trainable(
            FAMILIES[name], rank, targets)[0]
        return
    trainable, everything = peft_trainable(FAMILIES[name], rank, targets)
    ours = lora_params(cfg, rank=rank, targets=targets)
    assert ours.trainable_params == trainable
    assert ours.total_params == everything


def test_rank_and_targets_are_checked():
    cfg = import_config(FAMILIES["llama"]).config
    with pytest.raises(InvalidInput) as rank:
        lora_params(cfg, rank=0)
    assert rank.value.field == "lora_rank"
    with pytest.raises(InvalidInput) as target:
        lora_params(cfg, rank=8, targets=("q", "qkv"))
    assert target.value.field == "lora_targets.1"
    gpt2 = import_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4}).config
    with pytest.raises(InvalidInput, match="no gate projection"):
        lora_params(gpt2, rank=8, targets=("gate",))


def test_llama3_8b_rank_16_on_q_and_v_is_peft_s_famous_figure():
    """Llama-3-8B, r=16, q_proj and v_proj: 32 layers x 16 x ((4096 + 4096) + (4096 + 1024)) =
    6,815,744 trainable parameters, the figure peft prints for it."""
    from app.accounting.models import preset
    count = lora_params(preset("llama3-8b"), rank=16)
    assert count.trainable_params == 6_815_744
    assert count.by_target == {"q": 32 * 16 * 8192, "v": 32 * 16 * 5120}


EXPERT_SETS = [("experts_gate_up", "experts_down"), ("experts_down",), ("q", "v", "experts_gate_up")]


@pytest.mark.parametrize("targets", EXPERT_SETS, ids="-".join)
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_routed_experts_are_peft_s_target_parameters(name, targets):
    """peft's ParamWrapper over transformers' fused 3-D expert parameters: one rank-r adapter per
    expert, as A: in x (r E) and B: (r E) x out."""
    cfg = import_config(FAMILIES[name]).config
    ours = lora_params(cfg, rank=4, targets=targets)
    assert (ours.trainable_params, ours.total_params) == peft_trainable(FAMILIES[name], 4, targets)


def test_a_dense_model_has_no_experts_to_adapt():
    cfg = import_config(FAMILIES["llama"]).config
    with pytest.raises(InvalidInput, match="no routed experts") as refused:
        lora_params(cfg, rank=4, targets=("q", "experts_down"))
    assert refused.value.field == "lora_targets.1"


SAVED = [("embed_tokens",), ("lm_head",), ("embed_tokens", "lm_head")]


@pytest.mark.parametrize("saved", SAVED, ids="+".join)
@pytest.mark.parametrize("name", ["llama", "qwen2_moe"])  # untied, and tied embeddings
def test_trained_embeddings_and_head_are_copies_beside_the_frozen_ones(name, saved):
    """peft's modules_to_save: a trainable copy of each module beside the frozen original."""
    cfg = import_config(FAMILIES[name]).config
    ours = lora_params(cfg, rank=8, targets=("q", "v"), train_embeddings="embed_tokens" in saved,
                       train_head="lm_head" in saved)
    expected = peft_trainable(FAMILIES[name], 8, ("q", "v"), saved)
    assert (ours.trainable_params, ours.total_params) == expected
