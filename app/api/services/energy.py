"""Energy and carbon of GPU work: the inputs every calculator that answers with energy shares
(the time calculator, the layout search), and the energy calculator itself."""

from typing import Literal

from pydantic import Field

from app.accounting import energy
from app.accounting.errors import InvalidInput
from app.accounting.hardware import Accelerator
from app.accounting.units import SECONDS_PER_HOUR
from app.inputs.fields import Input, count, number
from app.inputs.schemas import GpuRef, accelerator
from app.measured import power as measured
from app.measured.here import Here

RegionId = Literal[tuple(energy.regions())]  # type: ignore[valid-type]
"""A refusal lists the few known regions; each answer states its region's figure and source."""
MEASURE_POWER = '{"probe": "train_step", "params": {"sustain_s": 10}}'


class EnergyInputs(Input):
    """How a calculator turns GPU-hours into kWh and CO2e (app/accounting/energy.py)."""

    power_watts: number(gt=0, le=100_000) | Literal["measured"] | None = Field(
        None, description="Average power of one GPU over the run, W. null: the catalogue gpu's board power "
                          "x power_utilization. \"measured\": this server's device's: " + measured.RULE)
    power_utilization: number(gt=0, le=1) = Field(
        energy.DEFAULT_POWER_UTILIZATION,
        description="The share of the catalogue's board power drawn on average, in (0, 1]. 1: the board "
                    "power, as the LLaMA and Llama 2 model cards take it.")
    pue: number(ge=1, le=10) = Field(
        energy.DEFAULT_PUE, description="Power usage effectiveness: the data centre's energy over its IT "
                                        f"equipment's, >= 1. Default: {energy.PUE_SOURCE}.")
    region: RegionId = Field(  # type: ignore[valid-type]
        energy.DEFAULT_REGION, description="The grid, by name, for its carbon intensity (the answer "
                                           "states its figure, year and source); the default is replaced by "
                                           "grid_g_per_kwh when that is given.")
    grid_g_per_kwh: number(ge=0, le=10_000) | None = Field(
        None, description="The grid's carbon intensity, gCO2eq per kWh, instead of a named region's.")

    def reads_store(self) -> bool:
        return self.power_watts == "measured"


def power(body: EnergyInputs, acc: Accelerator | None, here: Here | None) -> energy.Power:
    """One GPU's average power: given, measured here (`here`, read when body.reads_store()), or the
    catalogue's board power x utilisation."""
    # A utilisation of 1 (the default, which a page's form sends) scales nothing: only another one
    # conflicts with a power that is not the board power's.
    if body.power_utilization != energy.DEFAULT_POWER_UTILIZATION and body.power_watts is not None:
        raise InvalidInput("power_utilization", "scales the catalogue's board power: give power_watts or "
                                                "power_utilization, not both")
    if body.power_watts == "measured":
        assert here is not None, "body.reads_store(): the caller reads what is measured here"
        return measured_power(acc, here)
    if body.power_watts is not None:
        return energy.Power(body.power_watts, "given")
    if acc is None:
        raise InvalidInput("power_watts", "give power_watts, or a catalogue gpu for its board power")
    return energy.board_power(acc, body.power_utilization)


def measured_power(acc: Accelerator | None, here: Here) -> energy.Power:
    found, on = here.power, here.device
    if found is None:
        raise InvalidInput("power_watts", f"no sustained train-step run has measured power on this server's "
                                          f"device ({on.name}) yet: run one (POST /api/v1/jobs "
                                          f"{MEASURE_POWER}, or a burn_in), or give a number")
    if acc is not None and on.catalogue_id != acc.id:
        raise InvalidInput("power_watts", f"the measured power is from {on.catalogue_id or on.name}, "
                                          f"not {acc.id}")
    return energy.Power(found.watts, found.source)


def grid(body: EnergyInputs) -> energy.Grid:
    """A given number replaces the default region (which a page's form sends); another region
    beside a number is refused."""
    named = body.grid_g_per_kwh is None or body.region != energy.DEFAULT_REGION
    return energy.grid(region_id=body.region if named else None, g_per_kwh=body.grid_g_per_kwh)


def pue_source(body: EnergyInputs) -> str:
    return "given" if "pue" in body.model_fields_set else f"default: {energy.PUE_SOURCE}"


def of_gpu_hours(body: EnergyInputs, gpu_hours: float, acc: Accelerator | None,
                 here: Here | None) -> energy.Energy:
    return energy.energy(gpu_hours=gpu_hours, power=power(body, acc, here), pue=body.pue,
                         pue_source=pue_source(body), grid=grid(body))


def optional(body: EnergyInputs, gpu_hours: float, acc: Accelerator, here: Here | None) -> energy.Energy | None:
    """A calculator's energy beside its time: null where the catalogue lists no board power for the
    gpu and no power_watts was sent (TPUs, A10G), so an answer about time is never refused for it."""
    if body.power_watts is None and acc.board_power_watts is None:
        return None
    return of_gpu_hours(body, gpu_hours, acc, here)


class EnergyRequest(EnergyInputs):
    gpu_hours: number(gt=0, le=1e13) | None = Field(
        None, description="GPU-hours of the run (the model cards' figure); or give seconds and num_gpus.")
    seconds: number(gt=0, le=1e12) | None = Field(None, description="Wall-clock seconds, x num_gpus.")
    num_gpus: count(1, 10_000_000) = Field(1, description="GPUs running for `seconds`.")
    gpu: GpuRef | None = Field(  # type: ignore[valid-type]
        None, description="A catalogue accelerator, for its board power; or give power_watts.")


def calculate(body: EnergyRequest, here: Here | None = None) -> energy.Energy:
    """`here` (read when body.reads_store()) only for a measured power."""
    if (body.gpu_hours is None) == (body.seconds is None):
        raise InvalidInput("gpu_hours", "give gpu_hours, or seconds (x num_gpus), not both and not neither")
    if body.gpu_hours is not None and "num_gpus" in body.model_fields_set:
        raise InvalidInput("num_gpus", "gpu_hours counts every GPU already: give num_gpus with seconds")
    hours = body.gpu_hours if body.gpu_hours is not None else body.seconds * body.num_gpus / SECONDS_PER_HOUR
    acc = None if body.gpu is None else accelerator(body.gpu, None)
    return of_gpu_hours(body, hours, acc, here)
