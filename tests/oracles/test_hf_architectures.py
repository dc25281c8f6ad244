"""A config.json relabelled to another model_type (Qwen2's sent as llama) is caught by its
`architectures` line when the class it names builds a different count; the oracle is
transformers' count of the model `architectures` names."""

from tests.support.hf_oracle import hf_param_count

QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 128,
         "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 300, "max_position_embeddings": 256}


def test_relabelled_config_whose_class_builds_more_is_refused_naming_architectures(api):
    # Qwen2 biases q/k/v; llama does not: the same keys build different weights.
    assert api.ok("/api/v1/models/import", QWEN2)["params"]["total"] == hf_param_count(
        {k: v for k, v in QWEN2.items() if k != "architectures"})
    response = api.post("/api/v1/models/import", QWEN2 | {"model_type": "llama"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "architectures"
    assert "qwen2" in response.json()["message"]


def test_relabelled_config_with_the_same_weights_is_read_with_a_warning(api):
    mistral = QWEN2 | {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}
    answer = api.ok("/api/v1/models/import", mistral | {"model_type": "llama"})
    oracle = hf_param_count({k: v for k, v in mistral.items() if k != "architectures"})
    assert answer["params"]["total"] == oracle
    assert any("MistralForCausalLM" in w for w in answer["warnings"])


def test_an_architecture_tally_does_not_know_changes_nothing(api):
    answer = api.ok("/api/v1/models/import", QWEN2 | {"architectures": ["SomethingNewForCausalLM"]})
    assert not any("architectures" in w for w in answer["warnings"])


def test_qwen3_relabelled_llama_is_caught_by_its_q_k_norms(api):
    """Same keys, but Qwen3's class adds per-head q/k norms: the count differs, so refuse."""
    qwen3 = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 128,
             "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 256}
    oracle = hf_param_count({k: v for k, v in qwen3.items() if k != "architectures"})
    assert api.ok("/api/v1/models/import", qwen3)["params"]["total"] == oracle
    response = api.post("/api/v1/models/import", qwen3 | {"model_type": "llama"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "architectures"
