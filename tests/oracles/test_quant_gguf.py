"""GGUF weight bytes against llama.cpp's own Python package (gguf 0.19: its block sizes, and
its quantizers where it has them), and whole models against published GGUF files.

Published file sizes, bytes (TheBloke's Hugging Face repositories, as listed with their byte
sizes in dynaboard/ai-studio src/providers/models/model-list.ts; TheBloke's model card for
Llama-2-7B-GGUF gives Q4_0 as 3.83 GB, Q4_K_M 4.08 GB, Q8_0 7.16 GB). A file is its tensors
plus metadata (the tokenizer, under a megabyte): so the tensors must come to just under each
file, and every quantization of one model must leave the same metadata over.
"""

import dataclasses
import math

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from app.accounting import models
from app.accounting.errors import InvalidInput
from app.accounting.inference import ggml
from app.accounting.inference.quant import tensor_bytes, tensor_storage, weight_bytes
from app.accounting.transformer import TransformerConfig

PURE = {"gguf_q8_0": "Q8_0", "gguf_q6_k": "Q6_K", "gguf_q4_0": "Q4_0"}


def oracle_bytes(gtype: str, shape: tuple[int, ...]) -> int:
    per, size = GGML_QUANT_SIZES[GGMLQuantizationType[gtype]]
    assert shape[-1] % per == 0
    return math.prod(shape) // per * size


def test_block_layouts_are_ggmls():
    for gtype, block in ggml.GGML_BLOCK.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[gtype]] == block


@pytest.mark.parametrize("fmt,gtype", list(PURE.items()))
@pytest.mark.parametrize("shape", [(4096, 4096), (1024, 11008), (7, 512), (8, 96, 768)])
def test_pure_formats_are_blocks_of_ggml_sizes(fmt, gtype, shape):
    assert tensor_bytes(fmt, shape) == oracle_bytes(gtype, shape)


@pytest.mark.parametrize("fmt,gtype,shape", [
    ("gguf_q8_0", "Q8_0", (48, 320)), ("gguf_q4_0", "Q4_0", (48, 320)), ("gguf_q8_0", "Q8_0", (3, 16, 64)),
    # A K-quant whose rows do not divide 256 falls back (tensor_type_fallback): Q4_K to Q5_0, Q5_K
    # to Q5_1, Q6_K to Q8_0; gguf quantizes those three for real.
    ("gguf_q4_k_m", "Q5_0", (40, 3200)), ("gguf_q5_k_m", "Q5_1", (40, 3200)),
    ("gguf_q6_k", "Q8_0", (40, 3200)),
])
def test_bytes_are_those_of_a_real_quantized_array(fmt, gtype, shape):
    data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    quantized = gguf.quants.quantize(data, GGMLQuantizationType[gtype])
    assert tensor_bytes(fmt, shape) == quantized.nbytes


def test_a_type_without_fallback_is_refused_naming_the_format():
    with pytest.raises(InvalidInput) as refused:
        tensor_bytes("gguf_q4_0", (64, 100))
    assert refused.value.field == "weight_format" and "no fallback" in refused.value.message
    # K-quants fall back to F16 when the rows do not divide 32 either.
    assert tensor_bytes("gguf_q4_k_m", (64, 100)) == 64 * 100 * 2


LLAMA2_7B = models.presets()["llama2-7b"].config
MISTRAL_7B = models.presets()["mistral-7b"].config
# Phind-CodeLlama-34B-v2: Llama 2's 34B shape (48 layers, d_ff 22016, 8 KV heads of 128).
CODELLAMA_34B = dataclasses.replace(models.presets()["llama2-70b"].config, n_layers=48, d_ff=22016)
FILES = {
    "llama-2-7b": (LLAMA2_7B, {"gguf_q4_k_m": 4_081_004_224, "gguf_q5_k_m": 4_783_156_928,
                               "gguf_q8_0": 7_161_089_728}),
    "mistral-7b-instruct-v0.1": (MISTRAL_7B, {"gguf_q4_k_m": 4_368_438_944, "gguf_q5_k_m": 5_131_409_056}),
    "phind-codellama-34b-v2": (CODELLAMA_34B, {"gguf_q4_k_m": 20_219_900_064, "gguf_q5_k_m": 23_838_797_984,
                                               "gguf_q8_0": 35_856_052_384}),
}


@pytest.mark.parametrize("name", list(FILES))
def test_published_gguf_files_are_the_tensors_plus_the_same_metadata(name):
    cfg, files = FILES[name]
    metadata = {fmt: size - weight_bytes(cfg, fmt).total_bytes for fmt, size in files.items()}
    for fmt, size in files.items():
        assert 0 < metadata[fmt] < 0.01 * size, (fmt, metadata[fmt])
        assert metadata[fmt] < 1_000_000  # a 32k-token vocabulary and a few keys
    assert len(set(metadata.values())) == 1, metadata  # one file's metadata, whatever the format


