"""Fine-tuning stacks as conventions: what a framework keeps of the logits and of the checkpointed
activations, for the same model, adapters and precision.

A stack is a few rules (Stack), each with its source. The rest of a step (which tensors autograd
keeps in a layer, the adapters, the quantized base) is the engine's own (finetune/activations.py,
memory.py) and the same under every stack.

The loss. Every stack here computes cross-entropy as F.cross_entropy does, log_softmax then
nll_loss: log_softmax keeps its output for backward, nll_loss's backward makes a gradient with
respect to the log-probabilities, and log_softmax's backward one with respect to the logits, each
tokens x vocab. What the stacks differ in is the dtype, and whether that happens once over the
whole sequence or chunk by chunk:

- tally (today's rule, the default): one fp32 copy of the logits kept, two fp32 gradients at the
  start of backward: 4 + 8 bytes a token a vocabulary entry.
- hf: transformers' ForCausalLMLoss (huggingface/transformers, src/transformers/loss/loss_utils.py;
  LlamaForCausalLM.forward in src/transformers/models/llama/modeling_llama.py) upcasts the 16-bit
  logits with `logits.float()` and calls F.cross_entropy: log_softmax keeps its fp32 output (4),
  and backward starts with nll_loss's and log_softmax's fp32 gradients (8). The 16-bit logits
  (LlamaForCausalLM.forward's `self.lm_head(...)`) and the fp32 upcast are gone by then: the
  Trainer drops the model's outputs before `accelerator.backward(loss)`, and log_softmax keeps
  its output, not its input; while the loss runs they are 2 + 4 + 4 = 10 bytes, below 12. The
  count is tally's: transformers 5.23 with peft 0.21 measures 12.0 bytes a token a vocabulary
  entry at the peak (tests/engine/test_finetune_stacks.py). What differs is peft's
  prepare_model_for_kbit_training (huggingface/peft, src/peft/utils/other.py), which QLoRA recipes
  call before get_peft_model (huggingface/trl's SFTTrainer did through v0.25, until #4577): it casts every
  parameter that is not a Params4bit to fp32, so the embeddings, norms and head are fp32, the
  norms' outputs are fp32, bitsandbytes' Linear4bit returns its input's dtype
  (bitsandbytes-foundation/bitsandbytes, bitsandbytes/nn/modules.py, `.to(inp_dtype)`), and the
  residual stream and the checkpointed
  layer inputs are fp32; autocast's bf16 cast of the fp32 head is kept for its input gradient.
  TRL's SFTConfig (trl/trainer/sft_config.py) defaults to loss_type "chunked_nll" since June 2026
  (#5846), which this stack
  does not describe: it is the Trainer's and TRL's loss_type "nll".
- unsloth: unsloth_fused_ce_loss (unslothai/unsloth-zoo, unsloth_zoo/fused_losses/cross_entropy_loss.py),
  which LlamaForCausalLM's fast forward calls whenever labels are given (unslothai/unsloth,
  unsloth/models/llama.py,
  CausalLM_fast_forward), never materializes the logits: it splits the tokens into chunks whose
  fp32 logits are at most min(half the free memory, 4 GiB) (get_chunk_size, rounded up to a
  multiple of 4 chunks), and computes each chunk's loss and gradient in the forward
  (torch.func.grad_and_value, torch.compile'd), writing the gradient of the final hidden states
  into a tokens x d_model buffer that backward returns. Compiled, a chunk's upcast, log-softmax,
  nll and their backward are one fused kernel over the chunk's 16-bit logits, which take its
  gradient in place: 2 bytes a chunk's token a vocabulary entry (inductor's output code, torch
  2.13). unsloth/kernels/cross_entropy_loss.py's fast_cross_entropy_loss, the older path
  (UNSLOTH_RETURN_LOGITS=1), keeps the whole sequence's 16-bit logits instead.
- torchtune: LinearCrossEntropyLoss (pytorch/torchtune, torchtune/modules/loss/cross_entropy_loss.py),
  the cross-entropy of 162 of the 168 recipes/configs that name one (the other 6 name
  CEWithChunkedOutputLoss, which it deprecates and which takes every chunk's 16-bit logits from
  the model at once): the hidden states split into
  num_output_chunks = 8 chunks, each projected, upcast (`logits.float()`) and passed to
  F.cross_entropy in turn. The configs leave `compile: False`, and eager, each chunk's
  log_softmax keeps its fp32 output: 4 bytes a token a vocabulary entry over all chunks, and one
  chunk's two fp32 gradients at a time in backward (8 bytes a chunk's token). Compiled (the
  README's memory table), a chunk keeps its 16-bit logits instead (2); both are measured in
  tests/engine/test_finetune_stacks.py.

Checkpointed activations. With gradient checkpointing (recompute full) every stack keeps each
decoder layer's input; unsloth's "unsloth" checkpointing (unslothai/unsloth-zoo,
unsloth_zoo/gradient_checkpointing.py,
UnslothCheckpointFunction) copies those inputs to pinned host memory in forward and brings each
back into one GPU buffer in backward, except the last layer's, which stays on the GPU: two layer
inputs' worth on the GPU (a second buffer for double buffering is allocated only while more than
512 MiB is free). torchtune offloads with enable_activation_offloading
(torchtune/training/_activation_offloading.py), which its configs leave False. Once backward
reaches a checkpointed layer it reruns that layer's forward and keeps what an unchecked layer
keeps until its backward ends (torch.utils.checkpoint): the stacks other than tally count that
moment as a phase of its own (recompute_layer), which is the peak where the logits are small.
"""

