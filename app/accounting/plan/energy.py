"""Energy and carbon of the layout search's layouts, by the energy engine (app/accounting/energy.py)
with one set of inputs for the whole plan: a step's energy is its GPU-hours (step seconds x GPUs)
at the average power per GPU x PUE, so per step and per token it orders layouts as their step time
does, at the plan's power. Only the layouts answered (the fastest that fit, or the closest) are
costed: the search itself never is, so its speed is unchanged."""

import math
from dataclasses import dataclass

from app.accounting import energy
from app.accounting.records import RECORD
from app.accounting.units import SECONDS_PER_HOUR


@dataclass(slots=True)
class StepEnergy:
    """One optimizer step on every GPU of the layout, facility energy (PUE included)."""

    joules_per_step: float
    joules_per_token: float
    """joules_per_step / tokens per step."""
    co2e_grams_per_step: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class PlanEnergy:
    """What every layout's energy is computed with, each with its source; and, given the run's
    training tokens, the run's energy and CO2e on the fastest fitting layout."""

    power_watts_per_gpu: float
    power_source: str
    pue: float
    pue_source: str
    grid_g_per_kwh: float
    grid_region: str | None
    grid_source: str
    training_tokens: int | None = None
    steps: int | None = None
    """ceil(training_tokens / tokens per step): whole optimizer steps."""
    run: energy.Energy | None = None
    """The run on the fastest fitting layout: steps x its step's GPU-hours; null without
    training_tokens or when no layout fits."""

    __pydantic_config__ = RECORD


def _step_energy(step_seconds: float, gpus: int, tokens_per_step: int, power: energy.Power, pue: float,
                 grid: energy.Grid) -> StepEnergy:
    e = energy.energy(gpu_hours=step_seconds * gpus / SECONDS_PER_HOUR, power=power, pue=pue, pue_source="",
                      grid=grid)
    joules = e.energy_kwh * energy.JOULES_PER_KWH
    return StepEnergy(joules_per_step=joules, joules_per_token=joules / tokens_per_step,
                      co2e_grams_per_step=e.co2e_kg * 1000)


def cost(steps: list, *, gpus: int, tokens_per_step: int, power: energy.Power, pue: float, pue_source: str,
         grid: energy.Grid, training_tokens: int | None) -> PlanEnergy:
    """Set each StepTime's `energy` in `steps` (fastest first; None entries skipped) and answer the
    plan's inputs, with the run's energy on the first when training_tokens is given."""
    for st in steps:
        if st is not None:
            st.energy = _step_energy(st.step_seconds, gpus, tokens_per_step, power, pue, grid)
    stated = PlanEnergy(power_watts_per_gpu=power.watts, power_source=power.source, pue=pue,
                        pue_source=pue_source, grid_g_per_kwh=grid.g_per_kwh, grid_region=grid.region,
                        grid_source=grid.source, training_tokens=training_tokens)
    if training_tokens is not None:
        stated.steps = math.ceil(training_tokens / tokens_per_step)
        fastest = steps[0] if steps and steps[0] is not None and steps[0].fits else None
        if fastest is not None:
            hours = stated.steps * fastest.step_seconds * gpus / SECONDS_PER_HOUR
            stated.run = energy.energy(gpu_hours=hours, power=power, pue=pue, pue_source=pue_source,
                                       grid=grid)
    return stated
