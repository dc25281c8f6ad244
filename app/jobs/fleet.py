"""The fleet's SQL: the devices workers register (a GPU by NVML's UUID, a host's CPU as
"<host>:cpu"), the targets a job may name (a host, a device, a GPU model), and campaigns, one
job fanned out to every live device and grouped for its results (a burn-in). Part of the store
layer (app/jobs/store.py); Store inherits FleetStore.

A device is live while its dispatcher is seen (Store.seen, every few seconds, idle or busy);
one not seen for live_within_s is lost, and its running jobs are requeued through their stale
heartbeats by any other dispatcher (Store.recover), as on one box.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from app.jobs import backends
from app.jobs.job import Job, from_row
from app.jobs.schema import campaigns, devices, jobs, members

LIVE_WITHIN_S = 30
"""A device whose dispatcher was seen this recently is live (the heartbeat's stale bound)."""


@dataclass(frozen=True)
class Targets:
    """Where a job may run in the fleet; None places no bound."""

    host: str | None = None
    device: str | None = None
    """A GPU's NVML UUID ("GPU-…"), or "<host>:cpu"."""
    model: str | None = None
    """A GPU model: its catalogue id ("h100") or its NVML name ("NVIDIA H100 80GB HBM3")."""


@dataclass(frozen=True)
class Serves:
    """The device a dispatcher serves, as jobs may target it."""

    device: str
    models: tuple[str, ...]
    """The names it answers to as a model: its NVML name and its catalogue id."""


def claimable(serves: Serves | None, host: str) -> list[sa.ColumnElement[bool]]:
    """The claim's bound on targets: a dispatcher takes the jobs whose every target it meets."""
    if serves is None:
        return [jobs.c.target_device.is_(None), jobs.c.target_model.is_(None),
                sa.or_(jobs.c.target_host.is_(None), jobs.c.target_host == host)]
    return [sa.or_(jobs.c.target_host.is_(None), jobs.c.target_host == host),
            sa.or_(jobs.c.target_device.is_(None), jobs.c.target_device == serves.device),
            sa.or_(jobs.c.target_model.is_(None), jobs.c.target_model.in_(serves.models))]


@dataclass(frozen=True)
class Device:
    device: str
    host: str
    kind: str
    """cuda or cpu."""
    gpu_index: int | None
    name: str
    catalogue_id: str | None
    memory_bytes: int | None
    driver_version: str | None
    cuda_driver_version: str | None
    compute_capability: str | None
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    power_limit_watts: float | None
    worker_id: str | None
    registered_at: float
    seen_at: float

    def live(self, now: float, within_s: float = LIVE_WITHIN_S) -> bool:
        return now - self.seen_at <= within_s


DEVICE_FIELDS = tuple(f.name for f in fields(Device))


@dataclass(frozen=True)
class Campaign:
    id: int
    probe: str
    params: dict[str, Any]
    created_at: float
    outlier_fraction: float


class NoDevices(Exception):
    """A campaign found no live device to run on."""


class FleetStore:
    """The fleet's half of Store (it needs Store's transactions and its job insert)."""

    def register(self, device: dict[str, Any]) -> None:
        """A dispatcher's device joins (or rejoins) the fleet: its row written whole, seen now."""
        now = time.time()
        with self._write() as db:  # type: ignore[attr-defined]
            known = db.execute(sa.select(devices.c.registered_at)
                               .where(devices.c.device == device["device"])).scalar()
            row = {k: device.get(k) for k in DEVICE_FIELDS} | {"registered_at": known or now, "seen_at": now}
            backends.upsert(db, devices, row, key="device")

    def touch(self, device: str, *, worker_id: str) -> None:
        with self._write() as db:  # type: ignore[attr-defined]
            db.execute(devices.update().where(devices.c.device == device)
                       .values(seen_at=time.time(), worker_id=worker_id))

    def devices(self) -> list[Device]:
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(devices).order_by(devices.c.host, devices.c.kind, devices.c.gpu_index,
                                                           devices.c.device)).mappings()
            return [Device(**row) for row in rows]

    def running_on(self) -> dict[str, Job]:
        """The job each device runs now, by device: a job across boxes on each of theirs."""
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(jobs).where(jobs.c.status == "running",
                                                    jobs.c.ran_on_device.is_not(None))).mappings()
            out = {row["ran_on_device"]: from_row(row) for row in rows}
            spanning = db.execute(sa.select(members.c.device.label("box_device"), jobs)
                                  .join(jobs, jobs.c.id == members.c.job_id)
                                  .where(jobs.c.status == "running", members.c.status == "running",
                                         members.c.device.is_not(None))).mappings()
            for row in spanning:
                fields = dict(row)
                out.setdefault(fields.pop("box_device"), from_row(fields))
            return out

    def start_campaign(self, *, probe: str, params: dict, timeout_s: float, limit: int,
                       outlier_fraction: float, model: str | None = None,
                       within_s: float = LIVE_WITHIN_S,
                       admit: Callable[[Device], None] | None = None) -> tuple[Campaign, list[Job]]:
        """One job of `probe` per live device (the GPUs; a fleet of none, its hosts' CPUs), or of
        `model` only, each targeting its device, in one transaction: all of them or none.
        NoDevices when there is none; QueueFull when the queue has no room for them all.
        `admit` sees each chosen device first, in the transaction: what it raises (a job too
        large for that device) ends it with nothing queued. A lost device, or one the campaign
        does not pick (a CPU beside GPUs, another model), is never asked."""
        now = time.time()
        with self._write() as db:  # type: ignore[attr-defined]
            live = [Device(**row) for row in db.execute(
                sa.select(devices).where(devices.c.seen_at >= now - within_s)
                .order_by(devices.c.host, devices.c.gpu_index, devices.c.device)).mappings()]
            gpus = [d for d in live if d.kind == "cuda"]
            chosen = [d for d in gpus or live if model is None or model in (d.name, d.catalogue_id)]
            if not chosen:
                raise NoDevices("no live device" + (f" of model {model}" if model else "") + " in the fleet: "
                                "start `tally worker` on the boxes (GET /api/v1/fleet lists them)")
            for d in chosen if admit is not None else ():
                admit(d)
            campaign_id = db.execute(campaigns.insert().values(
                probe=probe, params=json.dumps(params), created_at=now,
                outlier_fraction=outlier_fraction)).inserted_primary_key[0]
            ids = [self._insert(db, probe=probe, params=params, timeout_s=timeout_s,  # type: ignore[attr-defined]
                                limit=limit, device=d.kind, targets=Targets(device=d.device),
                                campaign_id=campaign_id) for d in chosen]
            self.saw_id("campaigns", campaign_id)  # type: ignore[attr-defined]
            for job_id in ids:
                self.saw_id("jobs", job_id)  # type: ignore[attr-defined]
            return self._campaign(db, campaign_id), [self._row(db, i) for i in ids]  # type: ignore[attr-defined]

    @staticmethod
    def _campaign(db: sa.Connection, campaign_id: int) -> Campaign | None:
        row = db.execute(sa.select(campaigns).where(campaigns.c.id == campaign_id)).mappings().first()
        return None if row is None else Campaign(**(dict(row) | {"params": json.loads(row["params"])}))

    def expire_lost(self, *, after_s: float) -> list[int]:
        """Fail the queued jobs whose target (a device, a host, a GPU model) no device of the fleet
        has met for `after_s` seconds, and that have waited that long (a device gone for good, a box
        retired): DeviceLost, naming the target, so neither the job nor its campaign waits forever.
        The ids failed, oldest first."""
        now, expired = time.time(), []
        with self._write() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(jobs.c.id, jobs.c.target_host, jobs.c.target_device, jobs.c.target_model)
                              .where(jobs.c.status == "queued", jobs.c.created_at < now - after_s,
                                     sa.or_(jobs.c.target_host.is_not(None), jobs.c.target_device.is_not(None),
                                            jobs.c.target_model.is_not(None)))
                              .order_by(jobs.c.id).with_for_update(skip_locked=True)).all()
            if not rows:
                return []
            live = [Device(**row) for row in db.execute(
                sa.select(devices).where(devices.c.seen_at >= now - after_s)).mappings()]
            for row in rows:
                targets = Targets(row.target_host, row.target_device, row.target_model)
                if any(_meets(d, targets) for d in live):
                    continue
                named = ", ".join(f"{k} {v}" for k, v in (("host", row.target_host), ("device", row.target_device),
                                                         ("model", row.target_model)) if v)
                error = {"type": "DeviceLost", "message": f"no device of the fleet has met its target ({named}) "
                         f"for {after_s:g} s (TALLY_DEVICE_LOST_AFTER_S): it was lost for good",
                         "detail": {"host": row.target_host, "device": row.target_device,
                                    "model": row.target_model, "after_s": after_s}}
                if self._move(db, row.id, old="queued", new="failed",  # type: ignore[attr-defined]
                              values={"error": json.dumps(error), "finished_at": now}):
                    expired.append(row.id)
        return expired

    def cancel_campaign(self, campaign_id: int) -> bool:
        """Cancel every job of the campaign still queued, and ask its running ones to stop; False
        when there is no such campaign."""
        with self._read() as db:  # type: ignore[attr-defined]
            if self._campaign(db, campaign_id) is None:
                return False
            ids = db.execute(sa.select(jobs.c.id).where(jobs.c.campaign_id == campaign_id,
                                                        jobs.c.status.in_(("queued", "running")))).scalars().all()
        for job_id in ids:
            self.cancel(job_id)  # type: ignore[attr-defined]
        return True

    def campaign(self, campaign_id: int) -> tuple[Campaign, list[Job]] | None:
        """A campaign and its jobs, oldest first; None when there is no such campaign."""
        with self._read() as db:  # type: ignore[attr-defined]
            found = self._campaign(db, campaign_id)
            if found is None:
                return None
            rows = db.execute(sa.select(jobs).where(jobs.c.campaign_id == campaign_id)
                              .order_by(jobs.c.id)).mappings()
            return found, [from_row(row) for row in rows]

    def campaigns(self, *, limit: int = 20) -> list[Campaign]:
        """The newest campaigns first."""
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(campaigns).order_by(campaigns.c.id.desc()).limit(limit)).mappings()
            return [Campaign(**(dict(row) | {"params": json.loads(row["params"])})) for row in rows]

    def history(self, device: str, *, probe: str = "burn_in", limit: int = 100) -> list[Job]:
        """The succeeded jobs of `probe` that ran on `device`, oldest first."""
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(jobs).where(jobs.c.ran_on_device == device, jobs.c.probe == probe,
                                                    jobs.c.status == "succeeded")
                              .order_by(jobs.c.id.desc()).limit(limit)).mappings()
            return [from_row(row) for row in rows][::-1]


def _meets(device: Device, targets: Targets) -> bool:
    """Whether `device` meets every target of a job (the claim's rule, `claimable`, in Python)."""
    return ((targets.host is None or device.host == targets.host)
            and (targets.device is None or device.device == targets.device)
            and (targets.model is None or targets.model in (device.name, device.catalogue_id)))


def cpu_device(host: str) -> str:
    return f"{host}:cpu"

