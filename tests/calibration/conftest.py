"""Calibration (issue 31): profiles, the calibrated train step and the accuracy ledger on stored
results with known numbers (quick); a campaign through the real dispatcher and children, and the
held-out CPU validation, which run torch (marked slow). The held-out validation holds measured
times to a bound, so it runs alone (marked solo: make test runs it after the parallel suite)."""

import pytest

from tests.support.marks import mark_folder

RUNS_PROBES = ("test_campaign.py", "test_held_out.py")


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.slow, when=lambda item: item.path.name in RUNS_PROBES)
    mark_folder(items, __file__, pytest.mark.solo, when=lambda item: item.path.name == "test_held_out.py")
