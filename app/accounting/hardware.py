"""The accelerator catalogue (data/hardware.toml) and per-request overrides.

Every peak is DENSE FLOP/s (int8: ops/s): no 2:4 structured sparsity.
"""

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Annotated, Literal

from annotated_types import Ge, Le, MaxLen, MinLen

from app.accounting import names
from app.accounting.dtypes import PEAK_KEYS, peak_key
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD

# Floors keep every derived time and ratio finite.
FlopRate = Annotated[float, Ge(1), Le(1e18)]


Link = Literal["nvlink", "pcie", "infinity_fabric"]


@dataclass(frozen=True, slots=True)
class Interconnect:
    """How GPUs of this part are joined on the usual board, and how its nodes are networked.
    Bandwidths in bytes/s per direction; latencies in seconds per ring step (NCCL's tuning model)."""

    link: Link
    """What a ring over the node's GPUs runs on: NVLink through NVSwitch, PCIe, AMD's Infinity Fabric."""
    pcie_generation: int
    pcie_bytes_per_sec: float
    """The host link, x16, per direction."""
    gpus_per_node: int
    """GPUs on the usual board (HGX: 8)."""
    node_link_bytes_per_sec: float
    """Per GPU per direction, for collectives over all of a node's GPUs (a PCIe part's NVLink
    bridge joins a pair only, so its node runs at PCIe speed)."""
    node_link_latency_s: float
    network_latency_s: float
    source: str
    nvlink_generation: int | None = None
    nvswitch: bool = False
    """The node's GPUs meet in NVSwitch chips (HGX boards), not in a mesh of direct links: with NVLink
    4 or later its switches reduce an all_reduce themselves (NVLink SHARP, comm/achievable.py)."""
    network: str | None = None
    """The scale-out network of the reference node (DGX); null where no reference board names one."""
    network_bytes_per_sec_per_node: float | None = None
    """All of a node's NICs together, per direction (8 x 400 Gb/s = 400e9)."""

    __pydantic_config__ = RECORD

    @property
    def network_bytes_per_sec_per_gpu(self) -> float | None:
        """Each GPU's share of the node's NICs (one NIC per GPU on DGX boards)."""
        n = self.network_bytes_per_sec_per_node
        return None if n is None else n / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator. Peaks are dense FLOP/s per dtype key (int8 in ops/s)."""

    id: str
    name: str
    vendor: str
    memory_bytes: int
    """Device memory every fit and capacity answer uses, bytes: the total the device reports (CUDA's
    cudaMemGetInfo total, which torch.cuda.mem_get_info returns and vLLM's gpu_memory_utilization
    multiplies) where the catalogue has a report, else the datasheet's figure (memory_source)."""
    memory_bandwidth_bytes_per_sec: float
    peak_flop_per_sec: dict[str, float]
    """Dense peak per dtype key: float64, float32, tfloat32, bfloat16, float16, float8, float6, float4,
    int8."""
    device_names: list[str]
    """Names a live device reports for this part (torch.cuda.get_device_name, NVML)."""
    source: str
    notes: str
    interconnect_bytes_per_sec: float | None = None
    """What one GPU sends to its peers in one direction (NVLink, or PCIe where there is none),
    bytes/s; null where the catalogue has no figure (TPUs)."""
    interconnect_source: str | None = None
    interconnect: Interconnect | None = None
    """The node and network this part usually sits in; null for TPUs, whose pods are not nodes of GPUs."""
    board_power_watts: float | None = None
    """W: the vendor's max board power (TDP) of one GPU; the energy calculator's average power is it
    x a utilisation factor. Null where no vendor sheet gives one (A10G, TPUs)."""
    board_power_source: str | None = None
    datasheet_memory_bytes: int | None = None
    """The datasheet's figure, decimal as it writes it ("80GB" is 80e9); null for a custom GPU."""
    memory_source: str = "datasheet"
    """Where memory_bytes comes from: "device" (a device's own report, cited in memory_report),
    "datasheet" (no report in the catalogue), "measured" (the live device a probe runs on),
    "gpu_overrides.memory_bytes" or "given in the request"."""
    memory_report: str | None = None
    """The device report memory_bytes is: the query and where it was published."""

    __pydantic_config__ = RECORD


def memory_note(acc: Accelerator) -> str:
    """What a fit's memory is, in words, for an answer's assumptions."""
    gib = acc.memory_bytes / 2**30
    if acc.memory_source == "device":
        return (f"{acc.id}: {acc.memory_bytes:,} bytes ({gib:.1f} GiB), the total the device reports "
                f"({acc.memory_report}), not the datasheet's {acc.datasheet_memory_bytes / 1e9:g} GB")
    if acc.memory_source == "measured":
        return f"{acc.id}: {acc.memory_bytes:,} bytes ({gib:.1f} GiB), {acc.memory_report}"
    if acc.memory_source == "datasheet":
        return (f"{acc.id}: the datasheet's {acc.memory_bytes / 1e9:g} GB; the catalogue has no device report "
                "for it, and a device reports somewhat more or less (give gpu_overrides.memory_bytes)")
    return f"{acc.id}: {acc.memory_bytes:,} bytes ({gib:.1f} GiB), {acc.memory_source}"


