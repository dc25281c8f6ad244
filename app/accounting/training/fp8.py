"""FP8 training recipes: which matmuls run at the FP8 peak, and what FP8 adds to or takes from memory.

Three recipes, each as its framework runs it:
  fp8_delayed   Transformer Engine's per-tensor delayed scaling (recipe.DelayedScaling): each
                tensor's scale from an amax history of past steps (transformer_engine/common/recipe).
  fp8_current   Transformer Engine's per-tensor current scaling (recipe.Float8CurrentScaling): the
                scale from this step's amax, one more read of the tensor before the cast.
  fp8_blockwise DeepSeek-V3's fine-grained scaling (technical report, section 3.3.2): activations in
                1 x 128 tiles and weights in 128 x 128 blocks, each with its own scale, products
                promoted to fp32 every 128 elements of K; its optimizer keeps the Adam moments in bf16
                (section 3.3.3).

In all three, the GEMMs of the decoder layers' linear projections (attention's q, k, v and output,
the MLP's and the experts' matrices) take FP8 inputs: forward (E4M3) and both backward GEMMs. What
stays in bf16 or fp32 (DeepSeek-V3, section 3.3.1; Transformer Engine applies FP8 to its Linear
modules only): the embedding, the LM head, the attention core (softmax(QK^T)V), norms, the MoE
router. Each step casts the linear weights to FP8 twice, row-wise for the forward and dgrad GEMMs and
column-wise (transposed) for wgrad, and keeps both for the backward pass (TE's Float8Tensor with both
usages on Hopper); each linear layer keeps its input in FP8 for its weight gradient (TE's Linear saves
its quantized input; DeepSeek-V3 caches "the activations in FP8 format for the backward pass of the
Linear operator", section 3.3.2). Scales are not counted: one fp32 per tensor (per-tensor), or per
128 elements of an activation (1/32 byte per element) and per 16,384 of a weight (blockwise).
"""

from app.accounting.models import TransformerConfig, count_params

RECIPES = ("fp8_delayed", "fp8_current", "fp8_blockwise")

LINEAR_INPUTS = frozenset({
    "attention/qkv_input", "attention/latent_up_input", "attention/output_proj_input",
    "mlp/up_input", "mlp/down_input",
    "moe/expert_inputs", "moe/expert_down_input", "moe/shared_down_input",
})
"""Saved tensors that are a decoder layer's linear projection's input (blocks' Item names)."""

NOTE = ("{recipe}: the decoder layers' linear GEMMs at the float8 peak, the attention core and LM head at "
        "bfloat16's; the linear weights kept as two FP8 copies and the linear layers' inputs in FP8 for "
        "backward; embedding, head, norms and router in bf16 (Transformer Engine; DeepSeek-V3 technical "
        "report, section 3.3)")


FSDP_LAYERS_CAST = 2
"""Layers whose FP8 weight casts exist at once under ZeRO-3 with no pipeline: the one computing and the
one prefetched."""
FSDP_NOTE = ("ZeRO-3 (FSDP) with an FP8 recipe: weights are gathered a layer at a time and cast there (torchao's "
             "Float8Linear keeps the high-precision weight for backward, which FSDP gathers again; with "
             "enable_fsdp_float8_all_gather the gathered weight is FP8 already), so FP8 copies of 2 layers "
             "exist at once, not of the whole model")


def is_fp8(precision: str) -> bool:
    return precision in RECIPES


def linear_share(cfg: TransformerConfig) -> float:
    """The fraction of parameters outside the routed experts that FP8 GEMMs read: attention's and the
    dense and shared MLPs' matrices, not the embedding, the LM head or the router (routed experts are
    FP8 GEMM weights throughout)."""
    counts = count_params(cfg)
    return (counts.attention + counts.mlp + counts.shared_experts) / (counts.total - counts.routed_experts)
