"""Collective times against hand-computed cases and published measurements: nccl-tests' bus
factors (PERFORMANCE.md), rings at NCCL's own latencies, the hierarchical split over nodes, and
the achievable bandwidth (app/accounting/comm/achievable.py) against nccl-tests results that
NVIDIA engineers and stas00/ml-engineering published, other than the ones each constant was
read from where one exists."""

import math

import pytest

from app.accounting import hardware
from app.accounting.comm import achievable as ach
from app.accounting.comm import collectives as cc
from app.accounting.comm import links

FREE = {"base_latency_s": 0.0}  # bandwidth terms alone
LINE = {"achievable": False}  # rings at line rate, the model before achievable bandwidths
NVLINK = cc.Link(100e9, 0.0)
NET = cc.Link(10e9, 0.0)
GIB = 2**30


def node_link(gpu: str) -> cc.Link:
    return links.node_link(hardware.gpu(gpu), None, None, cc.NVLINK_STEP_LATENCY_S)


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("all_to_all", 16, 0.9375), ("broadcast", 8, 1.0), ("all_reduce", 1, 0.0)])
def test_bus_factors_are_nccl_tests(op, n, factor):
    assert cc.bus_factor(op, n) == factor


# --- at line rate (achievable=False): the ring model itself ----------------------------------

@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_inside_a_node_busbw_is_the_links_bandwidth(op):
    """nccl-tests' point: a ring at full speed shows busbw equal to the link, whatever n."""
    for n in (2, 4, 8):
        t = cc.collective_time(op, 10**9, n, gpus_per_node=8, intra=NVLINK, **FREE, **LINE)
        assert t.busbw_bytes_per_sec == pytest.approx(100e9)
        assert (t.algorithm, t.levels[0].efficiency) == ("ring", 1.0)


def test_an_8_gpu_all_reduce_of_1_gb():
    """2 (n-1)/n x S / B = 1.75 x 1e9 / 100e9 = 17.5 ms, plus NCCL's latencies: 8.4 us once and
    2 (n-1) = 14 ring steps of 3.4 us."""
    link = cc.Link(100e9, cc.NVLINK_STEP_LATENCY_S)
    t = cc.collective_time("all_reduce", 10**9, 8, gpus_per_node=8, intra=link, **LINE)
    assert t.seconds == pytest.approx(0.0175 + 8.4e-6 + 14 * 3.4e-6)
    assert t.algbw_bytes_per_sec == pytest.approx(1e9 / t.seconds)


def test_a_tiny_message_is_all_latency():
    t = cc.collective_time("all_gather", 8, 8, gpus_per_node=8, intra=cc.Link(450e9, 3.4e-6))
    assert t.seconds == pytest.approx(8.4e-6 + 7 * 3.4e-6, rel=1e-6)


def test_across_two_nodes_the_all_reduce_is_hierarchical():
    """Reduce-scatter and all-gather inside each node (2 x 7/8 x S over NVLink), and an all_reduce
    of each GPU's S/8 shard between the 2 nodes (2 x 1/2 x S/8 over its NIC)."""
    s = 8 * 10**9
    t = cc.collective_time("all_reduce", s, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE, **LINE)
    intra, inter = t.levels
    assert intra.seconds == pytest.approx(2 * 7 / 8 * s / 100e9)
    assert inter.seconds == pytest.approx(2 * 1 / 2 * (s / 8) / 10e9)
    assert t.seconds == pytest.approx(intra.seconds + inter.seconds) and t.nodes == 2


def test_all_to_all_sends_each_piece_over_the_link_that_reaches_it():
    """16 ranks on 2 nodes: of S, 7/16 goes to the node's other GPUs, 8/16 to the other node, at
    once over their own links: the slower sets the time."""
    s = 16 * 10**8
    t = cc.collective_time("all_to_all", s, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE, **LINE)
    assert t.seconds == pytest.approx(max(s * 7 / 16 / 100e9, s * 8 / 16 / 10e9))


def test_broadcast_pipelines_through_the_slower_link():
    t = cc.collective_time("broadcast", 10**9, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE, **LINE)
    assert t.seconds == pytest.approx(10**9 / 10e9)