@dataclass(frozen=True, slots=True)
class PeakOverrides:
    """Dense FLOP/s per dtype key to use instead of the catalogue's."""

    float64: FlopRate | None = None
    float32: FlopRate | None = None
    tfloat32: FlopRate | None = None
    bfloat16: FlopRate | None = None
    float16: FlopRate | None = None
    float8: FlopRate | None = None
    float6: FlopRate | None = None
    float4: FlopRate | None = None
    int8: FlopRate | None = None

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class GpuOverrides:
    """Numbers to use instead of the catalogue's for this request."""

    memory_bytes: Annotated[int, Ge(1), Le(10**15)] | None = None
    memory_bandwidth_bytes_per_sec: Annotated[float, Ge(1), Le(1e15)] | None = None
    peak_flop_per_sec: PeakOverrides = field(default_factory=PeakOverrides)
    interconnect_bytes_per_sec: Annotated[float, Ge(1), Le(1e15)] | None = None

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class CustomPeaks:
    """Dense FLOP/s (int8: ops/s) of a GPU outside the catalogue. Only the peaks given exist: a
    calculation in a dtype whose peak is not given is refused naming this field, never run at
    another part's figure."""

    bfloat16: FlopRate
    """The 16-bit tensor peak, dense (a datasheet's starred sparse figure / 2)."""
    float16: FlopRate | None = None
    """Where fp16 differs from bf16; else fp16 runs at the bfloat16 figure (the same tensor cores)."""
    float32: FlopRate | None = None
    tfloat32: FlopRate | None = None
    float8: FlopRate | None = None
    float6: FlopRate | None = None
    float4: FlopRate | None = None
    int8: FlopRate | None = None
    float64: FlopRate | None = None

    __pydantic_config__ = RECORD


@dataclass(frozen=True, slots=True)
class CustomGpu:
    """A GPU outside the catalogue, as its owner describes it: answers label it by `name`, and
    nothing is borrowed from any catalogue part (no node, network or power it was not given)."""

    name: Annotated[str, MinLen(1), MaxLen(60)]
    memory_bytes: Annotated[int, Ge(1), Le(10**15)]
    """Device memory: "24GB" (10^9) or "24GiB" (2^30)."""
    memory_bandwidth_bytes_per_sec: Annotated[float, Ge(1), Le(1e15)]
    """Device memory bandwidth: "936GB/s"."""
    peak_flop_per_sec: CustomPeaks
    interconnect_bytes_per_sec: Annotated[float, Ge(1), Le(1e15)] | None = None
    """What one GPU sends to its peers in one direction ("32GB/s" for PCIe Gen4 x16, "450GB/s"
    for NVLink 4); tensor parallel and collectives need it."""
    board_power_watts: Annotated[float, Ge(1), Le(1e5)] | None = None
    """W: the board's max power; energy answers need it (or a power of their own)."""

    __pydantic_config__ = RECORD


CUSTOM_VENDOR = "custom"


def custom(spec: CustomGpu) -> Accelerator:
    """The Accelerator a custom GPU describes: its id and name are its name."""
    given = spec.peak_flop_per_sec
    peaks = {key: getattr(given, key) for key in PEAK_KEYS if getattr(given, key) is not None}
    peaks.setdefault("float16", given.bfloat16)
    return Accelerator(
        id=spec.name, name=spec.name, vendor=CUSTOM_VENDOR, memory_bytes=spec.memory_bytes,
        memory_bandwidth_bytes_per_sec=spec.memory_bandwidth_bytes_per_sec,
        peak_flop_per_sec={k: peaks[k] for k in PEAK_KEYS if k in peaks}, device_names=[],
        source="given in the request", notes="", interconnect_bytes_per_sec=spec.interconnect_bytes_per_sec,
        interconnect_source="given in the request" if spec.interconnect_bytes_per_sec else None,
        board_power_watts=spec.board_power_watts,
        board_power_source="given in the request" if spec.board_power_watts else None,
        memory_source="given in the request")


@cache
def catalogue() -> dict[str, Accelerator]:
    text = resources.files("app.accounting").joinpath("data/hardware.toml").read_text()
    table = {}
    for row in tomllib.loads(text)["accelerator"]:
        peaks = {k: float(v) for k, v in row.pop("peak_flop_per_sec").items()}
        assert set(peaks) <= set(PEAK_KEYS), row["id"]
        link = row.pop("interconnect", None)
        # the device's own report where one is published, else the datasheet's figure
        datasheet, reported = row.pop("datasheet_memory_bytes"), row.pop("device_memory_bytes", None)
        report = row.pop("device_memory_report", None)
        assert (reported is None) == (report is None), row["id"]
        table[row["id"]] = Accelerator(
            peak_flop_per_sec=peaks, **row, interconnect=None if link is None else Interconnect(**link),
            memory_bytes=reported or datasheet, datasheet_memory_bytes=datasheet,
            memory_source="datasheet" if reported is None else "device", memory_report=report)
    return table


