"""Weight bytes of the non-GGUF formats against the tensors their published layouts hold, built
with torch (GPTQ, AWQ, FP8, INT8) or made by bitsandbytes itself (NF4); which tensors a model
keeps unquantized; tensor parallelism; and every refusal naming its field."""

import math

import bitsandbytes as bnb_nn
import bitsandbytes.functional as bnb
import gguf
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig
from transformers.integrations.bitsandbytes import replace_with_bnb_linear
from transformers.quantizers.base import get_keys_to_not_convert

from app.accounting import models
from app.accounting.errors import InvalidInput
from app.accounting.hf import import_config
from app.accounting.inference.quant import FORMATS, list_formats, tensor_bytes, tensor_storage, weight_bytes
from tests.support.hf_configs_moe import QWEN15_MOE_A27B

SHAPES = [(4096, 4096), (1024, 4096), (11008, 4096), (4096, 11008), (256, 384)]


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.nbytes for t in tensors)


def gptq_buffers(rows: int, cols: int, g: int) -> tuple[torch.Tensor, ...]:
    """AutoGPTQ's QuantLinear buffers for 4 bits (qlinear_cuda_old.py), bias-free."""
    g = cols if g == -1 else g
    return (torch.zeros((cols // 32 * 4, rows), dtype=torch.int32),
            torch.zeros((math.ceil(cols / g), rows // 32 * 4), dtype=torch.int32),
            torch.zeros((math.ceil(cols / g), rows), dtype=torch.float16),
            torch.tensor([i // g for i in range(cols)], dtype=torch.int32))


def awq_buffers(rows: int, cols: int, g: int) -> tuple[torch.Tensor, ...]:
    """AutoAWQ's WQLinear_GEMM buffers for 4 bits (awq/modules/linear/gemm.py), bias-free."""
    return (torch.zeros((cols, rows // 8), dtype=torch.int32),
            torch.zeros((cols // g, rows // 8), dtype=torch.int32),
            torch.zeros((cols // g, rows), dtype=torch.float16))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("g", [32, 64, 128, -1])
def test_gptq_is_autogptqs_buffers(shape, g):
    assert tensor_bytes("gptq_int4", shape, group_size=g) == nbytes(*gptq_buffers(*shape, g))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("g", [32, 64, 128])
def test_awq_is_autoawqs_buffers(shape, g):
    assert tensor_bytes("awq_int4", shape, group_size=g) == nbytes(*awq_buffers(*shape, g))


def mxfp4_buffers(rows: int, cols: int) -> tuple[torch.Tensor, ...]:
    """A gpt-oss checkpoint's expert matrix: <name>_blocks, 16 bytes of two E2M1 values for each
    32 inputs, and <name>_scales, one E8M0 byte for each (the layout transformers' mxfp4.py declared
    as gate_up_proj_blocks and _scales, and the safetensors files hold)."""
    return (torch.zeros(rows, cols // 32, 16, dtype=torch.uint8),
            torch.zeros(rows, cols // 32, dtype=torch.uint8))


def mxfp8_buffers(rows: int, cols: int) -> tuple[torch.Tensor, ...]:
    """vLLM modelopt.py ModelOptMxFp8LinearMethod.create_weights: E4M3 weight, E8M0 scale per 32 inputs."""
    return (torch.zeros(rows, cols, dtype=torch.float8_e4m3fn),
            torch.zeros(rows, cols // 32, dtype=torch.uint8))


def nvfp4_buffers(rows: int, cols: int) -> tuple[torch.Tensor, ...]:
    """vLLM modelopt.py ModelOptNvFp4LinearMethod.create_weights for one matrix: packed E2M1 weight,
    E4M3 scale per 16 inputs, float32 weight_scale_2 and input_scale."""
    return (torch.zeros(rows, cols // 2, dtype=torch.uint8),
            torch.zeros(rows, cols // 16, dtype=torch.float8_e4m3fn),
            torch.zeros(1, dtype=torch.float32), torch.zeros(1, dtype=torch.float32))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("fmt", "buffers"), [("mxfp4", mxfp4_buffers), ("mxfp8", mxfp8_buffers),
                                              ("nvfp4", nvfp4_buffers)])
def test_microscaled_formats_are_their_published_layouts(shape, fmt, buffers):
    assert tensor_bytes(fmt, shape) == nbytes(*buffers(*shape))
    assert tensor_bytes(fmt, (4, *shape)) == 4 * nbytes(*buffers(*shape))  # experts, each its own scales


def test_a_microscaled_matrix_whose_inputs_split_a_block_is_refused_naming_the_field():
    for fmt, cols in (("mxfp4", 2880 + 16), ("mxfp8", 100), ("nvfp4", 2888)):
        with pytest.raises(InvalidInput) as refused:
            tensor_bytes(fmt, (128, cols))
        assert refused.value.field == "weight_format" and f"{cols} inputs" in refused.value.message
    # A tensor-parallel shard that splits a block is refused naming tensor_parallel: Qwen1.5-MoE's
    # experts' down_proj has 1,408 inputs, 176 on each of 8 ranks, not a multiple of 32.
    with pytest.raises(InvalidInput) as refused:
        weight_bytes(QWEN2_MOE, "mxfp8", tensor_parallel=8)
    assert refused.value.field == "tensor_parallel" and "176 inputs" in refused.value.message


def test_mxfp4_keeps_attention_as_gpt_oss_does_and_nvfp4_splits_over_ranks():
    answer = weight_bytes(MIXTRAL, "mxfp4")
    assert answer.kept == ["embeddings", "attention", "router", "norms", "lm_head"]
    # 32 layers of 8 experts, each w1 and w3 (14,336 x 4,096) and w2 (4,096 x 14,336).
    assert answer.by_component["routed_experts"] == 32 * 8 * (2 * nbytes(*mxfp4_buffers(14336, 4096))
                                                               + nbytes(*mxfp4_buffers(4096, 14336)))
    two = weight_bytes(LLAMA2_7B, "nvfp4", tensor_parallel=2)
    # Column-split q/k/v/gate/up halve their rows; row-split o/down halve their inputs; each shard
    # keeps its own two float32 scales.
    one = weight_bytes(LLAMA2_7B, "nvfp4")
    halves = 32 * (4 * nbytes(*nvfp4_buffers(2048, 4096)) + 2 * nbytes(*nvfp4_buffers(5504, 4096))
                   + nbytes(*nvfp4_buffers(4096, 5504)))
    whole = 32 * (4 * nbytes(*nvfp4_buffers(4096, 4096)) + 3 * nbytes(*nvfp4_buffers(11008, 4096)))
    assert one.by_storage["nvfp4"] == whole
    norms = 65 * 4096 * 2  # bfloat16, on every rank; the embeddings and the head split by vocabulary
    assert two.by_storage == one.by_storage
    assert two.per_gpu_bytes - halves == (one.total_bytes - whole - norms) // 2 + norms


def test_experts_are_quantized_one_by_one():
    # A stacked (n_experts, rows, cols) tensor is n_experts matrices with their own scales.
    for fmt in ("gptq_int4", "awq_int4", "nf4", "fp8_e4m3", "fp8_e4m3_block128", "int8_channel"):
        assert tensor_bytes(fmt, (8, 1024, 4096)) == 8 * tensor_bytes(fmt, (1024, 4096))


@pytest.mark.parametrize("shape", SHAPES + [(33, 7), (100, 64)])
@pytest.mark.parametrize("double", [False, True])
def test_nf4_is_what_bitsandbytes_keeps(shape, double):
    weight = torch.randn(shape, dtype=torch.bfloat16)
    packed, state = bnb.quantize_4bit(weight, blocksize=64, quant_type="nf4", compress_statistics=double)
    held = [packed, state.absmax, state.code]
    if double:
        held += [state.offset, state.state2.absmax, state.state2.code]
    fmt = "nf4_double_quant" if double else "nf4"
    assert tensor_bytes(fmt, shape) == nbytes(*held)


@pytest.mark.parametrize("shape", SHAPES + [(33, 7), (100, 64)])
def test_int8_is_what_bitsandbytes_keeps(shape):
    """LLM.int8's stored weight (Linear8bitLt, has_fp16_weights=False): int8 CB and one fp32 SCB
    absmax scale per output row, QLoRA's int8 base."""
    weight = bnb_nn.nn.Int8Params(torch.randn(shape, dtype=torch.float16), requires_grad=False,
                               has_fp16_weights=False).to("cpu")
    assert weight.dtype == torch.int8 and weight.SCB.shape == (shape[0],)
    assert tensor_bytes("int8_channel", shape) == nbytes(weight, weight.SCB)


@pytest.mark.parametrize("shape", SHAPES + [(129, 257), (7168, 18432)])
def test_fp8_and_int8_are_their_weight_and_scale_tensors(shape):
    rows, cols = shape
    weight = torch.empty(shape, dtype=torch.float8_e4m3fn)
    block = torch.empty((math.ceil(rows / 128), math.ceil(cols / 128)), dtype=torch.float32)  # scale_inv
    assert tensor_bytes("fp8_e4m3_block128", shape) == nbytes(weight, block)
    assert tensor_bytes("fp8_e4m3", shape) == nbytes(weight, torch.empty(1, dtype=torch.float32))
    channel = torch.empty((rows, 1), dtype=torch.float32)
    assert tensor_bytes("int8_channel", shape) == nbytes(torch.empty(shape, dtype=torch.int8), channel)


def test_bits_per_weight_follow_the_layouts():
    # A large matrix whose dims divide every block: the stated bits, to within the per-row terms.
    shape = (8192, 8192)
    for fmt in FORMATS.values():
        if fmt.kind in ("gguf", "float") or fmt.id.startswith("gptq"):
            continue
        bits = 8 * tensor_bytes(fmt.id, shape) / math.prod(shape)
        assert bits == pytest.approx(fmt.bits_per_weight, abs=0.005), fmt.id
    assert FORMATS["gptq_int4"].bits_per_weight == 4 + 20 / 128  # + 32/rows of g_idx, in bits_formula
    assert FORMATS["nf4"].bits_per_weight == 4.5 and FORMATS["gguf_q4_k_m"].bits_per_weight == 4.5


def test_every_format_is_listed_with_a_source():
    listed = list_formats()
    assert [f.id for f in listed] == list(FORMATS) and len(listed) == 18
    assert all(f.source and f.layout and f.bits_per_weight > 0 for f in listed)


LLAMA2_7B = models.presets()["llama2-7b"].config
MIXTRAL = models.presets()["mixtral-8x7b"].config
QWEN2_MOE = import_config(QWEN15_MOE_A27B).config


def test_quantized_formats_keep_embeddings_head_norms_and_router():
    answer = weight_bytes(MIXTRAL, "awq_int4")
    assert answer.kept == ["embeddings", "router", "norms", "lm_head"]
    router = 32 * 8 * 4096
    embeddings = 2 * 32000 * 4096
    norms = 65 * 4096
    assert answer.unquantized_params == router + embeddings + norms
    assert answer.by_storage["bfloat16"] == 2 * answer.unquantized_params
    assert answer.quantized_params + answer.unquantized_params == answer.params == 46_702_792_704


_TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
         "num_hidden_layers": 2, "vocab_size": 128, "tie_word_embeddings": False}


@pytest.mark.parametrize("model_type,extra,keep", [
    ("llama", {}, None),
    # transformers 5.23 holds Mixtral's experts as stacked parameters and its router as a bare
    # weight, not nn.Linear: bitsandbytes leaves both, as `keep` with routed_experts does.
    ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2},
     ["embeddings", "lm_head", "norms", "router", "routed_experts"]),
])
def test_nf4_quantizes_the_layers_transformers_hands_to_bitsandbytes(model_type, extra, keep):
    body = {**_TINY, **extra}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **body))
    model = replace_with_bnb_linear(model, modules_to_not_convert=get_keys_to_not_convert(model),
                                    quantization_config=BitsAndBytesConfig(load_in_4bit=True))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, body["num_hidden_layers"])
    theirs = {names.get_name(f"{n}.weight", try_suffixes=(".weight",)) for n, m in model.named_modules()
              if isinstance(m, bnb_nn.nn.Linear4bit)}
    cfg = import_config({"model_type": model_type, **body}).config
    ours = {name for name, how in tensor_storage(cfg, "nf4", keep=keep).items() if how == "nf4"}
    assert ours == theirs and len(ours) == 2 * (7 if model_type == "llama" else 4)


def test_keep_is_chosen():
    everything = weight_bytes(LLAMA2_7B, "nf4", keep=[])
    assert everything.kept == ["norms"]  # 1-D tensors are never quantized
    head_too = weight_bytes(LLAMA2_7B, "nf4", keep={"embeddings", "lm_head", "norms", "attention"})
    assert "attention" in head_too.kept and head_too.total_bytes > weight_bytes(LLAMA2_7B, "nf4").total_bytes
    fp32 = weight_bytes(LLAMA2_7B, "float32", keep=["embeddings"])  # embeddings left in bf16
    assert fp32.total_bytes == 4 * 6_738_415_616 - 2 * 32000 * 4096
    assert weight_bytes(LLAMA2_7B, "Q4_K_M").format == "gguf_q4_k_m"  # aliases, any case


def test_tensor_parallel_splits_as_vllm_does():
    one = weight_bytes(LLAMA2_7B, "bfloat16")
    two = weight_bytes(LLAMA2_7B, "bfloat16", tensor_parallel=2)
    norms = 2 * (65 * 4096)
    assert two.per_gpu_bytes == (one.total_bytes - norms) // 2 + norms and two.total_bytes == one.total_bytes
    # GPTQ on two ranks: each rank holds AutoGPTQ's buffers for its shard of every matrix (q/k/v,
    # gate/up cut by rows, o/down by columns, as vLLM's parallel layers), half the bf16
    # vocabulary of the embedding and the head, and every norm.
    shards = [(2048, 4096)] * 3 + [(4096, 2048)] + [(5504, 4096)] * 2 + [(4096, 5504)]
    layer = sum(nbytes(*gptq_buffers(rows, cols, 128)) for rows, cols in shards)
    expected = 32 * layer + 2 * (2 * 16000 * 4096) + norms
    assert weight_bytes(LLAMA2_7B, "gptq_int4", tensor_parallel=2).per_gpu_bytes == expected


@pytest.mark.parametrize("call,field", [
    (lambda: weight_bytes(LLAMA2_7B, "int3"), "weight_format"),
    (lambda: weight_bytes(LLAMA2_7B, "gptq_int4", group_size=96), "group_size"),
    (lambda: weight_bytes(LLAMA2_7B, "gptq_int4", group_size=0), "group_size"),
    (lambda: weight_bytes(QWEN2_MOE, "awq_int4", keep=[]), "weight_format"),  # the d_model -> 1 gate
    (lambda: weight_bytes(LLAMA2_7B, "nf4", keep=["experts"]), "keep"),
    (lambda: weight_bytes(LLAMA2_7B, "nf4", base_dtype="int8"), "base_dtype"),
    (lambda: weight_bytes(LLAMA2_7B, "nf4", base_dtype="bf17"), "base_dtype"),
    (lambda: weight_bytes(LLAMA2_7B, "gptq_int4", tensor_parallel=8), "tensor_parallel"),  # 11008/8 = 1376
    (lambda: weight_bytes(LLAMA2_7B, "nf4", tensor_parallel=3), "tensor_parallel"),
    (lambda: tensor_bytes("awq_int4", (100, 4096)), "weight_format"),  # 100 rows: not 8-packed
    (lambda: tensor_bytes("nf4", (4096,)), "shape"),
])
def test_refusals_name_the_field(call, field):
    with pytest.raises(InvalidInput) as refused:
        call()
    assert refused.value.field == field


def test_an_unknown_format_lists_the_formats():
    with pytest.raises(InvalidInput) as refused:
        weight_bytes(LLAMA2_7B, "q4km_typo")
    assert "gguf_q4_k_m" in refused.value.message and "awq_int4" in refused.value.message


@pytest.mark.parametrize(("preset", "total_size"), [("gpt-oss-20b", 13_761_264_768),
                                                    ("gpt-oss-120b", 65_248_815_744)])
def test_gpt_oss_in_mxfp4_is_its_published_checkpoint(preset, total_size):
    """The `total_size` of openai/gpt-oss-20b's and -120b's model.safetensors.index.json: the
    experts' MXFP4 blocks and scales, everything else (their biases too) in bf16."""
    answer = weight_bytes(models.presets()[preset].config, "mxfp4", base_dtype="bfloat16")
    assert answer.total_bytes == total_size
    assert answer.kept == ["embeddings", "attention", "router", "norms", "lm_head"]