def test_one_rank_moves_nothing():
    t = cc.collective_time("all_reduce", 10**9, 1, gpus_per_node=8, intra=NVLINK)
    assert (t.seconds, t.busbw_bytes_per_sec, t.levels, t.algorithm) == (0.0, 0.0, [], "none")


# --- achievable bandwidth, the default ----------------------------------------------------------

def test_a_link_of_no_named_kind_rings_at_80_percent_and_a_network_at_96():
    """The same 2-node all_reduce as above: 0.80 of the node link, 0.96 of the network."""
    s = 8 * 10**9
    t = cc.collective_time("all_reduce", s, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE)
    intra, inter = t.levels
    assert intra.seconds == pytest.approx(2 * 7 / 8 * s / (0.80 * 100e9))
    assert inter.seconds == pytest.approx(2 * 1 / 2 * (s / 8) / (0.96 * 10e9))
    assert (intra.efficiency, inter.efficiency, t.algorithm) == (0.80, 0.96, "ring")
    assert any(line.startswith("intra_node: 80% of 100 GB/s") for line in t.assumptions)


def test_an_achieved_figure_is_not_derated():
    """A measured busbw (nccl-tests' 370 GB/s on an H100 node) or a fitted link is taken as is."""
    given = cc.Link(370e9, 0.0, kind=ach.Kind("nvlink", 4, nvswitch=True), achieved=True)
    t = cc.collective_time("all_gather", 10**9, 8, gpus_per_node=8, intra=given, **FREE)
    assert t.busbw_bytes_per_sec == pytest.approx(370e9) and t.levels[0].efficiency == 1.0
    # ... and an all_reduce on it stays a ring: the figure is a ring's, NVLS is not guessed on top
    assert cc.collective_time("all_reduce", 10**9, 8, gpus_per_node=8, intra=given).algorithm == "ring"


def test_h100_all_gather_and_reduce_scatter_ring_as_measured():
    """8 x H200 (the H100's NVLink 4 node) at 16 GiB: all_gather busbw 361.4 GB/s and reduce_scatter
    362.9 (stas00/ml-engineering network/README.md): NVLS runs all_reduce only, these ring. The
    constant (82%) was read from the all_reduce ring, not from these."""
    for op, measured in (("all_gather", 361.4e9), ("reduce_scatter", 362.9e9)):
        t = cc.collective_time(op, 16 * GIB, 8, gpus_per_node=8, intra=node_link("h200"))
        assert t.algorithm == "ring"
        assert t.busbw_bytes_per_sec == pytest.approx(measured, rel=0.03)


def test_a100_all_reduce_of_1_gib_as_measured():
    """One p4dn node (8 x A100 SXM): nccl-tests all_reduce of 1 GiB in 8,142.6 us, busbw 230.77 GB/s
    (NVIDIA/nccl issue 527); ~230 (sjeaugey, nccl-tests issue 149). Ampere has no NVLS: a ring at
    the A100 constant (78%, read from stas00's 16 GiB figure), with its 14 steps and base latency:
    8.4 + 14 x 3.4 us + 1.75 x 2^30 / (0.78 x 300e9) = 8,087 us."""
    t = cc.collective_time("all_reduce", GIB, 8, gpus_per_node=8, intra=node_link("a100-80gb"))
    assert t.algorithm == "ring"
    assert t.seconds == pytest.approx(8.4e-6 + 14 * 3.4e-6 + 1.75 * GIB / (0.78 * 300e9))
    assert t.seconds == pytest.approx(8142.6e-6, rel=0.02)
    assert t.busbw_bytes_per_sec == pytest.approx(230.77e9, rel=0.02)


def test_nvls_on_8_h800s_as_measured():
    """8 x H800 (NVLink 4 cut to 200 GB/s per direction): NVLS all_reduce busbw 215 GB/s, above the
    line rate (NVIDIA/nccl issue 1374), by hand: B = 0.68 x 200e9 = 136e9, algbw = B x 8/9,
    busbw = algbw x 1.75 = 211.6e9. No H800 figure went into the constant."""
    t = cc.collective_time("all_reduce", 16 * GIB, 8, gpus_per_node=8, intra=node_link("h800"))
    assert t.algorithm == "nvls" and t.levels[0].bytes == pytest.approx(16 * GIB * 9 / 8)
    assert t.busbw_bytes_per_sec == pytest.approx(0.68 * 200e9 * 8 / 9 * 1.75, rel=1e-3)
    assert t.busbw_bytes_per_sec == pytest.approx(215e9, rel=0.03)


