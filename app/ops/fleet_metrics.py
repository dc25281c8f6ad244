"""The fleet's Prometheus metrics, read from the job database at scrape time as tally_jobs is: the
energy Tally's jobs measured, per device and for the newest jobs, and each device's last burn-in
verdict. While the database does not answer they are left out (tally_jobs_available says so), and
the rest of the scrape still serves.

Names follow Prometheus' conventions (base units, _total on a counter) and sit beside what
dcgm-exporter gives the same GPUs: its DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is the board's energy
since boot, a counter in millijoules (etc/default-counters.csv), labelled by gpu, UUID and
modelName; here `device` holds the same UUID and `gpu_model` the same NVML name, in joules. Its view
per job is a label, hpc_job, put on a GPU's series while a mapping file names the job on that GPU
(internal/pkg/transformation/hpc.go), so its jobs come and go with the files. A finished job's
energy here is a gauge of its own, kept for the newest RECENT_JOBS only: Prometheus advises
against labels of unbounded values (a job id, one more series for good with every job).

Cheap. A scrape reads counts and ids; a job's result is parsed once (a terminal job never changes,
and no id names two jobs: app/jobs/monitoring.py), at most LOAD_PER_SCRAPE of them a scrape; the
burn-in verdicts are worked out again only when a device's newest burn-in, or its campaign's
succeeded jobs, changed.
"""

import logging
import threading
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from app.jobs.fleet import Device
from app.jobs.job import Job
from app.jobs.store import Store
from app.measured import burn_in, dcgm_diag, energy

log = logging.getLogger("tally.metrics")

RECENT_JOBS = 100
"""Jobs in tally_job_energy_joules: the newest finished that measured energy."""
LOAD_PER_SCRAPE = 5000
"""Results parsed by one scrape at most (about 0.05 ms each, a burn-in's), so the first scrape of a
long history stays short; the ones left wait for the next scrapes, newest first."""

DEVICE_LABELS = ["device", "host", "gpu_model"]
ENERGY_HELP = ("Joules NVML measured on the device's GPU in the energy windows of the jobs that "
               "succeeded on it: each window its average watts x its seconds (iterations x joules per "
               "iteration), the probes' measured work only, not whole jobs nor idle time")
JOB_HELP = (f"Joules one of the newest {RECENT_JOBS} succeeded jobs measured, as "
            "tally_device_energy_joules_total counts them (on rank 0's GPU for a job on several)")
VERDICT_HELP = ("1 for the verdict of the device's newest burn-in that ended (a cancelled one says "
                "nothing), 0 for the others: passed; slow, more than its campaign's outlier fraction "
                "below its model's median; failed, the job ended without a result")
WHEN_HELP = "Unix seconds the burn-in that gave tally_burn_in_verdict ended"


def _labels(device: str, devices: dict[str, Device]) -> list[str]:
    found = devices.get(device)
    return [device, found.host if found else "", found.name if found else ""]


@dataclass(frozen=True)
class _Measured:
    probe: str
    device: str
    finished_at: float
    joules: float | None


