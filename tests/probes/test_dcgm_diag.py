"""The dcgm_diag probe: dcgmi's JSON at each level (tests/support/fixtures/dcgm/, reconstructed from
DCGM's writer: its README) read into per-GPU, per-test results; malformed output refused naming
what is missing; a job on the CPU refused at submission; a box without DCGM failing the job with
what to install; and the verdict folded into the Burn-in page's row of that GPU.

The expected figures below are read off the recordings by eye, not from the parser."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench import dcgm_diag as bench
from app.jobs.dispatcher import Dispatcher
from app.jobs.fleet import Serves
from app.probes.dcgm_diag import parse as dcgm
from tests.support import FIXTURES
from tests.support.api import assert_names_field
from tests.support.html import form_post
from tests.support.results import result_for

RECORDED = FIXTURES / "dcgm"
ROOT = Path(__file__).resolve().parents[2]
H100 = {"device": "GPU-1111", "host": "box-a", "kind": "cuda", "gpu_index": 0,
        "name": "NVIDIA H100 80GB HBM3", "catalogue_id": "h100", "memory_bytes": 85 * 10**9}
H100_B = H100 | {"device": "GPU-3333", "gpu_index": 1}


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def parsed(name: str) -> dcgm.Parsed:
    return dcgm.parse(recorded(name))


def statuses(p: dcgm.Parsed) -> dict[tuple[str, str], str]:
    return {(r.test, r.entity): r.status for r in p.results}


# --- each level's recording ------------------------------------------------------------------------

def test_level_1_runs_the_software_test_on_both_gpus_and_passes():
    p = parsed("level1-pass.json")
    assert (p.layout, p.dcgm_version, p.driver_version, p.verdict) == ("4.x", "4.2.3", "570.124.06", "pass")
    assert statuses(p) == {("software", "GPU 0"): "pass", ("software", "GPU 1"): "pass"}
    assert [(g.gpu_id, g.serial, g.verdict, g.passed) for g in p.gpus] == [
        (0, "1652823054321", "pass", 1), (1, "1652823054877", "pass", 1)]


def test_level_2_skips_memory_where_ecc_is_off_and_reads_pcies_bandwidths():
    p = parsed("level2-skip-memory.json")
    assert p.verdict == "pass" and len({r.test for r in p.results}) == 3
    assert statuses(p)[("memory", "GPU 1")] == "skip" and statuses(p)[("pcie", "GPU 0")] == "pass"
    assert [(g.verdict, g.skipped, g.passed) for g in p.gpus] == [("pass", ["memory"], 2)] * 2
    memory = next(r for r in p.results if (r.test, r.gpu_id) == ("memory", 1))
    assert memory.info[0].startswith("Skipping test Memory because ECC is not enabled on GPU 1")
    pcie = next(r for r in p.results if (r.test, r.gpu_id) == ("pcie", 0))
    figures = {f.name: (f.value, f.unit) for f in pcie.figures}
    assert figures["GPU to Host bandwidth"] == (53.12, "GB/s")
    assert figures["bidirectional bandwidth"] == (94.57, "GB/s")
    assert figures["GPU to Host latency"] == (2.054, "us") and len(figures) == 5


def test_level_3_fails_gpu_1_on_targeted_power_with_dcgms_message():
    p = parsed("level3-fail-targeted-power.json")
    assert p.verdict == "fail"
    assert [r for r in dict.fromkeys(r.test for r in p.results)] == [
        "software", "memory", "diagnostic", "nvbandwidth", "pcie", "memory_bandwidth", "targeted_stress",
        "targeted_power"]
    gpu0, gpu1 = p.gpus
    assert (gpu0.verdict, gpu0.failed, gpu0.passed) == ("pass", [], 8)
    assert (gpu1.verdict, gpu1.failed, gpu1.passed) == ("fail", ["targeted_power"], 7)
    failed = [r for r in p.results if r.status == "fail"]
    assert [(r.test, r.entity, r.category) for r in failed] == [("targeted_power", "GPU 1", "Stress")]
    (warning,) = failed[0].warnings
    assert warning.message == ("Max power of 498.2 did not reach desired power minimum "
                               "target_power_min_ratio of 525.0 for GPU 1 Verify that the clock speeds and "
                               "GPU utilization are high.")
    # DCGM_FR_TARGET_POWER, hardware power, triage
    assert (warning.error_id, warning.category, warning.severity) == (63, 14, 4)
    power = next(r for r in p.results if (r.test, r.gpu_id) == ("targeted_power", 0))
    assert [(f.name, f.value, f.unit) for f in power.figures] == [("max power", 699.1, "W"),
                                                                  ("average power", 687.4, "W")]
    compute = next(r for r in p.results if (r.test, r.gpu_id) == ("diagnostic", 1))
    assert [(f.name, f.value) for f in compute.figures] == [("compute", 48191.7)]


def test_level_4_fails_memtest_on_its_one_gpu_as_an_isolate_error():
    p = parsed("level4-fail-memtest.json")
    (gpu,) = p.gpus
    assert (gpu.gpu_id, gpu.verdict, gpu.failed, gpu.passed) == (0, "fail", ["memtest"], 9)
    assert {"memtest", "pulse_test"} <= {r.test for r in p.results} and len(p.results) == 10
    (warning,) = next(r for r in p.results if r.test == "memtest").warnings
    assert warning.message.startswith("A memory mismatch was detected on GPU 0")
    assert (warning.error_id, warning.severity) == (58, 2)  # DCGM_FR_MEMORY_MISMATCH, DCGM_ERROR_ISOLATE


def test_the_3x_layout_reads_its_text_gpu_ids_serials_and_deployment_tests():
    p = parsed("level3-3x-fail-targeted-power.json")
    assert (p.layout, p.dcgm_version, p.driver_version) == ("3.x", "3.3.9", "535.129.03")
    deployment = [r for r in p.results if r.category == "Deployment"]
    assert len(deployment) == 9 and {r.entity for r in deployment} == {"all GPUs"}
    assert "Persistence Mode" in {r.test for r in deployment}
    gpu0, gpu1 = p.gpus
    assert (gpu0.serial, gpu0.verdict, gpu0.passed) == ("1652823054321", "pass", 15)
    assert (gpu1.verdict, gpu1.failed) == ("fail", ["Targeted Power"])
    (warning,) = next(r for r in p.results if r.status == "fail").warnings
    assert warning.message.startswith("Max power of 498.2") and warning.error_id == 63
    memory = next(r for r in p.results if (r.test, r.gpu_id) == ("GPU Memory", 0))
    assert memory.info == ["Allocated 79456894976 bytes (92.9%)"]
    assert [(f.name, f.value, f.unit) for f in memory.figures] == [("allocated", 79456894976.0, "bytes"),
                                                                   ("allocated share", 92.9, "%")]


def test_a_diagnostic_that_did_not_run_says_dcgms_reason():
    with pytest.raises(dcgm.DiagRuntimeError, match="A diag instance is already running") as e:
        parsed("runtime-error.json")
    assert "DCGM 4.2.3" in str(e.value)


# --- what the recordings do not show: rules over constructed outputs ------------------------------

def gpu(i: int, status: str, **more) -> dict:
    return {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status} | more


def run4(*tests: dict) -> dict:
    return {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": list(tests)}]}}


def test_a_summary_failing_where_no_gpu_did_fails_every_gpu():
    """4.x: an error of the whole run (DCGM_FE_NONE) appears only in the test's summary."""
    whole = {"warning": "Unable to start the plugin", "error_id": 16, "error_category": 16,
             "error_severity": 4}
    p = dcgm.parse(run4({"name": "memory", "results": [gpu(0, "Pass"), gpu(1, "Pass")],
                         "test_summary": {"status": "Fail", "warnings": [whole]}}))
    assert [(g.verdict, g.failed) for g in p.gpus] == [("fail", ["memory"])] * 2
    assert statuses(p)[("memory", "all GPUs")] == "fail"


