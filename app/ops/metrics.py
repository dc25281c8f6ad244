"""Prometheus metrics: requests by route and status with latency histograms, jobs by
state and queue depth, the energy jobs measured and each device's last burn-in verdict (read
from the database at scrape time; app/ops/fleet_metrics.py), and, where a GPU exists, its NVML
gauges. One registry per app, so tests and apps never share counts."""

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.compute import Compute
from app.jobs.job import STATES
from app.jobs.store import Store
from app.ops.fleet_metrics import BurnInVerdicts, DcgmVerdicts, FleetEnergy

# Calculators answer in well under a millisecond; probes' routes and pages take longer.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self, store: Store, gpu: Callable[[], dict[int, dict[str, float]]],
                 compute: Compute | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("tally_http_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("tally_http_request_duration_seconds", "Time to the end of the response",
                                 ["route", "method"], buckets=BUCKETS_S, registry=self.registry)
        self.registry.register(_Jobs(store))
        self.registry.register(FleetEnergy(store))
        self.registry.register(BurnInVerdicts(store))
        self.registry.register(DcgmVerdicts(store))
        self.registry.register(_Gpu(gpu))
        if compute is not None:
            self.registry.register(_Compute(compute))
        self._children: dict[tuple[str, str, int], tuple] = {}

    def record(self, route: str, method: str, status: int, seconds: float) -> None:
        """labels() builds and locks on every call; the few (route, method, status) children
        are kept instead, which keeps the per-request cost to an increment and an observe."""
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = self._children.setdefault(key, (self.requests.labels(route, method, str(status)),
                                                       self.latency.labels(route, method)))
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Jobs:
    """Jobs by state and the queue's depth, read at scrape time; while the job database does not
    answer, tally_jobs_available is 0 and they are left out, and the HTTP metrics still serve (the
    outage is what monitoring must see)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self):
        try:
            counts = self.store.counts()
        except Exception:  # any database failure: say so, rather than fail the whole scrape
            yield GaugeMetricFamily("tally_jobs_available", "1 when the job database answered this scrape",
                                    value=0)
            return
        yield GaugeMetricFamily("tally_jobs_available", "1 when the job database answered this scrape", value=1)
        by_state = GaugeMetricFamily("tally_jobs", "Jobs by state", labels=["state"])
        for state in STATES:
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state
        yield GaugeMetricFamily("tally_queue_depth", "Jobs queued or running",
                                value=counts.get("queued", 0) + counts.get("running", 0))


class _Compute:
    """The heavy calculations (app/api/compute.py): running or waiting, and stopped at the budget."""

    def __init__(self, compute: Compute) -> None:
        self.compute = compute

    def collect(self):
        yield GaugeMetricFamily("tally_compute_in_flight", "Heavy calculations running or waiting",
                                value=self.compute.in_flight)
        yield GaugeMetricFamily("tally_compute_workers", "Worker processes for heavy calculations",
                                value=0 if self.compute.inline else self.compute.workers)
        yield CounterMetricFamily("tally_compute_over_budget", "Heavy calculations stopped at "
                                  "TALLY_COMPUTE_BUDGET_S", value=self.compute.over_budget)


class _Gpu:
    """NVML gauges, named with their units, one series per GPU (label `gpu`, NVML's index);
    nothing at all on a box without a GPU."""

    def __init__(self, read: Callable[[], dict[int, dict[str, float]]]) -> None:
        self.read = read

    def collect(self):
        families: dict[str, GaugeMetricFamily] = {}
        for index, values in sorted(self.read().items()):
            for name, value in values.items():
                if name not in families:
                    doc = f"GPU {name.replace('_', ' ')} (NVML)"
                    families[name] = GaugeMetricFamily(f"tally_gpu_{name}", doc, labels=["gpu"])
                families[name].add_metric([str(index)], value)
        yield from families.values()


class RequestMetrics:
    """Counts each request under its route template (never the raw path: ids and typos
    would make unbounded label sets), after the response has been sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.record(route, scope["method"], status, time.perf_counter() - start)