def test_nvls_on_8_h100s_reads_480_busbw_and_275_algbw():
    """sjeaugey (NVIDIA/nccl-tests issue 212): on 8 H100s NVLS reaches a busbw of ~480 GB/s, algbw
    ~275, where the ring gets 370; NVIDIA/nccl issue 2140 measures 370 -> 480 and 211 -> 275."""
    t = cc.collective_time("all_reduce", 16 * GIB, 8, gpus_per_node=8, intra=node_link("h100-sxm"))
    assert t.algorithm == "nvls" and "NVLink SHARP" in " ".join(t.assumptions)
    assert t.busbw_bytes_per_sec == pytest.approx(480e9, rel=0.02)
    assert t.algbw_bytes_per_sec == pytest.approx(275e9, rel=0.02)
    assert t.seconds < cc.collective_time("all_reduce", 16 * GIB, 8, gpus_per_node=8,
                                          intra=cc.Link(450e9, 3.4e-6, ach.Kind("nvlink", 4))).seconds


def test_nccl_switches_to_nvls_above_4_gpus_as_measured_on_h200():
    """stas00's sweep on 8 x H200 at 8 GiB: NCCL stays on the ring at 4 GPUs and picks NVLS from 5
    (busbw 414.2, 435.6, 460.0, 473.1 GB/s at 5 to 8); the GB200 NVL partition guide: four GPUs or
    fewer do not benefit from multicast. Here the switch falls out of the two times alone."""
    measured = {5: 414.2e9, 6: 435.6e9, 7: 460.0e9, 8: 473.1e9}
    for g in (2, 3, 4, 5, 6, 7, 8):
        t = cc.collective_time("all_reduce", 8 * GIB, g, gpus_per_node=8, intra=node_link("h200"))
        assert t.algorithm == ("nvls" if g > 4 else "ring"), g
        if g in measured:
            assert t.busbw_bytes_per_sec == pytest.approx(measured[g], rel=0.02), g


def test_nvls_pays_nccls_latency_once_and_no_ring_base():
    """An 8-byte all_reduce: NCCL's NVLS latency, 25 us, and 8 x 9/8 bytes at 0.68 x 450e9, beat the
    ring's 8.4 + 14 x 3.4 us."""
    t = cc.collective_time("all_reduce", 8, 8, gpus_per_node=8, intra=node_link("h100-sxm"))
    assert t.algorithm == "nvls" and t.seconds == pytest.approx(25e-6 + 9 / (0.68 * 450e9), rel=1e-9)


def test_a100_and_pcie_nodes_never_run_nvls():
    for gpu in ("a100-80gb", "h100-pcie", "v100-sxm2", "mi300x"):
        t = cc.collective_time("all_reduce", 8 * GIB, 8, gpus_per_node=8, intra=node_link(gpu))
        assert t.algorithm == "ring", gpu


def test_a_pcie_ring_runs_at_nccls_pcie_price():
    """NCCL's topology log prices an RTX 4090's PCIe Gen4 x16 at PCI[24.0] GB/s (NVIDIA/nccl-tests
    issue 307): busbw at 16 GiB = 0.75 x 32e9 = 24e9, less a little latency."""
    t = cc.collective_time("all_gather", 16 * GIB, 8, gpus_per_node=8, intra=node_link("rtx-4090"))
    assert t.busbw_bytes_per_sec == pytest.approx(24e9, rel=1e-3)


