"""dcgm_diag: `dcgmi diag -r LEVEL -j -i GPUS` on the GPUs this child was given, its JSON read by
app/probes/dcgm_diag/parse.py. No torch: DCGM's host engine runs the tests (in its nvvs process),
so this child holds no CUDA context that DCGM's checks would count as another process.

The GPUs: the dispatcher names them in CUDA_VISIBLE_DEVICES as NVML's indices (in PCI bus order),
and DCGM numbers GPUs as NVML does (dcgmlib/src/DcgmCacheManager.cpp: detectedGpus[i].gpuId = i),
so the same list goes to `dcgmi diag -i` (DCGM 3's --gpuList, DCGM 4's --entity-id: both take GPU
ids, comma-separated; dcgmi/CommandLineParser.cpp). dcgmi exits non-zero when a test fails (Diag::
GetFailureResult): its JSON is read all the same; only output that is no diagnostic fails the job.
"""

import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata

from pydantic import TypeAdapter

from app import device
from app.probes.dcgm_diag.params import LEVELS, DcgmDiagParams, dcgmi_timeout
from app.probes.dcgm_diag.parse import DiagOutputError, parse
from app.probes.dcgm_diag.result import DcgmDiagResult
from app.probes.results import Environment

INSTALL = ("install NVIDIA DCGM (the datacenter-gpu-manager-4-cuda<N> package from NVIDIA's CUDA "
           "repository, or datacenter-gpu-manager for DCGM 3) and start its host engine (systemctl --now "
           "enable nvidia-dcgm, or nv-hostengine)")
NOT_REACHED = ("Unable to connect to host engine", "unable to establish a connection")
"""What dcgmi prints (to stdout, as text) when no nv-hostengine answers (dcgmi/Command.cpp)."""
GRACE_S = 30.0
"""After SIGINT, the time dcgmi has to stop the diagnostic it started (Diag::ExecuteDiagOnServer waits
up to 25 s for the host engine) before it is killed."""


class DcgmUnavailable(RuntimeError):
    """DCGM is not installed here, or its host engine does not answer."""


def visible_gpus() -> list[int]:
    """The NVML indices the dispatcher gave this child (CUDA_VISIBLE_DEVICES); GPU 0 when it names none,
    as a probe's cuda:0 is then NVML's first GPU."""
    named = [p.strip() for p in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if p.strip()]
    return [int(p) for p in named] if named and all(p.isdigit() for p in named) else [0]


def dcgmi() -> str:
    found = shutil.which("dcgmi")
    if found is None:
        raise DcgmUnavailable(f"dcgmi is not on this worker's PATH ({os.environ.get('PATH', '')}): {INSTALL}")
    return found


def run(raw: dict, progress) -> dict:
    params = DcgmDiagParams.model_validate(raw)
    if params.device == "cpu":  # admission refuses it; a child handed one anyway says why
        raise DcgmUnavailable("the dcgm_diag probe diagnoses GPUs: params.device \"cpu\" has none")
    gpus = visible_gpus()
    command = [dcgmi(), "diag", "-r", str(params.level), "-j", "-i", ",".join(map(str, gpus))]
    shown = " ".join(["dcgmi", *command[1:]])
    level = LEVELS[params.level]
    progress(0, 1, f"{shown}: level {params.level} ({level.name}), up to {dcgmi_timeout(params):g} s")
    started = time.monotonic()
    code, out, err = _run(command, dcgmi_timeout(params))
    seconds = time.monotonic() - started
    if any(said in out or said in err for said in NOT_REACHED):
        said = (out or err).strip()[:300]
        raise DcgmUnavailable(f"dcgmi could not reach DCGM's host engine (exit {code}: {said}): {INSTALL}")
    try:
        parsed = parse(out, gpus)
    except DiagOutputError as e:
        raise DiagOutputError(f"`{shown}` exited {code}; {e}; stderr: {err.strip()[-500:]!r}") from None
    uuids = {g.index: g.uuid for g in device.inventory()}
    for g in parsed.gpus:
        g.uuid = uuids.get(g.gpu_id)
    progress(1, 1, f"{parsed.verdict}: " + ", ".join(f"GPU {g.gpu_id} {g.verdict}" for g in parsed.gpus))
    return TypeAdapter(DcgmDiagResult).dump_python(DcgmDiagResult(
        probe="dcgm_diag", environment=environment(gpus, params.seed, parsed.driver_version),
        level=params.level, command=shown, exit_code=code, layout=parsed.layout,
        dcgm_version=parsed.dcgm_version, driver_version=parsed.driver_version, verdict=parsed.verdict,
        gpus=parsed.gpus, results=parsed.results, seconds=seconds), mode="json")


def _run(command: list[str], timeout_s: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `command`; a TimeoutError once it has run past timeout_s and been
    stopped (SIGINT first, which dcgmi answers by stopping the diagnostic on the host engine)."""
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise TimeoutError(f"dcgmi ran past {timeout_s:g} s (params.dcgmi_timeout_s) and was "
                               "stopped") from None
        return proc.returncode, out, err


def environment(gpus: list[int], seed: int, driver: str | None) -> Environment:
    """Where it ran, from NVML (no CUDA context); torch's fields say what the child has, unused."""
    first = device.describe(gpus[0])
    on_gpu = first.kind == "cuda"
    torch_version = "n/a"
    with contextlib.suppress(metadata.PackageNotFoundError):
        torch_version = metadata.version("torch")
    return Environment(
        device="cuda", device_name=first.name if on_gpu else f"GPU {gpus[0]} (NVML does not answer)",
        catalogue_id=first.catalogue_id if on_gpu else None, sm_count=None,
        compute_capability=first.compute_capability, memory_bytes=first.memory_bytes if on_gpu else None,
        torch_version=torch_version, cuda_version=first.cuda_driver_version,
        driver_version=first.driver_version or driver, cudnn_version=None, tf32_matmul=False,
        tf32_cudnn=False, float32_matmul_precision="n/a", cpu_threads=os.cpu_count() or 1,
        python_version=sys.version.split()[0], platform=platform.platform(), seed=seed, l2_flush_bytes=0,
        energy_note="dcgm_diag measures no energy: DCGM's own tests report their power (targeted_power)")
