"""What the dcgm_diag probe takes: DCGM's run level (dcgmi diag -r) and how long dcgmi may run; the
tests each level adds, and the least time each takes. Torch-free."""

from dataclasses import dataclass

from pydantic import Field

from app.accounting.errors import InvalidInput
from app.inputs.fields import count, number
from app.probes.params import ProbeParams


@dataclass(frozen=True)
class Level:
    name: str
    """The suite's name in nvvs/src/NvidiaValidationSuite.cpp (dcgmi diag -r takes it too)."""
    adds: str
    """The tests DCGM 4 adds at this level (NvidiaValidationSuite::FillTestVectors)."""
    least_s: float
    """Seconds the level's plugins run at least: their default test_duration, in the plugins of DCGM's
    open source (diagnostic 180 s, DiagnosticPlugin.cpp; targeted_power 120 s and targeted_stress
    30 s, their *_wrapper.cpp; memtest 600 s, memtest_wrapper.cpp), which run one after another.
    memory_bandwidth's, pulse_test's and eud's are closed source and not counted; a plugin a SKU
    disallows (nvvs/diag-skus.yaml.in) is skipped and would take none of its time."""
    timeout_s: float
    """dcgmi's time limit by default: several times the level's usual length (about a minute, a few
    minutes, half an hour, one to two hours)."""


LEVELS = {
    1: Level("quick", "software (deployment checks: denylisted drivers, NVML and CUDA libraries, "
             "permissions, persistence mode, environment, page retirement and row remap, graphics "
             "processes, inforom)", 0.0, 600.0),
    2: Level("medium", "memory, pcie", 0.0, 1800.0),
    3: Level("long", "diagnostic, nvbandwidth, memory_bandwidth, targeted_stress, targeted_power (and eud "
             "when the host engine runs as root)", 180.0 + 120.0 + 30.0, 7200.0),
    4: Level("xlong", "memtest, pulse_test", 180.0 + 120.0 + 30.0 + 600.0, 14400.0),
}
"""By level; each level runs the levels below it too."""


class DcgmDiagParams(ProbeParams):
    """The timing fields of every probe (warmup_s, measure_s ...) are taken and not used: DCGM times
    its own tests."""

    level: count(1, 4) = Field(
        1, description="dcgmi diag -r LEVEL: 1 quick (deployment checks, about a minute), 2 medium "
        "(+ memory, PCIe: a few minutes), 3 long (+ diagnostic, targeted stress and power, memory bandwidth: "
        "about 30 minutes), 4 extra long (+ memtest, pulse test: one to two hours). The job's timeout_s "
        "must cover it.")
    dcgmi_timeout_s: number(ge=10, le=86_400) | None = Field(
        None, description="Stop dcgmi (SIGINT, which aborts the diagnostic) after this many seconds. Default "
        "by level: 600, 1800, 7200, 14400.")


def dcgmi_timeout(params: DcgmDiagParams) -> float:
    return params.dcgmi_timeout_s if params.dcgmi_timeout_s is not None else LEVELS[params.level].timeout_s


def needs_gpu(kind: str) -> None:
    """InvalidInput naming params.device for a job that would run on a CPU: DCGM diagnoses GPUs."""
    if kind != "cuda":
        raise InvalidInput("params.device", "the dcgm_diag probe runs NVIDIA DCGM's diagnostic on a GPU, "
                                            "and this job would run on the CPU (params.device \"cpu\", or a "
                                            "worker with no CUDA device): submit it to a GPU")
