"""The worker's device, and what has been measured on it."""

from fastapi import APIRouter, Request, Response

from app.api import deps
from app.api.responses import respond
from app.jobs import calibration as calib
from app.jobs import device as dev

router = APIRouter(tags=["device"])


@router.get("/device", response_model=dev.DeviceInfo)
async def device() -> Response:
    """What the worker's device is, from NVML (the server never creates a CUDA context)."""
    return respond(dev.describe())


@router.get("/calibration", response_model=calib.Calibration)
def calibration(request: Request) -> Response:
    """The latest measured matmul peak per dtype and train-step MFU per precision on this
    device. POST /api/v1/time/training with `mfu: "measured"` uses the train-step MFU."""
    return respond(calib.calibration(deps.store(request), dev.describe()))
