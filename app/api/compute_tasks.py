"""What a compute worker runs for the API (app/api/compute.py): a calculator's service on a request,
answered as the API's JSON. Imported by the fork server before any worker starts, with the
calculators it calls, so a worker begins warm. (The pages' task: app/web/heavy.py.)"""

import functools
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from app.accounting.errors import InvalidInput
from app.api.responses import dump_json


@dataclass(frozen=True)
class Sent:
    """A validated request on its way to a worker: its model (pickled by reference) and the JSON
    of the fields its sender gave, validated again there into the same values, fields set alike.
    (The strict models made from engine dataclasses, inputs/fields.strict_input, have no
    importable name, so an instance does not pickle.)"""

    model: type[BaseModel]
    data: str

    @classmethod
    def of(cls, body: BaseModel) -> "Sent":
        return cls(type(body), body.model_dump_json(exclude_unset=True))

    def body(self) -> BaseModel:
        return self.model.model_validate_json(self.data)


@dataclass(frozen=True)
class StoreRef:
    """The job database a calculation may read, opened once in each worker that needs it."""

    database: str

_STORES: dict[str, Any] = {}


def store_of(ref: StoreRef | None) -> Any:
    """The worker's own Store on `ref`'s database, opened on first use; None for None."""
    if ref is None:
        return None
    if ref.database not in _STORES:
        from app.jobs.store import Store

        _STORES[ref.database] = Store(ref.database)
    return _STORES[ref.database]


class WorkerError(RuntimeError):
    """An unexpected error in a worker, as text: whatever it was, it crosses back to the server
    (an exception that does not pickle would break the pool for every request)."""


def guarded(task: Callable[..., Any]) -> Callable[..., Any]:
    """`task`, raising only the engine's refusals (which pickle: accounting/errors.py) and
    WorkerError."""

    @functools.wraps(task)
    def run(*args: Any) -> Any:
        try:
            return task(*args)
        except InvalidInput:
            raise
        except Exception as e:
            raise WorkerError("".join(traceback.format_exception(e))) from None

    return run


@guarded
def answer(service: Any, sent: Sent, args: tuple) -> bytes:
    """service(body, *args), as the JSON the route sends (without defaults_applied, which the
    server adds from its own copy of the body)."""
    return dump_json(service(sent.body(), *args))

