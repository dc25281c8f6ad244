"""The accuracy ledger: every probe job's (prediction, measurement) pairs, stored once per mode
and profile, and the errors they add up to per probe, metric, device model and mode.

Each probe declares its pairs (its `ledger`, app/probes/ledger.py). refresh() scores what the store
does not hold yet: every succeeded job's datasheet pairs, and its calibrated pairs under the newest
profile of its device model that was not fitted on it (leave-one-out: a job among a profile's
figures never scores that profile; a campaign's held-out jobs always can). A profile built later
scores the older jobs it left out on the next refresh. report() reads the stored pairs back: for
calibrated ones, each job under the newest profile that scored it.

Errors are relative: predicted / measured - 1 (positive: the prediction too high, too slow or too
big). Per group: the median error (signed), the mean absolute error (MAPE), the worst (with its job)
and the count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.accounting.calibration.profile import Profile, median
from app.accounting.records import RECORD
from app.measured.profile import PROFILE
from app.probes.registry import PROBES

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.store import Store

LOOKBACK = 1000
"""Newest succeeded jobs per probe scored on a refresh."""
MAX_POINTS = 2000
RULE = ("Each succeeded probe job's predictions beside its measurements: in datasheet mode, what the "
        "calculators answer from the catalogue and their defaults; in calibrated mode, what they answer "
        "from the newest profile of the job's device model not fitted on that job (leave-one-out). Error = "
        "predicted / measured - 1.")


def _newest_first(store: Store) -> dict[str, list[Profile]]:
    by_model: dict[str, list[Profile]] = {}
    for body in store.profiles(limit=10_000):
        p = PROFILE.validate_python(body)
        by_model.setdefault(p.device_model, []).append(p)
    for profiles in by_model.values():
        profiles.sort(key=lambda p: p.version, reverse=True)
    return by_model


def refresh(store: Store) -> int:
    """Score every job not scored yet; the number of pairs added."""
    have = store.ledger_keys()
    profiles = _newest_first(store)
    rows: list[dict[str, Any]] = []
    for name, probe in PROBES.items():
        if probe.ledger is None:
            continue
        for job in store.latest(probe=name, limit=LOOKBACK):
            model = job.result.environment.device_name
            base = {"job_id": job.id, "probe": name, "device_model": model}
            if (job.id, "datasheet", None) not in have:
                pairs = probe.ledger.datasheet(job.params, job.result)
                rows += [base | _row(pair, "datasheet", None) for pair in pairs]
            if probe.ledger.calibrated is None:
                continue
            fair = next((p for p in profiles.get(model, []) if job.id not in p.job_ids()
                         and p.device in (None, job.ran_on_device)), None)
            if fair is not None and (job.id, "calibrated", fair.id) not in have:
                rows += [base | _row(pair, "calibrated", fair)
                         for pair in probe.ledger.calibrated(job.params, job.result, fair)]
    return store.add_ledger(rows)


def _row(pair: Any, mode: str, profile: Profile | None) -> dict[str, Any]:
    return {"metric": pair.metric, "kind": pair.kind, "mode": mode, "predicted": pair.predicted,
            "measured": pair.measured, "detail": pair.detail,
            "profile_id": None if profile is None else profile.id,
            "profile_version": None if profile is None else profile.version}


@dataclass(slots=True)
class Point:
    job_id: int
    probe: str
    metric: str
    kind: str
    device_model: str
    mode: str
    profile_version: int | None
    predicted: float
    measured: float
    error: float
    """predicted / measured - 1."""
    detail: str

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Group:
    """The errors of one probe's metric on one device model in one mode."""

    probe: str
    metric: str
    kind: str
    device_model: str
    mode: str
    profile_versions: list[int]
    """Calibrated: the profile versions that made its predictions."""
    count: int
    median_error: float
    """Signed: positive when the predictions run high."""
    mape: float
    """Mean absolute error, a fraction."""
    worst_error: float
    worst_job_id: int

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Accuracy:
    groups: list[Group]
    points: list[Point]
    """The pairs themselves (newest MAX_POINTS), for the chart of predicted against measured."""
    rule: str = RULE
    scored_now: int = 0
    """Pairs this request added to the ledger (jobs and profiles new since the last read)."""
    notes: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD


def report(store: Store, *, probe: str | None = None, device_model: str | None = None,
           mode: str | None = None, metric: str | None = None) -> Accuracy:
    """Refresh the ledger, then its errors, filtered by what is given."""
    added = refresh(store)
    rows = [r for r in store.ledger_rows(probe=probe, device_model=device_model, mode=mode)
            if metric is None or r["metric"] == metric]
    # Calibrated: each job under the newest profile that scored it.
    newest: dict[tuple[int, str], int] = {}
    for r in rows:
        if r["mode"] == "calibrated":
            key = (r["job_id"], r["metric"])
            newest[key] = max(newest.get(key, 0), r["profile_id"])
    kept = [r for r in rows
            if r["mode"] == "datasheet" or r["profile_id"] == newest[(r["job_id"], r["metric"])]]
    points = [Point(r["job_id"], r["probe"], r["metric"], r["kind"], r["device_model"], r["mode"],
                    r["profile_version"], r["predicted"], r["measured"], r["predicted"] / r["measured"] - 1,
                    r["detail"]) for r in kept]
    grouped: dict[tuple[str, str, str, str, str], list[Point]] = {}
    for p in points:
        grouped.setdefault((p.probe, p.metric, p.kind, p.device_model, p.mode), []).append(p)
    groups = []
    for (probe_name, metric_name, kind, model, mode_name), members in sorted(grouped.items()):
        worst = max(members, key=lambda p: abs(p.error))
        groups.append(Group(probe_name, metric_name, kind, model, mode_name,
                            sorted({p.profile_version for p in members if p.profile_version is not None}),
                            len(members), median([p.error for p in members]),
                            sum(abs(p.error) for p in members) / len(members), worst.error, worst.job_id))
    notes = [] if groups else ["No pairs yet: run a probe (or a calibration campaign) and they appear here."]
    return Accuracy(groups, points[-MAX_POINTS:], scored_now=added, notes=notes)
