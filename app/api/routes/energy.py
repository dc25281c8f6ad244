"""Energy and carbon of GPU work."""

from typing import Annotated

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from app.accounting import energy
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import energy as service
from app.api.services.energy import EnergyRequest
from app.deps import StoreDep
from app.measured.here import read

router = APIRouter(prefix="/energy", tags=["energy"])

# Llama 2 7B's pre-training as its model card states it: 184,320 A100-80GB hours at 400 W, PUE 1.1,
# the US average grid: 31.22 tCO2eq. BLOOM (Luccioni et al. 2022): 1,082,990 A100 hours at 400 W,
# the GPUs' own energy (PUE 1), on the French grid.
ENERGY = examples(
    llama2_7b={"gpu_hours": 184320, "gpu": "a100-80gb", "pue": 1.1, "region": "us-average"},
    bloom={"gpu_hours": 1082990, "power_watts": 400, "pue": 1, "region": "france"},
    a_day_on_8_h100s={"seconds": 86400, "num_gpus": 8, "gpu": "h100-sxm", "power_utilization": 0.8,
                      "grid_g_per_kwh": 250})


@router.post("", response_model=answer(energy.Energy), responses=REQUEST_ERRORS)
async def energy_and_carbon(body: Annotated[EnergyRequest, Body(openapi_examples=ENERGY)],
                            jobs: StoreDep) -> Response:
    """kWh and CO2e of some GPU-hours: power x PUE x grid intensity, each input stated."""
    # What is measured here, read off the event loop only when the request asks for it.
    here = await run_in_threadpool(read, jobs) if body.reads_store() else None
    return respond(service.calculate(body, here), body)
