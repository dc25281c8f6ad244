"""The `calibration` field every time calculator takes: a profile's id, or a device model's name
for its newest version (app/accounting/calibration/profile.py; the API stores them)."""

from typing import Annotated, Any

from pydantic import BeforeValidator, Field


def _whole(value: Any) -> Any:
    """An integral float is an id, as JSON writers may write one (5081.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


ProfileId = Annotated[int, Field(ge=1, le=2**53)]
DeviceModelName = Annotated[str, Field(min_length=1, max_length=200)]
CalibrationRef = Annotated[ProfileId | DeviceModelName, BeforeValidator(_whole)]
CALIBRATION_HELP = ("A calibration profile: its id, a device model's name for its newest version, or "
                    "one device's name (its UUID, or \"<host>:cpu\") for its own "
                    "(GET /api/v1/calibration/profiles lists them). The answer then times the work "
                    "from that device's own runs and names them.")
