"""llama.cpp (llama-server, llama-cli): what a context costs on the GPU it is offloaded to.

llama.cpp has no memory fraction: it allocates what it is asked for and fails when that does
not fit. Read from ggml-org/llama.cpp:
  - src/llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256); with one sequence per stream
    (kv_unified false) each of n_seq_max sequences gets n_ctx_seq = GGML_PAD(n_ctx / n_seq, 256)
    cells, so the cache pads each sequence to 256 tokens.
  - src/llama-kv-cache.cpp: K is ggml_new_tensor_3d(type_k, n_embd_k_gqa, kv_size, n_stream) per
    layer, V likewise: n_kv_heads x head_dim per token per layer, in f16 unless -ctk/-ctv say
    otherwise (the model's own dtype does not matter: the cache type's default is f16).
  - llama_context::output_reserve: the logits buffer, n_vocab x n_outputs x 4 bytes, is in host
    memory ("CPU output buffer size").
  - The compute buffer is reserved once for the worst ubatch (n_ubatch tokens, the KV view at the
    whole n_ctx); the code has no closed form. Its largest tensor is the ubatch's f32 logits
    (n_vocab x n_ubatch x 4) with flash attention on, or the f32 KQ scores and mask
    (n_ctx x n_ubatch x (n_head + 1) x 4) with it off; six published logs sit within 35 MiB
    above the larger of the two (tests/engine/test_engine_memory.py).
"""

from app.accounting.inference.engines.base import Budget, Reserved, budget
from app.accounting.transformer import TransformerConfig
from app.accounting.units import GIB

NAME = "llama.cpp"
PAD_TOKENS = 256
"""GGML_PAD(n_ctx, 256): cells per sequence are a multiple of 256."""
DEFAULT_UBATCH = 512
"""n_ubatch's default (common/common.h): the tokens of one compute graph."""
DEFAULT_PARALLEL = 1
"""Sequences a llama-cli context serves (llama-server's -np auto takes 4, in a unified cache)."""
F32 = 4


def compute_buffer_bytes(cfg: TransformerConfig, *, context: int, ubatch: int, flash_attention: bool) -> int:
    """The CUDA compute buffer's dominant tensor for a ubatch against `context` cells."""
    tokens = min(context, ubatch)
    logits = cfg.vocab_size * tokens * F32
    if flash_attention:
        return logits
    padded = -(-context // PAD_TOKENS) * PAD_TOKENS
    return max(logits, padded * tokens * (cfg.n_heads + 1) * F32)


def plan(*, total: int, weights: int, compute: int, startup: int, flash_attention: bool) -> Budget:
    share = total - startup
    reserved = [
        Reserved("weights", weights, True, "the GGUF tensors offloaded to this GPU (CUDA0 model buffer size)"),
        Reserved("activations", compute, True,
                 "the CUDA compute buffer, reserved for the worst ubatch against the whole context: its f32 "
                 + ("logits (flash attention on)" if flash_attention
                    else "KQ scores and mask, n_ctx x n_ubatch x (n_head + 1) x 4 bytes (flash attention off)")),
    ]
    return budget(NAME, total, share,
                  f"the device's total less a {startup / GIB:.2f} GiB CUDA context: llama.cpp allocates what it "
                  "is asked for and fails when that does not fit", reserved)
