"""The accelerator catalogue: a data file with dense peaks and sources."""

import tomllib
from importlib import resources

from tests.support.api import assert_names_field

IDS = ["h100-sxm", "h100-pcie", "h200", "b200", "a100-40gb", "a100-80gb", "l40s", "l4", "a10g",
       "rtx-4090", "rtx-3090", "rtx-5090", "rtx-a6000", "l40", "a10", "h20", "h800", "mi300x", "tpu-v5e",
       "tpu-v5p"]


def test_catalogue_lists_every_required_accelerator(api):
    body = api.get("/api/v1/hardware").json()
    assert [g["id"] for g in body["data"]] == IDS and body["count"] == len(IDS)
    for g in body["data"]:
        assert g["source"].startswith("https://") and g["memory_bytes"] > 0
        assert g["memory_bandwidth_bytes_per_sec"] > 0
        assert set(g["peak_flop_per_sec"]) <= {"float64", "float32", "tfloat32", "bfloat16",
                                               "float16", "float8", "float4", "int8"}


def test_h100_bf16_is_the_dense_half_of_the_datasheet(api):
    h100 = api.get("/api/v1/hardware/h100-sxm").json()
    # The datasheet's 1,979 TFLOP/s assumes 2:4 sparsity; the course divides by 2.
    assert h100["peak_flop_per_sec"]["bfloat16"] == 1979e12 / 2
    assert h100["memory_bytes"] == 80e9


def test_the_parts_people_ask_about_carry_their_datasheets_figures(api):
    """Issue 28, point 3. Each figure from its vendor's sheet (dense: starred sparse / 2)."""
    sheets = {
        # Ampere GA102 whitepaper, RTX 3090: 936 GB/s; FP16/BF16 tensor with FP32 accumulate 71 dense
        "rtx-3090": (24e9, 936e9, 71e12, None),
        # RTX Blackwell: 1,792 GB/s; 3,352 AI TOPS is FP4 with sparsity
        "rtx-5090": (32e9, 1.792e12, 209.5e12, 419e12),
        # RTX A6000 datasheet: 768 GB/s; GA102 whitepaper, RTX A6000: FP16/BF16 154.8 dense (309.7 sparse)
        "rtx-a6000": (48e9, 768e9, 154.8e12, None),
        # L40 datasheet: 864 GB/s; BF16 362 sparse, FP8 724 sparse
        "l40": (48e9, 864e9, 181e12, 362e12),
        # A10 datasheet: 600 GB/s; BF16 125 dense (250 sparse)
        "a10": (24e9, 600e9, 125e12, None),
        # H20: 96 GB HBM3 at 4.0 TB/s, FP16 148 dense, FP8 296
        "h20": (96e9, 4.0e12, 148e12, 296e12),
        # H800 SXM: the H100 SXM's compute and memory
        "h800": (80e9, 3.35e12, 1979e12 / 2, 3958e12 / 2),
    }
    for gpu, (memory, bandwidth, bf16, fp8) in sheets.items():
        g = api.get(f"/api/v1/hardware/{gpu}").json()
        assert (g["memory_bytes"], g["memory_bandwidth_bytes_per_sec"]) == (memory, bandwidth), gpu
        assert g["peak_flop_per_sec"]["bfloat16"] == bf16, gpu
        assert g["peak_flop_per_sec"].get("float8") == fp8, gpu
        assert g["board_power_watts"] and g["board_power_source"], gpu
    # DeepSeek-V3's report: the H800's NVLink is 400 GB/s both ways (the H100's is 900)
    assert api.get("/api/v1/hardware/h800").json()["interconnect_bytes_per_sec"] == 200e9


def test_catalogue_is_served_from_the_data_file(api):
    text = resources.files("app.accounting").joinpath("data/hardware.toml").read_text()
    rows = {row["id"]: row for row in tomllib.loads(text)["accelerator"]}
    for g in api.get("/api/v1/hardware").json()["data"]:
        assert g["peak_flop_per_sec"] == rows[g["id"]]["peak_flop_per_sec"]
        assert g["memory_bytes"] == rows[g["id"]]["memory_bytes"]


def test_unknown_gpu_is_404(api):
    assert_names_field(api.get("/api/v1/hardware/h100"), "gpu_id", status=404)


def test_every_gpu_has_a_sourced_node_and_link_latencies(api):
    # Issue 16: NVLink generation, PCIe generation, GPUs per node, the network, a latency per link.
    for g in api.get("/api/v1/hardware").json()["data"]:
        ic = g["interconnect"]
        if g["vendor"] == "google":
            assert ic is None  # TPU pods are not nodes of GPUs
            continue
        assert ic["source"] and ic["gpus_per_node"] == 8 and ic["pcie_generation"] in (4, 5)
        assert 0 < ic["node_link_latency_s"] < ic["network_latency_s"] < 1e-4
        # A ring over the node runs no faster than what one GPU sends its peers.
        assert ic["node_link_bytes_per_sec"] <= g["interconnect_bytes_per_sec"]
        assert (ic["nvlink_generation"] is not None) == (ic["link"] == "nvlink" or g["id"] == "h100-pcie")


def test_dgx_h100_network_is_eight_400_gbit_nics():
    # DGX H100 user guide: 8 ConnectX-7 at 400 Gb/s, one per GPU: 8 x 400e9 / 8 bits = 400e9 bytes/s.
    from app.accounting import hardware
    ic = hardware.gpu("h100-sxm").interconnect
    assert ic.network_bytes_per_sec_per_node == 8 * 400e9 / 8
    assert ic.network_bytes_per_sec_per_gpu == 50e9
    assert ic.node_link_bytes_per_sec == 900e9 / 2  # NVLink 4's 900 GB/s is both directions


def test_the_collectives_probe_predicts_over_the_node_link():
    # What the collectives job page draws on a GPU: the node's ring link and NCCL's latency for it.
    from app.probes.collectives.params import catalogue_link
    sxm, source = catalogue_link("NVIDIA H100 80GB HBM3")
    assert (sxm.bytes_per_sec, sxm.latency_s) == (450e9, 3.4e-6) and source.startswith("h100-sxm: nvlink")
    pcie, _ = catalogue_link("NVIDIA H100 PCIe")  # its bridge joins pairs; 8 cards ring over PCIe Gen5
    assert (pcie.bytes_per_sec, pcie.latency_s) == (64e9, 5.7e-6)
    assert catalogue_link("AMD EPYC 9654") is None
