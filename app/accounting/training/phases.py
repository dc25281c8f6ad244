"""The peak of one training step, which is not one sum: different tensors are alive at
different moments. The moments that can hold the peak, each as live bytes:

- start of backward: model states, inputs, every activation, and the loss's gradients;
- the LM head's weight gradient (vocab x d, in the gradients' dtype), made while every
  activation and the logits' gradient are still held; with tied embeddings autograd keeps it
  until the embedding's own gradient arrives at the very end of backward, and adds the two into
  a third tensor before accumulating;
- the optimizer step: model states plus its temporaries (autocast's copies are gone).

Checked against live tensor bytes op by op and torch.cuda.max_memory_allocated by
app/bench/train_step.py (tests/probes/test_probes.py, tests/probes/test_probe_finetune.py). The training and
fine-tuning calculators (memory.py, finetune/memory.py) report the largest as their total, the
probes read the same composition (breakdown).
"""

import math

from app.accounting import blocks
from app.accounting.transformer import TransformerConfig

# Model-sized temporaries one optimizer step makes, in units of the largest parameter tensor:
# torch's per-tensor (foreach=False) loops allocate sqrt(v) and its quotient for Adam, sqrt(sum)
# for Adagrad, sqrt(square_avg) for RMSprop (torch/optim/rmsprop.py, _single_tensor_rmsprop),
# one tensor at a time; SGD, with momentum or not, updates in place (torch/optim/sgd.py).
STEP_TEMPORARIES = {"sgd": 0, "sgd_momentum": 0, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}
FUSED = ("adam", "adamw", "adamw_8bit")
"""Optimizers a GPU runs as fused kernels, which make no temporaries: torch's fused Adam and AdamW
(fused=True; Megatron-LM's and DeepSpeed's FusedAdam likewise), bitsandbytes' 8-bit AdamW."""
FP32_BYTES = 4
# Held from the step's start to its end; frozen_weights only in a fine-tune (finetune/memory.py).
STATES = ("parameters", "gradients", "optimizer_state", "master_weights", "frozen_weights", "inputs")
PARTS = ("parameters", "gradients", "optimizer_state", "master_weights", "frozen_weights", "weight_copies",
         "activations", "transient", "inputs")
"""Bytes by kind, in the order a breakdown lists them."""
PHASES = ("start_of_backward", "lm_head_weight_gradient", "end_of_backward", "optimizer_step")
INT64_BYTES = 8


def activation_gradients(tokens: int, width: int, act_bytes: int) -> int:
    """A stack of layers starts backward with two activation gradients in flight:
    dL/d(output) and dL/d(input), tokens x width each."""
    return 2 * tokens * width * act_bytes


def token_inputs(tokens: int, *, ids: bool = True, targets: bool = True) -> int:
    """A language model's inputs: token ids (read by the first stage) and targets (by the last), int64."""
    return INT64_BYTES * tokens * (ids + targets)


def lm_head_phases(parts: dict[str, int], *, vocab_size: int, d_model: int, tied: bool,
                   grad_bytes: int = FP32_BYTES, tensor_parallel: int = 1) -> dict[str, int]:
    """Live bytes at the LM head's weight gradient and at the end of backward: the head's gradient
    is vocab x d_model in the gradients' dtype, split by vocabulary over tensor ranks."""
    head_grad = grad_bytes * math.ceil(vocab_size * d_model / tensor_parallel)
    states = sum(parts.get(k, 0) for k in STATES)
    held = parts["weight_copies"] + parts["activations"] + parts["transient"] // 2  # logits' gradient
    return {"lm_head_weight_gradient": states + held + head_grad,
            "end_of_backward": states + (3 if tied else 1) * head_grad}


def step_peak(parts: dict[str, int], *, largest_param: int, optimizer: str, fused: bool,
              later: dict[str, int] | None = None, state_bytes: int = FP32_BYTES) -> dict[str, int]:
    """`parts` (bytes by kind: parameters, gradients, optimizer_state, master_weights,
    weight_copies, activations, transient, inputs, and a fine-tune's frozen_weights) with the
    optimizer's temporaries, the live bytes at each moment that can be the peak, and `total`,
    the largest of them.
    largest_param is in elements, each temporary element state_bytes wide (the optimizer's math
    runs in its states' dtype: fp32 beside master weights); `later` adds lm_head_phases."""
    temporaries = 0 if fused else STEP_TEMPORARIES[optimizer] * largest_param * state_bytes
    phases = {"start_of_backward": sum(parts.values()), **(later or {}),
              "optimizer_step": sum(parts.get(k, 0) for k in STATES) + temporaries}
    return parts | {"optimizer_temporaries": temporaries} | phases | {"total": max(phases.values())}


def breakdown(mem) -> dict[str, int]:
    """A TrainingMemory's or FineTuneMemory's bytes by kind, the optimizer's temporaries, the live
    bytes at each phase and the peak (`total`), flat: what the train_step probe sets beside the
    peak it measures."""
    parts = {k: getattr(mem, k) or 0 for k in PARTS if hasattr(mem, k)}
    return parts | {"optimizer_temporaries": mem.optimizer_temporaries} | mem.phases | {"total": mem.total}


def notes(optimizer: str, *, fused: bool, shaped: bool = True) -> list[str]:
    """What the phases assume of the step, in words."""
    said = ["total is the step's peak: the largest of its phases (the start of backward, the LM head's "
             "weight gradient, the end of backward, the optimizer step), as the train_step probe measures it"]
    per_tensor = STEP_TEMPORARIES.get(optimizer, 0)
    if fused and optimizer in FUSED:
        kernel = ("bitsandbytes' 8-bit kernel" if optimizer == "adamw_8bit" else
                  "torch's fused=True, as Megatron-LM's and DeepSpeed's FusedAdam")
        said.append(f"{optimizer} steps fused ({kernel}): no temporaries")
    elif per_tensor and not fused:
        said.append(f"{optimizer} steps as torch's per-tensor loop (foreach=False): {per_tensor} temporary "
                     "tensor(s) the size of the largest parameter it steps"
                     + ("" if shaped else "; a bare parameter count has no tensors, so none are counted"))
    return said


def largest_param(cfg: TransformerConfig, *, layers: range, embedding: bool, head: bool, tp: int,
                  ep: int = 1) -> int:
    """Elements of the largest parameter tensor one GPU holds of `layers` (and the token embedding,
    the LM head): split tensors are 1/tp of theirs (K and V heads replicated past n_kv_heads
    ranks), routed experts' 3-D parameters also 1/ep; what a per-tensor optimizer loop sizes its
    temporaries by."""
    largest = math.ceil(cfg.vocab_size * cfg.d_model / tp) if embedding or head else 0
    if embedding and cfg.position == "learned":
        largest = max(largest, cfg.max_seq_len * cfg.d_model)
    seen = set()
    for i in layers:
        layer = blocks.layers(cfg)[i]
        if layer in seen:
            continue
        seen.add(layer)
        replicas = layer.attention.kv_replicas(tp)
        for w in layer.weights():
            share = w.params if w.tp_split == "replicated" else math.ceil(
                w.params * (replicas if w.tp_split == "kv" else 1) / tp)
            largest = max(largest, math.ceil(share / ep) if w.component == "routed_experts" else share)
    return largest
