"""The accelerator catalogue: a data file with dense peaks and sources."""

import tomllib
from importlib import resources

import pytest

from tests.support.api import assert_names_field

IDS = ["h100-sxm", "h100-pcie", "h200", "h200-nvl", "b200", "b300", "gb200", "a100-40gb", "a100-80gb", "l40s",
       "l4", "a10g", "rtx-4090", "rtx-3090", "rtx-5090", "rtx-a6000", "l40", "a10", "h20", "h800", "a800-80gb",
       "v100-sxm2", "mi300x", "mi325x", "mi355x", "mi250x", "tpu-v5e", "tpu-v5p", "tpu-v4"]


def test_catalogue_lists_every_required_accelerator(api):
    body = api.get("/api/v1/hardware").json()
    assert [g["id"] for g in body["data"]] == IDS and body["count"] == len(IDS)
    for g in body["data"]:
        assert g["source"].startswith("https://") and g["memory_bytes"] > 0
        assert g["memory_bandwidth_bytes_per_sec"] > 0
        assert set(g["peak_flop_per_sec"]) <= {"float64", "float32", "tfloat32", "bfloat16",
                                               "float16", "float8", "float6", "float4", "int8"}


def test_h100_bf16_is_the_dense_half_of_the_datasheet(api):
    h100 = api.get("/api/v1/hardware/h100-sxm").json()
    # The datasheet's 1,979 TFLOP/s assumes 2:4 sparsity; the course divides by 2.
    assert h100["peak_flop_per_sec"]["bfloat16"] == 1979e12 / 2
    assert h100["datasheet_memory_bytes"] == 80e9


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
        assert (g["datasheet_memory_bytes"], g["memory_bandwidth_bytes_per_sec"]) == (memory, bandwidth), gpu
        assert g["peak_flop_per_sec"]["bfloat16"] == bf16, gpu
        assert g["peak_flop_per_sec"].get("float8") == fp8, gpu
        assert g["board_power_watts"] and g["board_power_source"], gpu
    # DeepSeek-V3's report: the H800's NVLink is 400 GB/s both ways (the H100's is 900)
    assert api.get("/api/v1/hardware/h800").json()["interconnect_bytes_per_sec"] == 200e9