import math
from dataclasses import dataclass, replace
from typing import Literal

StackName = Literal["tally", "hf", "unsloth", "torchtune"]
NAMES: tuple[StackName, ...] = ("tally", "hf", "unsloth", "torchtune")
GIB = 2**30
UNSLOTH_CHUNK_CAP_BYTES = 4 * GIB
"""unsloth_zoo/fused_losses/cross_entropy_loss.py, _get_chunk_multiplier: a chunk's fp32 logits are
at most min(half the free GPU memory, 4 GiB); the cap is what a GPU with 8 GiB free gets."""
UNSLOTH_GPU_CHECKPOINTS = 2
"""UnslothCheckpointFunction: the last layer's input (LAST_GC_INDEX, not offloaded) and GPU_BUFFER,
into which each offloaded input is copied back in backward."""
TORCHTUNE_CHUNKS = 8
"""LinearCrossEntropyLoss(num_output_chunks=8), the default no shipped config overrides."""


@dataclass(frozen=True, slots=True)
class Stack:
    name: StackName
    label: str
    logits_kept_bytes: int
    """Bytes a token a vocabulary entry the loss keeps for backward, over all chunks."""
    loss_peak_bytes: int
    """Bytes a chunk's token a vocabulary entry made while one chunk's gradient is computed."""
    chunks: int
    """Chunks the tokens split into for the loss; 0: Unsloth's rule by size (loss_chunks)."""
    hidden_gradient: bool
    """The loss computes the final hidden states' gradient in the forward and keeps it (tokens x
    d_model in the compute dtype) until backward."""
    offload_checkpoints: bool
    """Recompute full: the layer inputs go to host memory, UNSLOTH_GPU_CHECKPOINTS stay."""
    kbit_fp32: bool
    """QLoRA: peft's prepare_model_for_kbit_training casts what is not 4-bit to fp32."""
    recompute_phase: bool
    """Recompute full: count the moment a checkpointed layer is rerun and differentiated."""
    gradients_freed: bool
    """zero_grad(set_to_none=True) after each step: backward starts with no gradients and makes them
    as it goes, so they are whole only at its end (tally: kept allocated, as Megatron-LM's and
    DeepSpeed's contiguous buffers and the train_step probe's zero_grad(set_to_none=False))."""
    rules: tuple[str, ...]
    """The rules in words with their sources, for the answer's assumptions."""


