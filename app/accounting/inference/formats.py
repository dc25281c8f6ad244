"""Weight storage formats: each one's bytes for a tensor, as its published layout stores it.

A matrix is (rows, cols) = (out_features, in_features); a stack of routed experts
(n_experts, rows, cols) is n_experts matrices, each quantized on its own (its own scales,
zero points, g_idx). Bits per weight are stated for a matrix whose dims divide the format's
blocks and groups, overheads per group and block included; per-row and per-tensor terms (an
fp32 scale per row or per matrix, GPTQ's g_idx) are in `bits_formula`, as they vanish with size.
"""

from dataclasses import dataclass
from typing import Literal

from app.accounting import names
from app.accounting.errors import InvalidInput
from app.accounting.inference import ggml
from app.accounting.records import RECORD

Kind = Literal["float", "fp8", "fp8_block", "int8_channel", "gptq", "awq", "nf4", "nf4_dq", "mx", "nvfp4",
               "gguf"]

FP32_BYTES = 4  # one scale, absmax or offset (IEEE binary32)
FP16_BYTES = 2  # a GPTQ/AWQ scale or bias (IEEE binary16)
INT32_BYTES = 4  # a GPTQ/AWQ packed word, a g_idx entry
INT4_PER_INT32 = 8  # 4-bit values packed per int32 word (GPTQ qweight/qzeros, AWQ)
FP8_BLOCK_WEIGHTS = 128  # DeepSeek-V3's weight_block_size [128, 128]
NF4_BLOCK_WEIGHTS = 64  # bitsandbytes' quantize_4bit blocksize, the QLoRA paper's block
NF4_NESTED_BLOCK_ABSMAX = 256  # double quantization: 8-bit absmax in blocks of 256 (quantize_blockwise)
NF4_CODE_BYTES = 16 * FP32_BYTES  # the 16-entry NF4 code, get_4bit_type(), one per tensor
# Double quantization's 8-bit dynamic code: quantize_blockwise copies it into each tensor's
# nested state (code.to(device, copy=True)), and checkpoints save it as nested_quant_map.
NF4_NESTED_CODE_BYTES = 256 * FP32_BYTES
# Microscaling (OCP Microscaling Formats (MX) Specification v1.0, section 5): k = 32 elements along
# the reduction dimension share one E8M0 scale, a power of two in one byte. NVFP4 (NVIDIA's, as
# TensorRT Model Optimizer writes it and vLLM's modelopt.py loads it): 16 E2M1 elements share an
# E4M3 scale, and each matrix has a float32 global weight scale and a float32 input scale.
MX_BLOCK_WEIGHTS = 32
E8M0_BYTES = 1
NVFP4_BLOCK_WEIGHTS = 16
E4M3_BYTES = 1
NVFP4_PER_MATRIX_BYTES = 2 * FP32_BYTES  # weight_scale_2 and input_scale, one each per matrix
DEFAULT_KEEP = ("embeddings", "lm_head", "norms", "router")
# gpt-oss's quantization_config: modules_to_not_convert are self_attn, the router, embed_tokens and
# lm_head; only its experts are MXFP4.
MXFP4_KEEP = (*DEFAULT_KEEP, "attention")

_GPTQ_SRC = ("AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py QuantLinear (transformers' "
             "GPTQ checkpoints); vLLM gptq.py refuses input_size_per_partition % group_size != 0")
_KEPT_NOTE = ("Kept in the base dtype by default: embeddings, the LM head, norms and routers "
              "(and Qwen2-MoE's shared-expert gate, a d_model -> 1 gate kept with them). ")


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """A way of storing a model's weight matrices, with its bits per weight and source."""

    id: str
    name: str
    kind: Kind
    bits_per_weight: float
    """Bits per weight of a matrix whose dims divide the blocks (group_size 128 for GPTQ and
    AWQ), block and group overheads included; for GGUF mixes, the mix's default type."""
    bits_formula: str
    """The exact bits per weight, with the per-row and per-tensor terms."""
    layout: str
    source: str
    notes: str
    default_keep: tuple[str, ...]
    """Components left in the base dtype unless `keep` says otherwise."""
    aliases: tuple[str, ...] = ()

    __pydantic_config__ = RECORD


