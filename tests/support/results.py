"""Results of each probe's own type, for tests that need a finished job without running a
probe (and for tests/support/fault_child.py, whose probes report them). Torch-free and pydantic-free,
so a fault child starts as fast as the real child does."""

import dataclasses
import json
import types
import typing
from typing import Any, Literal, Union

from app.probes.registry import PROBES
from app.probes.results import Environment


def _simplest(hint: Any) -> Any:
    """The plainest value of a type: 0, "", an empty list, None where allowed, the first literal."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return typing.get_args(hint)[0]
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        return None if type(None) in args else _simplest(args[0])
    if origin in (list, dict):
        return origin()
    if dataclasses.is_dataclass(hint):
        return minimal(hint)
    return {int: 0, float: 0.0, str: "", bool: False}[hint]


def minimal(cls: type, **fields: Any) -> Any:
    """An instance of the result dataclass `cls`: `fields` as given, every other field at its
    plainest value."""
    hints = typing.get_type_hints(cls)
    plain = {f.name: _simplest(hints[f.name]) for f in dataclasses.fields(cls) if f.name not in fields}
    return cls(**plain, **fields)


def result_type(probe: str) -> type:
    """The result dataclass of `probe`, its registry record's."""
    return PROBES[probe].result


def result_for(probe: str, **fields: Any) -> Any:
    return minimal(result_type(probe), **fields)


def reporting(probe: str, **report: Any) -> Any:
    """A result whose environment.platform carries `report` as JSON: what a fault child saw."""
    return result_for(probe, environment=minimal(Environment, platform=json.dumps(report)))


def report(job: Any) -> dict:
    """What the fault child that ran `job` reported (see `reporting`)."""
    return json.loads(job.result.environment.platform)