STACKS: dict[str, Stack] = {
    "tally": Stack(
        "tally", "Tally's rule", logits_kept_bytes=4, loss_peak_bytes=8, chunks=1, hidden_gradient=False,
        offload_checkpoints=False, kbit_fp32=False, recompute_phase=False, gradients_freed=False,
        rules=("stack tally: one fp32 copy of the logits kept and the loss's two fp32 gradients at the start "
               "of backward (12 bytes a token a vocabulary entry)",)),
    "hf": Stack(
        "hf", "Hugging Face Trainer / TRL with peft", logits_kept_bytes=4, loss_peak_bytes=8, chunks=1,
        hidden_gradient=False, offload_checkpoints=False, kbit_fp32=True, recompute_phase=True,
        gradients_freed=True,
        rules=("stack hf: transformers' ForCausalLMLoss upcasts the logits (logits.float()) for "
               "F.cross_entropy, whose log_softmax keeps its fp32 output; backward starts with nll_loss's "
               "and log_softmax's fp32 gradients (12 bytes a token a vocabulary entry; "
               "src/transformers/loss/loss_utils.py)",
               "stack hf, qlora: peft's prepare_model_for_kbit_training casts the embeddings, norms and head "
               "to fp32, so the residual stream and the checkpointed layer inputs are fp32 and autocast's "
               "bf16 cast of the head is kept for its input gradient (src/peft/utils/other.py; "
               "bitsandbytes' Linear4bit returns its input's dtype)")),
    "unsloth": Stack(
        "unsloth", "Unsloth", logits_kept_bytes=0, loss_peak_bytes=2, chunks=0, hidden_gradient=True,
        offload_checkpoints=True, kbit_fp32=False, recompute_phase=True, gradients_freed=True,
        rules=("stack unsloth: unsloth_fused_ce_loss computes the loss and its gradient in the forward, "
               "chunk by chunk (each chunk's fp32 logits at most 4 GiB, a multiple of 4 chunks), compiled "
               "into one kernel over the chunk's 16-bit logits; it keeps the final hidden states' gradient "
               "(unsloth_zoo/fused_losses/cross_entropy_loss.py)",
               "stack unsloth, recompute full: the checkpointed layer inputs are offloaded to pinned host "
               "memory; the last layer's and one buffer stay on the GPU "
               "(unsloth_zoo/gradient_checkpointing.py)")),
    "torchtune": Stack(
        "torchtune", "torchtune", logits_kept_bytes=4, loss_peak_bytes=8, chunks=TORCHTUNE_CHUNKS,
        hidden_gradient=False, offload_checkpoints=False, kbit_fp32=False, recompute_phase=True,
        gradients_freed=True,
        rules=("stack torchtune: LinearCrossEntropyLoss projects and upcasts 8 chunks of tokens in turn; "
               "eager (the configs' compile: False) each chunk's log_softmax keeps its fp32 output, and "
               "backward makes one chunk's two fp32 gradients at a time "
               "(torchtune/modules/loss/cross_entropy_loss.py)",
               "stack torchtune: no activation offloading (the configs' enable_activation_offloading: "
               "False)")),
}


@dataclass(frozen=True, slots=True)
class Loss:
    """What the loss holds on one GPU, bytes."""

    chunks: int
    kept: int
    """Kept for backward once the forward ends: tally, hf, torchtune's fp32 log-probabilities."""
    hidden_gradient: int
    """Unsloth: the final hidden states' gradient, made in the forward."""
    transient: int
    """Made while one chunk's gradient is computed, beside what is kept."""


@dataclass(frozen=True, slots=True)
class Options:
    """A recipe's own flags over its stack's defaults, as torchtune's configs name them."""

    loss_chunks: int | None = None
    """Chunks of tokens the loss runs in (torchtune's num_output_chunks); None: the stack's rule."""
    torch_compile: bool = False
    """The loss compiled (torchtune's compile: True): each chunk keeps its 16-bit logits, not fp32
    log-probabilities."""
    activation_offload: bool = False
    """Checkpointed layer inputs in pinned host memory (torchtune's enable_activation_offloading)."""
    optimizer_in_backward: bool = False
    """Each parameter stepped as its gradient lands, and the gradient freed (torchtune's
    optimizer_in_bwd): one tensor's gradient at a time, not the model's."""


COMPILED_LOGITS_BYTES = 2
"""A compiled loss keeps its chunk's 16-bit logits and recomputes the upcast and log-softmax in
backward (inductor's partitioner), as the saved-tensor hooks see under torch.compile on CPU
(tests/engine/test_finetune_stacks.py, test_compiled_torchtune_loss_keeps_16_bit_logits)."""
TORCHTUNE_OFFLOAD = ("torchtune/training/_activation_offloading.py: OffloadActivations copies each saved "
                     "tensor to pinned host memory on a side stream and brings it back one layer ahead in "
                     "backward; the recipes keep the output layer's on the GPU (NoOpManager)")


