"""`tally slurm` against a real Slurm (tests/support/slurm.py: Debian's slurmctld and a slurmd for
each of two node names on this machine) and a real Tally server: the batch script runs the gloo
collectives probe across both nodes with srun and torchrun's c10d rendezvous, no MPI, and posts
its result with the server's token; a burn-in across the partition is one command and lands as
one campaign on the Burn-in page; without a server the results wait in files that `tally import`
loads. What Slurm printed is shown when a job does not complete."""

import json

import httpx
import pytest

from tests.support import slurm
from tests.support.cli import TALLY, tally
from tests.support.live import serve

pytestmark = pytest.mark.slurm

PARAMS = {
    "sizes_bytes": [4096, 65536],
    "collectives": ["all_reduce"],
    "iterations": 3,
    "warmup_iterations": 1,
}
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def cluster():
    with slurm.cluster() as started:
        yield started


@pytest.fixture
def server(tmp_path):
    env = {
        "TALLY_DATABASE_PATH": str(tmp_path / "t.db"),
        "TALLY_API_TOKEN": TOKEN,
        "TALLY_EMBEDDED_WORKER": "false",
    }
    with serve([*TALLY, "serve"], env, tmp_path / "server.log") as live:
        yield live


def submitted(cluster, tmp_path, *argv: str, server: str | None = None):
    """`tally slurm ... --submit --wait`, its output, and Slurm's output for the job on failure."""
    results = tmp_path / "results"
    done = tally(
        "slurm",
        *argv,
        "--partition",
        cluster.partition,
        "--results",
        str(results),
        "--script",
        str(tmp_path / "job.sbatch"),
        "--submit",
        "--wait",
        "240",
        *(["--server", server] if server else []),
        env=cluster.env | {"TALLY_API_TOKEN": TOKEN},
        timeout=300,
    )
    said = "\n".join(p.read_text()[-4000:] for p in results.glob("slurm-*.out"))
    assert done.returncode == 0, done.stdout + done.stderr + said + cluster.logs()
    return done, results


def test_a_probe_across_two_slurm_nodes_is_posted_to_the_server_as_one_job(cluster, server, tmp_path):
    done, _ = submitted(
        cluster, tmp_path, "collectives", "--params", json.dumps(PARAMS), "--nodes", "2", server=server.url
    )
    assert "COMPLETED" in done.stdout
    script = (tmp_path / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "srun " in script and "mpi" not in script.lower()
    (listed,) = httpx.get(f"{server.url}/api/v1/jobs").json()["data"]
    job = httpx.get(f"{server.url}/api/v1/jobs/{listed['id']}").json()
    assert (job["probe"], job["status"], job["nodes"]) == ("collectives", "succeeded", 2)
    assert sorted((b["box"], b["status"]) for b in job["boxes"]) == [
        ("tally-n1", "done"),
        ("tally-n2", "done"),
    ]
    assert job["attempts_log"][0]["worker_id"].startswith("slurm:")
    spanning = job["result"]["spanning"]
    assert sorted(spanning["boxes"]) == list(slurm.NODES) and job["result"]["ranks"] == 4
    assert job["result"]["check_passed"] is True and len(spanning["per_link"]) == 1
    page = httpx.get(f"{server.url}/benchmarks/jobs/{listed['id']}").text
    assert "Across 2 boxes" in page and "tally-n1" in page and "hierarchical" in page
    (across,) = httpx.get(f"{server.url}/api/v1/fleet").json()["across_boxes"]  # and on the Fleet page
    assert across["job_id"] == listed["id"] and across["ran_by"].startswith("slurm:")
    assert f'data-job="{listed["id"]}"' in httpx.get(f"{server.url}/fleet").text


def test_a_burn_in_across_a_slurm_partition_is_one_command_and_one_campaign(cluster, server, tmp_path):
    submitted(
        cluster,
        tmp_path,
        "burn-in",
        "--params",
        json.dumps({"sustain_s": 0.2}),
        "--nodes",
        "2",
        server=server.url,
    )
    (campaign,) = httpx.get(f"{server.url}/api/v1/campaigns").json()
    assert campaign["probe"] == "burn_in" and campaign["done"]
    assert sorted(j["device"] for j in campaign["jobs"]) == ["tally-n1:cpu", "tally-n2:cpu"]
    assert {j["status"] for j in campaign["jobs"]} == {"succeeded"}
    assert sorted(row["device"] for row in campaign["compared"]) == ["tally-n1:cpu", "tally-n2:cpu"]
    page = httpx.get(f"{server.url}/burn-in").text
    assert 'data-device="tally-n1:cpu"' in page and 'data-device="tally-n2:cpu"' in page
    # The nodes are in the fleet as seen when the burn-in ended: no dispatcher of this server serves them.
    fleet = {d["device"]: d for d in httpx.get(f"{server.url}/api/v1/fleet").json()["devices"]}
    assert {"tally-n1:cpu", "tally-n2:cpu"} <= set(fleet)


def test_without_a_server_the_result_waits_in_a_file_that_tally_import_loads(cluster, server, tmp_path):
    done, results = submitted(
        cluster, tmp_path, "collectives", "--params", json.dumps(PARAMS), "--nodes", "2"
    )
    (written,) = results.glob("*/result.json")
    refused = tally("import", str(written), "--server", server.url, "--token", "wrong")
    assert refused.returncode == 2 and "401" in refused.stderr
    loaded = tally("import", str(written.parent), "--server", server.url, "--token", TOKEN)
    assert loaded.returncode == 0, loaded.stderr
    (listed,) = httpx.get(f"{server.url}/api/v1/jobs").json()["data"]
    assert f"job {listed['id']}: collectives" in loaded.stdout and listed["nodes"] == 2
