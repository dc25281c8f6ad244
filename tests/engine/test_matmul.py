"""Matmul time by shape (app/accounting/matmul.py) against figures it did not make: the MAMF table of
stas00/ml-engineering (compute/accelerator/README.md), its wave-quantization worked example
(training/performance/README.md), the wave-quantization idle ratios of Bullet (Lin et al., ASPLOS '26,
Table 2), FlashAttention-2's FLOP formula and rates, Megatron-LM's tensor-parallel splits, and hand
calculations written out below."""

import statistics
import time
import tomllib
from importlib import resources

import pytest

from app.accounting import blocks, flops, hardware, matmul
from app.accounting.errors import InvalidInput
from app.accounting.hardware import CustomGpu, CustomPeaks
from app.accounting.models import preset
from app.accounting.transformer import TransformerConfig

# Llama 3 8B (models.toml preset llama3-8b): d 4096, 32 heads of 128, 8 key/value heads, SwiGLU 14336.
LLAMA3_8B = preset("llama3-8b")
GPT3_175B = preset("gpt3-175b")


def _data() -> dict:
    return tomllib.loads(resources.files("app.accounting").joinpath("data/matmul.toml").read_text())


# ---- the data file ----------------------------------------------------------------------------

def test_every_catalogue_part_has_a_row_and_every_sm_count_a_source():
    ids = [row["id"] for row in tomllib.loads(
        resources.files("app.accounting").joinpath("data/hardware.toml").read_text())["accelerator"]]
    rows = _data()["gpu"]
    assert [r["id"] for r in rows] == ids
    for r in rows:
        assert r["attention"] in ("fa2", "fa3")
        assert ("sm_count" in r) == ("sm_source" in r)
        assert ("sm_count" in r) == (not r["id"].startswith("tpu"))  # TPUs have no SMs
        for key, m in r.get("mamf", {}).items():
            assert key in ("bfloat16", "float8") and m["best_shape"].count("x") == 2
            assert 0 < m["tflops"] < m["theory_tflops"]


# The MAMF table, typed from ml-engineering's compute/accelerator/README.md (MAMF, Theory,
# Efficiency columns).
PUBLISHED = [
    ("a100-80gb", "bfloat16", 271.2, 312, 86.9), ("h100-sxm", "bfloat16", 794.5, 989, 80.3),
    ("b200", "bfloat16", 1745.0, 2250, 77.6), ("mi300x", "bfloat16", 668.4, 1300, 51.4),
    ("h100-sxm", "float8", 1402.6, 1979, 70.9), ("h200", "float8", 1453.4, 1979, 73.4),
    ("b200", "float8", 3432.5, 4500, 76.3),
]


@pytest.mark.parametrize(("gpu", "key", "tflops", "theory", "efficiency"), PUBLISHED)
def test_the_mamf_rows_are_the_published_table(gpu, key, tflops, theory, efficiency):
    row = next(r for r in _data()["gpu"] if r["id"] == gpu)["mamf"][key]
    assert (row["tflops"], row["theory_tflops"]) == (tflops, theory)
    # The table's Efficiency column is MAMF / Theory, to 0.1%.
    assert matmul.mamf_share(gpu, key) == pytest.approx(efficiency / 100, abs=0.0006)


def test_the_h200_bf16_is_the_h100_row_the_table_says_it_equals():
    # BF16 table, H100 SXM row, Notes: "H200 is the same".
    assert matmul.mamf_share("h200", "bfloat16") == matmul.mamf_share("h100-sxm", "bfloat16") == 794.5 / 989