def stack(name: str, options: Options = Options()) -> Stack:
    """The stack's rules with a recipe's flags over them, each flag said in the rules."""
    rules, said = STACKS[name], []
    if options.loss_chunks is not None and options.loss_chunks != rules.chunks:
        rules = replace(rules, chunks=options.loss_chunks)
        said.append(f"loss_chunks {options.loss_chunks}: the loss runs over that many chunks of tokens "
                    "in turn")
    if options.torch_compile and rules.logits_kept_bytes > COMPILED_LOGITS_BYTES:
        rules = replace(rules, logits_kept_bytes=COMPILED_LOGITS_BYTES)
        said.append("torch_compile: the compiled loss keeps each chunk's 16-bit logits and recomputes the "
                    "upcast and log-softmax in backward (2 bytes a token a vocabulary entry); the loss's "
                    "gradients are counted as eager's, and the layers' saved tensors as Tally's fused count")
    if options.activation_offload and not rules.offload_checkpoints:
        rules = replace(rules, offload_checkpoints=True)
        said.append("activation_offload, recompute full: the checkpointed layer inputs in pinned host "
                    f"memory, two of them on the GPU ({TORCHTUNE_OFFLOAD})")
    if options.optimizer_in_backward:
        said.append("optimizer_in_backward: each parameter steps as its gradient lands and frees it, so one "
                    "tensor's gradient is held at a time (torchtune/training/memory.py, "
                    "register_optim_in_bwd_hooks: a post-accumulate-grad hook steps and zeroes each "
                    "parameter)")
    return replace(rules, rules=rules.rules + tuple(said)) if said else rules


def loss_chunks(rules: Stack, tokens: int, vocab: int) -> int:
    """Chunks the loss splits `tokens` into. Unsloth's get_chunk_size: the fp32 logits over the cap,
    rounded up to a multiple of 4 (one chunk while they fit under it)."""
    if rules.chunks:
        return min(rules.chunks, tokens)  # torch.tensor_split makes empty chunks past `tokens`
    exact = tokens * vocab * 4 / UNSLOTH_CHUNK_CAP_BYTES
    return 1 if exact <= 1 else min(4 * math.ceil(exact / 4), tokens)


def loss(rules: Stack, *, tokens: int, vocab: int, d_model: int, act_bytes: int) -> Loss:
    """The loss's bytes over `tokens` (sequence x micro-batch): its chunks split the tokens as
    torch.tensor_split and torch.chunk do, the largest chunk ceil(tokens / chunks)."""
    n = loss_chunks(rules, tokens, vocab)
    chunk = -(-tokens // n)
    return Loss(chunks=n, kept=rules.logits_kept_bytes * tokens * vocab,
                hidden_gradient=tokens * d_model * act_bytes if rules.hidden_gradient else 0,
                transient=rules.loss_peak_bytes * chunk * vocab)


def notes(rules: Stack, *, mode: str, recompute: str, chunks: int, offloaded: int) -> list[str]:
    """The rules that applied, in words."""
    said = [r for r in rules.rules if (", qlora:" not in r or mode == "qlora")
            and (", recompute full:" not in r or recompute == "full")]
    if chunks > 1:
        said.append(f"the loss runs in {chunks} chunks of tokens")
    if offloaded:
        said.append(f"{offloaded:,} bytes of checkpointed layer inputs in host memory, not on the GPU")
    if rules.gradients_freed:
        said.append("gradients freed after each step (zero_grad(set_to_none=True): the Trainer's "
                    "model.zero_grad(), torchtune's recipes): backward starts with none, and only the LM "
                    "head's exists while a rerun layer or the head's weight gradient is computed")
    if rules.recompute_phase and recompute == "full":
        said.append("recompute_layer: a checkpointed layer rerun in backward keeps what an unchecked layer "
                    "keeps (no s x s scores, as FlashAttention and SDPA) beside the layer inputs still held "
                    "and two activation gradients (torch.utils.checkpoint)")
    return said
