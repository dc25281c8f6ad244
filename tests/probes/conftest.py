"""The probes run on the CPU at small sizes, through the real child (and the real dispatcher
where a test needs one), checked against torch itself and against the calculators' predictions;
and what stored results say: calibration, contention, energy, sustained runs, every earlier
version's results. Every test here is marked slow: they run torch."""

import pytest

from tests.support.marks import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.slow)