def test_a_warning_on_a_result_dcgm_passed_warns_and_a_skip_alone_does_not():
    p = dcgm.parse(run4({"name": "pcie", "results": [gpu(0, "Pass", warnings=[{"warning": "slow link"}]),
                                                     gpu(1, "Skip")]}), gpu_ids=[0, 1, 2])
    assert [(g.gpu_id, g.verdict, g.warned, g.skipped) for g in p.gpus] == [
        (0, "warn", ["pcie"], []), (1, "pass", [], ["pcie"]), (2, "pass", [], [])]
    assert p.verdict == "warn"


def test_a_cpu_entitys_failure_fails_the_run_but_no_gpu():
    cpu = {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail",
           "warnings": [{"warning": "CPU EUD failed"}]}
    p = dcgm.parse(run4({"name": "cpu_eud", "results": [cpu]},
                        {"name": "memory", "results": [gpu(0, "Pass")]}))
    assert [(g.gpu_id, g.verdict) for g in p.gpus] == [(0, "pass")]
    assert p.verdict == "fail" and statuses(p)[("cpu_eud", "CPU 0")] == "fail"


def test_dcgm_3_0s_bare_text_warnings_and_gpu_ids_are_read():
    p = dcgm.parse({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory",
         "results": [{"gpu_ids": "0", "status": "Fail", "warnings": "Found 3 faulty memory"}]}]}]}})
    assert p.gpus[0].failed == ["GPU Memory"] and p.results[0].warnings[0].message == "Found 3 faulty memory"
    assert p.results[0].warnings[0].error_id is None


