"""The achievable-bandwidth table (app/accounting/comm/achievable.py): each share checked by hand
against the measurement it names, and the catalogue rows read as the link kinds they are."""

import pytest

from app.accounting import hardware
from app.accounting.comm import achievable as ach
from app.accounting.comm import links


@pytest.mark.parametrize(("generation", "busbw", "line"), [
    (3, 234.89e9, 300e9),  # 8 x A100, 16 GiB (stas00/ml-engineering network/README.md)
    (4, 367.61e9, 450e9),  # 8 x H200, NVLS off, 16 GiB (same)
    (5, 682.2e9, 900e9),  # 8 x B200, NVLS off, 8 GiB (same)
])
def test_nvlink_ring_shares_are_the_measured_busbw_over_line_rate(generation, busbw, line):
    assert ach.NVLINK_RING[generation].fraction == pytest.approx(busbw / line, abs=0.005)


def test_nvlink_2_takes_nccls_own_per_link_price():
    # NCCL src/graph/topo.h: SM70_NVLINK_BW 20.0 GB/s for a 25 GB/s NVLink 2 link
    assert ach.NVLINK_RING[2].fraction == 20.0 / 25


@pytest.mark.parametrize(("generation", "g", "busbw", "line"), [
    # busbw = algbw x 2(g-1)/g, algbw = B g/(g+1): B = busbw (g+1) / (2(g-1))
    (4, 8, 473.1e9, 450e9), (4, 5, 414.2e9, 450e9),  # 8 x H200 sweep at 8 GiB (stas00)
    (5, 8, 838.0e9, 900e9), (5, 6, 778.2e9, 900e9),  # 8 x B200 sweep at 8 GiB (stas00)
])
def test_nvls_shares_are_the_sweeps_effective_bandwidth(generation, g, busbw, line):
    b = busbw * (g + 1) / (2 * (g - 1))
    assert ach.NVLS[generation].fraction == pytest.approx(b / line, abs=0.015)


def test_pcie_infinity_fabric_and_network_shares():
    # NCCL topo.cc: a 16 GT/s lane is 120 (x100 Mb/s), bw = 16 x 120 / 80 = 24 GB/s of 32
    assert ach.PCIE_RING.fraction == 16 * 120 / 80 / 32
    assert ach.INFINITY_FABRIC_RING.fraction == pytest.approx(312.912e9 / 448e9, abs=0.005)  # 8 x MI300X
    assert ach.NETWORK_RING.fraction == 192 / 200  # DGX A100, 8 x 200 Gb/s HDR (NVIDIA/nccl 812)
    assert 48e9 / 50e9 <= ach.NETWORK_RING.fraction <= 49e9 / 50e9  # NDR CX-7 (nccl-tests 267)


@pytest.mark.parametrize(("gpu", "kind", "nvls"), [
    ("h100-sxm", ach.Kind("nvlink", 4, True), True),
    ("h200", ach.Kind("nvlink", 4, True), True),
    ("h800", ach.Kind("nvlink", 4, True), True),
    ("h20", ach.Kind("nvlink", 4, True), True),
    ("b200", ach.Kind("nvlink", 5, True), True),
    ("a100-80gb", ach.Kind("nvlink", 3, True), False),  # NVSwitch, but NVLS came with Hopper
    ("a800-80gb", ach.Kind("nvlink", 3, True), False),
    ("v100-sxm2", ach.Kind("nvlink", 2, False), False),  # DGX-1's hybrid cube-mesh, no switch
    ("h100-pcie", ach.Kind("pcie"), False),  # its bridges join pairs: 8 cards ring over PCIe
    ("rtx-4090", ach.Kind("pcie"), False),
    ("mi300x", ach.Kind("infinity_fabric"), False),
    ("mi250x", ach.Kind("infinity_fabric"), False),
    ("tpu-v4", None, False),
])
def test_the_catalogue_rows_read_as_link_kinds(gpu, kind, nvls):
    found = links.node_kind(hardware.gpu(gpu))
    assert found == kind
    assert (ach.nvls(found) is not None) == nvls


def test_a_kind_picks_its_share_and_no_kind_the_level_default():
    assert ach.ring(ach.Kind("nvlink", 4, True), network=False) is ach.NVLINK_RING[4]
    assert ach.ring(ach.Kind("pcie"), network=False) is ach.PCIE_RING
    assert ach.ring(None, network=False) is ach.UNNAMED_NODE
    assert ach.ring(None, network=True) is ach.NETWORK_RING
    assert ach.ring(ach.NETWORK, network=True) is ach.NETWORK_RING
    assert ach.ring(ach.Kind("nvlink", 1), network=False) is ach.UNNAMED_NODE  # no figure: the ~80%


def test_a_given_bandwidth_becomes_an_achieved_link_and_a_catalogue_one_a_line_rate():
    h100 = hardware.gpu("h100-sxm")
    given = links.node_link(h100, 370e9, None, 3.4e-6)
    assert (given.bytes_per_sec, given.achieved, given.kind) == (370e9, True, None)
    catalogue = links.node_link(h100, None, None, 3.4e-6)
    assert (catalogue.bytes_per_sec, catalogue.achieved, catalogue.kind.nvls) == (450e9, False, True)
    net = links.network_link(h100, None, None, 9.6e-6)
    assert (net.bytes_per_sec, net.kind, net.achieved) == (50e9, ach.NETWORK, False)
    assert links.network_link(hardware.gpu("l40s"), None, None, 9.6e-6) is None  # no reference NICs
