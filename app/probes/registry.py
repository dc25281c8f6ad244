"""Every probe, by name: the modules below (and a site's TALLY_PROBE_MODULES), each defining its
PROBE (app/probes/base.py). Everything else reads this table: the child, the jobs API's request
and result unions, admission, the pages, the CSV export and `tally probe`."""

import importlib
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError

from app.config import Settings
from app.probes.base import Probe

MODULES = ("matmul", "attention", "bandwidth", "transfer", "train_step", "generate", "serve", "collectives",
           "data_parallel_step",
           "burn_in", "dcgm_diag", "data_loader", "checkpoint")
"""Tally's own probes, as app.probes.<module>, in the order the pages and `tally probe` list them."""


def _site_modules() -> list[str]:
    """TALLY_PROBE_MODULES, read once, as this module is imported: a process's probes are fixed for its
    life. A bad setting is named by start-up's own read (app/config.settings_or_exit)."""
    try:
        return Settings().probe_modules
    except ValidationError:
        return []


def _load(modules: list[str]) -> dict[str, Probe]:
    found: dict[str, Probe] = {}
    for module in modules:
        probe = importlib.import_module(module).PROBE
        if probe.name in found:
            raise ValueError(f"{module} defines probe {probe.name!r}, which another module already does")
        found[probe.name] = probe
    return found


PROBES: dict[str, Probe] = _load([f"app.probes.{m}" for m in MODULES] + _site_modules())

ProbeName = Literal[tuple(PROBES)]  # type: ignore[valid-type]
ProbeResult = Annotated[Union[tuple(p.result for p in PROBES.values())],  # type: ignore[valid-type]  # noqa: UP007
                        Field(discriminator="probe")]
"""Any probe's result, told apart by its `probe` field."""
RESULTS: TypeAdapter[Any] = TypeAdapter(ProbeResult)
"""Parses a result (a child's report, a stored row) into its probe's type, and dumps one."""
