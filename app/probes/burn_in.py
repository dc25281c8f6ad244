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

from app import numbers
from app.accounting.records import RECORD
from app.inputs.fields import number
from app.probes import bandwidth, matmul, sustained, train_step
from app.probes.bandwidth import BandwidthParams, BandwidthResult
from app.probes.base import Kind, Least, Need, Probe
from app.probes.faces import Faces, Metric
from app.probes.matmul import MatmulDtype, MatmulParams, MatmulResult
from app.probes.params import ProbeParams
from app.probes.results import Environment
from app.probes.train_step.params import TrainStepParams
from app.probes.train_step.result import TrainStepResult


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


def need(params: BurnInParams, kind: Kind) -> Need:
    # The three run one after another in one child: the largest of their needs.
    plan = parts(params, kind)
    return max(matmul.need(plan.matmul, kind), bandwidth.need(plan.bandwidth, kind),
               train_step.need(plan.train_step, kind))


def least_seconds(params: BurnInParams, kind: Kind) -> Least:
    plan = parts(params, kind)
    return (matmul.least_seconds(plan.matmul, kind)[0] + bandwidth.least_seconds(plan.bandwidth, kind)[0]
            + train_step.least_seconds(plan.train_step, kind)[0], "params.sustain_s")


def headline(r: BurnInResult) -> list[Metric]:
    return [*sustained.metrics(r.matmul.sustained, "matmul "),
            *sustained.metrics(r.bandwidth.sustained, "copy "),
            *sustained.metrics(r.train_step.sustained, "train step "),
            Metric("mfu", "train step MFU (median step)", r.train_step.mfu, "fraction")]


def tables(r: BurnInResult) -> list:
    env = r.environment
    best = next(iter(r.matmul.best.values()), None)
    shape = f"matmul {best.dtype} {best.m}x{best.k}x{best.n}" if best else "matmul"
    t = r.train_step
    rows = [sustained.row(shape, r.matmul.sustained), sustained.row("device copy", r.bandwidth.sustained),
            sustained.row(f"train step {t.model} b{t.batch_size}x{t.seq_len} {t.precision}", t.sustained)]
    burst = numbers.per(best and best.flop_per_sec, 1e12)
    return [f"burn_in on {r.gpu_uuid or env.device_name} ({env.device}), torch {env.torch_version}",
            sustained.table(rows), f"matmul burst (median iteration, best shape): {burst} TFLOP/s; the rates "
            "above are held back to back, at the power and thermal state a long run sees"]


PROBE = Probe(
    "burn_in", "a GPU's burn-in: the matmul at its best shape (bf16), the device copy and a train step, each "
    "sustained with NVML sampling clocks, power, energy and clock-event reasons", BurnInParams, BurnInResult,
    "app.bench.burn_in:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, page="probes/burn_in.html", form=()))
