"""Markers set by folder: a folder's conftest marks the tests under it (pytest hands every
conftest the whole session's items, so each keeps to its own folder)."""

from collections.abc import Callable
from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], conftest: str, mark: pytest.MarkDecorator,
                when: Callable[[pytest.Item], bool] = lambda item: True) -> None:
    """Add `mark` to the items under the folder of `conftest` (its __file__) for which `when` holds."""
    folder = Path(conftest).resolve().parent
    for item in items:
        if item.path.is_relative_to(folder) and when(item):
            item.add_marker(mark)


def uses_postgresql(item: pytest.Item) -> bool:
    """The test reaches a PostgreSQL server: it asks for pg_server, or runs with `postgresql` as a
    parameter (the `database` fixture's second engine, or a test's own `engine`)."""
    params = getattr(item, "callspec", None)
    return "pg_server" in item.fixturenames or (
        params is not None and "postgresql" in params.params.values())
