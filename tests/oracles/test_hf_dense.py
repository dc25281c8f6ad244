"""The dense families of today (qwen3, gemma, gemma2, gemma3_text, gemma3, phi3, olmo, olmo2,
falcon, starcoder2): the import's total equals the parameters of the model transformers builds
from the same config.json (meta device), for typed small configs, real configs and seeded random
ones; windows follow transformers' own layer_types; what cannot be honoured is a 422 naming it."""

import random

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.hf import import_config
from tests.support.api import assert_names_field
from tests.support.hf_configs_dense import (
    FALCON_7B,
    FALCON_40B,
    FALCON_RW_1B,
    GEMMA3_1B,
    GEMMA3_27B,
    GEMMA_7B,
    OLMO2_7B,
    OLMO_7B,
    PHI3_MINI,
    QWEN3_8B,
    SMALL,
    SMALL_BASE,
    SMALL_GEMMA3_TEXT,
    STARCODER2_7B,
)
from tests.support.hf_configs_real import GEMMA2_9B
from tests.support.hf_oracle import hf_param_count

IMPORT = "/api/v1/models/import"


def oracle(config: dict) -> int:
    """transformers' count; for gemma3, of the text model: Gemma3ForCausalLM from text_config."""
    if config["model_type"] == "gemma3":
        return hf_param_count({"model_type": "gemma3_text", **(config.get("text_config") or {})})
    return hf_param_count(config)


def hf_windows(config: dict) -> tuple[bool, ...]:
    """Per layer, whether transformers' config makes it attend in a window."""
    body = {k: v for k, v in config.items() if k != "model_type"}
    cfg = AutoConfig.for_model(config["model_type"], **body)
    types = getattr(cfg, "layer_types", None) or ["sliding_attention"] * cfg.num_hidden_layers
    return tuple(t == "sliding_attention" and cfg.sliding_window is not None for t in types)


@pytest.mark.parametrize("name", list(SMALL))
def test_small_configs_count_as_transformers_does(api, name):
    assert api.ok(IMPORT, SMALL[name])["params"]["total"] == oracle(SMALL[name])


@pytest.mark.parametrize("config,published", [
    (QWEN3_8B, 8_190_735_360), (PHI3_MINI, 3_821_079_552), (GEMMA2_9B, 9_241_705_984), (GEMMA_7B, None),
    (GEMMA3_1B, None), (GEMMA3_27B, None), (OLMO_7B, None), (OLMO2_7B, None), (FALCON_7B, None),
    (FALCON_40B, None), (FALCON_RW_1B, None), (STARCODER2_7B, None),
], ids=lambda c: c["model_type"] if isinstance(c, dict) else "")
def test_real_configs_count_as_transformers_does(api, config, published):
    total = api.ok(IMPORT, config)["params"]["total"]
    assert total == oracle(config)
    if published is not None:  # the issue's figures, transformers' own counts of the released models
        assert total == published


def test_gemma3_counts_the_text_model_of_the_multimodal_checkpoint(api):
    # The class AutoModelForCausalLM builds for model_type gemma3 is the multimodal one: its
    # parameters outside the vision tower and projector are the text model the import counts.
    body = {k: v for k, v in GEMMA3_27B.items() if k != "model_type"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gemma3", **body))
    assert type(model).__name__ == "Gemma3ForConditionalGeneration"
    vision = ("model.vision_tower.", "model.multi_modal_projector.")
    text = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(vision))
    answer = api.ok(IMPORT, GEMMA3_27B)
    assert answer["params"]["total"] == text
    assert any("vision tower" in w for w in answer["warnings"])


@pytest.mark.parametrize("config", [GEMMA2_9B, GEMMA3_1B, SMALL["gemma2"], SMALL["gemma3_text"], PHI3_MINI,
                                    STARCODER2_7B, SMALL["qwen3-window"], QWEN3_8B],
                         ids=lambda c: c["model_type"])
def test_windows_follow_transformers_layer_types(config):
    cfg = import_config(config).config
    assert cfg.windowed_layers == hf_windows(config)
    assert cfg.sliding_window == (config.get("sliding_window") if any(cfg.windowed_layers) else None)


