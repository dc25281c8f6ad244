"""Heavy calculations off the event loop: a bounded pool of worker processes, a time budget per
request, and a limit on each client's heavy requests at once.

The server answers every request from one event loop. A layout search or "will it run" on a huge
inline model is pure Python for seconds, and run there (or in a thread, which still holds the GIL)
it stalls /healthz, the job API and every page for as long. So the calculators and pages that can
take more than a few milliseconds (routes call `Heavy.respond`, pages `Heavy.call`; bench/calc_cost.py
times each calculator at its largest inputs) run in worker processes instead:

- **The pool** (pebble's ProcessPool): TALLY_COMPUTE_WORKERS processes, forked from a fork server
  that has imported the calculators once, each at a lower priority (nice +10) than the server.
  One per server process, started on the first heavy request.
- **The budget**: a calculation still running after TALLY_COMPUTE_BUDGET_S is stopped (its worker
  killed and replaced) and answered 422 `too_costly`, naming the field to narrow.
- **The limits**: TALLY_COMPUTE_PER_CLIENT heavy requests at once per client address (beyond:
  429 with Retry-After), TALLY_COMPUTE_QUEUE in all, running or waiting (beyond: 503).

A request crosses to a worker as its model and its JSON (`Sent`), validated again there, and
comes back as the answer's JSON: the strict models made from the engine's dataclasses
(inputs/fields.strict_input) have no importable name, so they do not pickle, and JSON keeps the
values and the fields set. What the job store says (a measured power or efficiency) is read in
the server first and sent along (app/measured/here.py); a heavy page, which may read more, gets
the worker's own connection to the same database (`StoreRef`).

`tally calc` answers inline (`Compute(inline=True)`): one request, nothing else to stall.
"""

import asyncio
import atexit
import gc
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request, Response
from pebble import ProcessExpired, ProcessPool
from pydantic import BaseModel

from app.api import compute_tasks
from app.api.errors import Busy, TooCostly
from app.api.compute_tasks import Sent
from app.api.responses import respond, respond_json

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("tally")

# Imported once by the fork server, so a worker (re)started after a budget ran out is ready at once:
# the API's tasks and the calculators they call, and whatever a caller adds (app/web/heavy.py).
PRELOAD = ("app.api.compute_tasks", "app.api.services.plan", "app.api.services.fit", "app.api.services.finetune",
           "app.api.services.memory", "app.api.services.inference", "app.api.services.simulate", "app.api.services.deploy")
NICE = 10
"""Workers' priority below the server's: the event loop is never the one kept waiting."""


@dataclass(frozen=True)
class Narrow:
    """What a client can do about a calculation over budget: the field to name, and the advice."""

    field: str
    advice: str


# --- the pool: one per process, started on first use ------------------------------------------------

_POOLS: dict[int, ProcessPool] = {}
_POOLS_LOCK = threading.Lock()


