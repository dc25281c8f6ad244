"""This server's past measurements as a probe module asks for them (app/probes/past.py's
protocol): the service that submits a job and the page that draws one pass a StoredPast over the
job store, so no probe module reads the store itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.measured import calibration, train_rate

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.store import Store


@dataclass(frozen=True)
class RanOn:
    """The device a result was measured on, as the calibration rule matches devices: same kind
    and name."""

    kind: str
    name: str
    catalogue_id: str | None

    @classmethod
    def of(cls, environment: Any) -> RanOn:
        return cls(environment.device, environment.device_name, environment.catalogue_id)


@dataclass(frozen=True)
class StoredPast:
    store: Store

    def calibration(self, environment: Any) -> calibration.Calibration:
        return calibration.calibration(self.store, RanOn.of(environment))

    def train_step_rate(self, params: Any, device: Any, job_id: int | None) -> tuple[float, int] | None:
        return train_rate.train_step_rate(self.store, params, device, job_id)