def test_unmeasured_parts_take_the_median_of_the_nvidia_rows():
    # A100 SXM, GH200, A100 PCIe, H100 SXM, B300, B200, GB200
    nvidia_bf16 = [86.9, 83.8, 81.1, 80.3, 78.6, 77.6, 72.9]
    nvidia_fp8 = [77.6, 76.3, 74.5, 73.4, 72.3, 70.9]  # GH200, B200, B300, H200, GB200, H100
    assert matmul.mamf_share("l40s", "bfloat16") == pytest.approx(statistics.median(nvidia_bf16) / 100)
    fp8_median = statistics.median(nvidia_fp8) / 100
    assert matmul.mamf_share("l40s", "float8") == pytest.approx(fp8_median, abs=0.001)
    assert matmul.mamf_share("l40s", "float16") == matmul.mamf_share("l40s", "bfloat16")
    # MI300X has a BF16 row and no FP8 one: its own share, 668.4 / 1300, stands for both.
    assert matmul.mamf_share("mi300x", "float8") == 668.4 / 1300


def test_a_device_runs_at_its_peak_times_the_share_and_follows_an_override():
    dev = matmul.for_gpu("a100-80gb", "bfloat16")
    assert dev.mamf_flop_per_sec == pytest.approx(271.2e12)
    assert (dev.sm_count, dev.operand_bytes, dev.output_bytes) == (108, 2, 2)
    faster = hardware.gpu("a100-80gb", hardware.GpuOverrides(
        peak_flop_per_sec=hardware.PeakOverrides(bfloat16=400e12)))
    assert matmul.device(faster, "bfloat16").mamf_flop_per_sec == pytest.approx(400e12 * 271.2 / 312)
    fp8 = matmul.for_gpu("h100-sxm", "float8_e4m3fn")
    assert fp8.mamf_flop_per_sec == pytest.approx(1979e12 * 1402.6 / 1979)
    assert (fp8.operand_bytes, fp8.output_bytes) == (1, 2)  # float8 GEMMs write bfloat16


def test_every_catalogue_part_gets_a_device():
    for gpu_id, acc in hardware.catalogue().items():
        # Volta has no bfloat16 path: its GEMMs run in float16.
        dev = matmul.for_gpu(gpu_id, "bfloat16" if "bfloat16" in acc.peak_flop_per_sec else "float16")
        assert 0 < dev.mamf_flop_per_sec < dev.peak_flop_per_sec
    assert matmul.for_gpu("tpu-v5p", "bfloat16").sm_count is None


def test_a_custom_gpu_takes_the_fallback_and_no_waves():
    acc = hardware.custom(CustomGpu(name="my-card", memory_bytes=24 * 10**9,
                                    memory_bandwidth_bytes_per_sec=1e12,
                                    peak_flop_per_sec=CustomPeaks(bfloat16=100e12)))
    dev = matmul.device(acc, "bfloat16")
    assert dev.sm_count is None and dev.mamf_flop_per_sec == pytest.approx(100e12 * 0.803)
    # With no waves a compute-bound GEMM runs at exactly the MAMF rate.
    assert matmul.gemm_seconds(4096, 4096, 4096, dev) == pytest.approx(2 * 4096**3 / (100e12 * 0.803))


def test_a_dtype_the_part_lacks_is_refused_naming_the_field():
    with pytest.raises(InvalidInput) as err:
        matmul.for_gpu("a100-80gb", "float8_e4m3fn")  # no FP8 on Ampere
    assert err.value.field == "dtype"


# ---- tile and wave quantization ----------------------------------------------------------------

def test_ml_engineering_llama_mlp_worked_example():
    """training/performance/README.md, 'Do more SMs give more TFLOPS?': Llama-3.1-8B's MLP
    up-projection at 8K tokens, an 8192 x 14336 output over a 128 x 256 tile, is 64 * 56 = 3584
    blocks: 25 waves on 148 SMs, 24 on 152."""
    assert matmul.waves(8192, 14336, 148).tiles == 3584
    assert matmul.waves(8192, 14336, 148).waves == 25
    assert matmul.waves(8192, 14336, 152).waves == 24
    # Its table: 148 blocks are one wave on 148 SMs and 152 need two; 296 fill two exactly.
    assert [matmul.waves(256, 128 * c, 148).waves for c in (148, 152, 296)] == [1, 2, 2]


