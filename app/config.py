"""Settings, in one place: environment variables with the TALLY_ prefix, or .env."""

from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TALLY_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    # The largest request is a config.json of a few kB; anything near this is not ours.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 1 << 20

    database_path: Path = Path("tally.db")
    """SQLite file holding the job queue and results (WAL mode: keep it on a local disk)."""
    api_token: SecretStr | None = None
    """When set, submitting and cancelling jobs need `Authorization: Bearer <token>`."""
    queue_limit: Annotated[int, Field(ge=1, le=100_000)] = 100
    """Most jobs queued or running at once; beyond it POST /api/v1/jobs answers 429."""
    job_timeout_s: Annotated[float, Field(ge=1, le=86_400)] = 600
    """A job's hard time limit when it names none."""
    job_timeout_max_s: Annotated[float, Field(ge=1, le=86_400)] = 3600
    """The longest time limit a job may ask for."""
    embedded_worker: bool = True
    """Run the dispatcher inside the server; false when `tally worker` runs beside it."""
    worker_id: str | None = None
    """Names this dispatcher in the job rows; defaults to the host name."""

    @model_validator(mode="after")
    def _timeouts(self) -> "Settings":
        if self.job_timeout_s > self.job_timeout_max_s:
            raise ValueError(f"job_timeout_s ({self.job_timeout_s}) exceeds job_timeout_max_s "
                             f"({self.job_timeout_max_s})")
        return self


@cache
def get_settings() -> Settings:
    """Read once; a bad value stops start-up with pydantic's message naming it."""
    return Settings()
