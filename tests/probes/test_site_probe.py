"""A probe defined in this file, and nowhere in app/, templates/ or static/: a real server told of
it (TALLY_PROBE_MODULES=tests.probes.test_site_probe) runs it in a real child through its dispatcher,
and gives it a launch form, a job page, a compare view and a CSV export; `tally probe` prints its
table. The module declares its parameters, its result, its child's entry point, its memory need
and least duration, and one face (its headline figure); every other face is the default.

The probe, "tossed": an elementwise add of n float32 elements per size, timed by the probes'
own timer (app/bench/timer.py); it reads two buffers and writes one, 12 bytes an element."""

import csv
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import httpx
from pydantic import Field

from app.accounting.records import RECORD
from app.inputs.fields import count
from app.probes.base import Probe, timer_least
from app.probes.faces import Faces, Metric
from app.probes.params import ProbeParams
from app.probes.results import Environment, Stats
from tests.support.live import serve
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
NAME = "tossed"
BYTES_PER_ELEMENT = 3 * 4  # a and b read, a written, float32


class TossedParams(ProbeParams):
    sizes: Annotated[list[count(1, 2**24)], Field(min_length=1, max_length=8)] = Field(  # type: ignore[valid-type]
        default_factory=lambda: [1024, 65_536], description="Elements added, per measurement.")
    label: str = Field("plain", max_length=20, description="A name for the run.")


@dataclass(slots=True)
class TossedPoint:
    elements: int
    time: Stats
    gb_per_sec: float

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TossedResult:
    probe: Literal["tossed"]
    environment: Environment
    label: str
    points: list[TossedPoint]

    __pydantic_config__ = RECORD


def run(raw: dict, progress: Any) -> dict:
    """The child's entry point: torch is imported here, in the child, as app/bench/'s probes do."""
    import torch

    from app.bench.common import setup, to_json

    params, env = setup(TossedParams, raw)
    points = []
    for i, n in enumerate(params.sizes):
        progress(i, len(params.sizes), f"{n} elements")
        a, b = torch.ones(n, device=env.device), torch.ones(n, device=env.device)
        stats = env.timer.measure(lambda a=a, b=b: a.add_(b), energy=False)
        points.append(TossedPoint(n, stats, BYTES_PER_ELEMENT * n / stats.median / 1e9))
    return to_json(TossedResult(NAME, env.environment(params.seed), params.label, points))


def headline(r: TossedResult) -> list[Metric]:
    largest = max(r.points, key=lambda p: p.elements)
    return [Metric("add", "add, largest size (median)", largest.gb_per_sec, "gb_per_sec",
                   f"{largest.elements:,} elements")]


PROBE = Probe(NAME, "an elementwise add per size (a throw-away probe of the tests)", TossedParams,
              TossedResult,
              f"{__name__}:run", need=lambda p, kind: (BYTES_PER_ELEMENT * max(p.sizes), "params.sizes"),
              least_seconds=lambda p, kind: timer_least(p, len(p.sizes)), faces=Faces(headline=headline))

def test_nothing_but_this_file_names_the_probe():
    for folder in ("app", "templates", "static"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".html", ".js", ".css", ".toml"):
                assert NAME not in path.read_text(), path


def test_a_probe_defined_here_gets_a_form_a_page_a_comparison_a_csv_and_a_table(tmp_path):
    env = {"TALLY_PROBE_MODULES": __name__, "TALLY_DATABASE_PATH": str(tmp_path / "tally.db"),
           "PYTHONPATH": str(ROOT)}
    with serve([sys.executable, "-m", "app"], env, tmp_path / "server.log") as live:
        page = httpx.get(f"{live.url}/benchmarks").text
        # The launch form lists it, with a fieldset its parameters give (no timing fields).
        assert f'<option value="{NAME}">' in page and f'data-probe="{NAME}"' in page
        assert 'name="tossed_sizes"' in page and 'name="tossed_label"' in page
        assert "tossed_warmup_s" not in page

        ids = []
        for sizes, label in (("1024, 4096", "first"), ("1024, 16384", "second")):
            form = {"probe": NAME, "device": "cpu", "tossed_sizes": sizes, "tossed_label": label}
            launched = httpx.post(f"{live.url}/ui/benchmarks/launch", content=urlencode(form),
                                  headers={"content-type": "application/x-www-form-urlencoded"})
            assert launched.status_code == 200 and "Job #" in launched.text, launched.text
            ids.append(int(re.search(r'id="job-(\d+)"', launched.text).group(1)))
        jobs = {}

        def ended() -> bool:
            jobs.update({i: httpx.get(f"{live.url}/api/v1/jobs/{i}").json() for i in ids})
            return all(job["status"] not in ("queued", "running") for job in jobs.values())

        wait_for(ended, timeout=120, what="both tossed jobs to end", every=0.2, context=live.log)
        assert [jobs[i]["status"] for i in ids] == ["succeeded", "succeeded"], jobs
        first, second = (jobs[i]["result"] for i in ids)
        assert first["label"] == "first"  # the form's text reached the child
        assert [p["elements"] for p in second["points"]] == [1024, 16384]

        # The job page: its headline figure, and its tables (the default face: the headline).
        shown = httpx.get(f"{live.url}/benchmarks/jobs/{ids[1]}").text
        assert 'data-testid="metric-add"' in shown and "16,384 elements" in shown
        assert 'data-testid="probe-tables"' in shown and "add, largest size (median)" in shown

        # The compare view: the same figure of both runs, B over A.
        compared = httpx.get(f"{live.url}/benchmarks/compare", params={"a": ids[0], "b": ids[1]}).text
        assert 'data-testid="compare-table"' in compared and "add, largest size (median)" in compared
        assert "nothing to set side by side" not in compared

        # The CSV: a row per point (the default), the job and device before each.
        rows = list(csv.DictReader(io.StringIO(httpx.get(f"{live.url}/api/v1/jobs/{ids[1]}/result",
                                                         params={"format": "csv"}).text)))
        assert [int(r["elements"]) for r in rows] == [1024, 16384]
        assert {r["probe"] for r in rows} == {NAME} and all(float(r["time.median"]) > 0 for r in rows)
        for row, point in zip(rows, second["points"], strict=True):
            assert float(row["gb_per_sec"]) == point["gb_per_sec"]

    # `tally probe` knows it too, with its parameters as options, and prints its table.
    done = subprocess.run([sys.executable, "-m", "app.cli", "probe", NAME, "--sizes", "2048",
                           "--device", "cpu",
                           "--warmup-s", "0.01", "--measure-s", "0.02"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    assert f"{NAME} on " in done.stdout and "add, largest size (median)" in done.stdout
    assert "2,048 elements" in done.stdout and "GB/s" in done.stdout
