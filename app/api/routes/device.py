"""The worker's device, and what has been measured on it."""

from fastapi import APIRouter, Request, Response

from app.api import deps
from app.api.responses import respond
from app.jobs import calibration as calib
from app import device as dev

router = APIRouter(tags=["device"])


@router.get("/device", response_model=dev.DeviceInfo)
async def device() -> Response:
    """What the worker's device is, from NVML (the server never creates a CUDA context)."""
    return respond(dev.describe())


@router.get("/devices", response_model=list[dev.DeviceInfo])
def devices(request: Request) -> Response:
    """Every device a job may run on: each GPU with a dispatcher (one per GPU, named by
    NVML's index in a job's `gpu`), or the host's CPU on a box without one."""
    served = dev.served_gpus(deps.settings(request).gpus)
    return respond([dev.describe_served(index) for index in served] or [dev.host()])


@router.get("/calibration", response_model=calib.Calibration)
def calibration(request: Request) -> Response:
    """The latest measured matmul peak per dtype and train-step MFU per precision on this
    device. POST /api/v1/time/training with `mfu: "measured"` uses the train-step MFU."""
    return respond(calib.calibration(deps.store(request), dev.describe()))