@pytest.mark.parametrize(("output", "named"), [
    ("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.",
     "printed no JSON"),
    ({"iterations": []}, "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"),
    ({"DCGM Diagnostic": {}}, "DCGM Diagnostic: no 'test_categories'"),
    ({"DCGM Diagnostic": {"test_categories": [{"tests": []}]}}, "test_categories[0]: no 'category'"),
    (run4({"results": [gpu(0, "Pass")]}), "tests[0]: no 'name'"),
    (run4({"name": "memory"}), "tests[0] (memory): neither 'results' nor 'test_summary'"),
    (run4({"name": "memory", "results": [gpu(0, "Maybe")]}), "status 'Maybe'"),
    (run4({"name": "memory", "results": [gpu("zero", "Pass")]}),
     "results[0].entity_id: 'zero' is not a GPU id"),
    (run4({"name": "memory", "results": [gpu(0, "Fail", warnings=[{"error_id": 5}])]}), "no 'warning' text"),
])
def test_malformed_output_is_refused_naming_what_is_missing(output, named):
    with pytest.raises(dcgm.DiagOutputError) as e:
        dcgm.parse(output if isinstance(output, str) else json.dumps(output))
    assert named in str(e.value)


# --- submission and the child --------------------------------------------------------------------

def test_a_job_on_the_cpu_is_refused_naming_params_device(make_api):
    api = make_api(embedded_worker=False)
    assert_names_field(api.post("/api/v1/jobs", {"probe": "dcgm_diag", "params": {"device": "cpu"}}),
                       "params.device")
    api.app.state.store.register({"device": "box-c:cpu", "host": "box-c", "kind": "cpu", "name": "a CPU"})
    refused = assert_names_field(api.post("/api/v1/jobs", {"probe": "dcgm_diag", "host": "box-c"}),
                                 "params.device")
    assert "runs NVIDIA DCGM's diagnostic on a GPU" in refused["message"]


def test_the_launch_form_offers_the_levels_and_sends_the_one_chosen(make_api):
    api = make_api(embedded_worker=False)
    page = api.get("/benchmarks").text
    fieldset = page.split('data-probe="dcgm_diag"')[1].split("</fieldset>")[0]
    assert '<option value="3"' in fieldset and "3: long (+ diagnostic" in fieldset
    # Level 5 is none of DCGM's: the refusal names the level, so the select's text reached the parameter.
    refused = form_post(api, "/ui/benchmarks/launch", {"probe": "dcgm_diag", "device": "cpu",
                                                       "dcgm_diag_level": "5", "token": ""})
    assert "level" in refused.text and "must be &lt;= 4" in refused.text
    refused = form_post(api, "/ui/benchmarks/launch", {"probe": "dcgm_diag", "device": "cpu",
                                                       "dcgm_diag_level": "3", "token": ""})
    assert "runs NVIDIA DCGM&#39;s diagnostic on a GPU" in refused.text


