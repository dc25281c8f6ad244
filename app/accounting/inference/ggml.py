"""GGUF storage: ggml's block layouts, and the type llama.cpp's quantizer gives each tensor.

Block layouts are ggml's (ggml/src/ggml-common.h; gguf-py's GGML_QUANT_SIZES lists the same
(elements per block, bytes per block) pairs, and the tests check them against it):
- Q8_0: 32 int8 weights and one fp16 scale d: 34 bytes per 32 (8.5 bits per weight).
- Q4_0: 32 4-bit weights packed in 16 bytes and one fp16 d: 18 bytes per 32 (4.5 bpw).
- Q5_0: Q4_0 plus 4 bytes of fifth bits: 22 per 32. Q5_1: Q5_0 plus an fp16 min: 24 per 32.
- Q4_K: a 256-weight super-block of 8 sub-blocks of 32: fp16 d and dmin, 12 bytes of 6-bit
  sub-block scales and mins, 128 bytes of 4-bit quants: 144 bytes per 256 (4.5 bpw).
- Q5_K: Q4_K plus 32 bytes of fifth bits: 176 per 256 (5.5 bpw).
- Q6_K: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 sub-block scales, fp16 d:
  210 bytes per 256 (6.5625 bpw).
A row of `cols` weights is cols / block blocks; a quantized type needs cols to divide its block.

Type selection follows llama.cpp's src/llama-quant.cpp (llama_tensor_get_type and its helpers)
for the ftypes listed in FTYPES, with no importance matrix and no user overrides. Implemented:
- tensors it never quantizes keep the type convert_hf_to_gguf.py wrote: F32 for 1-D tensors
  (norms, biases), *_norm.weight, the router ffn_gate_inp.weight and position_embd.weight;
- output.weight, and token_embd.weight when the embeddings are tied (no output.weight): Q6_K,
  or Q8_0 when its cols do not divide the ftype's block; Q8_0 files keep Q8_0;
- attn_v (and latent attention's attn_kv_b, which llama.cpp now counts with attn_v; files
  from older releases, b4944's DeepSeek-V3 among them, keep it in the default type) on
  use_more_bits layers: Q6_K in Q4_K_M and Q5_K_M;
- ffn_down (dense, _exps and _shexp alike) on use_more_bits layers: Q6_K in Q4_K_M and Q5_K_M;
- models with exactly 8 experts (Mixtral): attn_v and attn_k Q8_0 in every ftype here, and
  attn_output Q5_K in Q4_K_M;
- tensor_type_fallback: cols not dividing the block move Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0, then F16 if cols do not divide 32 either; Q8_0 and Q4_0 have no fallback, and
  llama.cpp refuses the model.
Left out, as they change no tensor this module sees or need what a config does not say:
Falcon's rules (output Q8_0, its ffn_down ladder), the LLM_TYPE_70B attn_v bump (Q4_K -> Q5_K,
about 50 MB on Llama-2-70B), fused attn_qkv tensors (GPT-2, GPT-NeoX, Falcon and Phi-3 GGUFs
fuse q/k/v; here they are three tensors), imatrix-only rules, and newer DeepSeek conversions
that also split attn_kv_b into attn_k_b / attn_v_b.
"""

from app.accounting.errors import InvalidInput

# (weights per block, bytes per block): ggml-common.h's block structs, sizeof included.
GGML_BLOCK = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18),
              "Q5_0": (32, 22), "Q5_1": (32, 24), "Q4_K": (256, 144), "Q5_K": (256, 176),
              "Q6_K": (256, 210)}

# Format id -> llama.cpp ftype's default tensor type (llama_ftype_get_default_type).
FTYPES = {"gguf_q8_0": "Q8_0", "gguf_q6_k": "Q6_K", "gguf_q5_k_m": "Q5_K", "gguf_q4_k_m": "Q4_K",
          "gguf_q4_0": "Q4_0"}
_MIXES = ("gguf_q5_k_m", "gguf_q4_k_m")

# tensor_type_fallback: a type whose block does not divide a row's cols.
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
_LEGACY_BLOCK_WEIGHTS = 32  # the block of Q4_0..Q8_0, the fallbacks' last resort before F16


def ggml_bytes(gtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor stored as `gtype`: rows x (cols / block) blocks (ggml_row_size)."""
    per, size = GGML_BLOCK[gtype]
    cols = shape[-1]
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    return rows * (cols // per) * size


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third
    layer between (C integer division; i_layer - n/8 is never negative where it is read)."""
    return (i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8
            or (i_layer - n_layers // 8) % 3 == 2)


def _quantizable(name: str, ndim: int) -> bool:
    """tensor_allows_quantization, for the tensors model_tensors names."""
    return (ndim >= 2 and name.endswith(".weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and name != "position_embd.weight")


def _mixed(fmt_id: str, name: str, layer: int | None, cols: int, *, n_layers: int, n_experts: int,
           tied: bool) -> str:
    """llama_tensor_get_type_impl's choice before the shape fallback."""
    default = FTYPES[fmt_id]
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        if cols % GGML_BLOCK[default][0]:
            return "Q8_0"
        return default if default == "Q8_0" else "Q6_K"
    more = layer is not None and fmt_id in _MIXES and use_more_bits(layer, n_layers)
    if name in ("attn_v.weight", "attn_kv_b.weight"):
        # One attn_v-like tensor per block, visited in layer order (weight_name_comparer), so
        # llama.cpp's i_attention_wv counter is the layer index.
        return "Q8_0" if n_experts == 8 else ("Q6_K" if more else default)
    if name == "attn_k.weight":
        return "Q8_0" if n_experts == 8 else default
    if "ffn_down" in name:
        return "Q6_K" if more else default
    if name == "attn_output.weight" and n_experts == 8 and fmt_id == "gguf_q4_k_m":
        return "Q5_K"
    return default


def gguf_type(fmt_id: str, name: str, layer: int | None, shape: tuple[int, ...], *, n_layers: int,
              n_experts: int, tied: bool) -> tuple[str, str | None]:
    """(ggml type, warning or None) llama.cpp's quantizer gives one tensor of a model in the
    ftype `fmt_id`. Raises InvalidInput where llama.cpp refuses (no fallback for the type)."""
    if not _quantizable(name, len(shape)):
        return "F32", None
    cols = shape[-1]
    chosen = _mixed(fmt_id, name, layer, cols, n_layers=n_layers, n_experts=n_experts, tied=tied)
    if cols % GGML_BLOCK[chosen][0] == 0:
        return chosen, None
    where = name if layer is None else f"blk.{layer}.{name}"
    fallback = _FALLBACK.get(chosen)
    if fallback is None:
        raise InvalidInput("weight_format", f"llama.cpp cannot store {where} as {chosen}: its rows of "
                           f"{cols} do not divide into blocks of {GGML_BLOCK[chosen][0]}, and {chosen} "
                           "has no fallback type")
    if cols % _LEGACY_BLOCK_WEIGHTS:
        fallback = "F16"
    return fallback, (f"{where}: rows of {cols} do not divide {chosen}'s {GGML_BLOCK[chosen][0]}-weight "
                      f"blocks; llama.cpp falls back to {fallback}")