def _fmt(id_: str, name: str, kind: Kind, bpw: float, formula: str, layout: str, source: str,
         notes: str, aliases: tuple[str, ...] = (), keep: tuple[str, ...] | None = None) -> WeightFormat:
    if keep is None:
        keep = () if kind in ("float", "gguf") else DEFAULT_KEEP
    return WeightFormat(id_, name, kind, bpw, formula, layout, source, notes, keep, aliases)


def _gguf(id_: str, name: str, layout: str, notes: str, aliases: tuple[str, ...]) -> WeightFormat:
    per, size = ggml.GGML_BLOCK[ggml.FTYPES[id_]]
    return _fmt(id_, name, "gguf", 8 * size / per, f"8 x {size} / {per}", layout,
                "ggml/src/ggml-common.h block structs; type per tensor from llama.cpp "
                "src/llama-quant.cpp llama_tensor_get_type", notes, aliases)


_FORMATS = (
    _fmt("float32", "float32", "float", 32, "32", "IEEE 754 binary32", "IEEE 754-2008", "", ("fp32",)),
    _fmt("bfloat16", "bfloat16", "float", 16, "16", "sign, 8 exponent, 7 mantissa bits",
         "Google Brain bfloat16", "", ("bf16",)),
    _fmt("float16", "float16", "float", 16, "16", "IEEE 754 binary16", "IEEE 754-2008", "", ("fp16",)),
    _fmt("fp8_e4m3", "FP8 E4M3, per-tensor scale", "fp8", 8, "8 + 32 / (rows x cols)",
         "float8_e4m3fn weight (rows, cols), one fp32 weight_scale per matrix",
         "vLLM model_executor/layers/quantization/fp8.py (Fp8LinearMethod, per-tensor scales)",
         _KEPT_NOTE + "vLLM's Fp8Config quantizes linear layers only: embeddings, ParallelLMHead and "
         "MoE gates (built with quant_config=None) stay in the model dtype.", ("fp8",)),
    _fmt("fp8_e4m3_block128", "FP8 E4M3, 128x128 block scales", "fp8_block", 8 + 32 / FP8_BLOCK_WEIGHTS**2,
         "8 + 32 x ceil(rows/128) x ceil(cols/128) / (rows x cols)",
         "float8_e4m3fn weight (rows, cols), fp32 weight_scale_inv (ceil(rows/128), ceil(cols/128))",
         "DeepSeek-V3 inference/model.py Linear; config.json quantization_config weight_block_size "
         "[128, 128]", _KEPT_NOTE + "DeepSeek-V3's checkpoint keeps embed_tokens, lm_head, norms and "
         "the router gate in bf16 and every other matrix, latent projections included, in FP8.",
         ("fp8_block",)),
    _fmt("int8_channel", "INT8, per-output-channel scales", "int8_channel", 8, "8 + 32 / cols",
         "int8 weight (rows, cols), fp32 weight_scale (rows, 1)",
         "vLLM compressed_tensors_w8a8_int8.py CompressedTensorsW8A8Int8.create_weights (channel "
         "strategy: torch.float32 scales)", _KEPT_NOTE + "llm-compressor's W8A8 recipes ignore lm_head "
         "and MoE gates.", ("int8", "w8a8")),
    _fmt("gptq_int4", "GPTQ 4-bit", "gptq", 4 + (16 + 4) / 128, "4 + 20 / group_size + 32 / rows",
         "qweight int32 (cols/8, rows), qzeros int32 (cols/g, rows/8), scales fp16 (cols/g, rows), "
         "g_idx int32 (cols), bias fp16; group_size -1 is one group per column (g = cols)", _GPTQ_SRC,
         _KEPT_NOTE + "AutoGPTQ/GPTQModel quantize the linear layers inside the decoder blocks; "
         "lm_head only with lm_head=True; MoE gates are not among their layer_modules.", ("gptq",)),
    _fmt("awq_int4", "AWQ 4-bit (GEMM)", "awq", 4 + (16 + 4) / 128, "4 + 20 / group_size",
         "qweight int32 (cols, rows/8), qzeros int32 (cols/g, rows/8), scales fp16 (cols/g, rows), "
         "bias fp16; no g_idx", "AutoAWQ awq/modules/linear/gemm.py WQLinear_GEMM (asserts cols % g "
         "== 0 and rows % 8 == 0)", _KEPT_NOTE + "AutoAWQ quantizes the decoder blocks' linear layers "
         "and sets modules_to_not_convert = ['gate'] for MoE models.", ("awq",)),
    _fmt("nf4", "NF4 (bitsandbytes)", "nf4", 4 + 32 / NF4_BLOCK_WEIGHTS, "4 + 32/64 + 512 / (rows x cols)",
         "uint8 data (ceil(n/2), 1), fp32 absmax per 64-weight block, fp32 code[16]; n = rows x cols",
         "bitsandbytes 0.50 functional.quantize_4bit; QLoRA (Dettmers et al. 2023) block 64",
         _KEPT_NOTE + "transformers' bitsandbytes integration swaps nn.Linear only and keeps the output "
         "embedding (quantizers/base.py get_keys_to_not_convert). In transformers 5.23 MoE experts "
         "are stacked nn.Parameters, which it leaves unquantized too: keep routed_experts to match.",
         ("bnb_nf4",)),
    _fmt("nf4_double_quant", "NF4 with double quantization", "nf4_dq",
         4 + 8 / NF4_BLOCK_WEIGHTS + 32 / (NF4_BLOCK_WEIGHTS * NF4_NESTED_BLOCK_ABSMAX),
         "4 + 8/64 + 32/(64 x 256) + 8736 / (rows x cols)",
         "uint8 data (ceil(n/2), 1), uint8 absmax per 64-weight block, fp32 absmax per 256 of those, "
         "fp32 offset, fp32 code[16], and the nested 8-bit code, fp32[256]",
         "bitsandbytes 0.50 functional.quantize_4bit(compress_statistics=True); QLoRA section 3",
         _KEPT_NOTE + "Each tensor's nested state holds its own copy of the 256-entry dynamic code "
         "(1 KiB), as bitsandbytes 0.50 copies it per tensor.",
         ("nf4_dq", "bnb_nf4_dq")),
    _fmt("mxfp4", "MXFP4, E2M1 in blocks of 32 with E8M0 scales", "mx", 4 + 8 * E8M0_BYTES / MX_BLOCK_WEIGHTS,
         "4 + 8/32", "uint8 blocks (rows, cols/32, 16): two E2M1 weights a byte; uint8 E8M0 scales "
         "(rows, cols/32); cols a multiple of 32",
         "OCP Microscaling Formats (MX) v1.0; gpt-oss checkpoints (<name>_blocks, <name>_scales) as "
         "transformers' integrations/mxfp4.py declared them and vLLM's mxfp4.py loads them",
         "gpt-oss stores only its experts so (its quantization_config's modules_to_not_convert: "
         "self_attn, router, embed_tokens, lm_head), so attention is kept too by default.",
         ("mxfp4_e2m1", "mx_fp4"), keep=MXFP4_KEEP),
    _fmt("mxfp8", "MXFP8, E4M3 in blocks of 32 with E8M0 scales", "mx", 8 + 8 * E8M0_BYTES / MX_BLOCK_WEIGHTS,
         "8 + 8/32", "float8_e4m3fn weight (rows, cols), uint8 E8M0 weight_scale (rows, cols/32); cols a "
         "multiple of 32", "OCP Microscaling Formats (MX) v1.0; vLLM modelopt.py ModelOptMxFp8LinearMethod "
         "and compressed_tensors_w8a8_mxfp8.py create_weights", _KEPT_NOTE, ("mx_fp8",)),
    _fmt("nvfp4", "NVFP4, E2M1 in blocks of 16 with E4M3 scales", "nvfp4",
         4 + 8 * E4M3_BYTES / NVFP4_BLOCK_WEIGHTS, "4 + 8/16 + 64 / (rows x cols)",
         "uint8 weight (rows, cols/2): two E2M1 weights a byte; float8_e4m3fn weight_scale (rows, "
         "cols/16); float32 weight_scale_2 and input_scale per matrix; cols a multiple of 16",
         "vLLM modelopt.py ModelOptNvFp4LinearMethod.create_weights (TensorRT Model Optimizer "
         "checkpoints)", _KEPT_NOTE + "Model Optimizer's NVFP4 recipes leave lm_head and MoE routers "
         "in the model dtype.", ("nv_fp4", "modelopt_fp4")),
    _gguf("gguf_q8_0", "GGUF Q8_0", "blocks of 32: int8 weights + fp16 scale (34 bytes)",
          "Pure: every matrix Q8_0; 1-D tensors, norms and routers F32.", ("q8_0",)),
    _gguf("gguf_q6_k", "GGUF Q6_K", "super-blocks of 256: 6-bit weights, int8 scales of 16, fp16 d "
          "(210 bytes)", "Every matrix Q6_K (8-expert attn_k/attn_v Q8_0); F32 as above.", ("q6_k",)),
    _gguf("gguf_q5_k_m", "GGUF Q5_K_M", "Q5_K super-blocks of 256 (176 bytes), mixed with Q6_K",
          "llama.cpp's mix: Q5_K, with output (or tied token_embd), and attn_v and ffn_down on "
          "use_more_bits layers, in Q6_K.", ("q5_k_m",)),
    _gguf("gguf_q4_k_m", "GGUF Q4_K_M", "Q4_K super-blocks of 256 (144 bytes), mixed with Q6_K",
          "llama.cpp's mix: Q4_K, with output (or tied token_embd), and attn_v and ffn_down on "
          "use_more_bits layers, in Q6_K.", ("q4_k_m",)),
    _gguf("gguf_q4_0", "GGUF Q4_0", "blocks of 32: 4-bit weights + fp16 scale (18 bytes)",
          "Q4_0, with output (or tied token_embd) in Q6_K.", ("q4_0",)),
)
FORMATS: dict[str, WeightFormat] = {f.id: f for f in _FORMATS}
QUANTIZATION_LISTING = "GET /api/v1/quantization"
_BY_NAME = {names.normalised(n): f for f in _FORMATS for n in (f.id, *f.aliases)}