# Bullet, Table 2: theoretical SM idle ratio (%) from wave quantization, Llama-3.1-8B prefill on A100.
BULLET = [(1024, 11.1, 40.7), (2048, 11.1, 21.0), (4096, 11.1, 5.2), (16384, 1.9, 0.2)]


@pytest.mark.parametrize(("tokens", "qkv_idle", "o_idle"), BULLET)
def test_bullet_wave_quantization_idle_ratios_on_a100(tokens, qkv_idle, o_idle):
    """QKV is (tokens x 4096) @ (4096 x 6144), O (tokens x 4096) @ (4096 x 4096). Every dimension is a
    multiple of the tile here, so the only loss is the idle tail: a GEMM reaches 1 - idle of MAMF."""
    a100 = matmul.for_gpu("a100-80gb", "bfloat16")
    for n, idle in ((6144, qkv_idle), (4096, o_idle)):
        t = matmul.gemm_time(matmul.Gemm("x", tokens, n, 4096), a100)
        reached = t.flops / t.compute_seconds / a100.mamf_flop_per_sec
        assert reached == pytest.approx(1 - idle / 100, abs=0.0006)


def test_a_wave_costs_the_same_full_or_not():
    """Hand calculation on A100 (108 SMs, 256 x 128 tiles): m = 256 rows is one tile tall, so n =
    108 x 128 = 13824 is 108 tiles, one full wave; one column more is 109 tiles, two waves, and
    the time doubles for 1/108 more work. Throughput is a staircase, not monotone in size."""
    a100 = matmul.for_gpu("a100-80gb", "bfloat16")
    one_wave = matmul.gemm_time(matmul.Gemm("x", 256, 13824, 4096), a100)
    assert one_wave.waves == 1
    assert one_wave.compute_seconds == pytest.approx(2 * 256 * 13824 * 4096 / 271.2e12)
    past = matmul.gemm_time(matmul.Gemm("x", 256, 13824 + 1, 4096), a100)
    assert past.waves == 2 and past.seconds == pytest.approx(2 * one_wave.seconds)
    assert matmul.gemm_seconds(256, 2 * 13824, 4096, a100) == pytest.approx(past.seconds)
    smaller, bigger = (matmul.gemm_seconds(256, n, 4096, a100) / n for n in (13824, 13824 + 128))
    assert bigger > 1.9 * smaller  # more work, lower throughput


def test_tile_quantization_pays_for_the_whole_tile():
    """Hand calculation on A100: 27648 = 108 x 256 rows, n = 128 is 108 tiles (one wave); n = 129
    needs a second tile column, 216 tiles, two waves, for 129/256 of their work."""
    a100 = matmul.for_gpu("a100-80gb", "bfloat16")
    full = matmul.gemm_time(matmul.Gemm("x", 27648, 128, 4096), a100)
    ragged = matmul.gemm_time(matmul.Gemm("x", 27648, 129, 4096), a100)
    assert (full.tiles, full.waves, ragged.tiles, ragged.waves) == (108, 1, 216, 2)
    assert ragged.flops / ragged.compute_seconds / a100.mamf_flop_per_sec == pytest.approx(129 / 256)


def test_qkv_of_llama3_8b_on_h100_by_hand():
    """(8192 x 4096) @ (4096 x 6144): 8192/256 x 6144/128 = 32 x 48 = 1536 tiles over 132 SMs is
    ceil(11.6) = 12 waves, 1584 tile slots: 1536/1584 = 97.0% of MAMF."""
    h100 = matmul.for_gpu("h100-sxm", "bfloat16")
    t = matmul.gemm_time(matmul.Gemm("qkv", 8192, 6144, 4096), h100)
    assert (t.tiles, t.waves, t.bound) == (1536, 12, "compute")
    assert t.seconds == pytest.approx(12 * 132 * 2 * 256 * 128 * 4096 / (989.5e12 * 794.5 / 989))


