"""A model's weight tensors, one record each, named as llama.cpp's GGUF files name them.

Shapes are as stored, output dimension first: (rows, cols) = (out_features, in_features), as
PyTorch's nn.Linear holds a weight and GGUF writes it (ne[1], ne[0]); (n_experts, rows, cols)
for a layer's routed experts, one 3-D tensor per projection as GGUF stores them (ffn_*_exps,
llama.cpp's convert_hf_to_gguf.py stacks the experts); (n,) for norms and biases. Embeddings
are (vocab_size, d_model).

Every tensor carries the component of count_params' breakdown it belongs to (token and position
embeddings are both `embeddings`), so the tensors of a component sum to that count exactly, and
how tensor parallelism splits it, as vLLM's parallel layers and Megatron-LM do:
- column: the output rows split over the ranks (q, gate/up projections, latent attention's up
  projections, and their biases);
- row: the input columns split (attention output, down projections); their biases are added
  after the all-reduce, so they are replicated;
- vocab: the embedding and the LM head split by vocabulary rows (VocabParallelEmbedding);
- kv: k/v projections split by key/value heads; past n_kv_heads ranks each keeps one head
  (vLLM's QKVParallelLinear replicates it);
- replicated: norms, routers, the shared-expert gate, latent attention's down projections
  (DeepSeek-V3's inference code keeps them whole on every rank), the learned position table
  (Megatron-LM's LanguageModelEmbedding), and the biases of row-parallel layers.
This is the split app.accounting.training.sharding counts parameters by. Each layer's tensors are
its blocks' (app/accounting/blocks/): the block norms of its layout, its attention's, its MLP's.
"""

from dataclasses import dataclass
from functools import lru_cache

from app.accounting import blocks
from app.accounting.blocks.base import COMPONENTS, Component, TpSplit, by_component, norm
from app.accounting.transformer import TransformerConfig

__all__ = ["COMPONENTS", "Component", "TpSplit", "WeightTensor", "model_tensors", "by_component"]


@dataclass(frozen=True, slots=True)
class WeightTensor:
    """One stored tensor of the model."""

    name: str
    """llama.cpp's GGUF name without the `blk.{layer}.` prefix: attn_q.weight, ffn_down_exps.weight,
    attn_q.bias, token_embd.weight..."""
    layer: int | None
    """The block it belongs to (from 0); None for embeddings, the final norm and the LM head."""
    shape: tuple[int, ...]
    """(rows, cols) = (out, in); (n_experts, rows, cols) for routed experts; (n,) for 1-D."""
    params: int
    component: Component
    tp_split: TpSplit

    @property
    def gguf_name(self) -> str:
        return self.name if self.layer is None else f"blk.{self.layer}.{self.name}"

    @property
    def matrix(self) -> bool:
        """A weight matrix (or a stack of them): the tensors a format quantizes. A bias is not one
        however many dimensions it has: stacked experts' biases, (n_experts, rows), stay in the
        base dtype, as gpt-oss's checkpoints keep them in bf16 beside their MXFP4 experts."""
        # A convolution's taps (Mamba-2's and DeltaNet's conv1d, (channels, 1, K)) are not a linear
        # layer's: quantizers leave nn.Conv1d in the base dtype.
        return (len(self.shape) >= 2 and not self.name.endswith(".bias")
                and not self.name.startswith("ssm_conv1d"))


@lru_cache(maxsize=1024)
def model_tensors(cfg: TransformerConfig) -> tuple[WeightTensor, ...]:
    """Every weight tensor of the model, in GGUF's order: token (and position) embeddings, the
    blocks, the final norm, then the LM head unless it is tied to the token embedding (GGUF then
    has no output.weight). Parameters sum to count_params(cfg).total, component by component.
    DeepSeek-V3's router score-correction bias is a buffer, not a parameter, and is left out."""
    d = cfg.d_model
    tensors = [WeightTensor("token_embd.weight", None, (cfg.vocab_size, d), cfg.vocab_size * d,
                            "embeddings", "vocab")]
    if cfg.position == "learned":
        tensors.append(WeightTensor("position_embd.weight", None, (cfg.max_seq_len, d), cfg.max_seq_len * d,
                                    "embeddings", "replicated"))
    for i, layer in enumerate(blocks.layers(cfg)):
        tensors += [WeightTensor(w.name, i, w.shape, w.params, w.component, w.tp_split)
                    for w in layer.weights()]
    tensors += [WeightTensor(w.name, None, w.shape, w.params, w.component, w.tp_split)
                for w in norm(cfg, "output_norm", d)]
    if not cfg.tied_embeddings:
        tensors.append(WeightTensor("output.weight", None, (cfg.vocab_size, d), cfg.vocab_size * d,
                                    "lm_head", "vocab"))
    return tuple(tensors)
