"""What the dcgm_diag probe reports: DCGM's own per-test results, as `dcgmi diag -j` printed them
(parse.py reads them), each GPU's verdict, and where and how dcgmi ran. Plain dataclasses,
torch-free and pydantic-free, so the parser, the server and the child share them."""

from dataclasses import dataclass, field
from typing import Literal

from app.accounting.records import RECORD
from app.probes.results import Environment

Status = Literal["pass", "fail", "warn", "skip"]
"""A result as DCGM printed it ("Pass", "Fail", "Skip"; "Warn" is the word dcgmi's table uses, which
no JSON writer of DCGM 3.x or 4.x prints: both write a warning as "Fail")."""
Verdict = Literal["pass", "warn", "fail"]
SEVERITIES = {0: "none", 1: "monitor", 2: "isolate", 3: "unknown", 4: "triage", 5: "config", 6: "reset"}
"""dcgmErrorSeverity_t (dcgmlib/dcgm_errors.h): monitor "can perform workload, but needs to be
monitored", isolate "cannot perform workload, GPU should be isolated", triage "this error should be
triaged", config "this error can be configured", reset "drain and reset GPU"."""


@dataclass(slots=True)
class DiagWarning:
    """One of DCGM's errors attached to a result (its JSON calls them warnings)."""

    message: str
    error_id: int | None
    """DCGM's dcgmError_t code (dcgmlib/dcgm_errors.h: 63 is DCGM_FR_TARGET_POWER); null where the
    layout gives none (DCGM 3.0 to 3.2 wrote the message alone)."""
    category: int | None
    """dcgmErrorCategory_t: 10 hardware memory, 14 hardware power ..."""
    severity: int | None
    """dcgmErrorSeverity_t: 1 monitor, 2 isolate, 3 unknown, 4 triage, 5 config, 6 reset."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Figure:
    """A number DCGM wrote into an info line, in the line's own unit (parse.FIGURES lists the
    lines read)."""

    name: str
    value: float
    unit: str
    """GB/s (10^9 bytes/s), us, W, GFLOP/s, bytes, % or "" (a relative stress level)."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Outcome:
    """One test on one entity (or on every GPU at once), as DCGM reported it."""

    category: str
    """DCGM's: Deployment, Hardware, Integration, Stress."""
    test: str
    """DCGM's name: software, memory, pcie, diagnostic, targeted_power ... (4.x); Denylist, PCIe,
    Targeted Power ... (3.x)."""
    gpu_id: int | None
    """DCGM's GPU id (NVML's index: dcgmlib/src/DcgmCacheManager.cpp numbers GPUs in NVML's order);
    null for a result of the whole run (3.x's deployment tests, a 4.x test with no entity)."""
    entity: str
    """"GPU 0", "CPU 0" (DCGM's entity group and id), or "all GPUs"."""
    status: Status
    warnings: list[DiagWarning] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class GpuVerdict:
    """One GPU's verdict over every test of the run: fail when a test failed on it or on all GPUs,
    else warn when one warned, else pass (a skipped test is listed, and does not change it)."""

    gpu_id: int
    """DCGM's GPU id: NVML's index on the box."""
    uuid: str | None
    """NVML's UUID of that index, as the child read it (the fleet's name for the GPU); null
    without NVML, and in a parse alone."""
    serial: str | None
    """The board's serial, as DCGM listed it."""
    verdict: Verdict
    failed: list[str] = field(default_factory=list)
    """The tests that failed on this GPU or on all GPUs, in DCGM's order."""
    warned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    passed: int = 0
    """Tests that passed on it."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class DcgmDiagResult:
    probe: Literal["dcgm_diag"]
    environment: Environment
    level: int
    """dcgmi diag -r LEVEL: 1 quick, 2 medium, 3 long, 4 extra long."""
    command: str
    """The command line the child ran."""
    exit_code: int
    """dcgmi's exit status: 0, or 256 less DCGM's error (226: DCGM_ST_NVVS_ERROR, a test failed;
    205: DCGM_ST_NVVS_ISOLATE_ERROR, one whose error asks the GPU be isolated)."""
    layout: Literal["4.x", "3.x"]
    """Which of dcgmi's JSON layouts it printed (parse.py)."""
    dcgm_version: str | None
    driver_version: str | None
    verdict: Verdict
    """The worst GPU's verdict, or worse where an entity that is no GPU failed (a CPU, in cpu_eud)."""
    gpus: list[GpuVerdict]
    results: list[Outcome]
    seconds: float
    """How long dcgmi ran."""

    __pydantic_config__ = RECORD
