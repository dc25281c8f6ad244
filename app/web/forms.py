"""Pages compute as the API does, without calling it: a form's fields become the API's JSON
body, the route's own request model validates it, the route's own service function computes,
and a refusal is formatted by the API's own error formatter, so its messages name the same
fields. A page view is never an API request."""

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from app import deps
from app.accounting.errors import InvalidInput
from app.api import errors

ABSENT = ("", None)


def number(text: str) -> int | float | str | bool:
    """A form field as the API's JSON value: "70e9" -> 70000000000, "0.5" -> 0.5, "true" ->
    true. Anything else goes through as text, for the API to refuse with its own message."""
    if text in ("true", "false"):
        return text == "true"
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):  # "nan", "inf": JSON has no such number
        return text
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def body(query: dict[str, str], fields: list[str], lists: set[str] = frozenset(),
         texts: set[str] = frozenset()) -> dict[str, Any]:
    """The JSON body from the page's query: the named fields, numbers where they parse as
    numbers, `lists` split on commas, `texts` as strings (a field the model reads exactly
    from a string: "0.1", "1e-400"), empty ones left out."""
    out: dict[str, Any] = {}
    for name in fields:
        value = query.get(name, "").strip().strip("()[]")
        if value in ABSENT:
            continue
        if name in texts:
            out[name] = value
        elif name in lists:
            out[name] = [number(v.strip()) for v in value.split(",") if v.strip()]
        else:
            out[name] = number(value)
    return out


def run(model: type[BaseModel] | Any, payload: Any, compute: Callable[[Any], Any]) -> tuple[Any, dict | None]:
    """(compute's result, None), or (None, the API's error body) when `payload` is refused.
    `model` is a request model or a pydantic TypeAdapter (a union of them, say). The payload
    goes through JSON, so it is validated exactly as the API validates a request body."""
    text = json.dumps(payload)
    try:
        validate = model.validate_json if hasattr(model, "validate_json") else model.model_validate_json
        body = validate(text)
    except ValidationError as e:
        # Located as FastAPI locates a request body's errors, so fields are named the same.
        found = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        return None, errors.error_body(errors.validation_items(found, payload))
    try:
        return compute(body), None
    except InvalidInput as e:
        refused = errors.error_body([errors.invalid_input_item(e)])
        # A refusal a job can lift (no measured MFU yet) carries the job, for a page's button.
        return None, refused | ({"launch": e.launch} if getattr(e, "launch", None) else {})
    except HTTPException as e:
        return None, errors.http_error_body(e)


_NUMBER_ERRORS = ("int_", "float_", "decimal_")


def field_errors(answer: dict[str, Any]) -> dict[str, str]:
    """A 4xx answer's messages by top-level field, for showing beside each input. A field that
    takes a number or a string and got a string shows the string's message, not the number's."""
    by_field: dict[str, str] = {}
    for item in answer.get("detail", []):
        name = item["field"].split(".")[0]
        if name in by_field and isinstance(item.get("input"), str) \
                and not item["type"].startswith(_NUMBER_ERRORS) and by_field[name][1]:
            by_field[name] = (item["msg"], False)
        by_field.setdefault(name, (item["msg"], item["type"].startswith(_NUMBER_ERRORS)))
    return {name: msg for name, (msg, _) in by_field.items()}


FORM_TYPE = "application/x-www-form-urlencoded"


def posted(content_type: str | None, raw: bytes, required: str) -> dict[str, str]:
    """A form posted urlencoded (as htmx posts it; parsed here rather than through
    python-multipart) that has the field `required`. Anything else is refused (422) rather
    than read as an empty form, so a stray body never becomes a job with default fields."""
    if (content_type or "").partition(";")[0].strip().lower() != FORM_TYPE:
        raise InvalidInput("body", f"send the form as {FORM_TYPE}")
    form = dict(parse_qsl(raw.decode(errors="replace"), keep_blank_values=True))
    if required not in form:
        raise InvalidInput(required, "the form has no such field")
    return form


async def act(form: dict[str, str], settings: Any, action: Callable[[], Awaitable[Any]],
              body: Any = None) -> tuple[Any, dict | None]:
    """A page's button or form that changes something: the token the form carries checked, then
    `action` awaited. (its result, None), or (None, the API's error body) for a refusal: a named
    field's InvalidInput, a ValidationError of `body` (the API's request it built), an HTTP refusal
    (a wrong token: 401, a full queue: 429)."""
    try:
        check_token(form, settings)
        return await action(), None
    except InvalidInput as e:
        return None, errors.error_body([errors.invalid_input_item(e)])
    except ValidationError as e:
        return None, errors.error_body(errors.validation_items(e.errors(), body or {}))
    except HTTPException as e:
        return None, errors.http_error_body(e)


def check_token(form: dict[str, str], settings: Any) -> None:
    """The API token a page's form carries (its `token` field, empty for none), held to the API's
    rule (deps.check_token): InvalidInput naming token for one no header could carry, Unauthorized
    for a wrong or missing one where the server has one."""
    token = form.get("token") or None
    if token is not None and not (token.isascii() and token.isprintable()):
        raise InvalidInput("token", "may hold only printable ASCII characters (no NUL, no accents); "
                                    "paste the server's TALLY_API_TOKEN")
    deps.check_token(settings, token)