def test_the_published_best_shapes_come_within_their_quantization_of_mamf():
    """mamf-finder's best shapes (MxNxK): the model's throughput there is MAMF less its idle tail,
    A100 1024x10240x5120: 320 tiles in 3 waves of 108 (98.8%); H100 2048x2048x13312: 128 tiles in
    one wave of 132 (97.0%)."""
    for gpu, (m, n, k), tail in (("a100-80gb", (1024, 10240, 5120), 320 / 324),
                                 ("h100-sxm", (2048, 2048, 13312), 128 / 132)):
        dev = matmul.for_gpu(gpu, "bfloat16")
        reached = 2 * m * n * k / matmul.gemm_seconds(m, n, k, dev)
        assert reached == pytest.approx(tail * dev.mamf_flop_per_sec)
        assert 0.96 * dev.mamf_flop_per_sec < reached <= dev.mamf_flop_per_sec


def test_large_gemms_approach_the_mamf_ceiling_and_never_pass_it():
    h100 = matmul.for_gpu("h100-sxm", "bfloat16")
    for m, n, k in ((32768, 32768, 8192), (8192, 28672, 4096), (1000, 3000, 777), (8, 65536, 4096)):
        t = matmul.gemm_time(matmul.Gemm("x", m, n, k), h100)
        assert t.flops / t.seconds <= h100.mamf_flop_per_sec * (1 + 1e-12)
    big = matmul.gemm_time(matmul.Gemm("x", 32768, 32768, 8192), h100)
    # 128 x 256 = 32768 tiles over 132 SMs: 249 waves, 32868 slots.
    assert big.flops / big.seconds / h100.mamf_flop_per_sec == pytest.approx(32768 / 32868)


def test_a_thin_gemm_is_memory_bound():
    """Decode: (1 x 8192) @ (8192 x 8192) in bf16 reads 2 x (8192 + 8192^2) bytes and writes 2 x
    8192, at 1 FLOP/byte, far under H100's ridge (794.5e12 / 3.35e12 = 237 FLOP/byte)."""
    h100 = matmul.for_gpu("h100-sxm", "bfloat16")
    t = matmul.gemm_time(matmul.Gemm("x", 1, 8192, 8192), h100)
    assert t.bound == "memory"
    assert t.seconds == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / 3.35e12)


# ---- a layer's GEMMs ---------------------------------------------------------------------------

def _layer(cfg: TransformerConfig, which: int = 0) -> blocks.Layer:
    return blocks.layers(cfg)[which]


def test_llama3_8b_layer_gemms_split_as_megatron_splits_them():
    """Megatron-LM: linear_qkv and linear_fc1 column-parallel (n / t), linear_proj and linear_fc2
    row-parallel (k / t). q 4096 + k 1024 + v 1024 = 6144 wide; fc1 holds gate and up, 2 x 14336."""
    t = 8192
    assert matmul.layer_gemms(_layer(LLAMA3_8B), t, 1) == (
        matmul.Gemm("qkv", t, 6144, 4096), matmul.Gemm("o", t, 4096, 4096),
        matmul.Gemm("fc1", t, 28672, 4096), matmul.Gemm("down", t, 4096, 14336))
    assert matmul.layer_gemms(_layer(LLAMA3_8B), t, 8) == (
        matmul.Gemm("qkv", t, 768, 4096), matmul.Gemm("o", t, 4096, 512),
        matmul.Gemm("fc1", t, 3584, 4096), matmul.Gemm("down", t, 4096, 1792))


def test_more_tensor_ranks_than_key_value_heads_keep_one_head_each():
    # Llama 3 70B: 64 query heads, 8 key/value heads of 128, d 8192. At t = 16 each rank keeps
    # 64/16 = 4 query heads (512) and one key and one value head (128 each).
    qkv = matmul.layer_gemms(_layer(preset("llama3-70b")), 4096, 16)[0]
    assert (qkv.n, qkv.k) == (512 + 128 + 128, 8192)


