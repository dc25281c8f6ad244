"""Calibration in the job database: each profile's JSON (app/accounting/calibration/profile.py)
under an id, numbered per device model, each campaign's jobs and outcome, and the accuracy ledger's
pairs. The store's parts for them (Store mixes them in)."""

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from app.jobs import backends
from app.jobs.schema import calibrations, ledger, profiles


class ProfileStore:
    def add_profile(self, *, device_model: str, body: dict[str, Any],
                    device: str | None = None) -> dict[str, Any]:
        """Store `body` as the next version of `device_model`'s profiles (one `device`'s own, when
        given: versions count every profile of the model); the body as stored, with its id and
        version set. The number is read and taken in one transaction, and a unique index
        holds it should two processes race."""
        with self._write() as db:  # type: ignore[attr-defined]
            latest = db.execute(sa.select(sa.func.max(profiles.c.version))
                                .where(profiles.c.device_model == device_model)).scalar()
            version = (latest or 0) + 1
            inserted = db.execute(profiles.insert().values(device_model=device_model, version=version,
                                                           device=device, created_at=time.time(), body="{}"))
            new_id = inserted.inserted_primary_key[0]
            stored = body | {"id": new_id, "version": version, "device_model": device_model, "device": device}
            db.execute(profiles.update().where(profiles.c.id == new_id).values(body=json.dumps(stored)))
        self.saw_id("profiles", new_id)  # type: ignore[attr-defined]
        return stored

    def profile(self, profile_id: int) -> dict[str, Any] | None:
        with self._read() as db:  # type: ignore[attr-defined]
            body = db.execute(sa.select(profiles.c.body).where(profiles.c.id == profile_id)).scalar()
        return None if body is None else json.loads(body)

    def latest_profile(self, name: str) -> dict[str, Any] | None:
        """The newest profile of the device model `name` (of all its devices), or else the newest of
        the one device `name` (a UUID, "<host>:cpu"); None before any."""
        with self._read() as db:  # type: ignore[attr-defined]
            body = db.execute(sa.select(profiles.c.body).where(profiles.c.device_model == name,
                                                               profiles.c.device.is_(None))
                              .order_by(profiles.c.version.desc()).limit(1)).scalar()
            if body is None:
                body = db.execute(sa.select(profiles.c.body).where(profiles.c.device == name)
                                  .order_by(profiles.c.version.desc()).limit(1)).scalar()
        return None if body is None else json.loads(body)

    def profiles(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """The newest first."""
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(profiles.c.body).order_by(profiles.c.id.desc()).limit(limit))
            return [json.loads(body) for body in rows.scalars()]


@dataclass(frozen=True)
class Calibration:
    """A calibration campaign: its jobs, and the profile built from them once they ended."""

    id: int
    device_model: str
    jobs: list[int]
    """The jobs the profile is built from."""
    held_out: list[int]
    """Jobs that score the profile and never enter it (the held-out train steps)."""
    created_at: float
    profile_id: int | None
    error: str | None
    """Why no profile could be built from its runs (the build's refusal), once they ended."""


def _calibration(row: Any) -> Calibration:
    return Calibration(**(dict(row) | {"jobs": json.loads(row["jobs"]),
                                       "held_out": json.loads(row["held_out"])}))


class CalibrationStore:
    def add_calibration(self, *, device_model: str, job_ids: list[int], held_out: list[int]) -> Calibration:
        with self._write() as db:  # type: ignore[attr-defined]
            new_id = db.execute(calibrations.insert().values(
                device_model=device_model, jobs=json.dumps(job_ids), held_out=json.dumps(held_out),
                created_at=time.time())).inserted_primary_key[0]
        self.saw_id("calibrations", new_id)  # type: ignore[attr-defined]
        found = self.calibration(new_id)
        assert found is not None
        return found

    def calibration(self, calibration_id: int) -> Calibration | None:
        with self._read() as db:  # type: ignore[attr-defined]
            row = db.execute(sa.select(calibrations)
                             .where(calibrations.c.id == calibration_id)).mappings().first()
        return None if row is None else _calibration(row)

    def calibrations(self, *, limit: int = 20) -> list[Calibration]:
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(calibrations).order_by(calibrations.c.id.desc())
                              .limit(limit)).mappings()
            return [_calibration(row) for row in rows]

    def end_calibration(self, calibration_id: int, *, profile_id: int | None, error: str | None) -> bool:
        """Record the campaign's outcome once: False when another caller recorded it first."""
        with self._write() as db:  # type: ignore[attr-defined]
            return db.execute(calibrations.update().where(
                calibrations.c.id == calibration_id, calibrations.c.profile_id.is_(None),
                calibrations.c.error.is_(None)).values(profile_id=profile_id, error=error)).rowcount == 1


LEDGER_FIELDS = ("job_id", "probe", "device_model", "metric", "kind", "mode", "profile_id", "profile_version",
                 "predicted", "measured", "detail")


class LedgerStore:
    def ledger_keys(self) -> set[tuple[int, str, int | None]]:
        """(job, mode, profile) of every scored prediction: what a refresh need not score again."""
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(ledger.c.job_id, ledger.c.mode, ledger.c.profile_id).distinct()).all()
        return {(j, m, p) for j, m, p in rows}

    def add_ledger(self, rows: list[dict[str, Any]]) -> int:
        """Store the rows of each (job, mode, profile) the ledger does not hold yet; how many. Two
        readers scoring the same new jobs at once (GET /accuracy fills the ledger as it reads) store
        them once: the check and the insert are one transaction, under a lock on PostgreSQL."""
        if not rows:
            return 0
        now = time.time()
        with self._write() as db:  # type: ignore[attr-defined]
            backends.lock(db, "tally:ledger")
            keys = {(row["job_id"], row["mode"], row["profile_id"]) for row in rows}
            have = set(db.execute(sa.select(ledger.c.job_id, ledger.c.mode, ledger.c.profile_id)
                                  .where(ledger.c.job_id.in_(sorted({j for j, _, _ in keys})))).all())
            new = [{k: row[k] for k in LEDGER_FIELDS} | {"recorded_at": now} for row in rows
                   if (row["job_id"], row["mode"], row["profile_id"]) not in have]
            if new:
                db.execute(ledger.insert(), new)
        return len(new)

    def ledger_rows(self, *, probe: str | None = None, device_model: str | None = None,
                    mode: str | None = None) -> list[dict[str, Any]]:
        given = ((ledger.c.probe, probe), (ledger.c.device_model, device_model), (ledger.c.mode, mode))
        where = [column == value for column, value in given if value is not None]
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(ledger).where(*where).order_by(ledger.c.job_id, ledger.c.id)).mappings()
            return [dict(row) for row in rows]
