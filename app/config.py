"""Settings, in one place: environment variables with the TALLY_ prefix, or .env."""

from functools import cache
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TALLY_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    # The largest request is a config.json of a few kB; anything near this is not ours.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 1 << 20


@cache
def get_settings() -> Settings:
    """Read once; a bad value stops start-up with pydantic's message naming it."""
    return Settings()
