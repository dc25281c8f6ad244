"""A burn-in campaign's results, compared: every GPU beside its model's fleet median, the ones
more than a set fraction below it flagged with NVML's reason, and the models side by side
against the catalogue: pure functions over the burn_in probe's results (app/probes/burn_in.py),
and `readings`, which takes them from the job store. `verdict`: what a burn-in says of its device
(passed, slow, failed), the one rule the Burn-in page's campaign, its JSON and /metrics'
tally_burn_in_verdict read; `last_verdicts`: each device's, from its newest burn-in.

The figures compared are the sustained ones (seconds of back-to-back work, at the power and
thermal state a long run sees), not the sub-second bursts: a GPU capped at its power limit runs
its bursts at full clocks and shows only when held.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.probes.burn_in import BurnInResult

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.fleet import Campaign
    from app.jobs.job import Job
    from app.jobs.store import Store

RUNS = {
    "matmul_flop_per_sec": "matmul",
    "bandwidth_bytes_per_sec": "bandwidth",
    "train_step_flop_per_sec": "train_step",
}
"""What a GPU is compared by (higher is better for each), and the sustained run each is read from."""
METRICS = tuple(RUNS)
OUTLIER_FRACTION = 0.10
"""Flag a GPU more than this far below its model's median on any metric: a synchronous job runs
at its slowest GPU's pace, so 10% there is 10% of the whole run."""


@dataclass(frozen=True)
class Reading:
    """One GPU's burn-in, as the comparison reads it."""

    job_id: int
    host: str | None
    gpu: str
    """NVML's UUID, or "<host>:cpu" for a CPU measured in its place."""
    model: str
    """The device's name as it reports it ("NVIDIA H200"): GPUs compare within a model."""
    catalogue_id: str | None
    finished_at: float | None
    metrics: dict[str, float | None]
    watts: dict[str, float | None]
    """Average power over each sustained run (matmul, bandwidth, train_step); null without NVML."""
    joules_per_iteration: dict[str, float | None]
    flop_per_sec_per_watt: dict[str, float | None]
    slowdowns: dict[str, list[str]]
    """Per run, the NVML clock-event reasons seen that slow a busy GPU."""
    matmul_burst_flop_per_sec: float | None
    matmul_peak_flop_per_sec: float | None
    bandwidth_catalogue_bytes_per_sec: float | None
    train_step_peak_flop_per_sec: float | None


def reading(
    result: BurnInResult,
    *,
    job_id: int,
    host: str | None,
    finished_at: float | None,
    device: str | None = None,
) -> Reading:
    """`device`: the fleet's name for where it ran (the job's ran_on_device); by default the
    result's GPU UUID, or "<host>:cpu"."""
    runs = {
        "matmul": result.matmul.sustained,
        "bandwidth": result.bandwidth.sustained,
        "train_step": result.train_step.sustained,
    }
    best = next(iter(result.matmul.best.values()), None)
    env = result.environment
    bandwidth = result.bandwidth.catalogue_gb_per_sec
    return Reading(
        job_id=job_id,
        host=host,
        gpu=device or result.gpu_uuid or f"{host}:cpu",
        model=env.device_name,
        catalogue_id=env.catalogue_id,
        finished_at=finished_at,
        metrics={
            "matmul_flop_per_sec": runs["matmul"] and runs["matmul"].flop_per_sec,
            "bandwidth_bytes_per_sec": runs["bandwidth"] and runs["bandwidth"].bytes_per_sec,
            "train_step_flop_per_sec": runs["train_step"] and runs["train_step"].flop_per_sec,
        },
        watts={k: s and s.average_power_watts for k, s in runs.items()},
        joules_per_iteration={k: s and s.joules_per_iteration for k, s in runs.items()},
        flop_per_sec_per_watt={k: s and s.flop_per_sec_per_watt for k, s in runs.items()},
        slowdowns={
            k: (list(s.slowdowns) if s else []) + _contended(sub)
            for k, (s, sub) in {
                "matmul": (runs["matmul"], result.matmul),
                "bandwidth": (runs["bandwidth"], result.bandwidth),
                "train_step": (runs["train_step"], result.train_step),
            }.items()
        },
        matmul_burst_flop_per_sec=best and best.flop_per_sec,
        matmul_peak_flop_per_sec=best and best.peak_flop_per_sec,
        bandwidth_catalogue_bytes_per_sec=None if bandwidth is None else bandwidth * 1e9,
        train_step_peak_flop_per_sec=result.train_step.peak_flop_per_sec,
    )


