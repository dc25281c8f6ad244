"""What the data_parallel_step probe accepts, and the calculators' view of one rank: the train
step's prediction at the strategy's ZeRO stage, and what FSDP2 holds beyond it."""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from app.accounting import models
from app.accounting.errors import InvalidInput
from app.accounting.params import norm_params
from app.accounting.training import memory
from app.inputs.fields import count
from app.probes.params import CPU_MAX_RANKS, ranks_for
from app.probes.train_step.params import TrainStepFields, TrainStepParams
from app.probes.train_step.predict import train_step

DataParallelStrategy = Literal["ddp", "fsdp"]


class DataParallelStepParams(TrainStepFields):
    strategy: DataParallelStrategy = Field(
        "ddp", description="ddp: DistributedDataParallel, every rank a whole replica (ZeRO stage 0); fsdp: "
        "FSDP2's fully_shard on each block and the root, parameters, gradients and optimizer state "
        "sharded over the ranks (ZeRO stage 3).")
    ranks: count(2, 64) | None = Field(
        None, description=f"Processes, one per GPU on CUDA (default: every GPU the job has, at least 2); "
        f"gloo processes on the CPU (default 2, at most {CPU_MAX_RANKS}). batch_size is per rank.")


ZERO_STAGE = {"ddp": 0, "fsdp": 3}
"""DDP keeps every state whole on each rank; FSDP2's fully_shard shards parameters, gradients and
optimizer state over the ranks, as ZeRO stage 3."""


@dataclass(frozen=True)
class DataParallelPrediction:
    name: str
    params: int
    zero_stage: int
    memory: dict[str, int]
    """Bytes on one rank by kind, the step's phases, and their total (the peak)."""
    notes: tuple[str, ...]


FSDP_GATHERED_BLOCKS = 3
"""Unsharded blocks FSDP2 holds at once in backward, beyond the root's: the block computing its
gradients, gathered again after forward resharded it; the next block's all-gather, prefetched
meanwhile; and a block of gradient buffers (its unsharded gradients, then the reduce-scatter's
input, which FSDP2 frees only at the next reduce-scatter). Read op by op with LiveBytes on gloo:
a 3-layer cruncher held four at its peak while its last layer's saved input was already freed; a
2-layer llama held two while the loss's gradients were still live."""


def fsdp_units(p: TrainStepParams, cfg: models.TransformerConfig | None) -> tuple[int, int]:
    """Parameters of (the root's unit, the largest block) as app/bench/data_parallel.wrap shards
    them: a block per cruncher layer or transformer block; the root keeps the rest (the cruncher's
    head; embeddings, LM head and final norm)."""
    if cfg is None:
        return p.model.dim, p.model.dim * p.model.dim if p.model.num_layers else 0
    count = models.count_params(cfg)
    return count.embedding + norm_params(cfg), count.per_layer


def fsdp_unsharded(p: TrainStepParams, cfg: models.TransformerConfig | None) -> int:
    """Bytes FSDP2 keeps gathered at backward's peak beyond ZeRO stage 3's shards: the root's
    parameters whole (gathered as forward starts, resharded only when backward ends) and
    FSDP_GATHERED_BLOCKS of the largest block, at the parameters' width."""
    root, block = fsdp_units(p, cfg)
    width = memory.PRECISIONS[p.precision].param
    return (root + FSDP_GATHERED_BLOCKS * block) * width


BACKWARD_PHASES = ("start_of_backward", "lm_head_weight_gradient")


def data_parallel_step(p: DataParallelStepParams, cuda: bool, ranks: int) -> DataParallelPrediction:
    """One rank's peak: train_step's prediction at the strategy's ZeRO stage over `ranks`, and
    for fsdp the unsharded buffers FSDP2 holds in backward (fsdp_unsharded) added to the phases
    of backward."""
    if p.mode != "full":
        raise InvalidInput("params.mode", "the data_parallel_step probe trains the whole model (mode full)")
    stage = ZERO_STAGE[p.strategy]
    base = train_step(p, cuda, zero_stage=stage, data_parallel=ranks)
    mem, notes = dict(base.memory), ()
    if p.strategy == "fsdp":
        extra = fsdp_unsharded(p, base.config)
        phases = {k: mem[k] + extra for k in BACKWARD_PHASES if k in mem}
        mem |= {"fsdp_unsharded": extra} | phases
        mem["total"] = max(mem["total"], *phases.values())
        notes = (f"fsdp: the prediction adds fsdp_unsharded ({extra:,} bytes) to backward's phases: the "
                 f"root's parameters whole and {FSDP_GATHERED_BLOCKS} of the largest block unsharded",)
    return DataParallelPrediction(base.name, base.params, stage, mem, notes)


def data_parallel_need(p: DataParallelStepParams, kind: str) -> tuple[int, str]:
    """Device bytes: one rank's peak on CUDA (each has its GPU); on the CPU every rank's, plus
    rank 0's lone step first (freed before the others build theirs)."""
    ranks = ranks_for(p.ranks, kind, 2)
    if ranks is None:  # every GPU the job has: the fewest that can run it bounds the need from above
        ranks = 2
    peak = data_parallel_step(p, kind == "cuda", ranks).memory["total"]
    alone = train_step(p, kind == "cuda").memory["total"]
    return (max(peak, alone) if kind == "cuda" else max(ranks * peak, alone)), "params.batch_size"
