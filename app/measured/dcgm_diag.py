"""A GPU's last DCGM diagnostic, as the Burn-in page shows it beside Tally's own burn-in of that GPU:
the newest succeeded dcgm_diag job its dispatcher ran (app/probes/dcgm_diag/), read for that GPU.

A dcgm_diag job succeeds whatever DCGM found (a failed test is a result, not an error), so the
newest one is the GPU's latest verdict. A job over several GPUs is its claiming dispatcher's:
it is found on that GPU's row, and read there for that GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.probes.dcgm_diag.result import DcgmDiagResult, GpuVerdict, Verdict

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.store import Store

PROBE = "dcgm_diag"


@dataclass(frozen=True)
class LastDiag:
    job_id: int
    finished_at: float | None
    level: int
    verdict: Verdict
    """This GPU's (or the run's, where the result does not list it)."""
    failed: list[str] = field(default_factory=list)
    """The tests that failed on it, in DCGM's order."""
    warned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dcgm_version: str | None = None


def for_device(result: DcgmDiagResult, device: str) -> GpuVerdict | None:
    """The GPU of `result` that `device` (an NVML UUID) names; the only one where NVML gave no UUID."""
    named = next((g for g in result.gpus if g.uuid == device), None)
    if named is None and len(result.gpus) == 1 and result.gpus[0].uuid is None:
        return result.gpus[0]
    return named


def last(store: Store, device: str) -> LastDiag | None:
    """The newest succeeded dcgm_diag job that ran on `device`, read for that GPU; None when it has none."""
    found = store.history(device, probe=PROBE, limit=1)
    job = found[-1] if found else None
    if job is None or not isinstance(job.result, DcgmDiagResult):
        return None
    r = job.result
    gpu = for_device(r, device)
    if gpu is None:
        return LastDiag(job.id, job.finished_at, r.level, r.verdict, dcgm_version=r.dcgm_version,
                        failed=list(dict.fromkeys(o.test for o in r.results if o.status == "fail")))
    return LastDiag(job.id, job.finished_at, r.level, gpu.verdict, list(gpu.failed), list(gpu.warned),
                    list(gpu.skipped), r.dcgm_version)
