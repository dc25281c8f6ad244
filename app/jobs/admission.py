"""Refuse, before it is queued, a job that this worker's device could not hold, or that
could not finish within its time limit.

Torch-free: the sizes come from the parameters and the calculators. Errors name
the parameter to change, as the calculators' own do.
"""

from app import device as dev
from app.accounting.errors import InvalidInput
from app.device import DeviceInfo, host_memory_bytes
from app.numbers import human_bytes
from app.probes import scratch
from app.probes.params import ProbeParams, flush_bytes
from app.probes.registry import PROBES


def device_for(gpu: int | None, params: ProbeParams, configured: list[int] | None) -> DeviceInfo:
    """The device a job naming `gpu` (None: any) will run on; InvalidInput naming `gpu` when
    this box does not serve it. A job naming no GPU is sized against the first one served."""
    served = dev.served_gpus(configured)
    if gpu is None:
        return dev.describe(served[0]) if served else dev.host()
    if params.device == "cpu":
        raise InvalidInput("gpu", "a job with params.device \"cpu\" cannot name a GPU")
    if gpu not in served:
        have = f"GPUs {', '.join(map(str, served))}" if served else "no GPU"
        raise InvalidInput("gpu", f"GPU {gpu} is not served here: this server's dispatchers run {have} "
                                  "(GET /api/v1/devices)")
    return dev.describe(gpu)


def several_gpus(gpu: int | None, num_gpus: int | None, gpus: list[int] | None, params: ProbeParams,
                 configured: list[int] | None) -> tuple[int, list[int] | None]:
    """(num_gpus, the GPUs named or None) of a job, once this box could run it; InvalidInput
    naming the field (num_gpus, gpus or gpus.N) when it could not. A CPU job runs on the host
    whatever its ranks (its probe's own parameters set those), so it asks for no GPUs."""
    if gpu is not None and (gpus is not None or num_gpus is not None):
        field = "gpus" if gpus is not None else "num_gpus"
        raise InvalidInput(field, f"give gpu (one GPU) or {field}, not both")
    if gpus is None:
        num_gpus = num_gpus or 1
        served = dev.served_gpus(configured)
        if num_gpus > 1 and params.device == "cpu":
            raise InvalidInput("num_gpus", "a job with params.device \"cpu\" runs on the host, not on GPUs; "
                                           "its probe's own parameters set how many processes it runs")
        if num_gpus > max(len(served), 1):
            raise InvalidInput("num_gpus", f"{num_gpus} GPUs asked for but this server serves "
                                           f"{len(served) or 'no'} GPU{'s' if len(served) != 1 else ''} "
                                           "(TALLY_GPUS; GET /api/v1/devices)")
        return num_gpus, None
    if num_gpus is not None and num_gpus != len(gpus):
        raise InvalidInput("num_gpus", f"{num_gpus} GPUs asked for but gpus names {len(gpus)}")
    if params.device == "cpu":
        raise InvalidInput("gpus", "a job with params.device \"cpu\" cannot name GPUs")
    served = dev.served_gpus(configured)
    for i, index in enumerate(gpus):
        if index in gpus[:i]:
            raise InvalidInput(f"gpus.{i}", f"GPU {index} is listed twice")
        if index not in served:
            have = f"GPUs {', '.join(map(str, served))}" if served else "no GPU"
            raise InvalidInput(f"gpus.{i}", f"GPU {index} is not served here: this server's dispatchers run "
                                            f"{have} (GET /api/v1/devices)")
    return len(gpus), sorted(gpus)


def target(params: ProbeParams, device: DeviceInfo) -> str:
    """cuda or cpu: where the job will run."""
    if params.device == "cuda" and device.kind != "cuda":
        raise InvalidInput("params.device", "this worker has no CUDA device (GET /api/v1/device)")
    return device.kind if params.device == "auto" else params.device


def check_fits(probe: str, params: ProbeParams, device: DeviceInfo) -> str:
    """The device kind the job will use; InvalidInput when it would not fit there."""
    kind = target(params, device)
    memory = device.memory_bytes if kind == "cuda" else host_memory_bytes()
    fits(probe, params, kind, memory, device.name if kind == "cuda" else "this host")
    writes = PROBES[probe].scratch
    if writes is not None:  # the file goes to this server's scratch disk
        scratch.check(*writes(params, kind))
    return kind


def fits(probe: str, params: ProbeParams, kind: str, memory_bytes: int | None, where: str) -> None:
    """InvalidInput, naming the parameter that sets the need, when the job would not fit in
    `memory_bytes` of a `kind` device (also a fleet's device: app/api/services/fleet.py)."""
    need, field = PROBES[probe].need(params, kind)
    need += flush_bytes(kind, None)
    if memory_bytes is not None and need > memory_bytes:
        raise InvalidInput(field, f"the job needs about {human_bytes(need, binary=True)} but {where} has "
                                  f"{human_bytes(memory_bytes, binary=True)}")


def check_time(probe: str, params: ProbeParams, kind: str, timeout_s: float) -> None:
    """InvalidInput naming timeout_s when the job's least duration (the registry's
    least_seconds: its warm-ups alone) is beyond its time limit: it could only time out, and
    would hold a dispatcher for all of timeout_s doing so."""
    least, field = PROBES[probe].least_seconds(params, kind)
    if least > timeout_s:
        raise InvalidInput("timeout_s", f"the job needs at least {least:g} s (its warm-ups alone, set by "
                                        f"{field}) but its time limit is {timeout_s:g} s; raise timeout_s "
                                        f"or lower {field}")