def test_gpt3_layer_flops_by_hand():
    """GPT-3 175B, d = 12288: QKV 3d^2, output d^2, MLP 2 x 4d^2 = 12 d^2 weights, 2 FLOPs each
    per token."""
    gemms = matmul.layer_gemms(_layer(GPT3_175B), 2048, 1)
    assert sum(g.flops for g in gemms) == 2 * 2048 * 12 * 12288**2
    backward = matmul.backward_gemms(gemms)
    assert sum(g.flops for g in backward) == 2 * sum(g.flops for g in gemms)
    # dgrad of QKV: dY (2048 x 36864) @ W^T (36864 x 12288); wgrad: X^T (12288 x 2048) @ dY.
    assert backward[:2] == (matmul.Gemm("qkv.dgrad", 2048, 12288, 36864),
                            matmul.Gemm("qkv.wgrad", 12288, 36864, 2048))


def test_experts_run_as_one_grouped_gemm_of_their_expected_tokens():
    # Mixtral 8x7B: 8 experts, top 2, SwiGLU 14336. 8192 tokens x 2 / 8 = 2048 rows per expert.
    layer = _layer(preset("mixtral-8x7b"))
    names = {g.name: g for g in matmul.layer_gemms(layer, 8192, 1)}
    assert names["experts_gate_up"] == matmul.Gemm("experts_gate_up", 2048, 28672, 4096, 8)
    assert names["experts_down"] == matmul.Gemm("experts_down", 2048, 4096, 14336, 8)
    assert names["router"] == matmul.Gemm("router", 8192, 8, 4096)
    # Expert parallel 8: one expert per rank gathers its tokens from 8 ranks: 8 x 2048 rows.
    ep = {g.name: g for g in matmul.layer_gemms(layer, 8192, 1, expert_parallel=8)}
    assert ep["experts_down"] == matmul.Gemm("experts_down", 16384, 4096, 14336, 1)


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3",
                                  "qwen3-30b-a3b", "gemma-2-9b", "phi-3-mini"])
def test_the_gemms_do_the_projection_flops_the_flop_engine_counts(name):
    """At one tensor rank the GEMMs are the layer's projections: the FLOP engine's forward total
    (checked against FlopCounterMode in tests/oracles) less the attention core and the LM head."""
    cfg, seq = preset(name), 1024
    fwd = flops.transformer_forward(cfg, 1, seq)
    gemm_flops = sum(n * sum(g.flops for g in matmul.layer_gemms(layer, seq, 1))
                     for layer, n in blocks.distinct(cfg))
    assert gemm_flops == fwd.total - fwd.lm_head - fwd.attention_scores - fwd.attention_values
    assert matmul.head_gemm(cfg, seq, 1).flops == fwd.lm_head


# ---- attention and the whole micro-batch ------------------------------------------------------

def test_the_attention_core_runs_at_flash_attention_rates():
    """FlashAttention-2's FLOP formula (section 4.1): 4 s^2 d heads forward, halved with a causal
    mask; backward 2.5x forward. Llama 3 8B, one 8192-token sequence: 4 x 8192^2 x 128 x 32 / 2.
    A100 runs it at FA2's 230 TFLOPs/s forward and 156 backward; H100 at FA3's 740 and 450."""
    fa_forward = 4 * 8192**2 * 128 * 32 / 2
    for gpu, fwd_rate, bwd_rate in (("a100-80gb", 230e12, 156e12), ("h100-sxm", 740e12, 450e12)):
        dev = matmul.for_gpu(gpu, "bfloat16")
        f, b = matmul.attention_core_seconds(_layer(LLAMA3_8B), batch=1, seq_len=8192, tp=1, dev=dev)
        assert f == pytest.approx(fa_forward / fwd_rate)
        assert b == pytest.approx(2.5 * fa_forward / bwd_rate)
        # Heads split over tensor ranks.
        f8, _ = matmul.attention_core_seconds(_layer(LLAMA3_8B), batch=1, seq_len=8192, tp=8, dev=dev)
        assert f8 == pytest.approx(f / 8)
    # FP8 GEMMs leave attention in bf16: the same rates.
    fp8 = matmul.for_gpu("h100-sxm", "float8_e4m3fn")
    assert fp8.attention_forward_flop_per_sec == pytest.approx(740e12)


