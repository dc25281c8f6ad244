"""A job's result as CSV: the rows its probe's faces make of it (app/probes/faces.py: one per
measurement, nested fields flattened to dotted columns such as time.median), each led by the job,
its probe and its device. Lists other than the measurements (assumptions, skipped) stay in the JSON
export."""

import csv
import io
from typing import Any

from app.jobs.job import Job
from app.probes.registry import PROBES, RESULTS


def rows(job: Job) -> list[dict[str, Any]]:
    env = job.result.environment
    result = RESULTS.dump_python(job.result, mode="json", exclude={"environment"})
    common = {"job_id": job.id, "probe": job.probe, "device": env.device, "device_name": env.device_name}
    return [common | row for row in PROBES[job.probe].faces.csv_rows(result)]


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
