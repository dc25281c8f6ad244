"""A CPU's datasheet peak: cores x clock x FLOPs a core retires per cycle, by its widest vector
FMA. The per-cycle figures are the vendors' (two FMA pipes on every x86 core since Haswell and
Zen 2): Intel's Optimization Reference Manual (248966), table "Peak FLOPs per cycle" (AVX2 + FMA:
32 single-precision FLOPs; AVX-512 with two FMA units: 64); AMD's Software Optimization Guide for
Zen 2 and later (two 256-bit FMA pipes: 32). Without FMA, SSE's 4-lane add and multiply give 8.
The same figure stands for bfloat16 where the core has no bfloat16 dot product (avx512_bf16,
AMX), as PyTorch then converts to float32 around float32 FMAs."""

FP32_FLOPS_PER_CYCLE = {"avx512f": 64, "avx2_fma": 32, "sse": 8}
"""Per core, by the widest of /proc/cpuinfo's flags."""


def isa(flags: set[str]) -> str:
    if "avx512f" in flags:
        return "avx512f"
    if "avx2" in flags and "fma" in flags:
        return "avx2_fma"
    return "sse"


def peak_flop_per_sec(cores: int, clock_hz: float, flags: set[str]) -> float:
    """Dense float32 FLOP/s of `cores` cores at `clock_hz`."""
    return cores * clock_hz * FP32_FLOPS_PER_CYCLE[isa(flags)]