def for_device(device_name: str) -> Accelerator | None:
    """The entry whose device_names include what a live device reports (NVML, torch); None
    for a part the catalogue does not list, or a CPU."""
    return next((acc for acc in catalogue().values() if device_name in acc.device_names), None)


def measured(acc: Accelerator, memory_bytes: int) -> Accelerator:
    """The entry with the memory a live device reported (torch.cuda.mem_get_info's total), which
    overrides both the catalogue's report and the datasheet: drivers differ by some hundred MiB."""
    return replace(acc, memory_bytes=memory_bytes, memory_source="measured",
                   memory_report="this device's own torch.cuda.mem_get_info total")


def catalogue_id(device_name: str) -> str | None:
    entry = for_device(device_name)
    return None if entry is None else entry.id


HARDWARE_LISTING = "GET /api/v1/hardware"


def resolve_id(gpu_id: str, *, field: str = "gpu") -> str:
    """The catalogue id `gpu_id` names: itself, the one part of a family it names (l4), or the one
    part a name hint points at (hinted: "4090", "H100 80GB"). A family or hint of several parts
    (h100, rtx) is refused listing exactly those."""
    table = catalogue()
    if gpu_id in table:
        return gpu_id
    parts = names.family(gpu_id, table) or hinted(gpu_id)
    if len(parts) == 1:
        return parts[0]
    if parts:
        raise InvalidInput(field, f"{gpu_id!r} names several parts: {', '.join(parts)}; say which")
    raise InvalidInput(field, names.unknown("gpu", gpu_id, table, HARDWARE_LISTING))


def _squeezed(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def hinted(hint: str) -> list[str]:
    """The parts a name as people write it points at: its id without punctuation ("rtx3090" ->
    rtx-3090), else every part whose id, name or reported device name holds it ("4090" ->
    rtx-4090; "H100 80GB" -> h100-sxm, which reports "NVIDIA H100 80GB HBM3"). Case, spaces,
    hyphens and a leading "NVIDIA" do not count; hints shorter than 3 characters name nothing."""
    squeezed = _squeezed(hint).removeprefix("nvidia")
    if len(squeezed) < 3:
        return []
    table = catalogue()
    exact = [i for i in table if _squeezed(i) == squeezed]
    return exact or [i for i, acc in table.items()
                     if any(squeezed in _squeezed(n) for n in (i, acc.name, *acc.device_names))]


def gpu(gpu_id: str, overrides: GpuOverrides | None = None, *, field: str = "gpu") -> Accelerator:
    """A catalogue entry (`gpu_id` as resolve_id reads it) with any overrides applied."""
    acc = catalogue()[resolve_id(gpu_id, field=field)]
    if overrides is None:
        return acc
    peaks = dict(acc.peak_flop_per_sec)
    for key in PEAK_KEYS:
        value = getattr(overrides.peak_flop_per_sec, key)
        if value is not None:
            peaks[key] = value
    link, node = overrides.interconnect_bytes_per_sec, acc.interconnect
    if link is not None and node is not None:  # the part's one link figure: its node's ring runs at it too
        node = replace(node, node_link_bytes_per_sec=link)
    return replace(
        acc,
        interconnect=node,
        memory_bytes=overrides.memory_bytes or acc.memory_bytes,
        memory_source="gpu_overrides.memory_bytes" if overrides.memory_bytes else acc.memory_source,
        memory_report=None if overrides.memory_bytes else acc.memory_report,
        memory_bandwidth_bytes_per_sec=(
            overrides.memory_bandwidth_bytes_per_sec or acc.memory_bandwidth_bytes_per_sec),
        peak_flop_per_sec=peaks,
        interconnect_bytes_per_sec=overrides.interconnect_bytes_per_sec or acc.interconnect_bytes_per_sec,
    )


def peak_flop_per_sec(acc: Accelerator, dtype: str, *, field: str = "dtype") -> float:
    """Dense peak for matmuls in `dtype` on one device."""
    key = peak_key(dtype, field=field)
    try:
        return acc.peak_flop_per_sec[key]
    except KeyError:
        listed = ", ".join(acc.peak_flop_per_sec)
        where = "gpu.peak_flop_per_sec" if acc.vendor == CUSTOM_VENDOR else "gpu_overrides.peak_flop_per_sec"
        raise InvalidInput(
            field, f"{acc.id} lists no {key} peak (it lists {listed}); give one in {where}") from None