def test_the_newer_parts_carry_their_datasheets_figures(api):
    """Issue 32, point 4. Each figure from its vendor's sheet (dense: starred sparse / 2)."""
    sheets = {
        # HGX B300 spec table, 8-GPU totals / 8: 2.3TB -> 288GB (DGX B300: 8TB/s), BF16 36 PF sparse,
        # FP8 72 PF sparse, FP4 105 PF dense (144 sparse), FP64 10 TF; DGX B300 power capping: 1,000W TGP
        "b300": (288e9, 8.0e12, 36e15 / 8 / 2, 72e15 / 8 / 2, 105e15 / 8, 1000),
        # GB200 NVL72 spec table, individual GPU: 186GB HBM3E at 8TB/s; FP16/BF16 5 PF, FP8 10 PF,
        # FP4 20 PF (all sparse); TDP configurable up to 1,200W
        "gb200": (186e9, 8.0e12, 5e15 / 2, 10e15 / 2, 20e15 / 2, 1200),
        # H200 spec table, NVL column: 141GB at 4.8TB/s; BF16 1,671 sparse, FP8 3,341 sparse; up to 600W
        "h200-nvl": (141e9, 4.8e12, 1671e12 / 2, 3341e12 / 2, None, 600),
        # AMD MI325X: 256GB HBM3E at 6TB/s; FP16/BF16 1,307.4 dense, FP8 2,614.9 dense; 1,000W peak TBP
        "mi325x": (256e9, 6.0e12, 1307.4e12, 2614.9e12, None, 1000),
        # AMD MI355X / CDNA 4 whitepaper: 288GB HBM3E at 8TB/s; FP16/BF16 2.5 PF, OCP-FP8 5 PF,
        # MXFP4 10.1 PF dense (the sparse FP8 is 10.1); 1,400W TBP
        "mi355x": (288e9, 8.0e12, 2.5e15, 5e15, 10.1e15, 1400),
    }
    for gpu, (memory, bandwidth, bf16, fp8, fp4, watts) in sheets.items():
        g = api.get(f"/api/v1/hardware/{gpu}").json()
        assert (g["datasheet_memory_bytes"], g["memory_bandwidth_bytes_per_sec"]) == (memory, bandwidth), gpu
        peaks = g["peak_flop_per_sec"]
        assert (peaks["bfloat16"], peaks["float8"], peaks.get("float4")) == (bf16, fp8, fp4), gpu
        assert g["board_power_watts"] == watts and g["board_power_source"], gpu
        assert g["source"].startswith(("https://www.nvidia.com/", "https://www.amd.com/")), gpu
    # Blackwell Ultra drops FP64: HGX B300's 10 TFLOPS for 8 GPUs, against the B200's 37 each
    b300 = api.get("/api/v1/hardware/b300").json()["peak_flop_per_sec"]
    assert b300["float64"] == 10e12 / 8 and b300["float64"] < 37e12 / 20
    assert "int8" not in b300  # the published INT8 figures disagree: left out, not guessed
    # FP4 dense is 13.125 PF per GPU: more than half the sparse 18, 1.46x the B200's 9
    assert b300["float4"] > 144e15 / 8 / 2
    # FP6: AMD prints MXFP6 at the MXFP4 rate (10.1 PF); the GB200 NVL72 table's "FP8/FP6" row, 10 PF
    # sparse, is 5 PF dense for both.
    mi355x = api.get("/api/v1/hardware/mi355x").json()["peak_flop_per_sec"]
    gb200 = api.get("/api/v1/hardware/gb200").json()["peak_flop_per_sec"]
    assert mi355x["float6"] == mi355x["float4"] == 10.1e15 and gb200["float6"] == gb200["float8"] == 10e15 / 2
    # GB200 NVL72: one NVLink 5 domain of 72 GPUs through NVSwitch, 1.8TB/s per GPU both ways
    ic = api.get("/api/v1/hardware/gb200").json()["interconnect"]
    assert (ic["gpus_per_node"], ic["node_link_bytes_per_sec"], ic["nvswitch"]) == (72, 1.8e12 / 2, True)
    assert ic["link"] == "nvlink" and ic["nvlink_generation"] == 5
    # H200 NVL: a PCIe card whose 2- or 4-way bridge gives 900GB/s per GPU; a ring over 8 runs on PCIe Gen5
    nvl = api.get("/api/v1/hardware/h200-nvl").json()
    assert nvl["interconnect_bytes_per_sec"] == 900e9 / 2 and nvl["interconnect"]["node_link_bytes_per_sec"] == 64e9
    # MI325X is the MI300X's compute with more memory; MI355X has no published TF32 figure
    mi300x, mi325x = (api.get(f"/api/v1/hardware/{g}").json() for g in ("mi300x", "mi325x"))
    assert mi325x["peak_flop_per_sec"] == mi300x["peak_flop_per_sec"]
    assert "tfloat32" not in api.get("/api/v1/hardware/mi355x").json()["peak_flop_per_sec"]


