"""Logging for the server and the worker: human lines by default, JSON lines on request.

One configuration covers Tally's loggers and uvicorn's, so an operator's log shipper
sees one format. A record about a job carries `job_id` (pass `extra={"job_id": id}`,
or use `for_job`); human lines show it as `job=<id>`, JSON lines as a field.

Every line passes through `redact` on its way out: the API token never reaches a log,
whatever a client put in a URL (percent-encoded, plus for space) or a Basic header, or an
exception carried. The formatters redact under `tally serve`; create_app also calls
`protect`, which puts a redacting filter on the loggers and their handlers, so a server
started any other way (plain `uvicorn --factory app.main:create_app`) redacts too.
"""

import base64
import binascii
import json
import logging
import logging.config
import re
import time
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote, unquote_plus

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
        if getattr(record, "reveal", False):
            return self.render(record)
        return redact(self.render(record), self.secrets)

    def render(self, record: logging.LogRecord) -> str:
        job_id = getattr(record, "job_id", None)
        record.job = "" if job_id is None else f" job={job_id}"
        return super().format(record)


# A run of URL characters between separators, holding an escape: a query value or a path
# segment that may spell a secret in percent-encoding or with + for space.
_ENCODED = re.compile(r"[^\s?&=;,\"'<>]*[%+][^\s?&=;,\"'<>]*")
_BASIC = re.compile(r"(Basic\s+)([A-Za-z0-9+/]+=*)", re.IGNORECASE)


def _spells(text: str, secrets: tuple[str, ...]) -> bool:
    decoded = (unquote(text), unquote_plus(text))
    return any(secret in form for secret in secrets for form in decoded)


def _basic_spells(b64: str, secrets: tuple[str, ...]) -> bool:
    try:
        decoded = base64.b64decode(b64, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return False
    return any(secret in decoded for secret in secrets)


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret replaced, as written or in any URL encoding or Basic header."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    if not secrets:
        return text
    if "%" in text or "+" in text:
        text = _ENCODED.sub(lambda m: REDACTED if _spells(m.group(), secrets) else m.group(), text)
    if "asic" in text:
        text = _BASIC.sub(lambda m: m.group(1) + REDACTED if _basic_spells(m.group(2), secrets)
                          else m.group(), text)
    return text


class RedactingFilter(logging.Filter):
    """Redacts a record's message, arguments and traceback in place, before any handler
    formats it. A record with `reveal=True` passes untouched: the one line that hands a
    generated token to the operator."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: tuple[str, ...] = ()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets or getattr(record, "reveal", False) or getattr(record, "_redacted", False):
            return True
        record._redacted = True
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.secrets)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a, self.secrets) if isinstance(a, str) else a for a in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), self.secrets)
        return True


_FILTER = RedactingFilter()
_PROTECTED = ("", "tally", "tally.jobs", "uvicorn", "uvicorn.error", "uvicorn.access")


def protect(secrets: tuple[str, ...]) -> None:
    """Add `secrets` to those redacted from every record of Tally's and uvicorn's loggers,
    whatever configured them: the filter goes on each logger (for its own records) and
    each of its handlers (for records propagated to it). Secrets accumulate: a process
    that built several apps redacts all their tokens."""
    _FILTER.secrets = tuple(dict.fromkeys((*_FILTER.secrets, *(s for s in secrets if s))))
    handlers = [logging.lastResort] if logging.lastResort else []
    for name in _PROTECTED:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        handlers += logger.handlers
    for handler in handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


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


class Repeating:
    """One error that may repeat many times a second (a dispatcher's loop against a database that is
    down): logged in full the first time, then once every `every_s` seconds with how many times it
    happened since, and once more when it stops."""

    def __init__(self, logger: logging.Logger, every_s: float = 60.0) -> None:
        self.logger, self.every_s = logger, every_s
        self.since = 0  # times it happened since it was last logged
        self.next_at: float | None = None  # monotonic; None while it is not happening

    def happened(self, message: str, *args: Any) -> None:
        """Log the exception being handled, unless it was logged less than every_s ago."""
        now = time.monotonic()
        if self.next_at is not None and now < self.next_at:
            self.since += 1
            return
        again = f" ({self.since} more times in the last {self.every_s:g} s)" if self.since else ""
        self.logger.exception(message + again, *args)
        self.since, self.next_at = 0, now + self.every_s

    def stopped(self, message: str, *args: Any) -> None:
        """It has stopped happening: say so once (and nothing when it was not happening)."""
        if self.next_at is not None:
            self.logger.warning(message, *args)
            self.since, self.next_at = 0, None
