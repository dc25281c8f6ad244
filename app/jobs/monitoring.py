"""The reads /metrics makes of the jobs table at every scrape (app/ops/fleet_metrics.py): cheap ones
first, ids and states without the result column, so that a scrape parses a job's result only when
it has not seen that job before, and the rows those ids name. Read-only. Part of the store layer
(app/jobs/store.py); Store inherits MonitoringStore.

Why ids can stand for rows: a terminal job is never left, nor written again (app/jobs/job.py), and
no id ever names two jobs, not even in a SQLite file created anew under a running server
(app/jobs/database.py). So a succeeded job read once is read for good.
"""

from collections.abc import Iterable

import sqlalchemy as sa

from app.jobs.job import TERMINAL, Job, from_row
from app.jobs.schema import jobs

CHUNK = 500
"""Ids per IN list: within SQLite's bound on one statement's variables (999 before 3.32)."""
ENDED = tuple(sorted(TERMINAL - {"cancelled"}))
"""The ends that say something of the device a job ran on: a cancelled job says nothing."""


def _measured() -> list[sa.ColumnElement[bool]]:
    """Succeeded jobs that ran on a device of the fleet: those whose energy has a device to count on."""
    return [jobs.c.status == "succeeded", jobs.c.ran_on_device.is_not(None)]


class MonitoringStore:
    def measured_mark(self) -> tuple[int, int]:
        """(how many, the highest id) of the succeeded jobs that ran on a fleet device. It changes
        whenever one joins them, and when the database is replaced, so a scrape that finds it as it
        was reads nothing more."""
        with self._read() as db:  # type: ignore[attr-defined]
            count, top = db.execute(sa.select(sa.func.count(), sa.func.max(jobs.c.id))
                                    .where(*_measured())).one()
        return count, top or 0

    def measured_ids(self) -> list[int]:
        """The ids of the succeeded jobs that ran on a fleet device, newest first."""
        with self._read() as db:  # type: ignore[attr-defined]
            return list(db.execute(sa.select(jobs.c.id).where(*_measured()).order_by(jobs.c.id.desc()))
                        .scalars())

    def jobs_by_id(self, ids: Iterable[int]) -> list[Job]:
        """The jobs `ids` name, whole (results parsed), oldest first; an id of no job is left out."""
        wanted, found = sorted(set(ids)), []
        with self._read() as db:  # type: ignore[attr-defined]
            for start in range(0, len(wanted), CHUNK):
                rows = db.execute(sa.select(jobs).where(jobs.c.id.in_(wanted[start:start + CHUNK]))
                                  .order_by(jobs.c.id)).mappings()
                found += [from_row(row) for row in rows]
        return found

    def last_ended(self, *, probe: str) -> list[Job]:
        """Per device, its newest job of `probe` that ended other than cancelled (the device it ran
        on, else the one it targeted: a campaign's job failed as DeviceLost never ran), oldest
        first. Results are left out (None): a caller reads the few it needs (jobs_by_id)."""
        device = sa.func.coalesce(jobs.c.ran_on_device, jobs.c.target_device)
        newest = (sa.select(sa.func.max(jobs.c.id))
                  .where(jobs.c.probe == probe, jobs.c.status.in_(ENDED), device.is_not(None))
                  .group_by(device))
        columns = [column for column in jobs.c if column.name != "result"]
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(*columns, sa.null().label("result"))
                              .where(jobs.c.id.in_(newest)).order_by(jobs.c.id)).mappings()
            return [from_row(row) for row in rows]

    def succeeded_in(self, campaign_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """Per campaign of `campaign_ids` with any: (how many of its jobs succeeded, the highest of
        their ids), which changes whenever one more succeeds."""
        wanted = sorted(set(campaign_ids))
        if not wanted:
            return {}
        with self._read() as db:  # type: ignore[attr-defined]
            rows = db.execute(sa.select(jobs.c.campaign_id, sa.func.count(), sa.func.max(jobs.c.id))
                              .where(jobs.c.campaign_id.in_(wanted), jobs.c.status == "succeeded")
                              .group_by(jobs.c.campaign_id)).all()
        return {campaign: (count, top) for campaign, count, top in rows}