def test_llama2_7b_in_each_format_the_brief_names():
    params = 6_738_415_616
    assert weight_bytes(LLAMA2_7B, "bfloat16").total_bytes == 2 * params
    card_gb = {"gguf_q4_0": 3.83, "gguf_q4_k_m": 4.08, "gguf_q8_0": 7.16}  # TheBloke's card, 1e9 bytes
    for fmt, gb in card_gb.items():
        ours = weight_bytes(LLAMA2_7B, fmt).total_bytes
        assert abs(ours / 1e9 - gb) / gb < 0.01
        assert round((ours + 741_056) / 1e9, 2) == gb  # with the metadata measured above


def types_of(cfg: TransformerConfig, fmt: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for gtype in tensor_storage(cfg, fmt).values():
        counts[gtype] = counts.get(gtype, 0) + 1
    return counts


def test_llama_cpp_loads_llama2_7b_q4_k_m_with_these_types():
    # llama.cpp's loader on a Llama-2-7B Q4_K_M file: "type f32: 65 tensors, type q4_K: 193
    # tensors, type q6_K: 33 tensors" (llama_model_loader log); TheBloke's card: "Q6_K for half
    # of the attention.wv and feed_forward.w2 tensors, else Q4_K".
    types = tensor_storage(LLAMA2_7B, "gguf_q4_k_m")
    assert types_of(LLAMA2_7B, "gguf_q4_k_m") == {"F32": 65, "Q4_K": 193, "Q6_K": 33}
    for name in ("attn_v.weight", "ffn_down.weight"):
        assert sum(types[f"blk.{i}.{name}"] == "Q6_K" for i in range(32)) == 16  # half of them


def test_eight_experts_keep_attention_k_and_v_in_q8_0():
    # llama.cpp's loader on a Q4_K_M file of a Mixtral-8x7B fine-tune: "type q8_0: 64 tensors",
    # attn_k and attn_v of 32 layers (llama-quant.cpp: "for the 8-expert model, bumping this to
    # Q8_0 trades just ~128MB").
    assert types_of(models.presets()["mixtral-8x7b"].config, "gguf_q4_k_m")["Q8_0"] == 64


def test_fallbacks_are_said():
    # OpenLLaMA-3B's shape: d_model 3200 and d_ff 8640 divide 32 but not 256.
    cfg = TransformerConfig(n_layers=26, d_model=3200, n_heads=32, vocab_size=32000, d_ff=8640,
                            mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                            position="rope")
    answer = weight_bytes(cfg, "gguf_q4_k_m")
    assert set(answer.by_storage) == {"Q5_0", "Q8_0", "F32"}  # Q4_K -> Q5_0, Q6_K -> Q8_0
    assert any("ffn_down.weight" in w and "Q8_0" in w for w in answer.warnings)
    with pytest.raises(InvalidInput) as refused:
        weight_bytes(dataclasses.replace(cfg, d_model=3208, n_heads=8), "gguf_q8_0")
    assert refused.value.field == "weight_format"


def test_tied_embeddings_take_the_output_type():
    tied = models.presets()["llama3.2-1b"].config
    assert tied.tied_embeddings
    types = tensor_storage(tied, "gguf_q4_0")
    assert types["token_embd.weight"] == "Q6_K" and "output.weight" not in types
    assert types["blk.0.attn_q.weight"] == "Q4_0"


def test_deepseek_v3_files_as_published():
    # bartowski's DeepSeek-V3-0324 GGUFs (llama.cpp release b4944), in GB of 1e9 as Hugging Face
    # lists them: Q8_0 713.29, Q6_K 550.80, Q5_K_M 475.40, Q4_K_M 404.43. Those files keep
    # latent attention's attn_kv_b in the default type; today's llama-quant.cpp counts it with
    # attn_v (category_is_attn_v), so its use_more_bits layers move to Q6_K: take that back out.
    cfg = models.presets()["deepseek-v3"].config
    files_gb = {"gguf_q8_0": 713.29, "gguf_q6_k": 550.80, "gguf_q5_k_m": 475.40, "gguf_q4_k_m": 404.43}
    for fmt, gb in files_gb.items():
        ours = weight_bytes(cfg, fmt).total_bytes
        for name, how in tensor_storage(cfg, fmt).items():
            if name.endswith("attn_kv_b.weight") and how == "Q6_K" and fmt in ("gguf_q5_k_m", "gguf_q4_k_m"):
                ours -= tensor_bytes("gguf_q6_k", (32768, 512)) - tensor_bytes(fmt, (32768, 512))
        # The file adds its metadata (a 129k-token vocabulary and its merges: megabytes), and
        # two decimals round by up to 5 MB.
        assert -5e6 < gb * 1e9 - ours < 25e6, (fmt, gb * 1e9 - ours)
