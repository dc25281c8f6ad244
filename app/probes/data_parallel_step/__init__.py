"""The data_parallel_step probe: the train_step probe's step over the job's GPUs (gloo processes
on a CPU) with DDP or FSDP2: step time, exposed communication, scaling against one rank, and peak
memory per rank against the ZeRO stage's prediction. params.py: what it takes and the
calculators' view of one rank; result.py: what it reports. Its torch side is
app/bench/data_parallel.py."""

from app.probes.base import Kind, Least, Need, Probe
from app.probes.data_parallel_step.params import DataParallelStepParams, data_parallel_need
from app.probes.data_parallel_step.result import DataParallelStepResult
from app.probes.faces import Faces, Fieldset, Input, Metric, Row
from app.probes.train_step import faces as train_step


def need(params: DataParallelStepParams, kind: Kind) -> Need:
    return data_parallel_need(params, kind)


def least_seconds(params: DataParallelStepParams, kind: Kind) -> Least:
    return 0.0, "params.steps"  # as a train step's, with no sustained run


def headline(r: DataParallelStepResult) -> list[Metric]:
    at = f"{r.strategy}, {r.ranks} ranks"
    return [Metric("step", "step time, median", r.step.median, "seconds", at),
            Metric("exposed", "exposed communication (vs one rank)", r.exposed_communication_s, "seconds"),
            Metric("scaling", "scaling efficiency (vs one rank)", r.scaling_efficiency, "fraction"),
            Metric("tokens", "tokens/s per rank (median step)", r.tokens_per_sec_per_rank, "tokens_per_sec"),
            Metric("memory", "peak memory per rank, predicted vs measured", r.memory.relative_error,
                   "signed_fraction")]


FIELDS = Fieldset("data_parallel_step", (
    Row("Strategy, ranks", (Input("strategy", kind="select", options=("ddp", "fsdp"), value="ddp"),
                            Input("ranks", "Ranks", "number", placeholder="default"))),
))

PROBE = Probe(
    "data_parallel_step", "the train_step probe's step over the job's GPUs (gloo processes on a CPU) with "
    "DDP or FSDP2: step time, exposed communication, scaling against one rank, and peak memory per rank vs "
    "the ZeRO stage's prediction", DataParallelStepParams, DataParallelStepResult,
    "app.bench.data_parallel:run", need, least_seconds,
    faces=Faces(headline=headline, charts=train_step.charts, page="probes/data_parallel_step.html",
                form=(train_step.FIELDS, FIELDS),
                compared=("strategy", "ranks", *train_step.COMPARED), overlay=train_step.overlay),
    spans_boxes=True)
