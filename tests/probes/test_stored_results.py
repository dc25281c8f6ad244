"""Results written by every earlier version still read, render and export.

tests/support/fixtures/results/ holds, per version, what each probe returned when that version
ran it (small CPU runs, the host's name replaced): v1 is the first release, whose
train_step memory had no per-phase peaks; v2 added them; v4 added the generate probe; v5 the
collectives and data_parallel_step probes; v6 sustained runs and the burn_in probe; v7 energy
per measurement (null on a CPU, with the environment's energy_note) and the data_loader and
checkpoint probes; v8 the attention probe (the others as v8 writes v7's); v9 the serve probe (the
others as v8 wrote them); v10 the dcgm_diag probe (the others as v9 wrote them; dcgm_diag's as the
child wrote it from tests/support/fixtures/dcgm/level3-fail-targeted-power.json, printed by a stand-in
dcgmi, on a box without NVML). A row is written as that
version's server wrote it, straight into the jobs table, and read back through the API, the job
pages, the CSV export and the calibration.
"""

import io
import json
import re
import sqlite3
import time

import pytest

from app.config import Settings
from app.main import create_app
from tests.support import FIXTURES
from tests.support.api import Api

STORED = sorted((FIXTURES / "results").glob("*.json"))
CASES = [(path.stem, name) for path in STORED for name in json.loads(path.read_text())]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """An app over a database holding one succeeded job per fixture result; {case: job id}."""
    database = tmp_path_factory.mktemp("stored") / "tally.db"
    api = Api(create_app(Settings(database_path=database)))
    ids = {}
    with sqlite3.connect(database) as db:
        for path in STORED:
            for name, result in json.loads(path.read_text()).items():
                now = time.time()
                cursor = db.execute(
                    "INSERT INTO jobs (probe, params, status, attempts, timeout_s, created_at, started_at, "
                    "finished_at, result, device) VALUES (?, '{}', 'succeeded', 1, 60, ?, ?, ?, ?, 'cpu')",
                    (result["probe"], now, now, now, json.dumps(result)))
                ids[(path.stem, name)] = cursor.lastrowid
    yield api, ids
    api.close()


def test_the_newest_version_has_a_fixture_of_every_probe_and_no_probe_was_dropped():
    """Each version's fixture holds every probe it had; a probe, once shipped, stays readable
    (v4 added generate)."""
    from app.probes.registry import PROBES

    newest = max(STORED, key=lambda path: int(path.stem.split("-")[0][1:]))
    assert {r["probe"] for r in json.loads(newest.read_text()).values()} == set(PROBES), newest.name
    for path in STORED:
        assert {r["probe"] for r in json.loads(path.read_text()).values()} <= set(PROBES), path.name


@pytest.mark.parametrize(("version", "name"), CASES)
def test_an_earlier_versions_result_reads_renders_and_exports(stored, version, name):
    api, ids = stored
    job_id = ids[(version, name)]
    job = api.get(f"/api/v1/jobs/{job_id}")
    assert job.status_code == 200, job.text
    assert job.json()["result"]["probe"] == name.removesuffix("_cruncher")
    for page in (f"/benchmarks/jobs/{job_id}", f"/ui/benchmarks/jobs/{job_id}"):
        response = api.get(page)
        assert response.status_code == 200, (page, response.text[-2000:])
    csv = api.get(f"/api/v1/jobs/{job_id}/result?format=csv")
    assert csv.status_code == 200 and csv.text.startswith("job_id,probe,device,device_name")
    assert api.get(f"/benchmarks/compare?a={job_id}&b={ids[CASES[0]]}").status_code == 200


def test_the_calibration_reads_every_versions_results(stored):
    api, _ = stored
    assert api.get("/api/v1/calibration").status_code == 200
    assert api.get("/").status_code == 200


EXPONENT = re.compile(r"\d(\.\d+)?e[+-]\d", re.I)


@pytest.mark.parametrize(("version", "name"), CASES)
def test_every_results_table_reads_without_exponents(version, name):
    """`tally probe`'s table of every stored result (each probe's table face, app/numbers.py's
    figures) prints no "1.2e+04" a person would have to decode."""
    from rich.console import Console

    from app.cli.probe import printed
    from app.probes.registry import RESULTS

    path = next(p for p in STORED if p.stem == version)
    result = RESULTS.validate_python(json.loads(path.read_text())[name])
    console = Console(width=400, record=True, file=io.StringIO())
    for part in printed(result):
        console.print(part)
    out = console.export_text()
    assert out.strip() and not EXPONENT.search(out), EXPONENT.search(out)
