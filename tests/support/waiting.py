"""One way for a test to wait: poll a condition against a generous deadline, never a fixed sleep."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Seconds to wait for what should take well under one; a loaded CI box may be slow.
PATIENCE_S = 30


def wait_for(predicate: Callable[[], T], *, timeout: float = PATIENCE_S, what: str = "condition",
             every: float = 0.02, context: Callable[[], object] | None = None) -> T:
    """Call `predicate` every `every` seconds until it returns something truthy, and return that.

    After `timeout` seconds, AssertionError naming `what`, with `context()` (a server's log, say)
    appended when given. The predicate is tried once more at the deadline, so a slow box that
    gets there just in time passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        if value := predicate():
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(every)
    message = f"timed out after {timeout} s waiting for {what}"
    raise AssertionError(message + (f":\n{context()}" if context is not None else ""))


def wait_for_count(count: Callable[[], int], target: int, *, stall: float = PATIENCE_S,
                   what: str = "count", every: float = 0.05) -> int:
    """Wait until `count()` reaches `target`, for as long as it keeps rising.

    For a queue of work whose total time depends on the box (fifty child processes, each a second
    of CPU, take a minute on two loaded cores): AssertionError naming `what` only when the count
    has not moved for `stall` seconds, so a slow box passes and a stuck queue still fails.
    """
    last = count()
    moved = time.monotonic()
    while last < target:
        time.sleep(every)
        now = count()
        if now != last:
            last, moved = now, time.monotonic()
        elif time.monotonic() - moved >= stall:
            raise AssertionError(f"{what} stuck at {last} of {target} for {stall} s")
    return last