def lookup_format(name: object, *, field: str = "weight_format") -> WeightFormat:
    """A format by id or alias, case and separators ignored (Q4_K_M, q4-k-m, gguf_q4_k_m)."""
    fmt = FORMATS.get(name) if isinstance(name, str) else None  # an id: the common case, no normalising
    if fmt is None and isinstance(name, str):
        fmt = _BY_NAME.get(names.normalised(name))
    if fmt is None:
        close = names.unknown("weight format", name, [f.id for f in _FORMATS], QUANTIZATION_LISTING)
        raise InvalidInput(field, f"{close} (formats: {', '.join(FORMATS)})")
    return fmt


def check_group_size(group_size: object) -> int:
    if type(group_size) is not int or not (group_size == -1 or 1 <= group_size <= 1_048_576):
        raise InvalidInput("group_size", f"must be a positive integer or -1 (one group per input "
                           f"column), got {group_size!r}"[:160])
    return group_size


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _microscaled(fmt: WeightFormat, rows: int, cols: int, what: str) -> int:
    """One MXFP4, MXFP8 or NVFP4 matrix: the elements packed, one scale per block of the input
    dimension (and NVFP4's two float32 per-matrix scales). A block never straddles rows, and the
    loaders refuse an input dimension that does not divide it (vLLM: "not multiple of 16")."""
    block = NVFP4_BLOCK_WEIGHTS if fmt.kind == "nvfp4" else MX_BLOCK_WEIGHTS
    if cols % block:
        raise InvalidInput("weight_format", f"{fmt.name} scales blocks of {block} inputs; {what} has "
                                            f"{cols} inputs")
    element_bits = int(fmt.bits_per_weight)  # 4 or 8: the scale's share is the fraction
    data = rows * cols * element_bits // 8
    if fmt.kind == "nvfp4":
        return data + rows * (cols // block) * E4M3_BYTES + NVFP4_PER_MATRIX_BYTES
    return data + rows * (cols // block) * E8M0_BYTES


def _int4(fmt: WeightFormat, rows: int, cols: int, group_size: int, what: str) -> int:
    """One GPTQ or AWQ matrix: packed weights, packed zero points, fp16 scales (and GPTQ's g_idx)."""
    g = cols if group_size == -1 else group_size
    if rows % INT4_PER_INT32:
        raise InvalidInput("weight_format", f"{fmt.name} packs 8 output columns per int32 (qzeros); "
                           f"{what} has {rows} outputs")
    if fmt.kind == "gptq" and cols % INT4_PER_INT32:
        raise InvalidInput("weight_format", f"{fmt.name} packs 8 inputs per int32 (qweight); {what} "
                           f"has {cols} inputs")
    if cols % g:
        raise InvalidInput("group_size", f"{g} does not divide the {cols} inputs of {what}; "
                           f"{fmt.name} needs whole groups")
    groups = cols // g
    packed = INT32_BYTES * cols * rows // INT4_PER_INT32 + INT32_BYTES * groups * rows // INT4_PER_INT32
    scales = FP16_BYTES * groups * rows
    g_idx = INT32_BYTES * cols if fmt.kind == "gptq" else 0
    return packed + scales + g_idx


def matrix_bytes(fmt: WeightFormat, shape: tuple[int, ...], group_size: int = 128, what: str = "the tensor",
                 gtype: str | None = None) -> int:
    """Bytes of a tensor stored in `fmt` (for GGUF, as ggml type `gtype`, the ftype's default type
    when None). A float format takes any shape; the others take matrices and stacks of them."""
    numel = 1
    for dim in shape:
        numel *= dim
    if fmt.kind == "float":
        return numel * int(fmt.bits_per_weight) // 8
    if len(shape) < 2:
        raise InvalidInput("shape", f"{fmt.name} quantizes matrices; a 1-D tensor stays in the base dtype")
    if fmt.kind == "gguf":
        return ggml.ggml_bytes(gtype or ggml.FTYPES[fmt.id], shape)
    rows, cols = shape[-2], shape[-1]
    mats = numel // (rows * cols)
    n = rows * cols
    if fmt.kind == "fp8":
        per = n + FP32_BYTES
    elif fmt.kind == "fp8_block":
        per = n + FP32_BYTES * _ceil(rows, FP8_BLOCK_WEIGHTS) * _ceil(cols, FP8_BLOCK_WEIGHTS)
    elif fmt.kind == "int8_channel":
        per = n + FP32_BYTES * rows
    elif fmt.kind in ("gptq", "awq"):
        per = _int4(fmt, rows, cols, group_size, what)
    elif fmt.kind in ("mx", "nvfp4"):
        per = _microscaled(fmt, rows, cols, what)
    else:
        # Two 4-bit weights a byte, one absmax per block (fp32; or uint8, requantized in blocks
        # of 256 with an fp32 absmax each, an fp32 offset and its own 8-bit code).
        blocks = _ceil(n, NF4_BLOCK_WEIGHTS)
        if fmt.kind == "nf4_dq":
            nested = FP32_BYTES * _ceil(blocks, NF4_NESTED_BLOCK_ABSMAX) + FP32_BYTES + NF4_NESTED_CODE_BYTES
            absmax = blocks + nested
        else:
            absmax = FP32_BYTES * blocks
        per = _ceil(n, 2) + absmax + NF4_CODE_BYTES
    return mats * per


def tensor_bytes(fmt_id: str, shape: tuple[int, ...], *, group_size: int = 128) -> int:
    """Bytes of one tensor of `shape` ((rows, cols) = (out, in), or (n_experts, rows, cols)) in
    the format `fmt_id`. A GGUF mix stores it in its default type (Q4_K for Q4_K_M), moved to
    llama.cpp's fallback type where cols do not divide the block."""
    fmt = lookup_format(fmt_id)
    check_group_size(group_size)
    if (not isinstance(shape, (tuple, list)) or not shape
            or any(type(d) is not int or d < 1 for d in shape)):
        raise InvalidInput("shape", f"must list positive integer dimensions, got {shape!r}"[:160])
    shape = tuple(shape)
    if fmt.kind == "gguf" and len(shape) >= 2:
        gtype, _ = ggml.gguf_type(fmt.id, "tensor.weight", None, shape, n_layers=1, n_experts=0, tied=False)
        return ggml.ggml_bytes(gtype, shape)
    return matrix_bytes(fmt, shape, group_size)
