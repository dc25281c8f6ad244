"""The accuracy ledger: how close Tally's predictions came to this fleet's measurements."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from app.api.errors import REQUEST_ERRORS
from app.api.responses import respond
from app.deps import StoreDep
from app.measured import accuracy as ledger
from app.probes.registry import ProbeName

router = APIRouter(prefix="/accuracy", tags=["calibration"])
Text = Annotated[str | None, Query(min_length=1, max_length=200)]


@router.get("", response_model=ledger.Accuracy, responses=REQUEST_ERRORS)
def accuracy(jobs: StoreDep, probe: ProbeName | None = None,  # type: ignore[valid-type]
             device_model: Text = None, mode: Literal["datasheet", "calibrated"] | None = None,
             metric: Text = None) -> Response:
    """Every probe job's predictions beside its measurements, per probe, metric, device model and mode
    (datasheet or calibrated, leave-one-out): the median error, MAPE, the worst and the count, and the
    pairs themselves. Jobs and profiles new since the last read are scored first."""
    return respond(ledger.report(jobs, probe=probe, device_model=device_model, mode=mode, metric=metric))
