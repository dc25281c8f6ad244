"""Seeding, device choice and the environment recorded with every result."""

import platform
import random
import sys

import torch

from app import device as device_info
from app.accounting import hardware
from app.bench import energy
from app.probes.results import Contention, Environment


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # every device's generator, CUDA included
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def pick_device(wanted: str) -> torch.device:
    if wanted == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for, but this worker has no CUDA device")
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(wanted, 0) if wanted == "cuda" else torch.device("cpu")


def _driver_version() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None


def environment(device: torch.device, *, seed: int, l2_flush_bytes: int,
                contention: Contention | None = None) -> Environment:
    cuda = device.type == "cuda"
    if cuda:
        props = torch.cuda.get_device_properties(device)
        name, sm, memory = props.name, props.multi_processor_count, props.total_memory
        capability = f"{props.major}.{props.minor}"
    else:
        name, sm, memory, capability = device_info.cpu_name(), None, device_info.host_memory_bytes(), None
    entry = hardware.for_device(name) if cuda else None
    return Environment(
        device="cuda" if cuda else "cpu", device_name=name, catalogue_id=entry.id if entry else None,
        sm_count=sm, compute_capability=capability, memory_bytes=memory,
        torch_version=torch.__version__, cuda_version=torch.version.cuda,
        driver_version=_driver_version() if cuda else None,
        cudnn_version=torch.backends.cudnn.version() if cuda else None,
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        cpu_threads=torch.get_num_threads(), python_version=sys.version.split()[0],
        platform=platform.platform(), seed=seed, l2_flush_bytes=l2_flush_bytes, contention=contention,
        energy_note=energy.note(device),
    )