def test_across_many_nodes_the_all_reduce_runs_a_tree():
    """1,024 nodes of 8 H100s, 16 GB: each GPU's 2 GB shard by ring pays 2 x 1023 steps of 9.6 us
    and 2 x 1023/1024 x 2 GB at 0.96 x 50e9; by tree 2 log2(1024) = 20 steps and 2 x 2 GB at
    0.92 x 0.96 x 50e9 (NCCL tuning.cc). The tree is faster, as NCCL's tuner would find it."""
    s, nodes = 16 * 10**9, 1024
    net = links.network_link(hardware.gpu("h100-sxm"), None, None, cc.NETWORK_STEP_LATENCY_S)
    t = cc.collective_time("all_reduce", s, 8 * nodes, gpus_per_node=8, intra=node_link("h100-sxm"),
                           inter=net)
    shard = s / 8
    ring = 2 * 1023 * 9.6e-6 + 2 * 1023 / 1024 * shard / (0.96 * 50e9)
    tree = 2 * math.log2(nodes) * 9.6e-6 + 2 * shard / (0.92 * 0.96 * 50e9)
    assert tree < ring
    inter = t.levels[1]
    assert (inter.algorithm, inter.steps) == ("tree", 20) and inter.seconds == pytest.approx(tree)
    assert t.algorithm == "ring + tree"
    # Two nodes: the tree saves no latency and costs bandwidth, so the ring stays.
    two = cc.collective_time("all_reduce", s, 16, gpus_per_node=8, intra=node_link("h100-sxm"), inter=net)
    assert two.levels[1].algorithm == "ring" and two.algorithm == "ring"


def test_the_fitted_link_is_not_derated():
    """fit_link's bandwidth is what the run achieved: its time is the line-rate formula over it."""
    fit = cc.fit_link("all_reduce", 4, [10**6, 10**8], [1e-4, 2e-3])
    link = fit.link()
    assert link.achieved
    t = cc.collective_time("all_reduce", 10**8, 4, gpus_per_node=4, intra=link, base_latency_s=0.0)
    assert t.seconds == pytest.approx(fit.steps * fit.latency_s + 1.5 * 10**8 / fit.bytes_per_sec)


# --- the API -------------------------------------------------------------------------------------

def test_the_api_takes_the_gpus_link_from_the_catalogue(api):
    body = {"collective": "all_gather", "bytes": "1GB", "ranks": 8, "gpu": "h100-sxm", "base_latency_s": 0,
            "intra_node_latency_s": 0}
    answer = api.ok("/api/v1/comm/collective", body)
    h100 = api.get("/api/v1/hardware/h100-sxm").json()["interconnect_bytes_per_sec"]
    assert answer["busbw_bytes_per_sec"] == pytest.approx(0.82 * h100)
    assert (answer["algorithm"], answer["levels"][0]["efficiency"]) == ("ring", 0.82)
    nvls = api.ok("/api/v1/comm/collective", body | {"collective": "all_reduce"})
    assert nvls["algorithm"] == "nvls" and nvls["levels"][0]["algorithm"] == "nvls"


def test_the_api_takes_a_given_bandwidth_as_achieved(api):
    """intra_node_bytes_per_sec is what nccl-tests reported on the caller's node: not derated."""
    body = {"collective": "all_reduce", "bytes": "1GB", "ranks": 8, "gpu": "h100-sxm", "base_latency_s": 0,
            "intra_node_latency_s": 0, "intra_node_bytes_per_sec": 370e9}
    answer = api.ok("/api/v1/comm/collective", body)
    assert answer["busbw_bytes_per_sec"] == pytest.approx(370e9)
    assert answer["algorithm"] == "ring" and "not derated" in " ".join(answer["assumptions"])
    wide = api.ok("/api/v1/comm/collective", body | {"ranks": 16, "inter_node_bytes_per_sec": 48e9,
                                                      "inter_node_latency_s": 0})
    assert wide["levels"][1]["bytes_per_sec"] == 48e9


@pytest.mark.parametrize(("body", "field"), [
    ({"ranks": 12}, "ranks"),
    ({"gpu": None}, "gpu"),
    ({"collective": "gather"}, "collective"),
    ({"bytes": 0}, "bytes"),
    ({"inter_node_bytes_per_sec": -1}, "inter_node_bytes_per_sec"),
])
def test_bad_input_names_the_field(api, body, field):
    base = {"collective": "all_reduce", "bytes": 1024, "ranks": 16, "gpu": "h100-sxm"}
    response = api.post("/api/v1/comm/collective", base | body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field
