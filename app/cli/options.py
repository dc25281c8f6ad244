"""What `tally calc` and `tally probe` share: command-line options made from a pydantic
request model, lenient values, `--json` bodies, and in-process calls to the app's own API.

Options carry values to the API rather than validating them here, so every refusal is
the API's own message, naming the field as a client of the HTTP API would see it.
"""

import argparse
import asyncio
import contextlib
import json
import math
import re
import sys
import textwrap
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# NUL never starts an argument (argv strings are C strings). With it as the only prefix
# character every argument, --help included, is a positional that add_deferred's parser
# hands on untouched: the command's real parser is built in `run`, so `tally --help` does
# not import the app.
_NO_PREFIX = "\0"

VALUES_HELP = (
    "Values are read as JSON when they are JSON (70e9, true, null, [256, 64], {\"kind\": ...}), "
    "otherwise as text; list fields also take a,b,c. Quote text that looks like a number as JSON "
    "(--value '\"0.1\"'), and write a value that starts with '-' as --option=-1.")


def add_deferred(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    """Register `name` so that all its arguments reach `run` as args.argv."""
    cli = commands.add_parser(name, help=help_text, add_help=False, prefix_chars=_NO_PREFIX)
    cli.add_argument("argv", nargs=argparse.REMAINDER)


def wrap(text: str, indent: str = "") -> str:
    """Paragraphs (blank-line separated) filled to 88 columns, for raw help text."""
    paragraphs = textwrap.dedent(text).strip().split("\n\n")
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 88, initial_indent=indent,
                                     subsequent_indent=indent) for p in paragraphs)


# --- values --------------------------------------------------------------------------------------

def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def value(text: str) -> Any:
    """JSON when the text is JSON, a number when Python reads a finite one (.5, 1_000), else the
    text. NaN and Infinity stay text: the API takes "nan" and "inf" as strings where it takes them."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except ValueError:
        pass
    for parse in (int, float):
        try:
            number = parse(text)
        except ValueError:
            continue
        if math.isfinite(number):
            return number
    return text


def list_value(text: str) -> Any:
    """For a list field: JSON as above, or comma-separated items (bfloat16,float32)."""
    parsed = value(text)
    if isinstance(parsed, list) or parsed is None:
        return parsed
    return [value(item.strip()) for item in text.split(",")]


# --- options from a model ------------------------------------------------------------------------

def _number(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() and abs(x) < 1e16 else repr(x)


def _bounds(schema: dict) -> str:
    lo = schema.get("exclusiveMinimum", schema.get("minimum"))
    hi = schema.get("exclusiveMaximum", schema.get("maximum"))
    if lo is None and hi is None:
        return ""
    left = "(" if "exclusiveMinimum" in schema else "["
    right = ")" if "exclusiveMaximum" in schema else "]"
    return f" in {left}{'-inf' if lo is None else _number(lo)}, {'inf' if hi is None else _number(hi)}{right}"


def kind(schema: dict, defs: dict) -> str:
    """A short reading of a JSON schema: 'integer in [1, 1024]', 'one of a, b', 'object {x, y}'."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        required = set(target.get("required", ()))
        names = [f"{n}{'*' if n in required else ''}" for n in target.get("properties", {})]
        return "object {" + ", ".join(names) + "}" + (" (* required)" if required else "")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            members = [s for s in schema[key] if s.get("type") != "null"]
            # Text a number field also takes ("70B", "80GB"): shown by two of its examples.
            quantity = [s for s in members if s.get("type") == "string" and "pattern" in s]
            members = [s for s in members if s not in quantity]
            text = " or ".join(kind(s, defs) for s in members)
            if quantity:
                shown = re.findall(r'"([^"]+)"', quantity[0].get("description", ""))[:2]
                text = f"text like {' or '.join(shown)}, or {text}" if shown else f"text or {text}"
            return text + (" or null" if len(members) + len(quantity) < len(schema[key]) else "")
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if schema.get("type") == "array":
        lengths = ""
        if "minItems" in schema or "maxItems" in schema:
            lengths = f", {schema.get('minItems', 0)} to {schema.get('maxItems', 'any')} items"
        return f"list of {kind(schema.get('items', {}), defs)}{lengths}"
    if schema.get("type") in ("integer", "number"):
        return schema["type"] + _bounds(schema)
    return schema.get("type", "any JSON value")


def _is_list(schema: dict) -> bool:
    members = schema.get("anyOf", [schema])
    return any(s.get("type") == "array" for s in members)


