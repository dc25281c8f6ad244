"""The collectives one training step issues on one GPU, kind by kind, as Megatron-LM and
ZeRO issue them. Sizes are nccl-tests' S (app/accounting/comm/collectives.py): each rank's
buffer for all_reduce, the whole gathered tensor for all_gather, reduce_scatter and all_to_all.

Per transformer layer and micro-batch of b sequences of s tokens, h = d_model, in the
activation dtype (Narayanan et al. 2021, section 3.2; Korthikanti et al. 2022, section 4.2.2):
  tensor parallel, no sequence parallelism: 2 all-reduces of b*s*h forward, 2 backward;
  with sequence parallelism: 2 all-gathers and 2 reduce-scatters of b*s*h each way, the same
  bytes on the wire (an all-reduce is a reduce-scatter then an all-gather);
  full recompute runs the forward again, and its 2 collectives with it.
Between pipeline stages, per micro-batch and model chunk: b*s*h forward and its gradient
backward, each GPU sending its 1/t share (Narayanan et al. 2021, section 4.1, scatter/gather).
Expert parallelism, per mixture-of-experts layer: dispatch and combine all-to-alls of the
tokens' top_k copies, forward and backward (and again with full recompute).
Data parallelism: the gradients' all-reduce; ZeRO-1 reduce-scatters them and all-gathers the
updated parameters; ZeRO-2 reduce-scatters every micro-batch's gradients; ZeRO-3 all-gathers
each micro-batch's parameters in forward and again in backward (ZeRO's 1.5x of an all-reduce
when there is one micro-batch; Rajbhandari et al. 2020, section 7).
"""

from dataclasses import dataclass

from app.accounting.comm.collectives import bus_factor
from app.accounting.training.activations import TrainRecompute


@dataclass(frozen=True, slots=True)
class Message:
    """One kind of collective a step issues `count` times, each of `bytes` (nccl-tests' S)."""

    collective: str
    bytes: int
    count: int
    phase: str
    """forward, backward or step (once per step, outside the micro-batches)."""


def tensor_parallel(*, tokens: int, d_model: int, act_bytes: int, sequence_parallel: bool,
                    recompute: TrainRecompute) -> list[Message]:
    """One layer, one micro-batch of `tokens` (b*s)."""
    size = tokens * d_model * act_bytes
    forward = 2 * (2 if recompute == "full" else 1)  # the recomputed forward's in the backward phase
    if not sequence_parallel:
        return [Message("all_reduce", size, 2, "forward"), Message("all_reduce", size, forward, "backward")]
    return [Message("all_gather", size, 2, "forward"), Message("reduce_scatter", size, 2, "forward"),
            Message("reduce_scatter", size, forward, "backward"),
            Message("all_gather", size, forward, "backward")]


def expert_parallel(*, tokens: int, d_model: int, top_k: int, act_bytes: int, tp: int,
                    sequence_parallel: bool, recompute: TrainRecompute) -> list[Message]:
    """One mixture-of-experts layer, one micro-batch: dispatch and combine, each way. With
    sequence parallelism a tensor rank routes its 1/t of the tokens."""
    local = tokens // tp if sequence_parallel else tokens
    size = local * top_k * d_model * act_bytes
    backward = 2 * (2 if recompute == "full" else 1)
    return [Message("all_to_all", size, 2, "forward"), Message("all_to_all", size, backward, "backward")]


def pipeline(*, tokens: int, d_model: int, act_bytes: int, tp: int) -> int:
    """Bytes one GPU sends a neighbouring stage per micro-batch and chunk, each way."""
    return tokens * d_model * act_bytes // tp


def data_parallel(*, params: int, param_bytes: int, grad_bytes: int, zero_stage: int,
                  micro_batches: int, pipeline: bool = False) -> list[Message]:
    """The gradient reduction and any parameter gathers for `params` parameters one GPU holds
    (before ZeRO shards them). With pipeline parallelism ZeRO-2/3 (FSDP) gather the parameters
    once per step and reduce-scatter the gradients after the last micro-batch's backward
    (torch.distributed.pipelining; training/memory.py's FSDP_WITH_PIPELINE_NOTE): ZeRO-1's messages."""
    grads, weights = params * grad_bytes, params * param_bytes
    m = micro_batches
    if zero_stage == 0:
        return [Message("all_reduce", grads, 1, "step")]
    if zero_stage == 1 or pipeline:
        return [Message("reduce_scatter", grads, 1, "step"), Message("all_gather", weights, 1, "step")]
    if zero_stage == 2:
        return [Message("reduce_scatter", grads, m, "backward"), Message("all_gather", weights, 1, "step")]
    return [Message("all_gather", weights, m, "forward"), Message("all_gather", weights, m, "backward"),
            Message("reduce_scatter", grads, m, "backward")]


def wire_bytes(message: Message, ranks: int) -> float:
    """What each rank sends for one such collective over a ring of `ranks`: S x the bus factor
    (all_reduce 2(n-1)/n, the others (n-1)/n)."""
    return message.bytes * bus_factor(message.collective, ranks)
