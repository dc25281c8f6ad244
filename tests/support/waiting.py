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
