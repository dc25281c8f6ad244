"""What this server has measured on its own device, read from the job store in one go: all a
calculator asks of the store for a "measured" input (an MFU, a power, an efficiency). Read where
the store is (the server, off its event loop), it lets the calculation itself run anywhere, in a
worker process too (app/api/compute.py), as a pure function of its request and this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app import device
from app.device import DeviceInfo
from app.measured.calibration import Calibration, calibration
from app.measured.power import MeasuredPower, measured_power

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.store import Store


@dataclass(frozen=True)
class Here:
    device: DeviceInfo
    """This server's device (NVML, or the CPU), which its measurements were taken on."""
    calibration: Calibration
    """Its best recent matmul, train step and bandwidth runs (calibration.py's rule)."""
    power: MeasuredPower | None
    """Its mean power over recent sustained train steps (power.py's rule); None until measured."""


def read(store: Store) -> Here:
    """This device's measurements, as the store holds them now."""
    here = device.describe()
    return Here(here, calibration(store, here), measured_power(store, here))


def read_if(needed: bool, store: Store) -> Here | None:
    """read(store) where a request asks for a measured input (its reads_store()); else None."""
    return read(store) if needed else None