class FleetEnergy:
    """tally_device_energy_joules_total and tally_job_energy_joules. The counter is yielded with no
    sample until every succeeded job has been read (a long history, LOAD_PER_SCRAPE at a time), so
    that its first value is the whole sum: a counter that climbed as old jobs were read would show
    energy drawn now that was drawn long ago."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()  # scrapes run in the thread pool, and may overlap
        self._mark: tuple[int, int] | None = None
        self._read: dict[int, _Measured] = {}
        self._complete = False

    def collect(self):
        try:
            with self._lock:
                devices = {d.device: d for d in self.store.devices()}
                self._catch_up(devices)
                per_device, per_job = self._families(devices)
        except Exception:  # any database failure: tally_jobs_available says so; the rest still serves
            return
        yield per_device
        yield per_job

    def _catch_up(self, devices: dict[str, Device]) -> None:
        mark = self.store.measured_mark()
        if mark == self._mark and self._complete:
            return
        ids = self.store.measured_ids()  # newest first
        present = set(ids)
        for gone in self._read.keys() - present:  # a database replaced under the server
            del self._read[gone]
        new = [i for i in ids if i not in self._read][:LOAD_PER_SCRAPE]
        for job in self._load(new):
            self._read[job.id] = _Measured(job.probe, energy.measured_on(job, devices.values()) or "",
                                           job.finished_at or job.created_at, energy.joules(job.result))
        for lost in set(new) - self._read.keys():  # unreadable (a probe this server no longer has)
            self._read[lost] = _Measured("", "", 0.0, None)
        self._complete = len(self._read) == len(present)
        self._mark = mark

    def _load(self, ids: list[int]) -> list[Job]:
        """The jobs of `ids`; one by one where a batch holds a result this server cannot read."""
        try:
            return self.store.jobs_by_id(ids)
        except ValueError:  # pydantic's ValidationError: a result of a probe not registered here
            found = []
            for job_id in ids:
                try:
                    found += self.store.jobs_by_id([job_id])
                except ValueError:
                    log.warning("job %s: its result cannot be read; its energy is left out", job_id)
            return found

    def _families(self, devices: dict[str, Device]) -> tuple[CounterMetricFamily, GaugeMetricFamily]:
        per_device = CounterMetricFamily("tally_device_energy_joules", ENERGY_HELP, labels=DEVICE_LABELS)
        if self._complete:
            sums: dict[str, float] = {}
            for m in self._read.values():
                if m.joules is not None:
                    sums[m.device] = sums.get(m.device, 0.0) + m.joules
            for device, total in sorted(sums.items()):
                per_device.add_metric(_labels(device, devices), total)
        per_job = GaugeMetricFamily("tally_job_energy_joules", JOB_HELP, labels=["job_id", "probe", "device"])
        measured = [(m.finished_at, job_id, m) for job_id, m in self._read.items() if m.joules is not None]
        for _, job_id, m in sorted(measured, key=lambda x: (x[0], x[1]), reverse=True)[:RECENT_JOBS]:
            per_job.add_metric([str(job_id), m.probe, m.device], m.joules)
        return per_device, per_job


class BurnInVerdicts:
    """tally_burn_in_verdict, one series per device and verdict, as kube-state-metrics gives a
    pod's phase (kube_pod_status_phase): the device's verdict 1, the others 0, so an alert is
    `tally_burn_in_verdict{verdict!="passed"} == 1` and a count is a sum by verdict. The rule is
    app/measured/burn_in.py's verdict, the one the Burn-in page's campaigns are compared by."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._verdicts: list[burn_in.DeviceVerdict] = []

    def collect(self):
        try:
            with self._lock:
                last = self.store.last_ended(probe="burn_in")  # no results: cheap
                campaigns = {j.campaign_id for j in last if j.campaign_id is not None}
                key = (tuple((j.id, j.status) for j in last),
                       tuple(sorted(self.store.succeeded_in(campaigns).items())))
                if key != self._key:
                    self._verdicts, self._key = burn_in.last_verdicts(self.store, last), key
                devices = {d.device: d for d in self.store.devices()}
                verdicts = self._verdicts
        except Exception:  # any database failure: tally_jobs_available says so; the rest still serves
            return
        by_verdict = GaugeMetricFamily("tally_burn_in_verdict", VERDICT_HELP,
                                       labels=[*DEVICE_LABELS, "verdict"])
        when = GaugeMetricFamily("tally_burn_in_last_timestamp_seconds", WHEN_HELP, labels=DEVICE_LABELS)
        for v in sorted(verdicts, key=lambda v: v.device):
            labels = _labels(v.device, devices)
            for name in burn_in.VERDICTS:
                by_verdict.add_metric([*labels, name], 1 if v.verdict == name else 0)
            if v.finished_at is not None:
                when.add_metric(labels, v.finished_at)
        yield by_verdict
        yield when


DCGM_HELP = ("1 for the verdict of the GPU's newest DCGM diagnostic (the dcgm_diag probe's `dcgmi diag -r "
             "LEVEL`: pass, warn or fail, as the Burn-in page shows it beside Tally's own burn-in), 0 for "
             "the others; no series for a GPU never diagnosed")


class DcgmVerdicts:
    """tally_dcgm_diag_verdict, one series per GPU, its diagnostic's level and each verdict, as
    tally_burn_in_verdict: the rule is app/measured/dcgm_diag.py's `last`, the Burn-in page's."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self):
        try:
            devices = {d.device: d for d in self.store.devices() if d.kind == "cuda"}
            found = {device: dcgm_diag.last(self.store, device) for device in devices}
        except Exception:  # any database failure: tally_jobs_available says so; the rest still serves
            return
        family = GaugeMetricFamily("tally_dcgm_diag_verdict", DCGM_HELP,
                                   labels=[*DEVICE_LABELS, "level", "verdict"])
        for device, diag in sorted(found.items()):
            if diag is None:
                continue
            labels = [*_labels(device, devices), str(diag.level)]
            for name in ("pass", "warn", "fail"):
                family.add_metric([*labels, name], 1 if diag.verdict == name else 0)
        yield family
