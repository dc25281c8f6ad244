"""What every probe does first: parse its parameters, pick and seed the device, build a timer."""

from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from pydantic import TypeAdapter

from app.accounting import hardware
from app.bench import contention, env
from app.bench.timer import Timer
from app.probes.params import ProbeParams

P = TypeVar("P", bound=ProbeParams)


@dataclass
class Setup:
    device: torch.device
    timer: Timer
    neighbours: contention.Watch
    """What else runs on the host, watched from set-up until the result's environment is read."""

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def environment(self, seed: int):
        return env.environment(self.device, seed=seed, l2_flush_bytes=self.timer.flush_bytes,
                               contention=self.neighbours.finish())

    def catalogue(self):
        """The device's catalogue entry; None on CPU or an unlisted GPU."""
        if not self.cuda:
            return None
        acc = hardware.for_device(torch.cuda.get_device_name(self.device))
        # the live device's own total overrides the catalogue's (drivers reserve differing amounts)
        return None if acc is None else hardware.measured(acc, torch.cuda.mem_get_info(self.device)[1])


def setup(model: type[P], raw: dict[str, Any]) -> tuple[P, Setup]:
    params = model.model_validate(raw)
    device = env.pick_device(params.device)
    env.seed_everything(params.seed)
    timer = Timer(device, warmup_s=params.warmup_s, measure_s=params.measure_s,
                  min_iters=params.min_iters, max_iters=params.max_iters)
    # After the timer's buffer, so this process's CUDA context exists when the GPU's are counted.
    neighbours = contention.Watch(gpu=contention.visible_gpu() if device.type == "cuda" else None)
    return params, Setup(device, timer, neighbours)


def to_json(result: Any) -> dict:
    return TypeAdapter(type(result)).dump_python(result, mode="json")
