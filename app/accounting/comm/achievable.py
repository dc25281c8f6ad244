"""What a collective gets of a link: the share of its line rate NCCL's algorithms deliver, per
link kind and algorithm, as nccl-tests measures it (busbw at payloads of gigabytes).

A catalogue link figure is a line rate: NVLink 4's 450 GB/s per direction is 18 links of 25 GB/s
of signalling. NCCL's kernels move 128-byte payloads from the SMs over both directions of every
link at once, so a ring delivers about 80% of it: "450GB/s is the line rate. With the protocol
overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (sjeaugey, NVIDIA,
https://github.com/NVIDIA/nccl-tests/issues/212). NCCL's own topology model prices one NVLink at
that effective rate (src/graph/topo.h: SM70 and SM80 20.0, SM90 20.6, SM100 40.1 GB/s against
25, 25, 25 and 50 GB/s of line rate) and one PCIe lane at 3/4 of its signalling rate.

On Hopper and Blackwell NVSwitch boards all_reduce runs NVLink SHARP (NVLS) instead: the switch
reduces, so each GPU's link carries S (g + 1) / g rather than the ring's 2 S (g - 1) / g, at an
effective bandwidth B below the ring's: algbw = B g / (g + 1) (sjeaugey,
https://github.com/NVIDIA/nccl-tests/pull/239). nccl-tests still reports busbw = algbw x 2(g-1)/g,
which reads 480 GB/s on 8 H100s, above the 450 GB/s line rate (nccl-tests#212). NVLS implements
all_reduce only: all_gather and reduce_scatter ring at 80-81% on the same node (stas00, below).

Across nodes NCCL's tuner (src/graph/tuning.cc, ncclTopoTuneModel) prices each algorithm and
runs the fastest: all_reduce may run a double binary tree, which pays 2 log2(nodes) network
latencies where a ring pays 2 (nodes - 1), and moves each node's data up and back down (algbw
= busbw x 0.5) at 92% of the ring's bus bandwidth ("busBw * .92").

Measured sources, all nccl-tests at payloads past saturation:
  stas00/ml-engineering, network/README.md (commit 744d01e, 2026): 8 x A100 all_reduce 234.89
    GB/s at 16 GiB; 8 x H200 ring 367.61 and NVLS 482.26 at 16 GiB, all_gather 361.4,
    reduce_scatter 362.9; an 8 x H200 NVLS sweep over 5-8 GPUs (414.2, 435.6, 460.0, 473.1 at
    8 GiB) and an 8 x B200 one (ring 682.2 and NVLS 838.0 at 8 GPUs); 8 x MI300X 312.9 at 4 GiB.
  NVIDIA engineers in NVIDIA's issue trackers: nccl-tests#149 (A100 ~230 GB/s), #212 (H100 370
    ring, ~480 NVLS busbw, algbw ~275), #267 (a 400 Gb/s NDR NIC: 48-49 GB/s), NVIDIA/nccl#1576
    quoting #812 (DGX A100, 8 x 200 Gb/s: 192 GB/s all_reduce busbw).
"""

from dataclasses import dataclass
from typing import Literal

Fabric = Literal["nvlink", "pcie", "infinity_fabric", "network"]


@dataclass(frozen=True, slots=True)
class Kind:
    """What a link is made of, as far as the share of its line rate a collective gets depends on it."""

    fabric: Fabric
    nvlink_generation: int | None = None
    nvswitch: bool = False
    """GPUs joined through NVSwitch chips (HGX boards), not a mesh of direct links."""

    @property
    def nvls(self) -> bool:
        """NVLink SHARP: NVSwitch with NVLink 4 or later (Hopper, Blackwell); A100's NVSwitch has
        none ("NVLS was a new feature of H100. A100 GPUs do not support it", sjeaugey,
        https://github.com/NVIDIA/nccl-tests/issues/228)."""
        return self.fabric == "nvlink" and self.nvswitch and (self.nvlink_generation or 0) >= 4


NETWORK = Kind("network")


@dataclass(frozen=True, slots=True)
class Efficiency:
    fraction: float
    """Achievable bus bandwidth / line rate (NVLS: the effective B of algbw = B g / (g + 1))."""
    source: str


