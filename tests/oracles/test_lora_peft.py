"""LoRA's trainable parameters, exact against peft: each family's config.json (typed in
tests/support/lora.py and hf_configs_*.py) built by transformers on the meta device, wrapped by
peft's LoraConfig with several ranks and target sets, and its trainable parameters counted as
peft counts them (requires_grad after get_peft_model). Tally reads the same config.json through
its import."""

import pytest
import torch
from peft import get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.errors import InvalidInput
from app.accounting.finetune.lora import HF_NAMES, lora_params
from app.accounting.hf.read import import_config
from tests.support.hf_configs_moe import QWEN3_30B_A3B
from tests.support.hf_configs_moe import SMALL as MOE_SMALL
from tests.support.lora import FAMILIES, FUSED, lora_config

TARGET_SETS = [("q", "v"), ("q", "k", "v", "o"), ("q", "k", "v", "o", "gate", "up", "down"), ("down",)]


def peft_trainable(config: dict, rank: int, targets: tuple[str, ...] | None,
                   saved: tuple[str, ...] = (), names: dict[str, str] = HF_NAMES) -> tuple[int, int]:
    """(trainable, all) parameters of the peft-wrapped model, as print_trainable_parameters counts;
    `saved` are modules_to_save."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    wrapped = get_peft_model(model, lora_config(rank, targets, saved, names))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in wrapped.parameters())


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


@pytest.mark.parametrize("every", [False, True], ids=["default", "every-matrix"])
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_projections_are_one_target_as_peft_wraps_them(name, every):
    """GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value, Phi-3's qkv_proj and gate_up_proj:
    one adapter over the fused module; peft's default target for these families is that qkv."""
    config, names = FUSED[name]
    cfg = import_config(config).config
    targets = tuple(names) if every else None
    ours = lora_params(cfg, rank=4, targets=targets)
    # peft has no default for phi3 (it asks for target_modules): Tally's is its fused qkv, as peft's
    # is for GPT-2, GPT-NeoX and Falcon.
    theirs = ("qkv",) if name == "phi3" and not every else targets
    assert (ours.trainable_params, ours.total_params) == peft_trainable(config, 4, theirs, names=names)
    if not every:
        assert ours.targets == ["qkv"]


@pytest.mark.parametrize(("name", "target", "field"), [("gpt2", ("q", "v"), "lora_targets.0"),
                                                       ("phi3", ("qkv", "gate"), "lora_targets.1"),
                                                       ("llama", ("qkv",), "lora_targets.0")])
def test_a_fused_or_separate_projection_is_named_as_the_model_has_it(name, target, field):
    config = FUSED[name][0] if name in FUSED else FAMILIES[name]
    with pytest.raises(InvalidInput, match="fuses|apart") as refused:
        lora_params(import_config(config).config, rank=4, targets=target)
    assert refused.value.field == field


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


QWEN3_MOE = MOE_SMALL["qwen3_moe"]  # layers 0 and 2 dense (decoder_sparse_step 2), 1 and 3 routed
QWEN3_SETS = [("q", "k", "v", "o", "gate", "up", "down"), ("gate", "up"), ("down",), ("q", "v", "down"),
              ("gate", "up", "experts_gate_up"), ("down", "experts_down"), ("experts_gate_up",), ("q", "v")]


@pytest.mark.parametrize("targets", QWEN3_SETS, ids="-".join)
@pytest.mark.parametrize("rank", [4, 16])
@pytest.mark.parametrize("family", ["qwen3_moe", "glm4_moe"])
def test_moe_mlp_targets_are_its_routed_experts_as_peft_maps_them(family, rank, targets):
    """peft 0.21 rewrites Qwen3-MoE's and GLM-4.5's target_modules before wrapping
    (transformers_weight_conversion's _convert_peft_config_moe): gate_proj and up_proj become the
    experts' fused gate_up_proj, down_proj their down_proj, and no dense MLP or shared expert is
    wrapped."""
    config = MOE_SMALL[family]
    cfg = import_config(config).config
    ours = lora_params(cfg, rank=rank, targets=targets)
    assert (ours.trainable_params, ours.total_params) == peft_trainable(config, rank, targets)
    assert not set(ours.by_target) & {"gate", "up", "down"}  # the dense layers' MLPs stay unwrapped


@pytest.mark.parametrize(("targets", "index"), [(("q", "gate"), 1), (("up", "down"), 0)])
def test_qwen3_moe_gate_or_up_alone_is_refused_as_peft_refuses_it(targets, index):
    """One of the two fused halves alone: peft's ValueError; Tally's refusal names the target."""
    with pytest.raises(ValueError, match="fused into gate_up_proj"):
        peft_trainable(QWEN3_MOE, 4, targets)
    with pytest.raises(InvalidInput, match="gate_up_proj") as refused:
        lora_params(import_config(QWEN3_MOE).config, rank=4, targets=targets)
    assert refused.value.field == f"lora_targets.{index}"


def test_qwen3_30b_a3b_every_matrix_at_rank_16_is_peft_s_count():
    """The model card's config.json built on the meta device and wrapped by peft: 994,836,480
    trainable parameters, 48 x (16 x (6144 + 2560 + 2560 + 6144) attention, 128 experts x (32 x
    (2048 + 1536) + 16 x (768 + 2048))); the preset is the same model."""
    every = ("q", "k", "v", "o", "gate", "up", "down")
    theirs, everything = peft_trainable(QWEN3_30B_A3B, 16, every)
    assert theirs == 994_836_480
    from app.accounting.models import preset
    for cfg in (import_config(QWEN3_30B_A3B).config, preset("qwen3-30b-a3b")):
        ours = lora_params(cfg, rank=16, targets=every)
        assert (ours.trainable_params, ours.total_params) == (theirs, everything)
