"""The burn-in probe's contract: one job per GPU that runs the three probes a fleet compares
its GPUs by, each with a sustained run (app/probes/sustained.py), so that a GPU held back by
its power cap, its temperature or its clocks shows against its siblings.

- matmul: the quick sweep in one dtype (bf16 on a GPU), then its best shape sustained;
- bandwidth: the device copy, sustained;
- train_step: one fixed model and batch per device kind, sustained.

Every GPU of a campaign runs the same parameters, so their figures compare directly.
"""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from app.accounting.records import RECORD
from app.inputs.fields import number
from app.probes.params import BandwidthParams, MatmulDtype, MatmulParams, ProbeParams, TrainStepParams
from app.probes.results import BandwidthResult, Environment, MatmulResult, TrainStepResult


@dataclass(frozen=True)
class BurnInSizes:
    sustain_s: float
    dtype: str
    train_step: dict
    """TrainStepParams fields: the model and batch every GPU of the kind trains."""


# By device kind. CUDA: gpt2 at batch 8 x 1024 in bf16 autocast, the train step measured on an
# H200 (docs/measurements/); 10 s is enough for an H200 to reach its 700 W cap under a bf16
# matmul. CPU: sizes that take seconds on two cores, so a fleet of CPU "GPUs" can be tested.
BURN_IN_SIZES = {
    "cuda": BurnInSizes(10.0, "bfloat16", {"model": "gpt2", "batch_size": 8, "seq_len": 1024,
                                           "precision": "bf16_autocast"}),
    "cpu": BurnInSizes(0.5, "float32", {"model": {"kind": "cruncher", "dim": 256, "num_layers": 2},
                                        "batch_size": 4, "seq_len": 64}),
}


class BurnInParams(ProbeParams):
    sustain_s: number(ge=0.1, le=3600) | None = Field(
        None, description="Seconds each of the three runs is sustained. Default 10 on a GPU, 0.5 on a CPU.")
    dtype: MatmulDtype | None = Field(
        None, description="The matmul's dtype. Default bfloat16 on a GPU, float32 on a CPU.")


@dataclass(frozen=True)
class Parts:
    matmul: MatmulParams
    bandwidth: BandwidthParams
    train_step: TrainStepParams


def parts(p: BurnInParams, kind: str) -> Parts:
    """The three probes' parameters on a device of `kind`; the timing fields are the burn-in's."""
    sizes = BURN_IN_SIZES[kind]
    common = p.model_dump(include={"device", "seed", "warmup_s", "measure_s", "min_iters", "max_iters"})
    common["sustain_s"] = p.sustain_s if p.sustain_s is not None else sizes.sustain_s
    return Parts(
        matmul=MatmulParams.model_validate(common | {"sweep": "quick", "dtypes": [p.dtype or sizes.dtype]}),
        bandwidth=BandwidthParams.model_validate(common),
        train_step=TrainStepParams.model_validate(common | sizes.train_step))


@dataclass(slots=True)
class BurnInResult:
    probe: Literal["burn_in"]
    environment: Environment
    gpu_uuid: str | None
    """NVML's UUID of the GPU it ran on: the GPU's name in the fleet's history; null on a CPU."""
    matmul: MatmulResult
    bandwidth: BandwidthResult
    train_step: TrainStepResult

    __pydantic_config__ = RECORD
