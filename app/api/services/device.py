"""The devices jobs run on, and what has been measured on this one."""

from app import device
from app.config import Settings
from app.jobs.store import Store
from app.measured import calibration as calib


def devices(settings: Settings) -> list[device.DeviceInfo]:
    """Each GPU with a dispatcher (by NVML's index), or the host's CPU on a box without one."""
    return [device.describe_served(index) for index in device.served_gpus(settings.gpus)] or [device.host()]


def calibration(jobs: Store) -> calib.Calibration:
    return calib.calibration(jobs, device.describe())