def test_a_level_3_job_under_its_plugins_least_time_is_refused_naming_timeout_s(make_api):
    api = make_api(embedded_worker=False)
    api.app.state.store.register(H100)
    refused = api.post("/api/v1/jobs", {"probe": "dcgm_diag", "params": {"level": 3}, "gpu_uuid": "GPU-1111",
                                        "timeout_s": 300})
    body = assert_names_field(refused, "timeout_s")
    assert "at least 330 s" in body["message"] and "params.level" in body["message"]


def fake_dcgmi(folder: Path, recording: str | None, exit_code: int, text: str = "") -> Path:
    """A `dcgmi` that writes its arguments beside it and prints a recording (or `text`)."""
    folder.mkdir(exist_ok=True)
    said = recorded(recording) if recording else text
    script = folder / "dcgmi"
    script.write_text(f"#!{sys.executable}\nimport pathlib, sys\n"
                      f"pathlib.Path({str(folder / 'argv')!r}).write_text(' '.join(sys.argv[1:]))\n"
                      f"sys.stdout.write({said!r})\nsys.exit({exit_code})\n")
    script.chmod(0o755)
    return folder


def run_child(params: dict, env: dict[str, str]) -> list[dict]:
    """The real child (python -m app.bench.child) on one dcgm_diag job, its stdin open while it works."""
    proc = subprocess.Popen([sys.executable, "-m", "app.bench.child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"} | env)
    proc.stdin.write(json.dumps({"job_id": 1, "probe": "dcgm_diag", "params": params}) + "\n")
    proc.stdin.flush()
    out = proc.stdout.read()
    proc.stdin.close()
    proc.wait(timeout=60)
    return [json.loads(line) for line in out.splitlines()]


def test_without_dcgmi_the_child_fails_naming_what_to_install(tmp_path):
    *_, last = run_child({"level": 2}, {"PATH": str(tmp_path)})  # no dcgmi there, whatever this box has
    assert last["type"] == "error" and last["error"]["type"] == "DcgmUnavailable"
    message = last["error"]["message"]
    assert "dcgmi is not on this worker's PATH" in message and "datacenter-gpu-manager" in message
    assert "nv-hostengine" in message


def test_a_host_engine_that_does_not_answer_fails_the_job_saying_so(tmp_path):
    said = "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    bin_dir = fake_dcgmi(tmp_path / "bin", None, 255 - 2, said)
    *_, last = run_child({}, {"PATH": str(bin_dir)})
    assert last["error"]["type"] == "DcgmUnavailable"
    assert "could not reach DCGM's host engine" in last["error"]["message"]


def test_the_child_passes_its_gpus_to_dcgmi_and_reads_a_failing_runs_json(tmp_path):
    """dcgmi exits 226 (DCGM_ST_NVVS_ERROR) when a test fails: the job still reports the results."""
    bin_dir = fake_dcgmi(tmp_path / "bin", "level3-fail-targeted-power.json", 226)
    messages = run_child({"level": 3}, {"PATH": str(bin_dir), "CUDA_VISIBLE_DEVICES": "0,1"})
    assert (bin_dir / "argv").read_text() == "diag -r 3 -j -i 0,1"
    assert messages[0]["type"] == "progress" and "level 3 (long)" in messages[0]["message"]
    result = messages[-1]["result"]
    assert result["exit_code"] == 226 and result["verdict"] == "fail"
    assert result["command"] == "dcgmi diag -r 3 -j -i 0,1"
    assert [(g["gpu_id"], g["verdict"], g["failed"]) for g in result["gpus"]] == [
        (0, "pass", []), (1, "fail", ["targeted_power"])]