def test_structure_as_the_modeling_files_build_it():
    # Read off the engine's config, each against the modeling file's modules (named in comments).
    gemma2 = import_config(GEMMA2_9B).config  # four RMSNorms a block; tied embeddings by default
    assert (gemma2.norm_layout, gemma2.mlp, gemma2.tied_embeddings, gemma2.global_every) == (
        "sandwich", "geglu", True, 2)
    assert (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping) == (50.0, 30.0)
    gemma3 = import_config(GEMMA3_27B).config  # q_norm/k_norm of head_dim; 5 local : 1 global
    assert (gemma3.qk_norm, gemma3.global_every, gemma3.sliding_window) == ("head", 6, 1024)
    olmo2 = import_config(OLMO2_7B).config  # post_*_layernorm; q/k norms over the whole projection
    assert (olmo2.norm_layout, olmo2.qk_norm) == ("post", "projection")
    assert import_config(OLMO_7B).config.norm == "layernorm_no_affine"
    falcon7 = import_config(FALCON_7B).config
    assert (falcon7.norm_layout, falcon7.n_kv_heads, falcon7.mlp_bias) == ("parallel_shared", 1, False)
    falcon40 = import_config(FALCON_40B).config
    assert (falcon40.norm_layout, falcon40.n_kv_heads) == ("parallel", 8)


def test_conventions_are_warned(api):
    def warned(config: dict, text: str) -> bool:
        return any(text in w for w in api.ok(IMPORT, config)["warnings"])

    assert warned(GEMMA2_9B, "softcapping")
    assert warned(GEMMA2_9B, "sliding window of 4096")
    assert warned(FALCON_7B, "num_kv_heads=71 is not read")
    assert warned(FALCON_RW_1B, "ALiBi")
    assert warned({**SMALL["qwen3"], "hidden_act": "gelu"}, "counted as swiglu")
    assert warned({**SMALL["gemma3_text"], "use_bidirectional_attention": True}, "not causal")


