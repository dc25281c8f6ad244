"""Settings, in one place: environment variables with the TALLY_ prefix, or .env."""

import ipaddress
import os
import socket
import sys
from functools import cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "TALLY_"
# The names a loopback server answers by default, and always accepts (`tally healthcheck` asks
# 127.0.0.1): a DNS-rebinding page reaches the server under its own name, never under these.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


BOX_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # a host name's letters: it names leases and devices
MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"  # a dotted Python module path


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    allowed_hosts: Annotated[list[str] | None, NoDecode] = None
    """Host header names (without the port) the server answers, written "tally.lab,10.0.0.5";
    "*" answers any. The loopback names are always accepted. Default: the loopback names when
    TALLY_HOST is a loopback address, any host otherwise. Another Host gets a 400."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["human", "json"] = "human"
    """json: one JSON object per line (time, level, logger, message, job_id, access fields)."""
    # The largest request is a config.json of a few kB; anything near this is not ours.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 1 << 20
    # Slow clients: each open connection costs a little; these bound how many and how long.
    limit_concurrency: Annotated[int, Field(ge=1, le=100_000)] = 256
    """Most requests being answered at once, each counted once its body is in (app/api/limits.py);
    beyond it 503. A connection that has sent no whole request holds no slot."""
    limit_connections: Annotated[int, Field(ge=1, le=100_000)] = 1000
    """Most open connections (`tally serve`); one beyond it is closed as it opens. Keep it under the
    process's file limit (ulimit -n)."""
    timeout_keep_alive_s: Annotated[int, Field(ge=1, le=3600)] = 5
    """An idle kept-alive connection is closed after this long."""
    header_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10
    """A request's line and headers must arrive within this long (`tally serve` only)."""
    body_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30
    """A request's whole body must arrive within this long of the first read; else 408."""
    max_header_bytes: Annotated[int, Field(ge=1024, le=1 << 20)] = 16384
    """Largest request line plus headers (uvicorn's h11_max_incomplete_event_size)."""

    compute_workers: Annotated[int, Field(ge=1, le=256)] | None = None
    """Worker processes for the heavy calculations (layout search, will-it-run, fine-tuning, training
    memory, serving time; app/api/compute.py), so none runs on the event loop. Default (None): the
    cores but one, at least 1 and at most 4 (`compute_pool_size`)."""
    compute_budget_s: Annotated[float, Field(gt=0, le=3600)] = 20
    """A heavy calculation still running after this long is stopped: 422 `too_costly`, naming what to
    narrow."""
    compute_per_client: Annotated[int, Field(ge=1, le=1000)] = 2
    """Heavy calculations one client address may have running or waiting at once; beyond it, 429."""
    compute_queue: Annotated[int, Field(ge=1, le=10_000)] = 16
    """Heavy calculations running or waiting at once, from all clients; beyond it, 503."""

    database_path: Path = Path("tally.db")
    """SQLite file holding the job queue and results (WAL mode: keep it on a local disk)."""
    database_url: str | None = None
    """The job database as a URL, which replaces TALLY_DATABASE_PATH: postgresql://USER:PASSWORD@HOST:PORT/
    DATABASE, a PostgreSQL server that a fleet's workers share (through psycopg 3), or sqlite:///PATH."""
    api_token: SecretStr | None = None
    """When set, submitting and cancelling jobs need `Authorization: Bearer <token>`. When unset
    and the server binds a non-loopback address, it generates one at start-up (see below)."""
    allow_anonymous: bool = False
    """Accept jobs from anyone on a network address with no token, as before tokens were
    generated; without it a server binding beyond loopback always requires a token."""
    queue_limit: Annotated[int, Field(ge=1, le=100_000)] = 100
    """Most jobs queued or running at once; beyond it POST /api/v1/jobs answers 429."""
    job_timeout_s: Annotated[float, Field(ge=1, le=86_400)] = 600
    """A job's hard time limit when it names none."""
    job_timeout_max_s: Annotated[float, Field(ge=1, le=86_400)] = 3600
    """The longest time limit a job may ask for."""
    embedded_worker: bool = True
    """Run the dispatcher inside the server; false when `tally worker` runs beside it."""
    worker_id: str | None = None
    """Names this dispatcher in the job rows, before `:gpu<i>` or `:cpu`; default host and process id."""
    box_name: Annotated[str, Field(min_length=1, max_length=253, pattern=BOX_NAME)] | None = None
    """This box's name in the fleet: its device leases, its registered devices ("<box>:cpu" for a
    CPU) and the jobs that target a host. Default: the machine's host name."""
    device_lost_after_s: Annotated[float, Field(ge=1, le=30 * 86_400)] = 3600
    """A queued job whose target (a device, a host, a GPU model) no device of the fleet has met for
    this long fails as DeviceLost, and its campaign can end; the server checks every
    min(30 s, a quarter of this)."""
    node_address: Annotated[str, Field(min_length=1, max_length=253, pattern=BOX_NAME)] | None = None
    """A job across boxes: the address the other boxes reach this one at, published through the job
    database for the rendezvous (torchrun's --local-addr). Default: this machine's host name's
    address, or where that is loopback the address of the interface its default route leaves by."""
    gather_wait_s: Annotated[float, Field(ge=1, le=86_400)] = 120
    """A job across boxes: how long a box that joined it waits for the others before it leaves,
    its devices freed (all of them or none)."""
    stale_after_s: Annotated[float, Field(ge=3, le=3600)] = 30
    """Seconds without a heartbeat before a running job counts as its dead worker's (requeued), and
    before a box of a job across boxes counts as lost (the job ends on every box)."""
    worker_loss_retries: Annotated[int, Field(ge=0, le=100)] = 3
    """Times a job goes back to the queue when its worker dies under it (a killed server or
    worker, not the job's fault), before it fails as WorkerLost."""
    probe_modules: Annotated[list[Annotated[str, Field(pattern=MODULE_NAME)]], NoDecode] = []
    """Site probes beside Tally's own: importable modules, written "site.disk,site.net", each
    defining a PROBE as app/probes/<name>.py does (app/probes/base.py). Read once as a process
    imports the probe registry, so the server, its workers and `tally probe` must all see it."""
    gpus: Annotated[list[Annotated[int, Field(ge=0, le=1023)]] | None, NoDecode] = None
    """GPU indices (as NVML and CUDA number them) that each get an embedded dispatcher and
    take jobs, written "0,1"; default every GPU NVML reports. Without a GPU, one dispatcher
    runs jobs on the CPU."""

    @field_validator("api_token", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # compose's `TALLY_API_TOKEN: ${TALLY_API_TOKEN:-}` passes "" for "not set".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, value: object) -> object:
        if isinstance(value, str):
            return database_url(value)
        return value

    def database(self) -> str | Path:
        """The job database, as Store takes it: TALLY_DATABASE_URL when set, else TALLY_DATABASE_PATH."""
        return self.database_url or self.database_path

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_list(cls, value: object) -> object:
        if isinstance(value, str):  # "tally.lab, 10.0.0.5" from the environment
            value = [v for v in value.split(",") if v.strip()] or None
        if isinstance(value, list | tuple):  # compared as the Host header's name is: lower case, no []
            return [str(v).strip().lower().removeprefix("[").removesuffix("]") for v in value]
        return value

    @field_validator("probe_modules", mode="before")
    @classmethod
    def _module_list(cls, value: object) -> object:
        if isinstance(value, str):  # "site.disk, site.net" from the environment
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_list(cls, value: object) -> object:
        if isinstance(value, str):  # "0,1" or "[0, 1]" from the environment
            items = [v.strip() for v in value.strip().strip("[]").split(",")]
            if items == [""]:
                return None
            return items
        return value

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"lists a GPU twice: {value}")
        return value

    def compute_pool_size(self) -> int:
        return self.compute_workers or max(1, min(4, (os.cpu_count() or 2) - 1))

    def box(self) -> str:
        return self.box_name or socket.gethostname()

    def exposed_without_token(self) -> bool:
        """Whether this server would take anonymous jobs from other machines: no token, a
        non-loopback address, and no TALLY_ALLOW_ANONYMOUS to say that is meant."""
        return self.api_token is None and not self.allow_anonymous and not is_loopback(self.host)

    def secrets(self) -> tuple[str, ...]:
        """Values no log line may contain: the API token, the database's password."""
        password = urlsplit(self.database_url).password if self.database_url else None
        return tuple(secret for secret in (self.api_token and self.api_token.get_secret_value(), password)
                     if secret)

    def host_names(self) -> frozenset[str] | None:
        """The Host names this server answers (lower case, IPv6 without brackets); None for any."""
        if self.allowed_hosts is None or "*" in self.allowed_hosts:
            return None
        return frozenset(self.allowed_hosts) | frozenset(LOOPBACK_NAMES)

    @model_validator(mode="after")
    def _loopback_hosts(self) -> "Settings":
        if self.allowed_hosts is None and self.host.strip("[]").lower() in LOOPBACK_NAMES:
            self.allowed_hosts = list(LOOPBACK_NAMES)
        return self

    @model_validator(mode="after")
    def _timeouts(self) -> "Settings":
        if self.job_timeout_s > self.job_timeout_max_s:
            raise ValueError(f"{ENV_PREFIX}JOB_TIMEOUT_S ({self.job_timeout_s}) exceeds "
                             f"{ENV_PREFIX}JOB_TIMEOUT_MAX_S ({self.job_timeout_max_s})")
        return self


