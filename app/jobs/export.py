"""A job's result as CSV: one row per measurement, nested fields flattened to dotted
columns (time.median, memory.predicted.total). Lists other than the measurements
(assumptions, skipped) stay in the JSON export."""

import csv
import io
from typing import Any

from app.jobs.job import Job
from app.probes.registry import RESULTS


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, v in value.items():
        name = f"{prefix}{key}"
        if isinstance(v, dict):
            row |= _flatten(v, f"{name}.")
        elif not isinstance(v, list):
            row[name] = v
    return row


PHASES = ("prefill", "decode")
"""generate's measurements come in two lists, a row per item with its phase named."""


def rows(job: Job) -> list[dict[str, Any]]:
    env = job.result.environment
    result = RESULTS.dump_python(job.result, mode="json", exclude={"environment"})
    common = {"job_id": job.id, "probe": job.probe, "device": env.device, "device_name": env.device_name}
    result.pop("best", None)  # repeats rows of points
    points = result.pop("points", None)
    if points is not None:
        return [common | _flatten(point) for point in points]
    modes = result.pop("modes", None)  # data_loader: a row per copy mode, the run's figures beside each
    if modes is not None:
        return [common | _flatten(result) | _flatten(mode) for mode in modes]
    if all(isinstance(result.get(phase), list) for phase in PHASES):
        return [common | {"phase": phase} | _flatten(point) for phase in PHASES for point in result[phase]]
    return [common | _flatten(result)]


def to_csv(job: Job) -> str:
    table = rows(job)
    columns: list[str] = []
    for row in table:
        columns += [c for c in row if c not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return out.getvalue()