@pytest.mark.parametrize("config,field", [
    # Window patterns the engine cannot express: all sliding, or every Nth layer full.
    ({**SMALL["gemma3_text"], "num_hidden_layers": 4,
      "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]},
     "layer_types"),
    ({**SMALL["gemma3"], "text_config": {**SMALL_GEMMA3_TEXT, "num_hidden_layers": 3, "layer_types": [
        "full_attention", "sliding_attention", "sliding_attention"]}}, "text_config.layer_types"),
    ({**SMALL["gemma2"], "layer_types": ["sliding_attention", "full_attention"]}, "layer_types"),  # 3 layers
    ({**SMALL["gemma2"], "layer_types": ["sliding_attention", "linear_attention", "full_attention"]},
     "layer_types"),
    ({**SMALL["qwen3-window"], "num_hidden_layers": 3, "max_window_layers": 1}, "max_window_layers"),
    ({**SMALL["gemma3_text"], "sliding_window_pattern": 0}, "sliding_window_pattern"),
    # Shapes transformers refuses or cannot run.
    ({**SMALL["gemma"], "head_dim": None}, "head_dim"),
    ({**SMALL["gemma2"], "num_key_value_heads": None}, "num_key_value_heads"),
    ({**SMALL["gemma"], "num_key_value_heads": 3}, "num_key_value_heads"),
    ({**SMALL["falcon-mq"], "num_attention_heads": 3}, "num_attention_heads"),
    ({**SMALL["falcon-gqa"], "parallel_attn": False}, "parallel_attn"),
    ({**SMALL["falcon-gqa"], "num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn"),
    ({**SMALL["falcon-mq"], "num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn"),
    ({**SMALL["falcon-rw"], "num_kv_heads": 2}, "num_kv_heads"),
    ({**SMALL["falcon-mq"], "n_embed": 32}, "hidden_size"),  # 64 given too: which one?
    # Keys Falcon does not read (head_dim is hidden / heads; n_head_kv is the RefinedWeb spelling).
    ({**SMALL["falcon-mq"], "head_dim": 8}, "head_dim"),
    ({**SMALL["falcon-gqa"], "n_head_kv": 4}, "n_head_kv"),
    # gemma3: the wrapper's keys, and its text_config's, named as nested.
    ({**SMALL["gemma3"], "tie_word_embeddings": True}, "tie_word_embeddings"),
    ({**SMALL["gemma3"], "text_config": {**SMALL_GEMMA3_TEXT, "num_key_value_heads": 3}},
     "text_config.num_key_value_heads"),
    ({**SMALL["gemma3"], "text_config": {**SMALL_GEMMA3_TEXT, "hidden_size": "64"}},
     "text_config.hidden_size"),
    ({**SMALL["gemma3"], "text_config": {**SMALL_GEMMA3_TEXT, "num_experts": 4}}, "text_config.num_experts"),
    ({**SMALL["gemma3"], "text_config": {**SMALL_GEMMA3_TEXT, "model_type": "gemma2"}},
     "text_config.model_type"),
])
def test_what_cannot_be_honoured_is_refused(api, config, field):
    assert_names_field(api.post(IMPORT, config), field)


_LLAMA = {**SMALL_BASE, "model_type": "llama", "num_key_value_heads": 2}


@pytest.mark.parametrize("config,key", [
    # Falcon's and Gemma's keys sent to a family that does not read them.
    *[({**_LLAMA, key: value}, key) for key, value in (
        ("parallel_attn", True), ("new_decoder_architecture", True), ("multi_query", True),
        ("num_kv_heads", 1), ("ffn_hidden_size", 64), ("num_ln_in_parallel_attn", 2), ("bias", True),
        ("hidden_activation", "gelu_pytorch_tanh"), ("sliding_window_pattern", 6))],
    # q/k norm switches of other families: qwen3, olmo2 and gemma3 build theirs whatever these say.
    ({**SMALL["qwen3"], "use_qk_norm": True}, "use_qk_norm"),
    ({**SMALL["olmo2"], "qk_layernorm": True}, "qk_layernorm"),
    ({**SMALL["gemma3_text"], "use_qk_norm": True}, "use_qk_norm"),
    ({**_LLAMA, "use_qk_norm": True}, "use_qk_norm"),
    # Gemma 2/3 keys Gemma (1) lacks; Gemma 3's pattern Gemma 2 and Qwen3 lack.
    ({**SMALL["gemma"], "attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ({**GEMMA2_9B, "model_type": "gemma"}, "query_pre_attn_scalar"),
    ({**GEMMA3_1B, "model_type": "gemma2"}, "sliding_window_pattern"),
    ({**SMALL["qwen3"], "sliding_window_pattern": 6}, "sliding_window_pattern"),
    # Biases where the family builds none (or only what use_bias says).
    ({**SMALL["phi3"], "attention_bias": True}, "attention_bias"),
    ({**SMALL["olmo"], "mlp_bias": True}, "mlp_bias"),
    ({**SMALL["starcoder2-no-bias"], "attention_bias": True}, "attention_bias"),
    ({**SMALL["falcon-mq"], "num_key_value_heads": 2}, "num_key_value_heads"),
    ({**SMALL["falcon-mq"], "intermediate_size": 100}, "intermediate_size"),
    ({**FALCON_40B, "model_type": "qwen3"}, "num_kv_heads"),
    ({**SMALL["starcoder2"], "parallel_attn": True}, "parallel_attn"),
])
def test_keys_only_another_family_reads_stay_refused(api, config, key):
    assert_names_field(api.post(IMPORT, config), key)


def test_what_a_family_builds_anyway_may_be_spelled_out(api):
    # Phi-3 has no biases and Falcon-7B one key/value head: saying so changes nothing.
    for config in ({**SMALL["phi3"], "attention_bias": False, "mlp_bias": False},
                   {**SMALL["falcon-mq"], "num_key_value_heads": 1, "intermediate_size": 256}):
        assert api.ok(IMPORT, config)["params"]["total"] == oracle(config)


# Seeded random configs: biases, head_dim, GQA, tying, windows, per family.
PER_FAMILY = 8


def _heads(rng: random.Random, d: int) -> tuple[int, int]:
    heads = rng.choice([h for h in (1, 2, 4, 8) if d % h == 0])
    return heads, rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0])


def _common(rng: random.Random, family: str) -> dict:
    d = rng.choice([16, 32, 48, 64])
    heads, kv = _heads(rng, d)
    cfg = {"model_type": family, "hidden_size": d, "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": rng.randint(1, 130), "num_hidden_layers": rng.randint(1, 7),
           "vocab_size": rng.randint(2, 300), "tie_word_embeddings": rng.random() < 0.5,
           "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    if rng.random() < 0.6:
        cfg["head_dim"] = rng.choice([4, 8, 24])  # need not be hidden_size / heads
    return cfg


def _qwen3(rng: random.Random) -> dict:
    cfg = _common(rng, "qwen3") | {"attention_bias": rng.random() < 0.5}
    if rng.random() < 0.5:  # every layer windowed (max_window_layers 0) or none (>= layers)
        cfg |= {"use_sliding_window": True, "sliding_window": rng.choice([4, 16]),
                "max_window_layers": rng.choice([0, 7])}
    return cfg


def _gemma(rng: random.Random, family: str) -> dict:
    cfg = _common(rng, family) | {"attention_bias": rng.random() < 0.3}
    if family != "gemma":
        cfg["sliding_window"] = rng.choice([None, 4, 16])
        cfg["attn_logit_softcapping"] = rng.choice([None, 50.0])
    if family == "gemma3_text":
        cfg["sliding_window_pattern"] = rng.randint(1, 4)
    if family == "gemma2" and rng.random() < 0.3:
        cfg["layer_types"] = ["sliding_attention"] * cfg["num_hidden_layers"]
    return cfg


def _plain(rng: random.Random, family: str) -> dict:
    cfg = _common(rng, family)
    if family in ("olmo", "olmo2"):
        cfg["attention_bias"] = rng.random() < 0.5
    if family == "starcoder2":
        cfg["use_bias"] = rng.random() < 0.5
        if rng.random() < 0.2:
            cfg["head_dim"] = None  # starcoder2 reads it as `head_dim or hidden / heads`
    if family in ("phi3", "starcoder2"):
        cfg["sliding_window"] = rng.choice([None, 8])
    return cfg


def _falcon(rng: random.Random) -> dict:
    d = rng.choice([16, 32, 48, 64])
    heads, kv = _heads(rng, d)
    new = rng.random() < 0.5
    cfg = {"model_type": "falcon", "hidden_size": d, "num_attention_heads": heads,
           "num_hidden_layers": rng.randint(1, 3), "vocab_size": rng.randint(2, 300),
           "tie_word_embeddings": rng.random() < 0.5, "bias": rng.random() < 0.5, "alibi": rng.random() < 0.3,
           "new_decoder_architecture": new, "ffn_hidden_size": rng.choice([None, rng.randint(1, 130)])}
    if new:
        cfg |= {"num_kv_heads": kv, "num_ln_in_parallel_attn": rng.choice([None, 1, 2])}
    else:
        cfg |= {"multi_query": rng.random() < 0.5, "parallel_attn": rng.random() < 0.5}
    return cfg


def _configs() -> list[dict]:
    rng = random.Random(13)
    out = []
    for _ in range(PER_FAMILY):
        out += [_qwen3(rng), _gemma(rng, "gemma"), _gemma(rng, "gemma2"), _gemma(rng, "gemma3_text"),
                _plain(rng, "phi3"), _plain(rng, "olmo"), _plain(rng, "olmo2"), _plain(rng, "starcoder2"),
                _falcon(rng)]
        text = _gemma(rng, "gemma3_text")
        out.append({"model_type": "gemma3", "text_config": text,
                    "tie_word_embeddings": text["tie_word_embeddings"]})
    return out


@pytest.mark.parametrize("config", _configs(), ids=lambda c: c["model_type"])
def test_random_configs_count_as_transformers_does(config):
    imported = import_config(config)
    assert imported.params.total == oracle(config)
    if config["model_type"] not in ("gemma", "olmo", "olmo2", "falcon", "gemma3"):
        assert imported.config.windowed_layers == hf_windows(config)