# TALLY_DATABASE_URL's schemes: PostgreSQL's (each through psycopg 3, SQLAlchemy's postgresql+psycopg),
# and SQLite's.
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def database_url(value: str) -> str | None:
    """TALLY_DATABASE_URL as the store takes it: a PostgreSQL URL rewritten for psycopg 3
    (postgresql+psycopg://), or sqlite:///PATH; None when empty. ValueError naming what is wrong."""
    value = value.strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise ValueError("a URL is SCHEME://...: postgresql://USER:PASSWORD@HOST:PORT/DATABASE or sqlite:///PATH")
    if scheme.lower() in POSTGRES_SCHEMES:
        return f"postgresql+psycopg://{rest}"
    if scheme.lower() == "sqlite":
        if not rest.startswith("/") or rest in ("/", "/:memory:"):  # in memory: one process's alone
            raise ValueError("sqlite:///PATH needs a file path (three slashes, then the path)")
        return value
    raise ValueError(f"the scheme {scheme!r} is not one Tally speaks: postgresql://USER:PASSWORD@HOST:PORT/"
                     "DATABASE or sqlite:///PATH")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this machine only. 0.0.0.0, :: and
    every other name or address may be reached from elsewhere."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@cache
def get_settings() -> Settings:
    """Read once; a bad value raises pydantic's ValidationError, naming it."""
    return Settings()


def settings_or_exit() -> Settings:
    """Start-up's read: a bad value stops the process (status 2) with one line per problem,
    each naming the environment variable, instead of a traceback."""
    try:
        return get_settings()
    except ValidationError as e:
        lines = [f"tally: invalid setting {ENV_PREFIX}{str(err['loc'][0]).upper()}: {err['msg']} "
                 f"(got {err['input']!r})" if err["loc"] else f"tally: invalid settings: {err['msg']}"
                 for err in e.errors(include_url=False)]
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(2) from None
