"""The energy one measurement's work draws on a GPU (app/probes/energy.py's Energy), read from
NVML (app/bench/nvml.py) over a window of its own.

Which window, and why not the timed iterations'. The timer zeroes a flush buffer of at least
256 MiB before every timed iteration, and on a small matmul or copy that memset takes longer
than the work itself; between iterations of a train step the host synchronises and the GPU
idles. The timed window's joules over its iterations would charge flushes and idle gaps to the
work, and scaling them by busy time / window time would charge the gaps at the working power
instead of the idle power. So the work gets a window of its own, straight after the timed
iterations: the same callables run back to back, without flushes, one synchronize per chunk
of about CHUNK_S, for ceil(WINDOW_S / the timed median) runs (at least one). Then joules per
iteration = joules / runs, and its pace (seconds / runs) sits beside the timed median; where
they differ much (a small shape whose inputs stay in L2 when nothing flushes them), the energy
is that of the back-to-back pace, not of a cold iteration.

Which reading. NVML's total-energy counter (Volta and later) is preferred, but it moves in
steps: about every 100 ms on an H200 (docs/measurements/), so reading it at the window's two
ends is off by up to a step at each end. The rule: find the samples where the counter changed;
with MIN_COUNTER_UPDATES changes or more, the average watts are the energy between the first
and the last change over the time between them (each end then off by at most one sampling
interval, INTERVAL_S, and the two errors share a sign), and joules = watts x the window's
seconds. With fewer changes, or no counter, the sampled power is integrated over time
(trapezoids) and divided by the samples' span for the watts: "power_x_time". NVML's power
reading is itself averaged by the board (over about a second on recent GPUs), so power x time
lags the work; the counter does not.
"""

import math
from collections.abc import Callable, Sequence

from app.bench import nvml
from app.device import nvml as nvml_lib
from app.device import optional
from app.probes.energy import Energy

WINDOW_S = 0.5
"""The back-to-back window's length at least: five steps of a counter that moves every 100 ms."""
INTERVAL_S = 0.01
"""NVML sampling interval in the window: the resolution of a counter update's time."""
CHUNK_S = 0.05
"""Seconds of work queued between synchronisations (as app/bench/sustain.py queues it)."""
MIN_COUNTER_UPDATES = 3
"""Counter changes needed in a window for the counter to be used: two whole steps between them."""


def counter_watts(reads: Sequence[tuple[float, int | None]]) -> tuple[float | None, int | None]:
    """(watts, updates) from the counter's reads, (seconds since the window opened, millijoules),
    in time order, the window's ends included. Watts are None with fewer than
    MIN_COUNTER_UPDATES changes; updates is None where the counter was never read."""
    points = [(t, mj) for t, mj in reads if mj is not None]
    if not points:
        return None, None
    if any(b < a for (_, a), (_, b) in zip(points, points[1:], strict=False)):
        return None, 0  # went backwards: a driver reload; no figure from it
    changes = [(t, mj) for (_, before), (t, mj) in zip(points, points[1:], strict=False) if mj != before]
    if len(changes) < MIN_COUNTER_UPDATES:
        return None, len(changes)
    (t0, e0), (t1, e1) = changes[0], changes[-1]
    return (e1 - e0) / 1e3 / (t1 - t0), len(changes)


def power_watts(samples: Sequence[tuple[float, float | None]]) -> float | None:
    """Mean of the sampled power (seconds, watts) over their span, by trapezoids; one sample's
    watts where there is one; None where there is none."""
    points = [(t, w) for t, w in samples if w is not None]
    if not points:
        return None
    span = points[-1][0] - points[0][0]
    if len(points) == 1 or span <= 0:
        return sum(w for _, w in points) / len(points)
    area = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(points, points[1:], strict=False))
    return area / span