def readings(store: Store, jobs: list[Job]) -> list[Reading]:
    """The succeeded burn-ins among `jobs` (a campaign's, a device's history), each named by the
    fleet's device it ran on and that device's host."""
    hosts = {d.device: d.host for d in store.devices()}
    return [reading(j.result, job_id=j.id, device=j.ran_on_device, host=hosts.get(j.ran_on_device or ""),
                    finished_at=j.finished_at)
            for j in jobs if j.status == "succeeded" and isinstance(j.result, BurnInResult)]


def _contended(sub) -> list[str]:
    """ "contention" where other processes used the host's CPUs while the run went (half a core or
    more, app/bench/contention.py): on a CPU, or a GPU fed by a busy host, the reason NVML cannot give."""
    c = sub.environment.contention
    return ["contention"] if c is not None and not c.quiet else []


@dataclass(frozen=True)
class Compared:
    reading: Reading
    median: dict[str, float | None]
    """The model's fleet median per metric, this GPU included."""
    ratio: dict[str, float | None]
    """This GPU's figure over its model's median."""
    flagged: bool
    worst: str | None
    """The metric furthest below the median."""
    shortfall: float
    """1 - the worst ratio (0 when nothing is below the median)."""
    reasons: list[str] = field(default_factory=list)
    """NVML's slowdown reasons in the worst metric's run (then any run's), when it gives one."""
    siblings: int = 1
    """GPUs of the model in the comparison, this one included: one alone is never flagged."""


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _over(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def compare(readings: list[Reading], outlier_fraction: float = OUTLIER_FRACTION) -> list[Compared]:
    """Every reading beside its model's medians, in the order given."""
    by_model: dict[str, list[Reading]] = defaultdict(list)
    for r in readings:
        by_model[r.model].append(r)
    medians = {
        model: {m: _median([r.metrics[m] for r in rs]) for m in METRICS} for model, rs in by_model.items()
    }
    out = []
    for r in readings:
        median = medians[r.model]
        ratio = {m: _over(r.metrics[m], median[m]) for m in METRICS}
        below = {m: v for m, v in ratio.items() if v is not None}
        worst = min(below, key=below.get) if below else None
        shortfall = max(0.0, 1 - below[worst]) if worst else 0.0
        siblings = len(by_model[r.model])
        flagged = siblings > 1 and shortfall > outlier_fraction
        anywhere = sorted({x for v in r.slowdowns.values() for x in v})
        seen = (r.slowdowns[RUNS[worst]] if worst else []) or anywhere
        out.append(Compared(r, median, ratio, flagged, worst, shortfall, seen if flagged else [], siblings))
    return out


@dataclass(frozen=True)
class ModelRow:
    """One GPU model across the fleet, medians of its GPUs, beside the catalogue."""

    model: str
    catalogue_id: str | None
    gpus: int
    matmul_flop_per_sec: float | None
    matmul_burst_flop_per_sec: float | None
    matmul_peak_flop_per_sec: float | None
    """The catalogue's dense peak at the burn-in's dtype."""
    matmul_fraction_of_peak: float | None
    bandwidth_bytes_per_sec: float | None
    bandwidth_catalogue_bytes_per_sec: float | None
    bandwidth_fraction_of_catalogue: float | None
    train_step_mfu: float | None
    """The sustained train step's FLOP/s over the catalogue's peak for its precision."""
    matmul_flop_per_sec_per_watt: float | None
    flagged: int


def leaderboard(compared: list[Compared]) -> list[ModelRow]:
    """The fleet's models, fastest sustained matmul first."""
    by_model: dict[str, list[Compared]] = defaultdict(list)
    for c in compared:
        by_model[c.reading.model].append(c)
    rows = []
    for model, cs in by_model.items():
        rs = [c.reading for c in cs]
        matmul, burst = (
            _median([r.metrics["matmul_flop_per_sec"] for r in rs]),
            _median([r.matmul_burst_flop_per_sec for r in rs]),
        )
        peak = _median([r.matmul_peak_flop_per_sec for r in rs])
        bandwidth = _median([r.metrics["bandwidth_bytes_per_sec"] for r in rs])
        catalogue = _median([r.bandwidth_catalogue_bytes_per_sec for r in rs])
        step, step_peak = (
            _median([r.metrics["train_step_flop_per_sec"] for r in rs]),
            _median([r.train_step_peak_flop_per_sec for r in rs]),
        )
        rows.append(
            ModelRow(
                model=model,
                catalogue_id=rs[0].catalogue_id,
                gpus=len(rs),
                matmul_flop_per_sec=matmul,
                matmul_burst_flop_per_sec=burst,
                matmul_peak_flop_per_sec=peak,
                matmul_fraction_of_peak=_over(matmul, peak),
                bandwidth_bytes_per_sec=bandwidth,
                bandwidth_catalogue_bytes_per_sec=catalogue,
                bandwidth_fraction_of_catalogue=_over(bandwidth, catalogue),
                train_step_mfu=_over(step, step_peak),
                matmul_flop_per_sec_per_watt=_median([r.flop_per_sec_per_watt["matmul"] for r in rs]),
                flagged=sum(c.flagged for c in cs),
            )
        )
    return sorted(rows, key=lambda row: -(row.matmul_flop_per_sec or 0))


VERDICTS = ("passed", "slow", "failed")
"""What a burn-in says of its device: passed, slow (flagged: more than its campaign's
outlier_fraction below its model's median on a sustained figure), failed (the job ended without a
result: failed, timeout, oom, crashed)."""


def verdict(job: Job, row: Compared | None) -> str | None:
    """The verdict of burn-in `job` on its device, `row` its line of its campaign's comparison
    (`campaign`; of its own reading alone outside a campaign, where nothing is flagged); None for a
    job that has not ended or was cancelled, which says nothing of its device. `tally burn-in`
    exits 1 on a cancelled job as well: there, the campaign did not finish."""
    if job.status in ("queued", "running", "cancelled"):
        return None
    if job.status != "succeeded":
        return "failed"
    return "slow" if row is not None and row.flagged else "passed"


def campaign(store: Store, campaign_id: int) -> tuple[Campaign, list[Job], list[Compared]] | None:
    """A campaign, its jobs (oldest first) and its succeeded devices beside their model's median, at
    the campaign's own outlier_fraction; None when there is no such campaign."""
    found = store.campaign(campaign_id)
    if found is None:
        return None
    c, members = found
    return c, members, compare(readings(store, members), c.outlier_fraction)


@dataclass(frozen=True)
class DeviceVerdict:
    device: str
    """The device the burn-in ran on (else the one it targeted: a job failed as DeviceLost)."""
    verdict: str
    """One of VERDICTS."""
    job_id: int
    campaign_id: int | None
    finished_at: float | None


def last_verdicts(store: Store, last: list[Job] | None = None) -> list[DeviceVerdict]:
    """Each device's verdict from its newest burn-in that ended other than cancelled (`last`, as
    store.last_ended(probe="burn_in") gives them; read when not given): a campaign's job beside the
    campaign's other devices, as its page shows it; a job of no campaign beside itself alone."""
    last = store.last_ended(probe="burn_in") if last is None else last
    rows: dict[int, Compared] = {}
    succeeded = [j for j in last if j.status == "succeeded"]
    for campaign_id in sorted({j.campaign_id for j in succeeded if j.campaign_id is not None}):
        found = campaign(store, campaign_id)
        if found is not None:
            rows |= {row.reading.job_id: row for row in found[2]}
    alone = [j.id for j in succeeded if j.campaign_id is None]
    for r in readings(store, store.jobs_by_id(alone)) if alone else []:
        rows[r.job_id] = compare([r])[0]
    out = []
    for j in last:
        said = verdict(j, rows.get(j.id))
        if said is not None:
            device = j.ran_on_device or j.target_device
            out.append(DeviceVerdict(device, said, j.id, j.campaign_id, j.finished_at))
    return out