def _initializer() -> None:
    os.nice(NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops its pool


def _pool(workers: int, preload: tuple[str, ...]) -> ProcessPool:
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None or not pool.active:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(list(preload))  # the process's fork server: set before it starts
            pool = _POOLS[workers] = ProcessPool(max_workers=workers, initializer=_initializer,
                                                 context=context)
        return pool


def _drop(workers: int) -> None:
    with _POOLS_LOCK:
        pool = _POOLS.pop(workers, None)
    if pool is not None:
        pool.stop()


@atexit.register
def close_pools() -> None:
    """Stop every pool's workers (a test process makes many apps and no lifespan ends them)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    if not pools:
        return
    for stopping in pools:
        stopping.stop()
        stopping.join(timeout=10)
    del pools, stopping  # no reference left: the collection below finalizes them
    gc.collect()  # the pools' locks are semaphores; collected, they are unlinked before the exit


# --- one server's limits ------------------------------------------------------------------------------

class Compute:
    """A server's heavy calculations: its budget and limits over the process's pool."""

    def __init__(self, *, workers: int = 1, budget_s: float = 20, per_client: int = 2, queue: int = 8,
                 inline: bool = False, preload: tuple[str, ...] = ()) -> None:
        self.workers, self.budget_s, self.per_client, self.queue = workers, budget_s, per_client, queue
        self.inline = inline
        self.preload = PRELOAD + tuple(preload)
        self.by_client: Counter[str] = Counter()  # heavy requests in flight, by client address
        self.over_budget = 0  # calculations stopped at their budget, since start

    @classmethod
    def of(cls, settings: "Settings", *, inline: bool = False, preload: tuple[str, ...] = ()) -> "Compute":
        return cls(workers=settings.compute_pool_size(), budget_s=settings.compute_budget_s,
                   per_client=settings.compute_per_client, queue=settings.compute_queue, inline=inline,
                   preload=preload)

    def start(self) -> None:
        """Start the pool's workers without waiting for them (a server's start-up)."""
        if not self.inline:
            _pool(self.workers, self.preload).schedule(os.getpid)

    @property
    def in_flight(self) -> int:
        return sum(self.by_client.values())

    @contextlib.contextmanager
    def _slot(self, client: str) -> Iterator[None]:
        # Counted on the event loop's thread only, so no lock: a check and its increment are one step.
        if self.by_client[client] >= self.per_client:
            raise Busy(429, "client", f"{self.per_client} heavy calculations of this client are running "
                       "or waiting (TALLY_COMPUTE_PER_CLIENT); send the next when one has answered", 1)
        if self.in_flight >= self.queue:
            raise Busy(503, "server", f"{self.queue} heavy calculations are running or waiting "
                       "(TALLY_COMPUTE_QUEUE); try again shortly", 2)
        self.by_client[client] += 1
        try:
            yield
        finally:
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]

    async def call(self, client: str, narrow: Narrow, task: Callable[..., Any], *args: Any) -> Any:
        """`task(*args)` in a worker within the budget; its return value. `task` and `args` pickle."""
        if self.inline:
            return task(*args)
        with self._slot(client):
            future = _pool(self.workers, self.preload).schedule(task, args=args, timeout=self.budget_s)
            try:
                return await asyncio.wrap_future(future)
            except FutureTimeout:
                self.over_budget += 1
                raise TooCostly(narrow.field, f"the calculation did not finish within {self.budget_s:g} s "
                                f"(TALLY_COMPUTE_BUDGET_S): {narrow.advice}") from None
            except ProcessExpired as e:  # killed under it (the kernel's OOM killer, an operator)
                log.error("a compute worker ended while computing (exit code %s)", e.exitcode)
                raise Busy(503, "server", f"the worker computing this ended (exit code {e.exitcode}); "
                           f"try again, or narrow it: {narrow.advice}", 2) from None
            except BrokenProcessPool as e:
                log.error("the compute pool broke (%s); starting a new one", e)
                _drop(self.workers)
                raise Busy(503, "server", "the compute workers failed; try again", 2) from None
            except asyncio.CancelledError:
                future.cancel()  # the client went away: stop its worker too
                raise


# --- what a route holds ----------------------------------------------------------------------------------

def client_of(request: Request) -> str:
    """The address a client's heavy requests are counted under."""
    return request.client.host if request.client else "unknown"


@dataclass(frozen=True)
class Heavy:
    """A heavy route's way to its server's Compute, for one request (`HeavyDep`)."""

    compute: Compute
    client: str

    async def respond(self, service: Callable[..., Any], body: BaseModel, narrow: Narrow, *args: Any) -> Response:
        """service(body, *args), answered as `respond` answers it (defaults_applied added here, from
        this body), computed in a worker: `service` and `args` must pickle (what the store says is
        read here first: app/measured/here.py)."""
        if self.compute.inline:
            return respond(service(body, *args), body)
        text = await self.compute.call(self.client, narrow, compute_tasks.answer, service, Sent.of(body), args)
        return respond_json(text, body)


async def heavy(request: Request) -> Heavy:
    return Heavy(request.app.state.compute, client_of(request))


HeavyDep = Annotated[Heavy, Depends(heavy)]
