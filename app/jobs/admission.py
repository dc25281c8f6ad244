"""Refuse, before it is queued, a job that this worker's device could not hold.

Torch-free: the sizes come from the parameters and the calculators. Errors name
the parameter to change, as the calculators' own do.
"""

from app.accounting.errors import InvalidInput
from app.accounting.units import human_bytes
from app.bench import predict
from app.bench.specs import (
    BandwidthParams,
    MatmulParams,
    ProbeParams,
    TrainStepParams,
    TransferParams,
    default_matmul_dtypes,
    matmul_shapes,
)
from app.jobs import device as dev
from app.jobs.device import DeviceInfo, host_memory_bytes

# The timer's L2-flush buffer (app/bench/timer.py), resident while anything is timed.
FLUSH_BYTES = {"cuda": 256 * 2**20, "cpu": 32 * 2**20}
BANDWIDTH_DEFAULT = {"cuda": 2**30, "cpu": 64 * 2**20}
TRANSFER_DEFAULT_MAX = {"cuda": 2**30, "cpu": 16 * 2**20}


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


def _need(params: ProbeParams, kind: str) -> tuple[int, str]:
    """Bytes on the device at the job's peak, and the parameter that sets them."""
    if isinstance(params, MatmulParams):
        shapes = matmul_shapes(params, kind == "cuda")
        dtypes = list(params.dtypes or default_matmul_dtypes(kind == "cuda"))
        i, need = predict.largest_matmul(shapes, dtypes)
        return need, f"params.shapes.{i}" if params.sweep == "custom" else "params.sweep"
    if isinstance(params, BandwidthParams):
        return 2 * (params.size_bytes or BANDWIDTH_DEFAULT[kind]), "params.size_bytes"
    if isinstance(params, TransferParams):
        # The device buffer, plus a pageable and a pinned host copy when host and device are one.
        largest = max(params.sizes_bytes or [TRANSFER_DEFAULT_MAX[kind]])
        return largest * (1 if kind == "cuda" else 2), "params.sizes_bytes"
    assert isinstance(params, TrainStepParams)
    return predict.train_step(params, kind == "cuda").memory["total"], "params.batch_size"


def check_fits(params: ProbeParams, device: DeviceInfo) -> str:
    """The device kind the job will use; InvalidInput when it would not fit there."""
    kind = target(params, device)
    memory = device.memory_bytes if kind == "cuda" else host_memory_bytes()
    need, field = _need(params, kind)
    need += FLUSH_BYTES[kind]
    if memory is not None and need > memory:
        where = device.name if kind == "cuda" else "this host"
        raise InvalidInput(field, f"the job needs about {human_bytes(need, binary=True)} but {where} has "
                                  f"{human_bytes(memory, binary=True)}")
    return kind