def test_live_devices_of_the_newer_parts_are_recognised():
    from app.accounting import hardware
    for name, gpu_id in [("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB200", "gb200"),
                         ("NVIDIA H200 NVL", "h200-nvl"), ("AMD Instinct MI325X", "mi325x"),
                         ("AMD Instinct MI355X", "mi355x"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200")]:
        assert hardware.catalogue_id(name) == gpu_id, name
    # the ids people write still name one part each
    assert [hardware.resolve_id(h) for h in ("h200", "b200", "B300", "GB200", "mi355x")] == \
        ["h200", "b200", "b300", "gb200", "mi355x"]


def test_a10g_mi300x_and_l40s_carry_their_peaks():
    """Issue 32, point 4: the parts already listed keep a full set of peaks, each noted."""
    from app.accounting import hardware
    cat = hardware.catalogue()
    # A10G: no NVIDIA sheet (AWS only); Baseten's A10 vs A10G table: FP32 35, TF32 35, BF16/FP16 70 dense
    assert cat["a10g"].peak_flop_per_sec == {"float32": 35e12, "tfloat32": 35e12, "bfloat16": 70e12,
                                             "float16": 70e12}
    assert cat["a10g"].board_power_watts is None  # AWS publishes none
    # MI300X datasheet, dense: FP16/BF16 1,307.4, FP8 2,614.9, TF32 653.7, FP64 matrix 163.4; 750W
    assert cat["mi300x"].peak_flop_per_sec["bfloat16"] == 1307.4e12 and cat["mi300x"].board_power_watts == 750
    assert set(cat["mi300x"].peak_flop_per_sec) == {"float64", "float32", "tfloat32", "bfloat16", "float16",
                                                    "float8", "int8"}
    # L40S datasheet: BF16 733 sparse, FP8 1,466 sparse, 350W; no FP64 figure is published
    assert cat["l40s"].peak_flop_per_sec["float8"] == 1466e12 / 2 and cat["l40s"].board_power_watts == 350
    assert set(cat["l40s"].peak_flop_per_sec) == {"float32", "tfloat32", "bfloat16", "float16", "float8", "int8"}


def test_catalogue_is_served_from_the_data_file(api):
    text = resources.files("app.accounting").joinpath("data/hardware.toml").read_text()
    rows = {row["id"]: row for row in tomllib.loads(text)["accelerator"]}
    for g in api.get("/api/v1/hardware").json()["data"]:
        assert g["peak_flop_per_sec"] == rows[g["id"]]["peak_flop_per_sec"]
        row = rows[g["id"]]
        assert g["datasheet_memory_bytes"] == row["datasheet_memory_bytes"]
        # the fits' figure: the device's own report where the file cites one, else the datasheet's
        assert g["memory_bytes"] == row.get("device_memory_bytes", row["datasheet_memory_bytes"])
        assert g["memory_source"] == ("device" if "device_memory_bytes" in row else "datasheet")
        assert (g["memory_report"] is None) == ("device_memory_bytes" not in row)


def test_unknown_gpu_is_404(api):
    assert_names_field(api.get("/api/v1/hardware/h100"), "gpu_id", status=404)


def test_every_gpu_has_a_sourced_node_and_link_latencies(api):
    # Issue 16: NVLink generation, PCIe generation, GPUs per node, the network, a latency per link.
    for g in api.get("/api/v1/hardware").json()["data"]:
        ic = g["interconnect"]
        if g["vendor"] == "google":
            assert ic is None  # TPU pods are not nodes of GPUs
            continue
        # HGX/DGX boards and PCIe servers hold 8; a GB200 NVL72 rack is one 72-GPU NVLink domain
        assert ic["source"] and ic["gpus_per_node"] == (72 if g["id"] == "gb200" else 8)
        assert ic["pcie_generation"] in (3, 4, 5, 6)
        assert 0 < ic["node_link_latency_s"] < ic["network_latency_s"] < 1e-4
        # A ring over the node runs no faster than what one GPU sends its peers.
        assert ic["node_link_bytes_per_sec"] <= g["interconnect_bytes_per_sec"]
        bridged = g["id"] in ("h100-pcie", "h200-nvl")  # NVLink bridges join pairs or quads; rings run on PCIe
        assert (ic["nvlink_generation"] is not None) == (ic["link"] == "nvlink" or bridged)
        # HGX boards join their GPUs through NVSwitch; DGX-1's V100s and PCIe cards do not
        hgx = ic["link"] == "nvlink" and ic["nvlink_generation"] >= 3
        assert ic["nvswitch"] == hgx and ("through NVSwitch" in ic["source"]) == hgx, g["id"]


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


def test_the_parts_published_pretraining_runs_used(api):
    """Each from its vendor's figures (notes and sources in hardware.toml)."""
    # V100 datasheet, SXM2 column: 32GB, 900GB/s, tensor (FP16) 125, FP32 15.7, FP64 7.8 TFLOPS, 300W;
    # the Volta whitepaper's 640 tensor cores x 64 FMA x 2 x 1.53 GHz = 125.3 TFLOPS. No BF16 path.
    v100 = api.get("/api/v1/hardware/v100-sxm2").json()
    assert (v100["datasheet_memory_bytes"], v100["memory_bandwidth_bytes_per_sec"]) == (32e9, 900e9)
    assert v100["peak_flop_per_sec"] == {"float64": 7.8e12, "float32": 15.7e12, "float16": 125e12}
    assert pytest.approx(125e12, rel=0.005) == 640 * 64 * 2 * 1.53e9
    assert v100["interconnect_bytes_per_sec"] == 300e9 / 2 and v100["board_power_watts"] == 300
    # A800: the A100 80GB SXM with NVLink at 400GB/s both ways (NVIDIA, Nov 2022, via Reuters/Tweakers)
    a800, a100 = (api.get(f"/api/v1/hardware/{g}").json() for g in ("a800-80gb", "a100-80gb"))
    assert a800["peak_flop_per_sec"] == a100["peak_flop_per_sec"] and a800["datasheet_memory_bytes"] == 80e9
    assert a800["interconnect_bytes_per_sec"] == 400e9 / 2 == a800["interconnect"]["node_link_bytes_per_sec"]
    # MI250X: one GCD, what ROCm counts as a GPU, so half the module's 383.0 TFLOPS FP16/BF16, 128GB,
    # 95.7 FP64 matrix; the ROCm MI250 page's 1,024 FLOPS/clock/CU x 110 CUs x 1.7 GHz agrees.
    mi250x = api.get("/api/v1/hardware/mi250x").json()
    bf16 = mi250x["peak_flop_per_sec"]["bfloat16"]
    assert bf16 == 383.0e12 / 2 == pytest.approx(1024 * 110 * 1.7e9, rel=1e-3)
    assert (mi250x["datasheet_memory_bytes"], mi250x["peak_flop_per_sec"]["float64"]) == (128e9 / 2, 95.7e12 / 2)
    # LUMI-G: 4 x 200 Gb/s Slingshot-11 per node of 8 GCDs
    assert mi250x["interconnect"]["network_bytes_per_sec_per_node"] == 4 * 200e9 / 8
    # Cloud TPU v4 docs: 275 TFLOPS bf16 or int8, 32 GiB HBM2 at 1,200 GBps; no node of GPUs
    v4 = api.get("/api/v1/hardware/tpu-v4").json()
    assert v4["peak_flop_per_sec"] == {"bfloat16": 275e12, "int8": 275e12}
    assert (v4["datasheet_memory_bytes"], v4["memory_bandwidth_bytes_per_sec"]) == (32 * 2**30, 1200e9)
    assert v4["interconnect"] is None and v4["board_power_watts"] is None


def test_a_catalogue_gpu_without_a_bf16_path_is_refused_naming_the_dtype(api):
    """The V100 has FP16 tensor cores and no BF16: its bf16 peak is refused, never borrowed."""
    from app.accounting import hardware
    from app.accounting.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        hardware.peak_flop_per_sec(hardware.gpu("v100-sxm2"), "bfloat16")
    assert refused.value.field == "dtype"
    assert hardware.peak_flop_per_sec(hardware.gpu("v100-sxm2"), "float16") == 125e12
