"""Collective times against hand-computed cases: nccl-tests' bus factors (PERFORMANCE.md), ring
steps at NCCL's own latencies, and the hierarchical split over nodes."""

import pytest

from app.accounting.comm import collectives as cc

FREE = {"base_latency_s": 0.0}  # bandwidth terms alone
NVLINK = cc.Link(100e9, 0.0)
NET = cc.Link(10e9, 0.0)


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("all_to_all", 16, 0.9375), ("broadcast", 8, 1.0), ("all_reduce", 1, 0.0)])
def test_bus_factors_are_nccl_tests(op, n, factor):
    assert cc.bus_factor(op, n) == factor


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_inside_a_node_busbw_is_the_links_bandwidth(op):
    """nccl-tests' point: a ring at full speed shows busbw equal to the link, whatever n."""
    for n in (2, 4, 8):
        t = cc.collective_time(op, 10**9, n, gpus_per_node=8, intra=NVLINK, **FREE)
        assert t.busbw_bytes_per_sec == pytest.approx(100e9)


def test_an_8_gpu_all_reduce_of_1_gb():
    """2 (n-1)/n x S / B = 1.75 x 1e9 / 100e9 = 17.5 ms, plus NCCL's latencies: 8.4 us once and
    2 (n-1) = 14 ring steps of 3.4 us."""
    link = cc.Link(100e9, cc.NVLINK_STEP_LATENCY_S)
    t = cc.collective_time("all_reduce", 10**9, 8, gpus_per_node=8, intra=link)
    assert t.seconds == pytest.approx(0.0175 + 8.4e-6 + 14 * 3.4e-6)
    assert t.algbw_bytes_per_sec == pytest.approx(1e9 / t.seconds)


def test_a_tiny_message_is_all_latency():
    t = cc.collective_time("all_gather", 8, 8, gpus_per_node=8, intra=cc.Link(450e9, 3.4e-6))
    assert t.seconds == pytest.approx(8.4e-6 + 7 * 3.4e-6, rel=1e-6)


def test_across_two_nodes_the_all_reduce_is_hierarchical():
    """Reduce-scatter and all-gather inside each node (2 x 7/8 x S over NVLink), and an all_reduce
    of each GPU's S/8 shard between the 2 nodes (2 x 1/2 x S/8 over its NIC)."""
    s = 8 * 10**9
    t = cc.collective_time("all_reduce", s, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE)
    intra, inter = t.levels
    assert intra.seconds == pytest.approx(2 * 7 / 8 * s / 100e9)
    assert inter.seconds == pytest.approx(2 * 1 / 2 * (s / 8) / 10e9)
    assert t.seconds == pytest.approx(intra.seconds + inter.seconds) and t.nodes == 2


def test_all_to_all_sends_each_piece_over_the_link_that_reaches_it():
    """16 ranks on 2 nodes: of S, 7/16 goes to the node's other GPUs, 8/16 to the other node, at
    once over their own links: the slower sets the time."""
    s = 16 * 10**8
    t = cc.collective_time("all_to_all", s, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE)
    assert t.seconds == pytest.approx(max(s * 7 / 16 / 100e9, s * 8 / 16 / 10e9))


def test_broadcast_pipelines_through_the_slower_link():
    t = cc.collective_time("broadcast", 10**9, 16, gpus_per_node=8, intra=NVLINK, inter=NET, **FREE)
    assert t.seconds == pytest.approx(10**9 / 10e9)


def test_one_rank_moves_nothing():
    t = cc.collective_time("all_reduce", 10**9, 1, gpus_per_node=8, intra=NVLINK)
    assert (t.seconds, t.busbw_bytes_per_sec, t.levels) == (0.0, 0.0, [])


def test_the_api_takes_the_gpus_link_from_the_catalogue(api):
    body = {"collective": "all_reduce", "bytes": "1GB", "ranks": 8, "gpu": "h100-sxm", "base_latency_s": 0,
            "intra_node_latency_s": 0}
    answer = api.ok("/api/v1/comm/collective", body)
    h100 = api.get("/api/v1/hardware/h100-sxm").json()["interconnect_bytes_per_sec"]
    assert answer["busbw_bytes_per_sec"] == pytest.approx(h100)


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
