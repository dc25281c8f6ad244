"""Pages compute through the JSON API itself, never a second copy of a formula: a form's
fields become the API's JSON body, the app answers itself in-process, and the page
renders the JSON (or shows each 4xx message beside the field it names)."""

from typing import Any

import httpx
from fastapi import Request
from starlette.exceptions import HTTPException

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
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def body(query: dict[str, str], fields: list[str], lists: set[str] = frozenset()) -> dict[str, Any]:
    """The JSON body from the page's query: the named fields, numbers where they parse as
    numbers (no field of ours takes a numeric-looking string), `lists` split on commas,
    empty ones left out."""
    out: dict[str, Any] = {}
    for name in fields:
        value = query.get(name, "").strip().strip("()[]")
        if value in ABSENT:
            continue
        if name in lists:
            out[name] = [number(v.strip()) for v in value.split(",") if v.strip()]
        else:
            out[name] = number(value)
    return out


async def call(request: Request, path: str, json: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """POST to this very app's API and return (status, JSON)."""
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://tally.internal") as client:
        response = await client.post(path, json=json, headers=headers)
    return response.status_code, response.json()


async def get(request: Request, path: str) -> Any:
    """GET from this very app's API. A page cannot show what the API refuses (an unknown
    job, say), so the API's 4xx becomes the page's, with the API's message."""
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://tally.internal") as client:
        response = await client.get(path)
    if response.status_code != 200:
        raise HTTPException(response.status_code, response.json().get("message", response.reason_phrase))
    return response.json()


def field_errors(answer: dict[str, Any]) -> dict[str, str]:
    """A 4xx answer's messages by top-level field, for showing beside each input."""
    errors: dict[str, str] = {}
    for item in answer.get("detail", []):
        errors.setdefault(item["field"].split(".")[0], item["msg"])
    return errors