# Rings over NVLink, by generation: busbw of an 8-GPU all_reduce with NVLS off / line rate per
# direction. NVLink 2 has no measured figure here: NCCL's own per-link price stands in.
NVLINK_RING = {
    2: Efficiency(0.80, "NCCL src/graph/topo.h prices an NVLink 2 link at 20.0 of its 25 GB/s "
                        "(SM70_NVLINK_BW); no measured V100 figure found"),
    3: Efficiency(0.78, "8 x A100 SXM: nccl-tests all_reduce busbw 234.89 of 300 GB/s at 16 GiB "
                        "(stas00/ml-engineering network/README.md); ~230 (sjeaugey, NVIDIA/nccl-tests#149)"),
    4: Efficiency(0.82, "8 x H200, NVLS off: nccl-tests all_reduce busbw 367.6 of 450 GB/s at 16 GiB "
                        "(stas00/ml-engineering network/README.md); H100 370 (sjeaugey, "
                        "NVIDIA/nccl-tests#212)"),
    5: Efficiency(0.76, "8 x B200, NVLS off: nccl-tests all_reduce busbw 682.2 of 900 GB/s at 8 GiB "
                        "(stas00/ml-engineering network/README.md)"),
}
# NVLS all_reduce inside one NVSwitch node: B = algbw x (g + 1) / g over the line rate.
NVLS = {
    4: Efficiency(0.68, "8 x H200 NVLS sweep, 5-8 GPUs: busbw 414.2-473.1 GB/s at 8 GiB, i.e. "
                        "B = busbw (g + 1) / (2 (g - 1)) = 304-311 of 450 (stas00/ml-engineering "
                        "network/README.md); 8 x H100 algbw ~275, B 309 (sjeaugey, NVIDIA/nccl-tests#212)"),
    5: Efficiency(0.60, "8 x B200 NVLS, 6-8 GPUs: busbw 778.2-838.0 GB/s at 8 GiB, B = 539-545 of 900 "
                        "(stas00/ml-engineering network/README.md)"),
}
PCIE_RING = Efficiency(0.75, "NCCL's topology model: a PCIe lane at 3/4 of its signalling rate "
                             "(src/graph/topo.cc kvDictPciGen, bw = width x speed / 80: Gen4 x16 24 of "
                             "32 GB/s, as NCCL's log prints PCI[24.0], NVIDIA/nccl-tests#307); boards "
                             "bound by their CPU get less (8 x RTX 5090: 28 of 64, NVIDIA/nccl#1639)")
INFINITY_FABRIC_RING = Efficiency(0.70, "8 x MI300X: RCCL all_reduce busbw 312.9 of 448 GB/s at 4 GiB "
                                        "(stas00/ml-engineering network/README.md)")
NETWORK_RING = Efficiency(0.96, "DGX A100, 8 x 200 Gb/s InfiniBand HDR: all_reduce busbw 192 of 200 GB/s "
                                "(AddyLaddy, NVIDIA, NVIDIA/nccl#812 as quoted in #1576); a 400 Gb/s NDR "
                                "ConnectX-7 NIC: 48-49 of 50 GB/s (AddyLaddy, NVIDIA/nccl-tests#267)")
UNNAMED_NODE = Efficiency(0.80, "a node link of unnamed kind: the ~80% of the line rate per direction "
                                "NCCL's rings reach on NVLink 2 to 5 (NCCL src/graph/topo.h) and measure "
                                "on A100 and H200 nodes (stas00/ml-engineering: 78%, 82%)")
LINE_RATE = Efficiency(1.0, "the line rate (achievable=False): no derating")
ACHIEVED = Efficiency(1.0, "given as an achieved bus bandwidth (what nccl-tests reports as busbw, or a "
                           "fit to measured times): not derated again")

TREE_SHARE = 0.92
"""A tree all_reduce's bus bandwidth over the ring's (NCCL src/graph/tuning.cc: "busBw * .92")."""
NVLS_LATENCY_S = 25e-6
"""NCCL's NVLS latency, once per all_reduce in place of the ring's base and step latencies
(src/graph/tuning.cc: baseLat 0, hwLat NVLink NVLS Simple 25 us)."""


def ring(kind: Kind | None, *, network: bool) -> Efficiency:
    """The share of the line rate a ring (or point-to-point traffic) gets on a link of `kind`;
    a link of no named kind is a node link (`network` False) or a network."""
    if kind is None:
        return NETWORK_RING if network else UNNAMED_NODE
    if kind.fabric == "nvlink":
        return NVLINK_RING.get(kind.nvlink_generation or 0, UNNAMED_NODE)
    return {"pcie": PCIE_RING, "infinity_fabric": INFINITY_FABRIC_RING, "network": NETWORK_RING}[kind.fabric]


def nvls(kind: Kind | None) -> Efficiency | None:
    """NVLS's effective bandwidth share on an NVSwitch node of `kind`; None where it has none."""
    if kind is None or not kind.nvls:
        return None
    return NVLS.get(kind.nvlink_generation or 0, NVLS[max(NVLS)])
