"""An import never silently drops a key that changes a count: relabelled real
configs, and every count-changing key a supported family does not read, are 422s
naming the key; neutral values and count-neutral keys still import."""

import json

import pytest

from tests.support import FIXTURES
from tests.support.api import assert_names_field
from tests.support.hf_configs_real import DEEPSEEK_V3, GEMMA2_9B
from tests.support.hf_oracle import hf_param_count

IMPORT = "/api/v1/models/import"
HF_CONFIGS = FIXTURES / "hf_configs"
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
         "intermediate_size": 96,
         "num_hidden_layers": 2, "vocab_size": 100}


def test_deepseek_v3_relabelled_llama_is_refused(api):
    # The oracle: 671B as transformers builds DeepSeek-V3 (MoE + latent attention).
    assert round(hf_param_count(DEEPSEEK_V3) / 1e9) == 671
    body = assert_names_field(api.post(IMPORT, {**DEEPSEEK_V3, "model_type": "llama"}), "n_routed_experts")
    assert "kv_lora_rank" in body["message"] and "q_lora_rank" in body["message"]


def test_gemma2_9b_relabelled_llama_is_refused(api):
    # 9.24B as transformers builds Gemma-2 (tied embeddings, four norms a block); read
    # as llama it would be 10.16B, so its Gemma-only keys must not pass unnoticed.
    assert round(hf_param_count(GEMMA2_9B) / 1e7) == 924
    response = api.post(IMPORT, {**GEMMA2_9B, "model_type": "llama"})
    body = assert_names_field(response, "query_pre_attn_scalar")
    assert "attn_logit_softcapping" in body["message"]


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gpt_neox"])
@pytest.mark.parametrize("key,value", [
    ("num_local_experts", 8), ("num_experts", 60), ("n_routed_experts", 64), ("num_experts_per_tok", 2),
    ("n_shared_experts", 2), ("moe_intermediate_size", 32), ("shared_expert_intermediate_size", 64),
    ("first_k_dense_replace", 1), ("decoder_sparse_step", 2), ("mlp_only_layers", [0]), ("moe_layer_freq", 2),
    ("num_nextn_predict_layers", 1), ("q_lora_rank", 32), ("kv_lora_rank", 16), ("qk_nope_head_dim", 16),
    ("qk_rope_head_dim", 8), ("v_head_dim", 16), ("query_pre_attn_scalar", 16),
    ("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0), ("sliding_window_pattern", 6),
    ("layer_types", ["linear_attention", "full_attention"]), ("use_qk_norm", True),
    ("qk_layernorm", True), ("new_decoder_architecture", True), ("add_cross_attention", True),
])
def test_count_changing_keys_the_family_ignores_are_refused(api, family, key, value):
    assert_names_field(api.post(IMPORT, {**LLAMA, "model_type": family, key: value}), key)


@pytest.mark.parametrize("config,key", [
    ({**LLAMA, "model_type": "mistral", "attention_bias": True}, "attention_bias"),  # MistralConfig: none
    ({**LLAMA, "model_type": "qwen2", "mlp_bias": True}, "mlp_bias"),
    ({**LLAMA, "model_type": "qwen2", "attention_bias": False}, "attention_bias"),  # qwen2 biases q/k/v
    ({**LLAMA, "model_type": "gpt_neox", "num_key_value_heads": 2}, "num_key_value_heads"),  # MHA only
    ({**LLAMA, "model_type": "gpt_neox", "mlp_bias": False}, "mlp_bias"),
    ({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "intermediate_size": 96}, "intermediate_size"),
    ({"model_type": "gpt2", "n_embd": 64, "hidden_size": 128}, "hidden_size"),
])
def test_family_hard_wired_structure_refuses_contrary_keys(api, config, key):
    assert_names_field(api.post(IMPORT, config), key)


def test_neutral_values_import_and_only_unknown_keys_are_listed(api):
    # n_group and topk_group only limit which experts a token may pick (DeepSeek's routing); a step
    # of 1 between MoE layers is every layer.
    neutral = {**LLAMA, "num_experts": 0, "num_local_experts": None, "q_lora_rank": None,
               "mlp_only_layers": [], "use_qk_norm": False, "n_group": 8, "topk_group": 4,
               "decoder_sparse_step": 1, "moe_layer_freq": 1,
               "layer_types": ["sliding_attention", "full_attention"], "torch_dtype": "bfloat16",
               "rope_scaling": {"type": "linear", "factor": 2.0}, "bos_token_id": 1, "my_custom_flag": 3}
    body = api.ok(IMPORT, neutral)
    assert body["params"]["total"] == hf_param_count(LLAMA)
    [warning] = body["warnings"]
    assert "my_custom_flag" in warning and "rope_scaling" not in warning and "num_experts" not in warning
    # What mistral builds anyway may be spelled out.
    mistral = {**LLAMA, "model_type": "mistral", "num_key_value_heads": 2, "attention_bias": False,
               "mlp_bias": False}
    assert api.ok(IMPORT, mistral)["params"]["total"] == hf_param_count(mistral)


@pytest.mark.parametrize("family,kv_heads", [("mistral", 8), ("qwen2", 32)])
def test_absent_kv_heads_take_the_family_default(api, family, kv_heads):
    # MistralConfig and Qwen2Config default num_key_value_heads to 8 and 32, not to MHA.
    config = {**LLAMA, "model_type": family, "hidden_size": 512, "num_attention_heads": 32}
    del config["num_key_value_heads"]
    body = api.ok(IMPORT, config)
    assert body["config"]["n_kv_heads"] == kv_heads
    assert body["params"]["total"] == hf_param_count(config)


def test_gpt2_reads_hidden_size_as_gpt2config_does(api):
    config = {"model_type": "gpt2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "max_position_embeddings": 32, "vocab_size": 100}
    assert api.ok(IMPORT, config)["params"]["total"] == hf_param_count(config)


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2-0.5b", "qwen2-7b",
                                  "gpt2", "pythia-160m"])
def test_real_configs_list_only_the_unknown_key(api, name):
    config = {**json.loads((HF_CONFIGS / f"{name}.json").read_text()), "my_custom_flag": 3}
    unknown = [w for w in api.ok(IMPORT, config)["warnings"] if "does not know" in w]
    assert unknown == ["keys Tally does not know, assumed not to change the count: my_custom_flag"]