def _metavar(schema: dict) -> str:
    types = {s.get("type") for s in schema.get("anyOf", schema.get("oneOf", [schema]))} - {"null"}
    if "enum" in schema and len(schema["enum"]) <= 8:
        return "{" + ",".join(str(v) for v in schema["enum"]) + "}"
    names = {"integer": "INT", "number": "NUM", "boolean": "BOOL", "array": "LIST", "string": "TEXT"}
    return names.get(next(iter(types)), "JSON") if len(types) == 1 and None not in types else "VALUE"


def add_fields(parser: argparse.ArgumentParser, model: type, group_title: str) -> list[str]:
    """One --kebab-case option per field of the pydantic `model`, its description, type, bounds
    and default in the help. Values land in args as "field:<name>"; returns the field names."""
    from pydantic_core import to_jsonable_python

    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    group = parser.add_argument_group(group_title)
    for name, prop in schema.get("properties", {}).items():
        info = model.model_fields[name]
        if info.is_required():
            default = "required"
        else:
            default = info.get_default(call_default_factory=True)
            default = "default: " + json.dumps(to_jsonable_python(default))
        description = " ".join(prop.get("description", "").split())
        text = f"{description} [{kind(prop, defs)}; {default}]".strip()
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"field:{name}", default=argparse.SUPPRESS,
                           type=list_value if _is_list(prop) else value, metavar=_metavar(prop),
                           help=text.replace("%", "%%"))
    return list(schema.get("properties", {}))


def given(args: argparse.Namespace, fields: list[str]) -> dict[str, Any]:
    """The fields given on the command line, in the model's order."""
    values = vars(args)
    return {name: values[f"field:{name}"] for name in fields if f"field:{name}" in values}


def add_json(parser: argparse.ArgumentParser, what: str, note: str = "") -> None:
    parser.add_argument("--json", metavar="BODY", help=(
        f"{what}: inline JSON '{{...}}', @FILE, or - (stdin); options given beside it replace its "
        f"keys. {note}").strip().replace("%", "%%"))


def read_json(parser: argparse.ArgumentParser, source: str) -> str:
    """The text of --json: inline, @file or - (stdin). An unreadable file is a usage error (2)."""
    if source == "-":
        return sys.stdin.read()
    if source.startswith("@"):
        try:
            return Path(source[1:]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"--json {source}: {exc}")
    return source


def merge(raw: str | None, fields: dict[str, Any]) -> str:
    """The request body text. --json alone is sent as written, so malformed JSON gets the API's
    own message; options replace its keys when it is an object."""
    if raw is None:
        return json.dumps(fields)
    if not fields:
        return raw
    try:
        base = json.loads(raw)
    except ValueError:
        return raw
    return json.dumps(base | fields) if isinstance(base, dict) else raw


# --- the API, in process -------------------------------------------------------------------------

@dataclass
class Answer:
    """What the app answered: its status, headers and body text (UTF-8, as JSON is)."""

    status_code: int
    headers: list[tuple[str, str]]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def call(app: Any, method: str, path: str, content: str | None = None,
         params: dict[str, Any] | None = None) -> Answer:
    """One HTTP request to the ASGI `app`, in process (no socket), as an HTTP client would
    send it: the body with its length and type. Called directly rather than through httpx's
    ASGI transport, whose import cost 0.07 s of a `tally calc` (bench/cli_speed.py). An
    exception the app lets out (after its 500) is raised here, as httpx's transport does."""
    body = b"" if content is None else content.encode()
    headers = [(b"host", b"tally.cli")]
    if content is not None:
        headers += [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": urllib.parse.unquote(path), "raw_path": path.encode(),
             "query_string": urllib.parse.urlencode(params or {}).encode(), "headers": headers,
             "server": ("tally.cli", 80), "client": ("127.0.0.1", 123), "root_path": ""}
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def go() -> None:
        sent, done = False, asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:  # the body is in: the client "disconnects" once the answer is complete
                await done.wait()
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        await app(scope, receive, send)

    asyncio.run(go())
    return Answer(start["status"], [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]],
                  b"".join(chunks).decode(errors="replace"))


def print_json(text: str, compact: bool, stream: Any = None) -> None:
    """Indented, or with `compact` the API's bytes as they came."""
    stream = stream or sys.stdout
    if not compact:
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    stream.write(text.rstrip("\n") + "\n")


def exit_status(status_code: int) -> int:
    """0 for 2xx, 2 for a refused request (4xx: the input), 1 otherwise."""
    return 0 if status_code < 300 else 2 if 400 <= status_code < 500 else 1
