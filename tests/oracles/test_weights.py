"""The weight tensors, enumerated: their parameters sum to count_params (itself exact against
transformers) for every preset and typed config.json, component by component; their names and
shapes are what transformers builds, named as llama.cpp's own gguf package maps them; the
tensor-parallel split is sharding.py's; enumerating DeepSeek-V3 costs nothing once cached."""

import dataclasses
import time

import gguf
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting import models
from app.accounting.hf import import_config
from app.accounting.inference.quant import _shard
from app.accounting.inference.weights import by_component, model_tensors
from app.accounting.params import count_params
from app.accounting.training.sharding import stage_params
from tests.support import hf_configs_dense, hf_configs_hybrid, hf_configs_moe, hf_configs_real

REAL = {name: value for module in (hf_configs_dense, hf_configs_moe, hf_configs_real)
        for name, value in vars(module).items() if isinstance(value, dict) and "model_type" in value}


def breakdown(cfg) -> dict[str, int]:
    """ParamCount's components under weights.py's names, those with parameters."""
    pc = count_params(cfg)
    parts = {"embeddings": pc.token_embedding + pc.position_embedding, "attention": pc.attention,
             "mlp": pc.mlp, "router": pc.router, "routed_experts": pc.routed_experts,
             "shared_experts": pc.shared_experts, "norms": pc.norms, "lm_head": pc.lm_head}
    return {c: n for c, n in parts.items() if n}


def assert_counts(cfg):
    tensors = model_tensors(cfg)
    assert sum(t.params for t in tensors) == count_params(cfg).total
    assert by_component(tensors) == breakdown(cfg)
    for t in tensors:
        size = 1
        for dim in t.shape:
            size *= dim
        assert t.params == size, t


@pytest.mark.parametrize("name", list(models.presets()))
def test_every_preset_sums_to_its_parameter_count(name):
    assert_counts(models.presets()[name].config)


@pytest.mark.parametrize("name", list(REAL))
def test_real_config_json_files_sum_to_their_count(name):
    assert_counts(import_config(REAL[name]).config)


@pytest.mark.parametrize("body", hf_configs_moe.random_configs(per_family=6, seed=14),
                         ids=lambda b: b["model_type"])
def test_random_mixture_of_experts_configs_sum_to_their_count(body):
    assert_counts(import_config(body).config)


_SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
          "num_hidden_layers": 3, "vocab_size": 100}
_MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
_MLA = {**_SMALL, **_MOE, "num_key_value_heads": 4, "n_routed_experts": 4, "first_k_dense_replace": 1,
        "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
# model_type -> (llama.cpp architecture whose tensor names convert_hf_to_gguf.py uses, config.json)
FAMILIES = {
    "llama": ("LLAMA", {**_SMALL, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}),
    "qwen3": ("QWEN3", {**_SMALL, "head_dim": 24, "tie_word_embeddings": False}),
    "gemma2": ("GEMMA2", {**_SMALL, "head_dim": 24, "sliding_window": 16}),
    "olmo2": ("OLMO2", {**_SMALL, "eos_token_id": 1, "pad_token_id": 1}),
    "starcoder2": ("STARCODER2", {**_SMALL, "bos_token_id": 0, "eos_token_id": 0}),
    "mixtral": ("LLAMA", {**_SMALL, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": ("QWEN2MOE", {**_SMALL, **_MOE, "num_experts": 4, "shared_expert_intermediate_size": 48,
                               "tie_word_embeddings": False}),
    "deepseek_v3": ("DEEPSEEK2", {**_MLA, "n_shared_experts": 1, "q_lora_rank": 24, "n_group": 2,
                                  "topk_group": 1, "tie_word_embeddings": False}),
    "deepseek_v2": ("DEEPSEEK2", {**_MLA, "n_shared_experts": 2, "q_lora_rank": None,
                                  "attention_bias": True}),
    # The hybrids' small configs: Mamba-2 (Bamba, as llama.cpp's granite hybrid), Mamba-1 beside experts
    # (Jamba), attention and Mamba-2 side by side (Falcon-H1), one block a layer with experts
    # (Nemotron-H, whose converter reads the checkpoint's backbone.* names).
    **{family: (arch, {k: v for k, v in hf_configs_hybrid.SMALL[family].items() if k != "model_type"})
       for family, arch in (("bamba", "GRANITE_HYBRID"), ("jamba", "JAMBA"), ("falcon_h1", "FALCON_H1"),
                            ("nemotron_h", "NEMOTRON_H_MOE"))},
    # Gated DeltaNet beside gated attention, every layer's MLP routed (llama.cpp's qwen3next has no
    # dense MLP layers, so mlp_only_layers is left out).
    "qwen3_next": ("QWEN3NEXT", {k: v for k, v in hf_configs_hybrid.SMALL["qwen3_next"].items()
                                 if k not in ("model_type", "mlp_only_layers")}),
}


def transformers_tensors(model_type: str, arch: str, body: dict) -> dict[str, tuple[int, ...]]:
    """GGUF name -> shape of every parameter transformers builds, named by gguf's TensorNameMap
    (what convert_hf_to_gguf.py writes). transformers 5.23 fuses routed experts' gate and up
    projections in one (n_experts, 2 x d_ff_expert, d_model) tensor: split in half, as the
    converter does. Mamba's dt_bias is renamed dt_proj.bias before mapping, as the converter's
    Mamba2Model does, and its A and D keep no suffix (llama.cpp loads tn(LLM_TENSOR_SSM_A, i))."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **body))
    layers = body.get("num_hidden_layers") or len(body["hybrid_override_pattern"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch], layers)
    out = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        # Nemotron-H's two-matrix experts, which the converter merges from the checkpoint's per expert
        if name.endswith(("mixer.experts.up_proj", "mixer.experts.down_proj")):
            layer, kind = name.split(".")[2], name.rsplit("_", 1)[0].rsplit(".", 1)[-1]
            out[f"blk.{layer}.ffn_{kind}_exps.weight"] = shape
            continue
        if name.endswith("experts.gate_up_proj"):
            layer = name.split(".")[2]
            half = (shape[0], shape[1] // 2, shape[2])
            out[f"blk.{layer}.ffn_gate_exps.weight"] = out[f"blk.{layer}.ffn_up_exps.weight"] = half
            continue
        if model_type == "nemotron_h":  # the checkpoint's names, which the converter maps
            name = name.replace("model.", "backbone.", 1).replace(".dt_bias", ".dt.bias")
        elif name.endswith(".dt_bias"):
            name = name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert mapped is not None, name
        bare = mapped.rsplit(".", 1)[-1] in ("ssm_a", "ssm_d")
        out[mapped if mapped.endswith((".weight", ".bias")) or bare else mapped + ".weight"] = shape
    return out


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_tensors_are_those_transformers_builds_under_llama_cpp_names(model_type):
    arch, body = FAMILIES[model_type]
    cfg = import_config({"model_type": model_type, **body}).config
    ours = {t.gguf_name: t.shape for t in model_tensors(cfg)}
    assert ours == transformers_tensors(model_type, arch, body)


@pytest.mark.parametrize("name,tp", [("llama2-70b", 8), ("llama3-8b", 16), ("mixtral-8x7b", 8),
                                     ("deepseek-v3", 8), ("qwen3-30b-a3b", 4), ("gemma-2-9b", 16),
                                     ("gpt2", 4), ("deepseek-v2-lite", 16)])
def test_the_split_is_the_one_training_memory_counts(name, tp):
    # Where tp divides every split dimension the largest rank's share is exact, and equals what
    # sharding.py gives one GPU (its routed experts and everything else) for one pipeline stage.
    cfg = models.presets()[name].config
    if name == "gpt2":  # nanoGPT's vocabulary padded to 50304, so that 4 ranks divide it
        cfg = dataclasses.replace(cfg, vocab_size=50304)
    per_gpu = 0
    for t in model_tensors(cfg):
        size = 1
        for dim in _shard(t, tp, cfg.kv_heads):
            size *= dim
        per_gpu += size
    (_, outside, routed), = stage_params(cfg, tp, 1)
    assert per_gpu == outside + routed


def test_kv_heads_replicate_past_n_kv_heads():
    cfg = models.presets()["llama3-8b"].config  # 8 KV heads of 128
    k = next(t for t in model_tensors(cfg) if t.name == "attn_k.weight")
    assert k.tp_split == "kv" and k.shape == (1024, 4096)
    assert [_shard(k, tp, 8)[0] for tp in (1, 2, 8, 16, 32)] == [1024, 512, 128, 128, 128]


def test_deepseek_v3_enumerates_in_microseconds_once_cached():
    cfg = models.presets()["deepseek-v3"].config
    tensors = model_tensors(cfg)
    assert len(tensors) > 61 * 10
    start = time.perf_counter()
    for _ in range(1000):
        model_tensors(cfg)
    assert (time.perf_counter() - start) / 1000 < 1e-4  # well under a millisecond
