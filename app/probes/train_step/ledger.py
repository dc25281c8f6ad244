"""The train step's pairs for the accuracy ledger (app/probes/ledger.py): its peak memory beside
the memory engine's, and its step time beside the datasheet answer and the calibrated one
(app/accounting/calibration/step.py)."""

from typing import Any

from pydantic import ValidationError

from app.accounting import hardware
from app.accounting.calibration import step, surface
from app.accounting.calibration.profile import Profile
from app.accounting.errors import InvalidInput
from app.inputs.schemas import engine_model
from app.probes.ledger import Ledger, Pair, datasheet_peak, positive
from app.probes.train_step.params import CruncherSpec, TrainStepParams


def calibratable(params: dict[str, Any]) -> TrainStepParams | None:
    """The params of a step step.py's model times (a full, uncompiled transformer step at a
    precision with a matmul dtype), parsed; None for any other."""
    try:
        p = TrainStepParams.model_validate(params)
    except ValidationError:
        return None
    if isinstance(p.model, CruncherSpec) or p.mode != "full" or p.compile:
        return None
    if p.precision not in step.MATMUL_DTYPE:
        return None
    return p


def datasheet(params: dict[str, Any], result: Any) -> list[Pair]:
    detail = f"{result.model}, batch {result.batch_size} x {result.seq_len}, {result.precision}"
    pairs = [Pair("peak_bytes", "memory", result.memory.predicted.get("total", 0),
                  result.memory.measured_peak_allocated, detail)]
    peak = datasheet_peak(result.environment, step.MATMUL_DTYPE.get(result.precision, "float32"))
    if peak is not None and result.mode == "full":
        pairs.append(Pair("step_seconds", "time", result.flops_per_step / (peak[0] * step.DEFAULT_MFU),
                          result.step.median, detail))
    board = board_watts(result.environment)
    if board is not None:
        pairs += _power(board, result, detail)
    return positive(pairs)


def board_watts(environment: Any) -> float | None:
    """What the energy calculators draw a GPU at when not told (POST /api/v1/energy, a plan's
    energy): the catalogue's board power."""
    acc = hardware.catalogue().get(environment.catalogue_id or "")
    return None if acc is None else acc.board_power_watts


def _power(predicted_watts: float, result: Any, detail: str) -> list[Pair]:
    """The average board watts NVML read over the steps run back to back (Stats.energy), beside
    the power an energy answer assumes: the energy a run draws is its hours times that."""
    drawn = result.step.energy
    return [] if drawn is None else [Pair("board_watts", "energy", predicted_watts, drawn.watts, detail)]


def calibrated(params: dict[str, Any], result: Any, profile: Profile) -> list[Pair]:
    p = calibratable(params)
    if p is None:
        return []
    try:
        c = step.counts(engine_model(p.model), batch_size=p.batch_size, seq_len=p.seq_len,
                        precision=p.precision, optimizer=p.optimizer)
        surf = surface.fit(list(profile.matmul), step.MATMUL_DTYPE[p.precision])
        predicted = step.calibrated(c, profile, surf, p.precision).seconds
    except InvalidInput:  # no surface in this dtype, no fit at this precision: nothing to score
        return []
    detail = f"{result.model}, batch {p.batch_size} x {p.seq_len}, {p.precision}"
    power = [] if profile.power_watts is None else _power(profile.power_watts.value, result, detail)
    return positive([Pair("step_seconds", "time", predicted, result.step.median, detail), *power])


LEDGER = Ledger(datasheet, calibrated)
