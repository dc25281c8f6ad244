"""Energy and carbon of GPU work, by the method the model cards state (LLaMA, Touvron et al.
2023a, "Carbon footprint", after Wu et al. 2022; Llama 2's model card):

    energy (kWh)  = GPU-hours x average power per GPU (W) x PUE / 1000
    CO2e (g)      = energy (kWh) x grid carbon intensity (gCO2eq/kWh)

The average power per GPU is given, or the catalogue's board power (data/hardware.toml) x a
utilisation factor (1.0: the board power, as the model cards take it), or measured on this
server's device (app/measured/power.py). PUE (power usage effectiveness: the facility's energy over
the IT equipment's, >= 1) scales the GPUs' energy to the data centre's. The grid's intensity is a
named region's (data/grid.toml, each with its source) or a number.

Pure: no store, no fastapi. Every input is stated in the answer with where it came from.
"""

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from app.accounting.errors import InvalidInput
from app.accounting.hardware import CUSTOM_VENDOR, Accelerator
from app.accounting.records import RECORD

JOULES_PER_KWH = 3.6e6
GRAMS_PER_TONNE = 1e6

# The model cards' convention, each a default a request may replace (stated in defaults_applied).
DEFAULT_POWER_UTILIZATION = 1.0
"""Average power = the board power: LLaMA and Llama 2 take each GPU at its TDP (400 W for an A100)."""
DEFAULT_PUE = 1.1
PUE_SOURCE = ("LLaMA (Touvron et al. 2023a, 'Carbon footprint'): PUE 1.1, the figure Llama 2's model card "
              "uses too")
DEFAULT_REGION = "us-average"


@dataclass(frozen=True, slots=True)
class Region:
    """A grid's carbon intensity, with the year it is for and where it is written."""

    id: str
    name: str
    g_per_kwh: float
    """gCO2eq per kWh drawn."""
    year: int
    source: str

    __pydantic_config__ = RECORD


@cache
def regions() -> dict[str, Region]:
    text = resources.files("app.accounting").joinpath("data/grid.toml").read_text()
    return {row["id"]: Region(**row) for row in tomllib.loads(text)["region"]}


def region(region_id: str, *, field: str = "region") -> Region:
    table = regions()
    if region_id not in table:
        raise InvalidInput(field, f"unknown region {region_id!r}: the known ones are {', '.join(table)}")
    return table[region_id]


@dataclass(frozen=True, slots=True)
class Power:
    """Average power of one GPU over the run, and where it came from."""

    watts: float
    source: str
    """"given"; "catalogue: ..." (board power x utilisation, with the datasheet); "measured: ..."."""
    board_power_watts: float | None = None
    """The catalogue's board power, when the average is taken from it."""
    utilization: float | None = None
    """The share of the board power drawn on average, when the average is taken from it."""


def board_power(acc: Accelerator, utilization: float, *, field: str = "power_watts") -> Power:
    """The catalogue's board power x `utilization` (0 < u <= 1); InvalidInput naming `field`
    where the catalogue lists no board power for the part."""
    if not 0 < utilization <= 1:
        raise InvalidInput("power_utilization", f"must be in (0, 1], not {utilization}")
    if acc.board_power_watts is None and acc.vendor == CUSTOM_VENDOR:
        raise InvalidInput(field, f"{acc.id} was given no board power: give power_watts, or "
                                  "gpu.board_power_watts")
    if acc.board_power_watts is None:
        raise InvalidInput(field, f"the catalogue lists no board power for {acc.id} (no vendor sheet gives "
                                  "one); give power_watts")
    where = "gpu" if acc.vendor == CUSTOM_VENDOR else "catalogue"
    return Power(acc.board_power_watts * utilization,
                 f"{where}: {acc.id} board power {acc.board_power_watts:g} W x utilisation {utilization:g} "
                 f"({acc.board_power_source})", acc.board_power_watts, utilization)


@dataclass(frozen=True, slots=True)
class Grid:
    g_per_kwh: float
    region: str | None
    """The named region's id; null for a given number."""
    source: str


def grid(*, region_id: str | None, g_per_kwh: float | None) -> Grid:
    """A named region's intensity, or the given number; the default region when neither."""
    if g_per_kwh is not None:
        if region_id is not None:
            raise InvalidInput("grid_g_per_kwh", "give region or grid_g_per_kwh, not both")
        if g_per_kwh < 0:
            raise InvalidInput("grid_g_per_kwh", f"a carbon intensity is >= 0 gCO2eq/kWh, not {g_per_kwh}")
        return Grid(g_per_kwh, None, "given")
    r = region(region_id or DEFAULT_REGION)
    return Grid(r.g_per_kwh, r.id, f"{r.name}, {r.year}: {r.source}")


@dataclass(slots=True)
class Energy:
    """The energy and carbon of some GPU-hours, with every input and its source."""

    gpu_hours: float
    power_watts_per_gpu: float
    """Average power of one GPU over the run."""
    power_source: str
    """"given"; "catalogue: ..." (board power x utilisation, with the datasheet); "measured: ..."."""
    board_power_watts: float | None
    """The catalogue's board power, where the average power is taken from it."""
    power_utilization: float | None
    """The share of the board power drawn on average, where the average power is taken from it."""
    pue: float
    """Power usage effectiveness: facility energy / IT energy."""
    pue_source: str
    gpu_energy_kwh: float
    """GPU-hours x W / 1000: the GPUs' own energy, before PUE."""
    energy_kwh: float
    """gpu_energy_kwh x PUE: the facility's."""
    energy_mwh: float
    grid_g_per_kwh: float
    """gCO2eq per kWh."""
    grid_region: str | None
    """The named region (data/grid.toml); null for a given intensity."""
    grid_source: str
    co2e_kg: float
    """energy_kwh x grid_g_per_kwh / 1000."""
    co2e_tonnes: float
    """Metric tonnes (tCO2eq), as the model cards write it."""

    __pydantic_config__ = RECORD


def energy(*, gpu_hours: float, power: Power, pue: float, pue_source: str, grid: Grid) -> Energy:
    """kWh = GPU-hours x W x PUE / 1000; CO2e = kWh x g/kWh."""
    if power.watts <= 0:
        raise InvalidInput("power_watts", f"an average power is > 0 W, not {power.watts}")
    if pue < 1:
        raise InvalidInput("pue", f"a PUE is facility energy over IT energy, so >= 1, not {pue}")
    gpu_kwh = gpu_hours * power.watts / 1000
    kwh = gpu_kwh * pue
    grams = kwh * grid.g_per_kwh
    return Energy(gpu_hours=gpu_hours, power_watts_per_gpu=power.watts, power_source=power.source,
                  board_power_watts=power.board_power_watts, power_utilization=power.utilization, pue=pue,
                  pue_source=pue_source, gpu_energy_kwh=gpu_kwh, energy_kwh=kwh, energy_mwh=kwh / 1000,
                  grid_g_per_kwh=grid.g_per_kwh, grid_region=grid.region, grid_source=grid.source,
                  co2e_kg=grams / 1000, co2e_tonnes=grams / GRAMS_PER_TONNE)