def test_step_matmul_adds_up_its_parts():
    h100 = matmul.for_gpu("h100-sxm", "bfloat16")
    r = matmul.step_matmul(LLAMA3_8B, seq_len=8192, micro_batch=1, tp=1, dev=h100)
    layer = _layer(LLAMA3_8B)
    gemms = matmul.layer_gemms(layer, 8192, 1)
    f = sum(matmul.gemm_time(g, h100).seconds for g in gemms)
    cf, _ = matmul.attention_core_seconds(layer, batch=1, seq_len=8192, tp=1, dev=h100)
    assert r.forward_layers_seconds == pytest.approx(32 * (f + cf))
    assert r.attention_core_forward_seconds == pytest.approx(32 * cf)
    fwd = flops.transformer_forward(LLAMA3_8B, 1, 8192)  # "full": the plan's count
    assert r.forward_flops == fwd.total
    assert r.efficiency == pytest.approx(3 * fwd.total / (
        (r.forward_layers_seconds + r.backward_layers_seconds + r.head_forward_seconds
         + r.head_backward_seconds) * 989.5e12))
    # The layers' GEMMs alone stay under the MAMF share (794.5 / 989).
    assert r.layer_gemm_efficiency <= 794.5 / 989
    assert r.layer_gemm_efficiency > 0.95 * 794.5 / 989  # big GEMMs: a few percent of quantization


def test_small_models_get_less_of_the_peak_than_large_ones():
    """The point of the module: no knob, and a thin model's GEMMs reach less. GPT-2 small (d 768)
    at 8 tensor ranks has 96-wide GEMMs; GPT-3 175B's stay large."""
    a100 = matmul.for_gpu("a100-80gb", "bfloat16")
    small = matmul.step_matmul(preset("gpt2"), seq_len=1024, micro_batch=8, tp=8, dev=a100)
    large = matmul.step_matmul(GPT3_175B, seq_len=2048, micro_batch=4, tp=8, dev=a100)
    assert small.layer_gemm_efficiency < 0.5 * large.layer_gemm_efficiency


def test_bad_sizes_are_refused_naming_the_field():
    h100 = matmul.for_gpu("h100-sxm", "bfloat16")
    for kwargs, field in ((dict(tp=0), "tensor_parallel"), (dict(seq_len=0), "seq_len"),
                          (dict(expert_parallel=-1), "expert_parallel"),
                          (dict(micro_batch=0), "micro_batch")):
        args = dict(seq_len=1024, micro_batch=1, tp=1, dev=h100) | kwargs
        with pytest.raises(InvalidInput) as err:
            matmul.step_matmul(LLAMA3_8B, **args)
        assert err.value.field == field
    with pytest.raises(InvalidInput) as err:
        matmul.step_matmul(GPT3_175B, seq_len=4096, micro_batch=1, tp=1, dev=h100)  # 2048 learned positions
    assert err.value.field == "seq_len"


def test_a_cached_call_costs_well_under_a_tenth_of_a_millisecond():
    matmul.step_matmul_efficiency(LLAMA3_8B, seq_len=8192, micro_batch=1, tp=8, gpu_id="h100-sxm")
    calls = 2000
    start = time.perf_counter()
    for _ in range(calls):
        matmul.step_matmul_efficiency(LLAMA3_8B, seq_len=8192, micro_batch=1, tp=8, gpu_id="h100-sxm")
    assert (time.perf_counter() - start) / calls < 1e-4
