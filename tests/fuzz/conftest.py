"""Schemathesis over every operation of the OpenAPI document, both ways a server runs (with a
token and without): a few minutes of one core, and half a minute of collection (a hypothesis test
is built per operation), so a folder of its own, marked slow. `make fuzz` runs it with fresh
random cases, a thousand per operation."""

import pytest

from tests.support.marks import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.slow)
