"""The SQL of results run elsewhere and brought in: a probe launched by Slurm (`tally slurm`,
app/cli/slurm.py) or by hand with torchrun posts its result here, and it is kept as a job that
succeeded, beside those the dispatchers ran: the same pages, comparisons and ledger read it.

An imported job was never queued: it is inserted already succeeded (no move makes it so, as no
dispatcher ran it), its attempt's worker named by its launcher ("slurm:<job id>"), its boxes as
members that are done, and the devices it ran on registered in the fleet as seen when it ended
(so a node that Tally's dispatchers never serve shows as lost, not live). A campaign of them (a
burn-in across a Slurm partition) is one campaign, compared as the dispatchers' are. Part of the
store layer (app/jobs/store.py); Store inherits ImportStore.
"""

import json
import secrets
from dataclasses import dataclass
from typing import Any

from app.jobs import backends
from app.jobs.fleet import DEVICE_FIELDS, Campaign
from app.jobs.job import Job, result_json
from app.jobs.schema import campaigns, devices, jobs, members


@dataclass(frozen=True)
class Imported:
    """One result run elsewhere, as the store keeps it."""

    probe: str
    params: dict[str, Any]
    result: Any
    """The probe's result type."""
    device_kind: str
    """cuda or cpu."""
    started_at: float
    finished_at: float
    worker_id: str
    """Who ran it: its launcher and its id there ("slurm:1234")."""
    boxes: list[tuple[str, int, str | None]]
    """(box, node, fleet device) of each box it ran on, node 0 first."""
    device: dict[str, Any] | None = None
    """The fleet's row of the device it ran on (app/device.fleet_device), for a job on one box."""


class ImportStore:
    """The importing half of Store (it needs Store's transactions and rows)."""

    def record(self, imported: Imported, *, campaign_id: int | None = None) -> Job:
        """Keep one imported result as a succeeded job; the job."""
        with self._write() as db:  # type: ignore[attr-defined]
            job_id = self._record(db, imported, campaign_id)
            self.saw_id("jobs", job_id)  # type: ignore[attr-defined]
            return self._row(db, job_id)  # type: ignore[attr-defined]

    def record_campaign(
        self, *, probe: str, params: dict, outlier_fraction: float, results: list[Imported]
    ) -> tuple[Campaign, list[Job]]:
        """Keep imported results of one probe, one per device, as one campaign (a burn-in run by
        Slurm on every node of a partition): all of them or none."""
        with self._write() as db:  # type: ignore[attr-defined]
            campaign_id = db.execute(
                campaigns.insert().values(
                    probe=probe,
                    params=json.dumps(params),
                    created_at=min(r.started_at for r in results),
                    outlier_fraction=outlier_fraction,
                )
            ).inserted_primary_key[0]
            ids = [self._record(db, r, campaign_id) for r in results]
            self.saw_id("campaigns", campaign_id)  # type: ignore[attr-defined]
            for job_id in ids:
                self.saw_id("jobs", job_id)  # type: ignore[attr-defined]
            found = self._campaign(db, campaign_id)  # type: ignore[attr-defined]
            return found, [self._row(db, i) for i in ids]  # type: ignore[attr-defined]

    @staticmethod
    def _record(db: Any, r: Imported, campaign_id: int | None) -> int:
        if r.device is not None:  # seen when it ended, never later: no dispatcher of ours serves it
            row = {k: r.device.get(k) for k in DEVICE_FIELDS} | {
                "registered_at": r.finished_at,
                "seen_at": r.finished_at,
            }
            known = db.execute(devices.select().where(devices.c.device == row["device"])).mappings().first()
            if known is None or known["seen_at"] < r.finished_at:
                if known is not None:
                    row["registered_at"] = known["registered_at"]
                backends.upsert(db, devices, row, key="device")
        log = [
            {
                "attempt": 1,
                "worker_id": r.worker_id,
                "started_at": r.started_at,
                "ended_at": r.finished_at,
                "reason": "succeeded",
            }
        ]
        job_id = db.execute(
            jobs.insert().values(
                probe=r.probe,
                params=json.dumps(r.params),
                status="succeeded",
                attempts=1,
                timeout_s=max(1.0, r.finished_at - r.started_at),
                created_at=r.started_at,
                started_at=r.started_at,
                finished_at=r.finished_at,
                result=result_json(r.result),
                worker_id=r.worker_id,
                heartbeat_at=r.finished_at,
                device=r.device_kind,
                attempts_log=json.dumps(log),
                campaign_id=campaign_id,
                nodes=len(r.boxes) if len(r.boxes) > 1 else None,
                # Its device is its target too: a campaign lists its jobs by the device each was for.
                ran_on_device=r.device["device"] if r.device else r.boxes[0][2],
                target_device=r.device["device"] if r.device else None,
            )
        ).inserted_primary_key[0]
        if len(r.boxes) > 1:
            for box, node, device in r.boxes:
                db.execute(
                    members.insert().values(
                        job_id=job_id,
                        host=box,
                        node=node,
                        worker_id=r.worker_id,
                        device=device,
                        address="",
                        port=0,
                        token=secrets.token_hex(16),
                        status="done",
                        joined_at=r.started_at,
                        heartbeat_at=r.finished_at,
                        ended_at=r.finished_at,
                    )
                )
        return job_id
