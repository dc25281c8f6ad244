"""The train_step probe: one training step of the cruncher, a preset or an inline transformer,
full or fine-tuned: phase times, tokens/s, MFU and peak memory, each beside the calculators'
prediction. params.py: what it takes (data_parallel_step, data_loader and checkpoint share
it); predict.py: the calculators' view; result.py: what it reports; faces.py: how it is shown.
Its torch side is app/bench/train_step.py."""

from app.probes.base import Kind, Least, Need, Probe, sustained_least
from app.probes.faces import Faces
from app.probes.train_step import faces
from app.probes.train_step.ledger import LEDGER
from app.probes.train_step.params import TrainStepParams
from app.probes.train_step.predict import train_step
from app.probes.train_step.result import TrainStepResult


def need(params: TrainStepParams, kind: Kind) -> Need:
    return train_step(params, kind == "cuda").memory["total"], "params.batch_size"


def least_seconds(params: TrainStepParams, kind: Kind) -> Least:
    # Warm-up and timing count steps, not seconds (Timer.measure_phases): no floor from the parameters.
    return sustained_least((0.0, "params.steps"), params)


PROBE = Probe(
    "train_step", "one training step: phase times, tokens/s, MFU, peak memory measured vs predicted",
    TrainStepParams, TrainStepResult, "app.bench.train_step:run", need, least_seconds,
    faces=Faces(headline=faces.headline, tables=faces.tables, charts=faces.charts,
                page="probes/train_step.html", form=(faces.FIELDS,), compared=faces.COMPARED,
                overlay=faces.overlay, sustained="The step"),
    ledger=LEDGER)
