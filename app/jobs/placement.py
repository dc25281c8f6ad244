"""Which queued job a dispatcher starts next, and on which devices: pure Python over the queue
and the host's live leases, both read by Store.claim inside its one write transaction.

A job runs on one of: the host's CPU (a one-GPU job whose device is "cpu"); one GPU (the one it
names, else the claiming dispatcher's); several GPUs (num_gpus > 1: the ones it names in `gpus`, else any
that many free ones); or, for a job naming no GPU claimed by a dispatcher serving no one GPU,
the whole host ("*"). Each is a lease unit ("cpu", "gpu<N>", "*"); a job starts only when every
unit it needs is free, and takes them all at once.

Who runs a job on several GPUs: any dispatcher serving one of its GPUs (or one serving no one
GPU), whichever looks first once they are all free; it gives the child all of them. The other
GPUs' dispatchers find their GPU leased and run nothing meanwhile. A job asking for num_gpus
without naming them gets the claiming dispatcher's GPU and the lowest-numbered other free ones.

No starvation (the reservation rule): the queue is read oldest first, and a job on several GPUs
that cannot start yet reserves the GPUs it waits for: the ones it names, or (num_gpus) the free
ones first, then the lowest-numbered busy ones, up to num_gpus. No newer job may start on a
reserved GPU, so each GPU that frees up stays free until the waiting job has all of its GPUs,
and a stream of one-GPU jobs cannot keep it waiting. Older jobs still go first. A job waiting
for one GPU reserves nothing: dispatchers take the oldest job they can, so a GPU's next job is
already its oldest waiter. Nothing is backfilled onto a reserved GPU, even a job that would end
in time: a job's timeout_s is its limit, not its length, so a reserved GPU may idle a while.
"""

from collections.abc import Sequence
from dataclasses import dataclass

CPU = "cpu"
WHOLE_HOST = "*"


def gpu_unit(gpu: int) -> str:
    return f"gpu{gpu}"


@dataclass(frozen=True)
class Waiting:
    """A queued job as placement sees it."""

    id: int
    device: str | None
    """cpu or cuda, as admission decided; None in rows from before it was kept."""
    gpu: int | None
    num_gpus: int
    gpus: list[int] | None


@dataclass(frozen=True)
class Placement:
    job: Waiting
    units: list[str]
    """The lease units to take: "cpu", "*", or one "gpu<N>" per GPU."""
    ran_on_gpus: list[int]
    """The GPUs the child is given, ascending; what CUDA_VISIBLE_DEVICES will list."""


def choose(queue: Sequence[Waiting], *, claimer: int | None, served: Sequence[int],
           busy: set[str]) -> Placement | None:
    """The oldest job in `queue` (oldest first) that the dispatcher serving GPU `claimer` (None: no
    one GPU) may start now, given the host's GPUs `served` and its units under a live lease `busy`;
    None when every one waits."""
    whole = WHOLE_HOST in busy
    held = {int(unit[3:]) for unit in busy if unit.startswith("gpu")}

    def is_busy(gpu: int) -> bool:
        return whole or gpu in held

    reserved: set[int] = set()  # GPUs held for an older job on several GPUs
    for job in queue:
        if job.num_gpus == 1:
            named = job.gpu if job.gpu is not None else job.gpus[0] if job.gpus else None
            if claimer is not None and named is not None and named != claimer:
                continue  # another GPU's job
            gpu = named if named is not None else claimer
            if job.device == CPU:  # it leases the host's CPU; its child is still shown its GPU, if any
                if not ({CPU, WHOLE_HOST} & busy):
                    return Placement(job, [CPU], [] if gpu is None else [gpu])
                continue
            if gpu is None:  # no GPU known: the child's default device, so the whole host
                if not busy and not reserved:
                    return Placement(job, [WHOLE_HOST], [])
                continue
            if gpu not in reserved and not is_busy(gpu):
                return Placement(job, [gpu_unit(gpu)], [gpu])
            continue
        # Several GPUs take their GPUs' leases even where their device is "cpu": admission found
        # NVML lacks the GPUs TALLY_GPUS names, and the box stands in for them (app/device.py).
        universe = sorted(set(served) | set(job.gpus or ()) | ({claimer} - {None}))
        free = [gpu for gpu in universe if not is_busy(gpu) and gpu not in reserved]
        if job.gpus:
            want = sorted(job.gpus)
            ready = set(want) <= set(free)
        else:
            mine = [claimer] if claimer in free else []
            want = sorted(mine + [gpu for gpu in free if gpu != claimer][:job.num_gpus - len(mine)])
            ready = len(want) == job.num_gpus
        if ready and (claimer is None or claimer in want):
            return Placement(job, [gpu_unit(gpu) for gpu in want], want)
        if not job.gpus:  # free ones first: a GPU that frees up is never handed to a newer job
            waiting_on = free + [gpu for gpu in universe if is_busy(gpu) and gpu not in reserved]
            want = waiting_on[:job.num_gpus]
        reserved |= set(want)
    return None