def test_the_child_side_loads_no_torch():
    """No CUDA context of the child's own for DCGM's checks to count beside its tests."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, app.bench.child, app.bench.dcgm_diag, "
                             "app.probes.registry; print('torch' in sys.modules)"],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


def test_dcgmi_past_its_time_limit_is_stopped():
    with pytest.raises(TimeoutError, match="ran past 0.2 s"):
        bench._run(["sleep", "30"], 0.2)


# --- the job page and the Burn-in page -------------------------------------------------------------

def test_a_gpus_last_diagnostic_shows_on_its_job_page_and_in_its_burn_in_row(make_api, tmp_path):
    """A real job: the API queues it for GPU-1111, a dispatcher serving that GPU runs the child with a
    dcgmi that prints the level-4 recording; the burn-in campaign's row of GPU-1111 then shows it."""
    api = make_api(embedded_worker=False)
    store = api.app.state.store
    for row in (H100, H100_B):
        store.register(row)
    campaign = api.post("/api/v1/campaigns", {"probe": "burn_in"})
    assert campaign.status_code == 202, campaign.text
    for job in campaign.json()["jobs"]:  # each GPU's burn-in, finished by hand
        claimed = store.claim(worker_id="tests", host="box-a", serves=Serves(job["device"], ()))
        assert store.finish(claimed.id, status="succeeded", result=result_for("burn_in"))

    queued = api.post("/api/v1/jobs", {"probe": "dcgm_diag", "params": {"level": 4}, "gpu_uuid": "GPU-1111",
                                       "timeout_s": 3600})
    assert queued.status_code == 202, queued.text
    bin_dir = fake_dcgmi(tmp_path / "bin", "level4-fail-memtest.json", 205)  # DCGM_ST_NVVS_ISOLATE_ERROR
    dispatcher = Dispatcher(store, "box-a:0", host="box-a", gpu=0, fleet_device=H100,
                            child_env={"PATH": str(bin_dir)})
    assert dispatcher.run_once()
    job = api.get(f"/api/v1/jobs/{queued.json()['id']}").json()
    assert job["status"] == "succeeded", job["error"]
    assert job["ran_on_device"] == "GPU-1111" and job["result"]["verdict"] == "fail"

    page = api.get(f"/benchmarks/jobs/{job['id']}").text
    assert "memtest" in page and "A memory mismatch was detected on GPU 0" in page and "GPUs failed" in page

    out = api.get(f"/api/v1/campaigns/{campaign.json()['id']}").json()
    rows = {row["device"]: row["dcgm_diag"] for row in out["compared"]}
    assert rows["GPU-3333"] is None
    assert {k: rows["GPU-1111"][k] for k in ("job_id", "level", "verdict", "failed")} == {
        "job_id": job["id"], "level": 4, "verdict": "fail", "failed": ["memtest"]}
    burn_in = api.get(f"/burn-in?campaign={out['id']}&device=GPU-1111").text
    row = burn_in.split('data-device="GPU-1111"')[1].split("</tr>")[0]
    cell = row.split('data-testid="dcgm-diag">')[1]
    assert f'href="/benchmarks/jobs/{job["id"]}" class="diag fail">fail</a>' in cell
    assert "level 4" in cell and "failed memtest" in cell
    other = burn_in.split('data-device="GPU-3333"')[1].split("</tr>")[0]
    assert "none run" in other
    history = burn_in.split('data-testid="device-dcgm-diag">')[1].split("</p>")[0]
    assert "failed memtest" in history
    # /metrics says the same, as dcgm-exporter users alert on: GPU-1111's level-4 run failed.
    from prometheus_client.parser import text_string_to_metric_families
    scraped = {f.name: f for f in text_string_to_metric_families(api.get("/metrics").text)}
    verdicts = {(s.labels["device"], s.labels["level"], s.labels["verdict"]): s.value
                for s in scraped["tally_dcgm_diag_verdict"].samples}
    assert verdicts == {("GPU-1111", "4", "pass"): 0, ("GPU-1111", "4", "warn"): 0,
                        ("GPU-1111", "4", "fail"): 1}
