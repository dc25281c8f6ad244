"""What the collectives probe accepts, the sweep each device kind gets, and the calculators' view
of it: the buffers it holds, and the catalogue's link it is set beside."""

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator

from app.accounting import dtypes, hardware
from app.accounting.comm import collectives as cc
from app.inputs.fields import byte_count, count
from app.probes.params import CPU_MAX_RANKS, ProbeParams, ranks_for, rule

CollectiveName = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]

COLLECTIVE_NAMES: tuple[str, ...] = CollectiveName.__args__  # type: ignore[attr-defined]

CollectiveDtype = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class CollectiveSizes:
    """A device kind's default collectives sweep."""

    sizes_bytes: tuple[int, ...]
    ranks: int | None
    """None: every GPU the job was given (CUDA_VISIBLE_DEVICES)."""

# By device kind: as nccl-tests' -b 8 -e 1G -f 2 on CUDA; on CPU 1 KiB to 4 MiB in steps of 4x over
# 2 gloo processes, seconds on a two-core box.
COLLECTIVE_SIZES = {
    "cuda": CollectiveSizes(tuple(2**i for i in range(3, 31)), None),
    "cpu": CollectiveSizes(tuple(4**i * 1024 for i in range(0, 7)), 2),
}


class CollectivesParams(ProbeParams):
    collectives: Annotated[list[CollectiveName], Field(min_length=1, max_length=5)] | None = Field(
        None, description="Default: all_reduce, all_gather, reduce_scatter, all_to_all and broadcast.")
    sizes_bytes: Annotated[list[byte_count(1, 16 * 2**30)],  # type: ignore[valid-type]
                           Field(min_length=1, max_length=64)] | None = Field(
        None, description="nccl-tests' size S per point: each rank's buffer (all_reduce, broadcast), the "
        "all_gather's output, the reduce_scatter's input, the all_to_all's send buffer; rounded down to "
        "whole elements, and to a multiple of ranks where S is split in pieces. Default: 8 B to 1 GiB in "
        "steps of 2x on CUDA (nccl-tests -b 8 -e 1G -f 2); 1 KiB to 4 MiB in steps of 4x on CPU.")
    ranks: count(2, 64) | None = Field(
        None, description=f"Processes, one per GPU on CUDA (default: every GPU the job has, at least 2); "
        f"gloo processes on the CPU (default 2, at most {CPU_MAX_RANKS}).")
    dtype: CollectiveDtype = "float32"
    iterations: count(1, 10_000) = Field(20, description="Timed runs per point (nccl-tests -n).")
    warmup_iterations: count(0, 1000) = Field(5, description="Untimed runs before them (nccl-tests -w).")
    check: bool = Field(True, description="Check each collective's values once per point (nccl-tests -c).")

    @field_validator("collectives")
    @classmethod
    def _collectives(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise rule("name each collective once")
        return value


def collective_names(params: CollectivesParams) -> list[str]:
    return list(params.collectives or COLLECTIVE_NAMES)


def collective_sizes(params: CollectivesParams, kind: str) -> list[int]:
    return list(params.sizes_bytes or COLLECTIVE_SIZES[kind].sizes_bytes)


@dataclass(frozen=True)
class CollectivesPlan:
    collectives: tuple[str, ...]
    sizes_bytes: tuple[int, ...]
    ranks: int | None
    """None on CUDA when not given: every GPU the job has, known only in the child."""
    dtype_bytes: int


def collectives(p: CollectivesParams, kind: str) -> CollectivesPlan:
    return CollectivesPlan(tuple(collective_names(p)), tuple(collective_sizes(p, kind)),
                           ranks_for(p.ranks, kind, COLLECTIVE_SIZES[kind].ranks),
                           int(dtypes.lookup(p.dtype).storage_bytes))


COLLECTIVE_BUFFERS = 3
"""Buffers of S bytes a rank holds at most: the input, the output (all_to_all's are both S) and
the expected values of the check."""


def collectives_need(p: CollectivesParams, kind: str) -> tuple[int, str]:
    """Device bytes at the largest size: COLLECTIVE_BUFFERS x S per GPU on CUDA (each rank has
    its own), times the ranks on the CPU, where every process shares the host's memory."""
    plan = collectives(p, kind)
    per_rank = COLLECTIVE_BUFFERS * max(plan.sizes_bytes)
    return per_rank * (1 if kind == "cuda" else plan.ranks or 1), "params.sizes_bytes"


def catalogue_link(device_name: str) -> tuple[cc.Link, str] | None:
    """The link a collective over one node's GPUs runs on, from the catalogue's interconnect row:
    its bytes/s per GPU per direction and NCCL's per-step latency for its kind, with the row's
    source; None for a part the catalogue lacks or gives no node (TPUs)."""
    acc = hardware.for_device(device_name)
    if acc is None or acc.interconnect is None:
        return None
    ic = acc.interconnect
    return cc.Link(ic.node_link_bytes_per_sec, ic.node_link_latency_s), f"{acc.id}: {ic.link} ({ic.source})"
