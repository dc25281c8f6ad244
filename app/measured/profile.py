"""A calibration profile of one device model, built from the runs this store holds
(app/accounting/calibration/profile.py is what it is; this is which runs make it).

Which runs: the succeeded jobs of each probe whose result was measured on a device of that name
(every device of the model across the fleet: a fleet of eight H200s calibrates as one), newest
first, at most LOOKBACK per probe. A run that shared its host or GPU, or whose timings spread
widely (app/measured/doubts.py), is left out and listed in `left_out`; where no run of a probe was
measured alone, its doubted runs are used and the profile says so in `flags`: a profile is never
built on contended runs silently. Where the runs of one figure still disagree by more than
WIDE_SPREAD, the figure is kept and flagged too, and every calibrated answer repeats the flags.

Figures:
- matmul: per (dtype, m, k, n), the median over runs of each run's median seconds (a shape whose
  timings spread widely is left out alone, the rest of its run kept);
- attention: per (dtype, shape, mask), SDPA's forward and forward-with-backward seconds, the same way;
- copy_bytes_per_s: the bandwidth probe's rate, median over its last WINDOW runs;
- host_to_device / device_to_host: the transfer probe's fastest steady size (pinned where measured),
  median over its last WINDOW runs;
- launch_eager_s: a launch-bound eager decode step's median over its ops (the generate probe's
  least such point); launch_graph_s: a graph-replayed decode step's median over its eager ops;
- train_step: per precision, step.py's three overhead coefficients fitted over the full-mode,
  uncompiled transformer train_step runs (three or more), their GEMMs timed on the matmul surface;
- collectives: each collectives run's fitted latency and bandwidth per collective;
- checkpoint write and read rates (checkpoint probe); loader tokens/s (data_loader, its fastest mode);
- sustained_ratio: a sustained run's rate over its burst rate (burn-in runs' matmul and train step,
  then matmul and train_step runs with sustain_s); power_watts: their average watts where NVML
  read them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from app.accounting.calibration import attention as core
from app.accounting.calibration import lsq, step, surface
from app.accounting.calibration.profile import (
    WIDE_SPREAD,
    AttentionSample,
    CollectiveFit,
    Figure,
    MatmulSample,
    Profile,
    StepOverheads,
    check,
    median,
    spread,
)
from app.accounting.errors import InvalidInput
from app.accounting.hardware import catalogue
from app.inputs.schemas import engine_model
from app.measured import doubts, outliers
from app.probes.train_step.ledger import calibratable
from app.probes.train_step.params import TrainStepParams

if TYPE_CHECKING:  # annotations only: the job store (SQLAlchemy) loads when a caller opens one
    from app.jobs.job import Job
    from app.jobs.store import Store

LOOKBACK = 200
WINDOW = 5
MIN_STEP_RUNS = 3
"""Runs a train step fit needs at one precision: three coefficients."""


class Runs:
    """The usable runs of each probe on one device model, and why the others were left out."""

    def __init__(self, store: Store, device_model: str, exclude: frozenset[int] = frozenset(),
                 device: str | None = None) -> None:
        self.store, self.device_model, self.exclude, self.device = store, device_model, exclude, device
        self.slow: dict[str, float] = {}
        """Devices left out of a model-wide profile (outliers.py), with how far below the model they ran."""
        self.left_out: list[str] = []
        self.flags: list[str] = []
        self.kind: str | None = None
        self.catalogue_id: str | None = None

    def of(self, probe: str, *, per_point: bool = False) -> list[Job]:
        """Usable runs, newest first. per_point: only contention leaves a whole run out; a timing
        that spread widely leaves out its own point (the matmul probe's shapes, _matmul). Where no
        run of the probe was measured alone, the doubted ones, and a flag saying so."""
        kept, doubted = [], []
        for job in self.store.latest(probe=probe, limit=LOOKBACK):
            env = job.result.environment
            if env.device_name != self.device_model or job.id in self.exclude:
                continue
            if self.device is not None and job.ran_on_device != self.device:
                continue
            if job.ran_on_device in self.slow:
                below = self.slow[job.ran_on_device]
                self.left_out.append(f"{probe} job {job.id}: ran on {job.ran_on_device}, {below:.0%} slower "
                                     "than its model's other devices")
                continue
            self.kind, self.catalogue_id = self.kind or env.device, self.catalogue_id or env.catalogue_id
            why = doubts.contended(job.result) if per_point else doubts.doubts(job.result)
            if why:
                self.left_out.append(f"{probe} job {job.id}: " + "; ".join(why))
                doubted.append(job)
            else:
                kept.append(job)
        if kept or not doubted:
            return kept
        self.flags.append(f"{probe}: no run was measured alone; built from {len(doubted)} that were not "
                          f"(jobs {_ids(j.id for j in doubted)}), so its figures may be slower than the "
                          "device")
        return doubted


def _figure(values: list[tuple[float, int]], unit: str, source: str, flags: list[str]) -> Figure | None:
    """The median of (value, job) over the newest WINDOW runs; flagged when they disagree."""
    values = values[:WINDOW]
    if not values:
        return None
    figures = [v for v, _ in values]
    fig = Figure(median(figures), unit, spread(figures), tuple(dict.fromkeys(j for _, j in values)), source)
    if fig.spread > WIDE_SPREAD:
        flags.append(f"{source}: its {len(values)} runs spread {fig.spread:.0%} (jobs {_ids(fig.jobs)})")
    return fig


def _matmul(jobs: list[Job], left_out: list[str], flags: list[str]) -> tuple[MatmulSample, ...]:
    by_shape: dict[tuple[str, int, int, int], list[tuple[float, int]]] = {}
    for job in jobs:
        for p in job.result.points:
            if not _steady(p):
                left_out.append(f"matmul job {job.id}, {p.dtype} {p.m}x{p.k}x{p.n}: its timings spread "
                                f"widely (a median {p.time.median / p.time.best:.3g} times the fastest)")
                continue
            by_shape.setdefault((p.dtype, p.m, p.k, p.n), []).append((p.time.median, job.id))
    out = []
    for (dtype, m, k, n), runs in sorted(by_shape.items()):
        seconds = [s for s, _ in runs]
        jobs = tuple(sorted({j for _, j in runs}))
        sample = MatmulSample(dtype, m, k, n, median(seconds), spread(seconds), jobs)
        if sample.spread > WIDE_SPREAD:
            flags.append(f"matmul {dtype} {m}x{k}x{n}: its {len(runs)} runs spread {sample.spread:.0%}")
        out.append(sample)
    return tuple(out)


def _attention(jobs: list[Job], left_out: list[str], flags: list[str]) -> tuple[AttentionSample, ...]:
    """Per (dtype, shape, mask), the median over runs of each run's forward and forward-with-backward
    medians; a point without its backward, or whose timings spread widely, left out alone."""
    by_shape: dict[tuple, list[tuple[float, float, int]]] = {}
    for job in jobs:
        for p in job.result.points:
            what = f"attention job {job.id}, {p.dtype} b{p.batch} h{p.heads} s{p.seq_len} d{p.head_dim}"
            if p.forward_backward is None:
                left_out.append(f"{what}: no backward was timed (backward: false)")
            elif not (_steady_time(p.forward) and _steady_time(p.forward_backward)):
                left_out.append(f"{what}: its timings spread widely")
            else:
                key = (p.dtype, p.batch, p.heads, p.seq_len, p.head_dim, p.causal)
                by_shape.setdefault(key, []).append((p.forward.median, p.forward_backward.median, job.id))
    out = []
    for (dtype, b, h, s, d, causal), runs in sorted(by_shape.items()):
        sample = AttentionSample(dtype, b, h, s, d, causal, median([f for f, _, _ in runs]),
                                 median([t for _, t, _ in runs]), spread([t for _, t, _ in runs]),
                                 tuple(sorted({j for _, _, j in runs})))
        if sample.spread > WIDE_SPREAD:
            flags.append(f"attention {dtype} b{b} h{h} s{s} d{d}: its {len(runs)} runs spread "
                         f"{sample.spread:.0%}")
        out.append(sample)
    return tuple(out)


def _steady(p: Any) -> bool:
    """A point whose timings did not spread widely (app/measured/doubts.py's bound)."""
    return _steady_time(p.time)


def _steady_time(t: Any) -> bool:
    return t.iterations <= 1 or t.median <= doubts.WIDE_SPREAD * t.best


def _transfer(jobs: list[Job], direction: str, flags: list[str]) -> Figure | None:
    values = []
    for job in jobs:
        points = [p for p in job.result.points if p.direction == direction and _steady(p)]
        pinned = [p for p in points if p.host_memory == "pinned"] or points
        if pinned:
            values.append((max(p.gb_per_sec for p in pinned) * 1e9, job.id))
    return _figure(values, "bytes/s", f"transfer {direction.replace('_', '-')} (fastest size)", flags)


def _eager_launch(job: Job) -> float | None:
    """An eager decode step's seconds over its ops, at the launch-bound point that gives the least: what
    launching one op of a real model costs the host (more than the bare add of seconds_per_launch,
    which pays no module code around it)."""
    per = [p.time.median / p.ops_per_step for p in job.result.decode if p.launch_bound and p.ops_per_step]
    return min(per) if per else None


def _graph_launch(job: Job) -> float | None:
    ops = {(p.batch_size, p.context): p.ops_per_step for p in job.result.decode}
    per = [g.time.median / ops[(g.batch_size, g.context)] for g in job.result.graphed
           if ops.get((g.batch_size, g.context))]
    return min(per) if per else None


def _train_step(jobs: list[Job], samples: tuple[MatmulSample, ...], attention: tuple[AttentionSample, ...],
                left_out: list[str], flags: list[str]) -> tuple[StepOverheads, ...]:
    by_precision: dict[str, list[tuple[Job, TrainStepParams]]] = {}
    for job in jobs:
        p = calibratable(job.params)
        if p is None:
            left_out.append(f"train_step job {job.id}: not a full, uncompiled transformer step "
                            "(step.py's model)")
        else:
            by_precision.setdefault(p.precision, []).append((job, p))
    fits = []
    for precision, runs in sorted(by_precision.items()):
        dtype = step.MATMUL_DTYPE[precision]
        if len(runs) < MIN_STEP_RUNS:
            flags.append(f"train step {precision}: {len(runs)} run(s), a fit needs {MIN_STEP_RUNS}")
            continue
        try:
            surf = surface.fit(list(samples), dtype)
        except InvalidInput:
            flags.append(f"train step {precision}: no {dtype} matmul surface to subtract its GEMMs from")
            continue
        curve = core.fit(attention, surf)
        rows, targets, seen = [], [], []
        for job, p in runs:
            c = step.counts(engine_model(p.model), batch_size=p.batch_size, seq_len=p.seq_len,
                            precision=precision, optimizer=p.optimizer)
            t = job.result.step.median
            known = sum(step.known(c, surf, curve))
            rows.append([c.ops / t, c.activation_bytes / t, c.optimizer_bytes / t])
            targets.append((t - known) / t)
            seen.append(job.id)
        per_op, per_act, per_opt = lsq.nonnegative(rows, targets)
        errors = [(r[0] * per_op + r[1] * per_act + r[2] * per_opt) - y
                  for r, y in zip(rows, targets, strict=True)]
        rms = math.sqrt(sum(e * e for e in errors) / len(errors))
        fit = StepOverheads(precision, per_op, per_act, per_opt, rms, tuple(sorted(seen)))
        if rms > WIDE_SPREAD:
            flags.append(f"train step {precision}: the fit misses its own runs by {rms:.0%} rms")
        fits.append(fit)
    return tuple(fits)


def _sustained(runs: list[tuple[Any, int]], flags: list[str]) -> tuple[Figure | None, Figure | None]:
    """From (result, job id) of matmul and train_step runs held with sustain_s: the sustained rate
    over the burst rate, and the average watts."""
    ratios, watts = [], []
    for result, job_id in runs:
        held = getattr(result, "sustained", None)
        if held is None:
            continue
        if result.probe == "matmul" and held.flop_per_sec and result.best:
            burst = next(iter(result.best.values())).flop_per_sec
            ratios.append((held.flop_per_sec / burst, job_id))
        elif result.probe == "train_step" and held.seconds_per_iteration:
            ratios.append((result.step.median / held.seconds_per_iteration, job_id))
        if held.average_power_watts is not None:
            watts.append((held.average_power_watts, job_id))
    return (_figure(ratios, "ratio", "sustained over burst rate", flags),
            _figure(watts, "W", "sustained average power", flags))


def _held(matmul_jobs: list[Job], steps: list[Job], burn_ins: list[Job]) -> list[tuple[Any, int]]:
    """The runs a sustained figure reads, newest first: a burn-in's matmul and train step (each held
    for its sustain_s, app/probes/burn_in.py) before the probes' own sustained runs."""
    return ([(part, j.id) for j in burn_ins for part in (j.result.matmul, j.result.train_step)]
            + [(j.result, j.id) for j in matmul_jobs + steps])


def build(store: Store, device_model: str, *, version: int, datasheet_peaks: dict[str, float] | None = None,
          exclude: frozenset[int] = frozenset(), field: str = "device_model",
          device: str | None = None) -> Profile:
    """The profile of `device_model` from this store's runs but the `exclude`d jobs (a campaign's
    held-out ones): of every device of the model but the slow ones (outliers.py), or of the one
    `device` given. InvalidInput naming `field` when no usable matmul run was measured on it (a
    profile without one cannot time a GEMM)."""
    runs = Runs(store, device_model, exclude, device)
    flags = runs.flags
    if device is None:
        runs.slow = outliers.slow_devices(Runs(store, device_model, exclude).of("matmul", per_point=True))
        flags += [f"device {d} ran its matmul shapes {below:.0%} slower than its model's other devices: "
                  f"its runs are left out, and its own profile (device={d}) times it"
                  for d, below in runs.slow.items()]
    matmul_jobs = runs.of("matmul", per_point=True)
    samples = _matmul(matmul_jobs, runs.left_out, flags)
    if not samples:
        why = f" ({len(runs.left_out)} left out: {'; '.join(runs.left_out[:3])})" if runs.left_out else ""
        raise InvalidInput(field, f"no usable matmul run was measured on {device_model!r}{why}: run the "
                                  "matmul probe there (tally calibrate), then build the profile")
    attention = _attention(runs.of("attention", per_point=True), runs.left_out, flags)
    bandwidth = [(j.result.gb_per_sec * 1e9, j.id) for j in runs.of("bandwidth")]
    transfers = runs.of("transfer", per_point=True)
    generate = runs.of("generate")
    eager = [(s, j.id) for j in generate if (s := _eager_launch(j)) is not None]
    graph = [(s, j.id) for j in generate if (s := _graph_launch(j)) is not None]
    steps = runs.of("train_step")
    collectives = [CollectiveFit(f.collective, f.ranks, f.latency_s, f.bytes_per_sec, f.rms_relative_error,
                                 (j.id,))
                   for j in runs.of("collectives") for f in j.result.fits if f.bytes_per_sec]
    flags += [f"collectives {c.collective} over {c.ranks} ranks: the fit misses its own sizes by "
              f"{c.rms_relative_error:.0%} rms (jobs {_ids(c.jobs)})" for c in collectives
              if c.rms_relative_error > WIDE_SPREAD]
    disks = runs.of("checkpoint")
    loaders = [(max(m.tokens_per_sec for m in j.result.modes), j.id) for j in runs.of("data_loader")
               if j.result.modes]
    sustained, power = _sustained(_held(matmul_jobs, steps, runs.of("burn_in")), flags)
    peaks = dict(datasheet_peaks or {})
    if runs.catalogue_id in catalogue():
        peaks = {k: v for k, v in catalogue()[runs.catalogue_id].peak_flop_per_sec.items()}
    return Profile(
        device_model=device_model, device_kind=runs.kind or "cpu", catalogue_id=runs.catalogue_id,
        device=device,
        version=version, created_at=datetime.now(UTC).isoformat(timespec="seconds"), matmul=samples,
        datasheet_peak_flop_per_sec=peaks,
        copy_bytes_per_s=_figure(bandwidth, "bytes/s", "bandwidth (device-to-device copy)", flags),
        host_to_device_bytes_per_s=_transfer(transfers, "host_to_device", flags),
        device_to_host_bytes_per_s=_transfer(transfers, "device_to_host", flags),
        launch_eager_s=_figure(eager, "s", "generate: a launch-bound eager decode step over its ops", flags),
        launch_graph_s=_figure(graph, "s", "generate graph-replayed step per op", flags),
        checkpoint_write_bytes_per_s=_figure([(j.result.write_bytes_per_s, j.id) for j in disks], "bytes/s",
                                             "checkpoint write", flags),
        checkpoint_read_bytes_per_s=_figure([(j.result.read_bytes_per_s, j.id) for j in disks], "bytes/s",
                                            "checkpoint read", flags),
        loader_tokens_per_s=_figure(loaders, "tokens/s", "data_loader (fastest copy mode)", flags),
        train_step=_train_step(steps, samples, attention, runs.left_out, flags), attention=attention,
        collectives=tuple(collectives),
        sustained_ratio=sustained, power_watts=power, flags=tuple(flags), left_out=tuple(runs.left_out))


def _ids(jobs: Any) -> str:
    return ", ".join(str(j) for j in jobs)


PROFILE: TypeAdapter[Profile] = TypeAdapter(Profile)


def stored(store: Store, ref: int | str, *, field: str = "calibration") -> Profile:
    """The stored profile `ref` names (its id, or a device model's name for its newest version);
    InvalidInput naming `field` when there is none, or when it fails check()."""
    body = store.profile(ref) if isinstance(ref, int) else store.latest_profile(ref)
    if body is None:
        raise InvalidInput(field, f"no calibration profile {ref!r} here: GET /api/v1/calibration/profiles "
                                  "lists them, POST /api/v1/calibration/profiles builds one from this "
                                  "server's runs, POST /api/v1/calibration/import loads a file")
    profile = PROFILE.validate_python(body)
    try:
        check(profile)
    except InvalidInput as e:
        raise InvalidInput(field, f"{profile.label}: {e.field}: {e.message}") from None
    return profile
