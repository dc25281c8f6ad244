"""Mixture-of-experts imports (mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3) against the
model transformers builds from the same config.json: parameter total, active parameters and
DeepSeek-V3's router buffers, on real configs and seeded random ones; and a 422 naming the key
wherever the engine cannot honour one."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.hf import import_config
from tests.support.api import assert_names_field
from tests.support.hf_configs_hybrid import (
    BAMBA_9B,
    FALCON_H1_7B,
    JAMBA_V01,
    NEMOTRON_NANO_9B_V2,
    QWEN3_NEXT_80B,
)
from tests.support.hf_configs_moe import (
    DEEPSEEK_V2_LITE,
    GLM_45,
    GLM_45_AIR,
    GPT_OSS_20B,
    GPT_OSS_120B,
    LLAMA4_MAVERICK,
    LLAMA4_SCOUT,
    MIXTRAL_8X7B,
    QWEN3_30B_A3B,
    QWEN15_MOE_A27B,
    random_configs,
)
from tests.support.hf_configs_real import DEEPSEEK_V3

IMPORT = "/api/v1/models/import"


def hf_counts(config: dict) -> tuple[int, int, int]:
    """(total, active, router buffers) of the causal LM transformers builds on the meta device.
    Active: every parameter except the routed experts' stacked (n_experts, ...) tensors, of which
    each token uses num_experts_per_tok slices per MoE layer."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")]
    routed = [(p.numel(), m.num_experts) for m in experts for p in m.parameters()]
    active = total - sum(n for n, _ in routed) + sum(n // e * cfg.num_experts_per_tok for n, e in routed)
    buffers = sum(b.numel() for name, b in model.named_buffers() if name.endswith("e_score_correction_bias"))
    return total, active, buffers


def test_mixtral_8x7b_is_its_published_total_and_active(api):
    body = api.ok(IMPORT, MIXTRAL_8X7B)
    assert (body["params"]["total"], body["params"]["active"]) == (46_702_792_704, 12_879_925_248)
    assert hf_counts(MIXTRAL_8X7B) == (46_702_792_704, 12_879_925_248, 0)
    assert body["config"]["first_dense_layers"] == 0 and body["params"]["mlp"] == 0  # no dense layer


@pytest.mark.parametrize(("config", "total", "card_active"), [
    (GPT_OSS_20B, 20_914_757_184, 3.6e9), (GPT_OSS_120B, 116_829_156_672, 5.1e9)], ids=["20b", "120b"])
def test_gpt_oss_is_its_published_total_and_the_cards_active_without_the_embedding(api, config, total,
                                                                                   card_active):
    """The model card: gpt-oss-20b 20.9B total, 3.6B active; gpt-oss-120b 116.8B and 5.1B. The card's
    active count leaves out the input embedding table (a lookup), which Tally's `active` keeps."""
    body = api.ok(IMPORT, config)
    assert (body["params"]["total"], body["params"]["active"], 0) == hf_counts(config)
    assert body["params"]["total"] == total
    assert body["params"]["active"] - 201088 * 2880 == pytest.approx(card_active, rel=0.01)
    assert body["config"]["attention_sinks"] and body["config"]["expert_bias"] and body["config"]["router_bias"]
    assert (body["config"]["sliding_window"], body["config"]["global_every"]) == (128, 2)
    assert not any("does not know" in w for w in body["warnings"])


def test_deepseek_v3_is_its_published_total_with_the_buffer_and_mtp_said(api):
    body = api.ok(IMPORT, DEEPSEEK_V3)
    total, active, buffers = hf_counts(DEEPSEEK_V3)
    assert body["params"]["total"] == total == 671_026_404_352
    assert body["params"]["active"] == active and active // 10**9 == 37  # the card's "37B activated"
    assert body["params"]["buffers"] == buffers == 58 * 256  # 58 MoE layers of 256 correction floats
    warnings = " ".join(body["warnings"])
    assert "num_nextn_predict_layers=1" in warnings and "not counted" in warnings
    assert "buffer" in warnings and "dropless" in warnings


@pytest.mark.parametrize("config", [QWEN3_30B_A3B, QWEN15_MOE_A27B, DEEPSEEK_V2_LITE, GLM_45, GLM_45_AIR],
                         ids=["qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "glm-4.5",
                              "glm-4.5-air"])
def test_real_configs_count_as_transformers_does(api, config):
    body = api.ok(IMPORT, config)
    total, active, buffers = hf_counts(config)
    assert (body["params"]["total"], body["params"]["active"], body["params"]["buffers"]) == (
        total, active, buffers)
    assert not any("does not know" in w for w in body["warnings"])  # every key is known
    assert any("dropless routing" in w for w in body["warnings"])  # the convention is said


@pytest.mark.parametrize("config", [{"model_type": "mixtral"}, {"model_type": "qwen2_moe"},
                                    {"model_type": "qwen3_moe"}, {"model_type": "deepseek_v3"},
                                    {"model_type": "gpt_oss"}, {"model_type": "glm4_moe"},
                                    {"model_type": "llama4_text"},
                                    {"model_type": "llama4_text", "moe_layers": [0, 5]},
                                    {"model_type": "deepseek_v2", "num_experts_per_tok": 6}],
                         ids=lambda c: c["model_type"])
def test_absent_keys_take_the_config_class_defaults(config):
    got = import_config(config).params
    assert (got.total, got.active, got.buffers) == hf_counts(config)


def test_deepseek_v2_has_no_default_top_k(api):
    # DeepseekV2Config defaults num_experts_per_tok to null, which routes nothing.
    assert_names_field(api.post(IMPORT, {"model_type": "deepseek_v2"}), "num_experts_per_tok")


def test_the_cards_round_figures_hold():
    # Model cards: Qwen3-30B-A3B 30.5B (3.3B activated), Qwen1.5-MoE-A2.7B 14.3B, DeepSeek-V2-Lite 15.7B.
    assert round(import_config(QWEN3_30B_A3B).params.total / 1e8) == 305
    assert round(import_config(QWEN3_30B_A3B).params.active / 1e8) == 34  # 3.35B with embeddings and head
    assert round(import_config(QWEN15_MOE_A27B).params.total / 1e8) == 143
    assert round(import_config(DEEPSEEK_V2_LITE).params.total / 1e8) == 157


@pytest.mark.parametrize("config", random_configs(25, 13), ids=lambda c: c["model_type"])
def test_random_configs_count_as_transformers_does(config):
    got = import_config(config).params
    assert (got.total, got.active, got.buffers) == hf_counts(config)


def test_qwen2_moe_windows_follow_transformers_layer_types():
    config = {**QWEN15_MOE_A27B, "num_hidden_layers": 6, "use_sliding_window": True, "max_window_layers": 6}
    types = AutoConfig.for_model("qwen2_moe", **{k: v for k, v in config.items() if k != "model_type"})
    windowed = import_config(config).config.windowed_layers
    assert windowed == tuple(t == "sliding_attention" for t in types.layer_types)
    assert any(windowed) and not all(windowed)


BAD = {
    # top_k above the experts, named as config.json spells it.
    "top_k": ({**MIXTRAL_8X7B, "num_experts_per_tok": 9}, "num_experts_per_tok"),
    "top_k_qwen": ({**QWEN3_30B_A3B, "num_experts_per_tok": 129}, "num_experts_per_tok"),
    "top_k_null": ({**DEEPSEEK_V2_LITE, "num_experts_per_tok": None}, "num_experts_per_tok"),
    # kv_lora_rank without another MLA width; or no kv latent at all.
    "mla_rope": ({**DEEPSEEK_V3, "qk_rope_head_dim": None}, "qk_rope_head_dim"),
    "mla_v": ({**DEEPSEEK_V2_LITE, "v_head_dim": None}, "v_head_dim"),
    "mla_kv": ({**DEEPSEEK_V3, "kv_lora_rank": None}, "kv_lora_rank"),
    # Two spellings of one attribute (attribute_map) that disagree.
    "alias": ({**MIXTRAL_8X7B, "num_experts": 4}, "num_experts"),
    "alias_v3": ({**DEEPSEEK_V3, "num_local_experts": 8}, "num_local_experts"),
    # transformers' DeepSeek ignores moe_layer_freq; DeepSeek's own code would not.
    "moe_layer_freq": ({**DEEPSEEK_V2_LITE, "moe_layer_freq": 2}, "moe_layer_freq"),
    "mlp_bias": ({**DEEPSEEK_V2_LITE, "mlp_bias": True}, "mlp_bias"),
    "v3_mlp_bias": ({**DEEPSEEK_V3, "mlp_bias": True}, "mlp_bias"),  # DeepseekV3MLP has none
    "v2_heads": ({**DEEPSEEK_V2_LITE, "num_attention_heads": 3}, "num_attention_heads"),
    "sparse_step": ({**QWEN15_MOE_A27B, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    "shared_width": ({**QWEN15_MOE_A27B, "shared_expert_intermediate_size": 0},
                     "shared_expert_intermediate_size"),
    "mlp_only": ({**QWEN3_30B_A3B, "mlp_only_layers": "0,1"}, "mlp_only_layers"),
    # Windows on layers 0, 2 ... 20 of 24 (below max_window_layers): not every layer nor all but every n-th.
    "windows": ({**QWEN15_MOE_A27B, "use_sliding_window": True}, "max_window_layers"),
    "layer_types": ({**QWEN15_MOE_A27B, "use_sliding_window": True,
                     "layer_types": ["sliding_attention"] * 23 + ["linear_attention"]}, "layer_types"),
    # Keys the family does not read.
    "mixtral_shared": ({**MIXTRAL_8X7B, "n_shared_experts": 1}, "n_shared_experts"),
    "mixtral_step": ({**MIXTRAL_8X7B, "decoder_sparse_step": 2}, "decoder_sparse_step"),
    "qwen3_shared": ({**QWEN3_30B_A3B, "shared_expert_intermediate_size": 512},
                     "shared_expert_intermediate_size"),
    "qwen2_local": ({**QWEN15_MOE_A27B, "num_local_experts": 8}, "num_local_experts"),
    "v2_mtp": ({**DEEPSEEK_V2_LITE, "num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_keys_the_engine_cannot_honour_are_named(api, case):
    config, key = BAD[case]
    assert_names_field(api.post(IMPORT, config), key)


def test_inline_latent_attention_needs_every_width(api):
    model = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100, "kv_lora_rank": 16,
             "qk_nope_head_dim": 8, "v_head_dim": 8}
    assert_names_field(api.post("/api/v1/flops/transformer", {"model": model, "seq_len": 16}),
                       "model.qk_rope_head_dim")


def test_neutral_moe_keys_and_routing_keys_import_quietly(api):
    # n_group/topk_group only limit which experts a token may pick; a step of 1 is every layer.
    config = {**MIXTRAL_8X7B, "n_group": 8, "topk_group": 4, "decoder_sparse_step": 1, "moe_layer_freq": 1,
              "n_shared_experts": 0, "first_k_dense_replace": 0}
    body = api.ok(IMPORT, config)
    assert body["params"]["total"] == 46_702_792_704
    assert not any("does not know" in w for w in body["warnings"])


def test_qwen_without_experts_is_dense_and_mlp_only_layers_outside_are_ignored(api):
    dense = {**QWEN3_30B_A3B, "num_hidden_layers": 4, "num_experts": 0}
    body = api.ok(IMPORT, dense)
    assert body["params"]["total"] == hf_counts(dense)[0] == body["params"]["active"]
    assert body["config"]["n_experts"] is None
    outside = {**QWEN3_30B_A3B, "num_hidden_layers": 4, "mlp_only_layers": [1, 7, -1]}
    body = api.ok(IMPORT, outside)
    assert body["params"]["total"] == hf_counts(outside)[0]
    assert body["config"]["mlp_only_layers"] == [1]
    assert any("mlp_only_layers" in w for w in body["warnings"])


@pytest.mark.parametrize(("config", "total", "active"), [(LLAMA4_SCOUT, 107_769_861_120, 17e9),
                                                       (LLAMA4_MAVERICK, 400_711_848_960, 17e9)],
                         ids=["scout", "maverick"])
def test_llama4_text_is_transformers_count_and_the_cards_17b_active(api, config, total, active):
    """The cards: Scout 17B active of 109B, Maverick 17B of 400B (Scout's 109B counts its vision
    encoder, which the text model leaves out). Three layers of four attend in 8,192-token chunks."""
    body = api.ok(IMPORT, config)
    assert (body["params"]["total"], body["params"]["active"], 0) == hf_counts(config)
    assert body["params"]["total"] == total and body["params"]["active"] == pytest.approx(active, rel=0.02)
    assert (body["config"]["attention_chunk_size"], body["config"]["global_every"]) == (8192, 4)
    assert not any("does not know" in w for w in body["warnings"])


@pytest.mark.parametrize(("preset", "config"), [("gpt-oss-20b", GPT_OSS_20B), ("gpt-oss-120b", GPT_OSS_120B),
                                                ("glm-4.5", GLM_45), ("glm-4.5-air", GLM_45_AIR),
                                                ("llama4-scout", LLAMA4_SCOUT),
                                                ("llama4-maverick", LLAMA4_MAVERICK),
                                                ("qwen3-next-80b-a3b", QWEN3_NEXT_80B),
                                                ("bamba-9b", BAMBA_9B),
                                                ("jamba-v0.1", JAMBA_V01),
                                                ("nemotron-nano-9b-v2", NEMOTRON_NANO_9B_V2),
                                                ("falcon-h1-7b", FALCON_H1_7B)])
def test_the_2025_presets_are_their_published_configs(api, preset, config):
    """Each preset is its model's config.json as imported: the same model, field for field."""
    imported = api.ok(IMPORT, config)
    listed = api.get(f"/api/v1/models/{preset}").json()
    assert listed["params"]["total"] == imported["params"]["total"] == hf_counts(config)[0]
    assert listed["params"]["active"] == imported["params"]["active"]
    given = {k: v for k, v in imported["config"].items() if v is not None}
    assert {k: v for k, v in listed["config"].items() if v is not None} == given


def test_the_multimodal_llama4_config_counts_its_text_model_and_says_the_vision_tower_is_not(api):
    text = {k: v for k, v in LLAMA4_SCOUT.items() if k != "architectures"}
    whole = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": text,
             "vision_config": {"model_type": "llama4_vision_model"}, "tie_word_embeddings": False}
    body = api.ok(IMPORT, whole)
    assert body["params"]["total"] == api.ok(IMPORT, LLAMA4_SCOUT)["params"]["total"] == 107_769_861_120
    assert any("vision tower" in w for w in body["warnings"])
    bad = api.post(IMPORT, whole | {"text_config": text | {"num_local_experts": 0}})
    assert_names_field(bad, "text_config.num_local_experts")
