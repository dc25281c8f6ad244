"""Logging for the server and the worker: human lines by default, JSON lines on request.

One configuration covers Tally's loggers and uvicorn's, so an operator's log shipper
sees one format. A record about a job carries `job_id` (pass `extra={"job_id": id}`,
or use `for_job`); human lines show it as `job=<id>`, JSON lines as a field.

Every line passes through `redact` on its way out: the API token never reaches a log,
whatever a client put in a URL or an exception carried.
"""

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["human", "json"]
REDACTED = "[redacted]"
HUMAN = "%(asctime)s %(levelname)s %(name)s%(job)s: %(message)s"
# uvicorn.access's record.args, in order (uvicorn/protocols/http/*: access_logger.info).
ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


class _Redacting(logging.Formatter):
    def __init__(self, *args: Any, secrets: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets = tuple(s for s in secrets if s)

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.render(record), self.secrets)

    def render(self, record: logging.LogRecord) -> str:
        job_id = getattr(record, "job_id", None)
        record.job = "" if job_id is None else f" job={job_id}"
        return super().format(record)


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


class HumanFormatter(_Redacting):
    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(HUMAN, secrets=secrets)


class JsonFormatter(_Redacting):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and
    job_id or the access fields when the record has them."""

    def render(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if getattr(record, "job_id", None) is not None:
            line["job_id"] = record.job_id
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            line.update(zip(ACCESS_FIELDS, record.args, strict=True))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def config(level: str, fmt: LogFormat, secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """A logging.config.dictConfig dict; uvicorn.run takes it as log_config."""
    formatter = {"()": JsonFormatter if fmt == "json" else HumanFormatter, "secrets": secrets}
    handler = {"class": "logging.StreamHandler", "formatter": "tally", "stream": "ext://sys.stderr"}
    loggers = {name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
               for name in ("tally", "uvicorn", "uvicorn.error", "uvicorn.access")}
    return {"version": 1, "disable_existing_loggers": False, "formatters": {"tally": formatter},
            "handlers": {"stderr": handler}, "loggers": loggers,
            "root": {"handlers": ["stderr"], "level": "WARNING"}}


def configure(level: str, fmt: LogFormat, secrets: tuple[str, ...] = ()) -> None:
    logging.config.dictConfig(config(level, fmt, secrets))


def for_job(logger: logging.Logger, job_id: int) -> logging.LoggerAdapter:
    """A logger whose every line carries `job_id`."""
    return logging.LoggerAdapter(logger, {"job_id": job_id})
