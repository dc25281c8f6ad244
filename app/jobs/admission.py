"""Refuse, before it is queued, a job that this worker's device could not hold, or that
could not finish within its time limit.

Torch-free: the sizes come from the parameters and the calculators. Errors name
the parameter to change, as the calculators' own do.
"""

from app import device as dev
from app.accounting.errors import InvalidInput
from app.accounting.units import human_bytes
from app.contract.params import ProbeParams, flush_bytes
from app.contract.registry import PROBES
from app.device import DeviceInfo, host_memory_bytes


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


def target(params: ProbeParams, device: DeviceInfo) -> str:
    """cuda or cpu: where the job will run."""
    if params.device == "cuda" and device.kind != "cuda":
        raise InvalidInput("params.device", "this worker has no CUDA device (GET /api/v1/device)")
    return device.kind if params.device == "auto" else params.device


def check_fits(probe: str, params: ProbeParams, device: DeviceInfo) -> str:
    """The device kind the job will use; InvalidInput when it would not fit there."""
    kind = target(params, device)
    memory = device.memory_bytes if kind == "cuda" else host_memory_bytes()
    need, field = PROBES[probe].need(params, kind)
    need += flush_bytes(kind, None)
    if memory is not None and need > memory:
        where = device.name if kind == "cuda" else "this host"
        raise InvalidInput(field, f"the job needs about {human_bytes(need, binary=True)} but {where} has "
                                  f"{human_bytes(memory, binary=True)}")
    return kind


def check_time(probe: str, params: ProbeParams, kind: str, timeout_s: float) -> None:
    """InvalidInput naming timeout_s when the job's least duration (the registry's
    least_seconds: its warm-ups alone) is beyond its time limit: it could only time out, and
    would hold a dispatcher for all of timeout_s doing so."""
    least, field = PROBES[probe].least_seconds(params, kind)
    if least > timeout_s:
        raise InvalidInput("timeout_s", f"the job needs at least {least:g} s (its warm-ups alone, set by "
                                        f"{field}) but its time limit is {timeout_s:g} s; raise timeout_s "
                                        f"or lower {field}")
