"""A step model for one GPU of the catalogue and a model in one dtype, at the serving calculators'
defaults (POST /api/v1/inference/time with no efficiency given): the matmuls at the part's Maximum
Achievable Matmul FLOPS, reads at 0.9 of its bandwidth. The serve probe sets the simulator with it
beside the one it fits on the device, where the device is in the catalogue: Tally's own prediction
for that engine, uncalibrated."""

import dataclasses

from app.accounting import dtypes, hardware, matmul
from app.accounting.hardware import Accelerator
from app.accounting.inference import kernels, kv_cache
from app.accounting.inference.kernels import Launch
from app.accounting.inference.roofline import Hardware
from app.accounting.serving.steps import StepModel
from app.accounting.transformer import TransformerConfig

MEMORY_EFFICIENCY = 0.9
"""The serving calculators' stated default (app/api/services/inference.py DEFAULT_MEMORY_EFFICIENCY)."""


def step_model(
    cfg: TransformerConfig,
    acc: Accelerator,
    dtype: str,
    *,
    launch: Launch,
    memory_efficiency: float = MEMORY_EFFICIENCY,
) -> StepModel:
    """One GPU (no tensor parallelism), weights, activations and cache in `dtype`, unpaged cache reads."""
    width = int(dtypes.lookup(dtype).storage_bytes)
    dev = matmul.device(acc, dtype)
    peak = hardware.peak_flop_per_sec(acc, dtype)
    hw = Hardware(
        peak_flop_per_sec=peak,
        bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec,
        flops_efficiency=dev.mamf_flop_per_sec / peak,
        memory_efficiency=memory_efficiency,
        interconnect_bytes_per_sec=None,
        allreduce_latency_s=0.0,
    )
    dev = dataclasses.replace(
        dev, memory_bandwidth_bytes_per_sec=acc.memory_bandwidth_bytes_per_sec * memory_efficiency
    )

    def read(context: int) -> int:
        return kv_cache.sequence_bytes_per_gpu(
            cfg, context=context, cache_dtype=dtype, model_dtype=dtype, block_size=None
        )[0]

    deployment = kernels.Deployment(
        cfg=cfg, tensor_parallel=1, weight_bytes_per_param=width, act_bytes=width, kv_bytes_per_token=read(1)
    )
    return StepModel(
        deployment, hw, dev, launch, host_seconds_per_op=kernels.EAGER_HOST_S_PER_OP, read_bytes=read
    )


class GraphedDecodes:
    """The step of an engine that replays its decode-only steps from CUDA graphs and launches the rest
    eagerly (the serve probe with graphs): a decode-only step is timed as graph launches, any step
    with prompt tokens as eager ones. The GPU's pieces are the same either way."""

    def __init__(self, eager: StepModel, graph: StepModel) -> None:
        self.eager, self.graph = eager, graph
        self.forward, self.sampling, self.read = eager.forward, eager.sampling, eager.read
        self.chunk, self.bandwidth = eager.chunk, eager.bandwidth
        self.floors, self.host = graph.floors, graph.host
        """What runs.py's decode-only runs add to a step."""

    def seconds(self, *, tokens: int, sequences: int, read_bytes: float, attention: float) -> float:
        decode_only = attention == 0.0 and tokens == sequences
        return (self.graph if decode_only else self.eager).seconds(
            tokens=tokens, sequences=sequences, read_bytes=read_bytes, attention=attention
        )


def served(
    cfg: TransformerConfig, acc: Accelerator, dtype: str, *, graphs: bool
) -> "StepModel | GraphedDecodes":
    """The serve probe's engine: eager launches, its decode-only steps from graphs when it captures them."""
    eager = step_model(cfg, acc, dtype, launch="eager")
    return GraphedDecodes(eager, step_model(cfg, acc, dtype, launch="graph")) if graphs else eager
