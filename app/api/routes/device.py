"""The worker's device, and what has been measured on it."""

from fastapi import APIRouter, Response

from app import device as dev
from app.api.responses import respond
from app.api.services import device as service
from app.deps import SettingsDep

router = APIRouter(tags=["device"])


@router.get("/device", response_model=dev.DeviceInfo)
def device() -> Response:
    """What the worker's device is, from NVML (the server never creates a CUDA context)."""
    return respond(dev.describe())


@router.get("/devices", response_model=list[dev.DeviceInfo])
def devices(settings: SettingsDep) -> Response:
    """Every device a job may run on: each GPU with a dispatcher (one per GPU, named by
    NVML's index in a job's `gpu`), or the host's CPU on a box without one."""
    return respond(service.devices(settings))