def rule(seconds: float, counter: Sequence[tuple[float, int | None]],
         power: Sequence[tuple[float, float | None]], iterations: int) -> Energy | None:
    """The window's Energy: the counter's rate where it moved MIN_COUNTER_UPDATES times, else
    power x time; None where neither was read. Per iteration: joules / iterations."""
    watts, updates = counter_watts(counter)
    method = "energy_counter"
    if watts is None:
        watts, method = power_watts(power), "power_x_time"
    if watts is None or seconds <= 0 or iterations < 1:
        return None
    joules = watts * seconds
    return Energy(joules=joules, seconds=seconds, watts=watts, method=method,
                  samples=sum(1 for _, w in power if w is not None), counter_updates=updates,
                  iterations=iterations, seconds_per_iteration=seconds / iterations,
                  joules_per_iteration=joules / iterations)


def of_window(window: nvml.Window, iterations: int) -> Energy | None:
    """The rule over what nvml.window read."""
    counter = [(0.0, window.energy_start_mj), *((s.t, s.energy_mj) for s in window.samples),
               (window.seconds, window.energy_end_mj)]
    return rule(window.seconds, counter, [(s.t, s.power_watts) for s in window.samples], iterations)


def per_unit(energy: Energy | None, *, tokens: float | None = None, flops: float | None = None,
             bytes_moved: float | None = None) -> Energy | None:
    """The probe's units of one iteration added: joules per token, FLOP or bytes per joule."""
    if energy is None:
        return None
    j = energy.joules_per_iteration
    if tokens:
        energy.joules_per_token = j / tokens
    if flops is not None and j > 0:
        energy.flop_per_joule = flops / j
    if bytes_moved is not None and j > 0:
        energy.bytes_per_joule = bytes_moved / j
    return energy


def back_to_back(device, phases: list[Callable[[], object]], *, seconds_per_iteration: float,
                 agree: Callable[[int], int] | None = None) -> Energy | None:
    """Run `phases` in order, back to back, ceil(WINDOW_S / seconds_per_iteration) times (at least
    once) inside an NVML window on `device`; None on a CPU or without NVML. `agree` turns the
    count into one every rank of a distributed job runs (the largest, an all-reduce every rank
    on a GPU makes), so none waits in a collective for a rank that stopped."""
    # Here, not above: the rule itself needs no torch (its tests import it bare).
    import torch

    if device.type != "cuda":
        return None
    runs = max(1, math.ceil(WINDOW_S / max(seconds_per_iteration, 1e-9)))
    if agree is not None:
        runs = agree(runs)
    chunk = max(1, int(CHUNK_S / max(seconds_per_iteration, 1e-9)))
    torch.cuda.synchronize(device)
    with nvml.window(nvml.torch_uuid(device.index or 0), INTERVAL_S) as window:
        # No NVML: nothing to read. A distributed job's ranks run on regardless, so a rank that
        # cannot read its GPU still joins every collective the others make.
        if window is None and agree is None:
            return None
        done = 0
        while done < runs:
            for _ in range(min(chunk, runs - done)):
                for phase in phases:
                    phase()
            done = min(runs, done + chunk)
            torch.cuda.synchronize(device)
    return None if window is None else of_window(window, runs)


def note(device) -> str:
    """The environment's one line on energy: how it was read, or why it is missing."""
    if device.type != "cuda":
        return ("No energy recorded: this ran on a CPU, which NVML (NVIDIA's management library) does not "
                "read, so every energy field is null.")
    with nvml_lib() as lib:
        uuid = nvml.torch_uuid(device.index or 0)
        handle = None if lib is None or uuid is None else optional(lib.nvmlDeviceGetHandleByUUID, uuid)
        if handle is None:
            return ("No energy recorded: NVML (NVIDIA's management library) could not be opened for this "
                    "GPU, so every energy field is null.")
        counter = optional(lib.nvmlDeviceGetTotalEnergyConsumption, handle) is not None
    return (f"Energy per measurement: its work run back to back for at least {WINDOW_S} s after the timed "
            f"iterations, without L2 flushes, read from NVML's "
            + ("total-energy counter (power x time where it moved fewer than "
               f"{MIN_COUNTER_UPDATES} times)" if counter else "sampled power x time (this GPU has no "
                                                               "energy counter)")
            + "; each figure names its method.")
