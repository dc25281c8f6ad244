"""Number formats against the course's examples and torch's own casts."""

import math
import random
import struct

import pytest
import torch

from app.accounting.encode import encode

# Tally name -> torch dtype, for every float format both have.
TORCH_FLOATS = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}
BITS_VIEW = {16: torch.int16, 8: torch.uint8, 32: torch.int32}


def test_course_float32_layout_of_0_15625(api):
    body = api.ok("/api/v1/dtypes/encode", {"value": 0.15625, "dtype": "float32"})
    assert body["bits"] == "0|01111100|01000000000000000000000"
    assert body["exponent_value"] == -3 and body["significand"] == 1.25
    assert body["category"] == "normal" and body["stored"] == 0.15625 and not body["inexact"]


def test_course_1e8_underflows_in_fp16_not_in_bf16(api):
    fp16 = api.ok("/api/v1/dtypes/encode", {"value": 1e-8, "dtype": "fp16"})
    bf16 = api.ok("/api/v1/dtypes/encode", {"value": 1e-8, "dtype": "bf16"})
    assert fp16["stored"] == 0 and fp16["underflow"] and fp16["category"] == "zero"
    assert bf16["stored"] != 0 and not bf16["underflow"]
    # The same facts, from torch.
    assert torch.tensor([1e-8], dtype=torch.float16).item() == 0
    assert torch.tensor([1e-8], dtype=torch.bfloat16).item() == bf16["stored"]


def test_list_has_every_format_with_aliases(api):
    body = api.get("/api/v1/dtypes").json()
    names = {d["name"] for d in body["data"]}
    assert {"float64", "float32", "tfloat32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
            "int8", "uint8", "int32", "int64"} <= names
    assert body["count"] == len(body["data"])
    aliases = {a: d["name"] for d in body["data"] for a in d["aliases"]}
    assert aliases["fp32"] == "float32" and aliases["fp16"] == "float16"
    assert aliases["bf16"] == "bfloat16" and aliases["fp8"] == "float8_e4m3fn"
    for alias in ("fp32", "fp16", "bf16", "fp8"):
        assert api.ok("/api/v1/dtypes/encode", {"value": 1.5, "dtype": alias})["dtype"] == aliases[alias]


@pytest.mark.parametrize("name,dtype", [("float64", torch.float64), ("float32", torch.float32),
                                        *TORCH_FLOATS.items()])
def test_float_limits_match_torch_finfo(api, name, dtype):
    info = api.get(f"/api/v1/dtypes/{name}").json()
    fi = torch.finfo(dtype)
    assert info["bits"] == fi.bits and info["bytes"] == fi.bits // 8
    assert info["max"] == fi.max and info["min_normal"] == fi.smallest_normal
    view = BITS_VIEW.get(fi.bits, torch.int64)
    # eps is the gap above 1.0: decode the bit pattern after 1.0's. (torch.finfo's eps
    # for float8_e5m2fnuz says 0.125, but torch itself decodes the next value as 1.25.)
    after_one = (torch.tensor([1.0]).to(dtype).view(view) + 1).view(dtype)
    assert info["eps"] == after_one.to(torch.float64).item() - 1
    # The smallest subnormal is the bit pattern ...0001, decoded by torch.
    one = torch.tensor([1], dtype=view).view(dtype)
    assert info["min_subnormal"] == one.to(torch.float64).item()


@pytest.mark.parametrize("name,dtype", [("int8", torch.int8), ("uint8", torch.uint8),
                                        ("int32", torch.int32), ("int64", torch.int64)])
def test_int_limits_match_torch_iinfo(api, name, dtype):
    info = api.get(f"/api/v1/dtypes/{name}").json()
    ii = torch.iinfo(dtype)
    assert (info["bits"], info["max"], info["lowest"]) == (ii.bits, ii.max, ii.min)


def _random_float32(fmt_name: str, rng: random.Random, n: int) -> list[float]:
    """Values spread over (and past) a format's range, exactly representable in float32."""
    fi = torch.finfo(TORCH_FLOATS[fmt_name])
    lo = math.log2(fi.smallest_normal) - 12  # deep into underflow
    hi = math.log2(fi.max) + 2
    values = [rng.choice((-1, 1)) * 2 ** rng.uniform(lo, hi) for _ in range(n)]
    # Exact halfway points between neighbours, where ties-to-even decides.
    grid = torch.arange(0, 2 ** (fi.bits - 1), dtype=BITS_VIEW[fi.bits] if fi.bits == 16 else torch.uint8)
    decoded = grid.view(TORCH_FLOATS[fmt_name]).to(torch.float64)
    finite = sorted(v for v in decoded.tolist() if math.isfinite(v))
    values += [(a + b) / 2 for a, b in zip(finite, finite[1:], strict=False)][:: max(1, len(finite) // 300)]
    values += [0.0, -0.0, fi.max, -fi.max, fi.max * 1.03, fi.smallest_normal / 3, 1e-30, 3.4e38]
    return torch.tensor(values, dtype=torch.float32).tolist()


@pytest.mark.parametrize("name", sorted(TORCH_FLOATS))
def test_encode_matches_torch_cast_bit_for_bit(name):
    rng = random.Random(f"tally-{name}")
    values = _random_float32(name, rng, 3000) + [math.inf, -math.inf, math.nan]
    src = torch.tensor(values, dtype=torch.float32)
    cast = src.to(TORCH_FLOATS[name])
    bits = torch.finfo(TORCH_FLOATS[name]).bits
    patterns = cast.view(BITS_VIEW[bits]).tolist()
    stored = cast.to(torch.float64).tolist()
    for value, want_bits, want in zip(values, patterns, stored, strict=True):
        arg = value if math.isfinite(value) else str(value)
        got = encode(arg, name)
        if math.isnan(want):
            assert got.category == "nan", (value, got)
            continue
        if math.isinf(want):
            assert got.stored_text == ("inf" if want > 0 else "-inf"), (value, got)
        else:
            assert got.stored == want, (value, got, want)
        assert int(got.hex, 16) == want_bits % 2**bits, (value, got.hex, hex(want_bits % 2**bits))


def test_float32_encode_matches_torch_from_float64():
    """float64 -> float32 is one rounding in torch, so any double is a fair input."""
    rng = random.Random(32)
    values = [rng.choice((-1, 1)) * 2 ** rng.uniform(-160, 130) for _ in range(3000)]
    values += [2.0**-149 * 1.5, 2.0**-150, 3.4028235677973366e38, 3.5e38]
    cast = torch.tensor(values, dtype=torch.float64).to(torch.float32)
    wants, bits = cast.to(torch.float64).tolist(), cast.view(torch.int32).tolist()
    for value, want, want_bits in zip(values, wants, bits, strict=True):
        got = encode(value, "float32")
        assert (got.stored if got.stored is not None else math.copysign(math.inf, value)) == want
        assert int(got.hex, 16) == want_bits % 2**32


def test_float64_encode_is_the_ieee_bit_pattern():
    rng = random.Random(64)
    for _ in range(2000):
        value = rng.choice((-1, 1)) * 2 ** rng.uniform(-1074, 1023)
        got = encode(value, "float64")
        assert got.stored == value and not got.inexact
        assert int(got.hex, 16) == struct.unpack(">Q", struct.pack(">d", value))[0]


def test_fp4_rounds_to_nearest_even_over_the_ocp_value_table():
    # OCP Microscaling Formats (MX) v1.0, FP4 E2M1: the eight magnitudes, bit patterns 0..7.
    table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    for pattern, magnitude in enumerate(table):
        got = encode(magnitude, "fp4")
        assert got.stored == magnitude and int(got.hex, 16) == pattern
    rng = random.Random(4)
    for _ in range(2000):
        x = rng.uniform(0, 7.5)
        distance = [abs(x - m) for m in table]
        best = min(distance)
        ties = [p for p, dd in enumerate(distance) if dd == best]
        pattern = next((p for p in ties if p % 2 == 0), ties[0])
        got = encode(x, "fp4")
        assert int(got.hex, 16) == pattern, (x, got)
        # Past 6 the next step would be 8 (1.0 x 2^3); from 7 up, rounding goes there.
        assert got.overflow == (x >= 7)


def test_integers_truncate_like_torch():
    values = [3.7, -3.7, 0.5, -0.5, 127.9, -128.9, 255.5, 42.0]
    for name, dtype in (("int8", torch.int8), ("int32", torch.int32), ("uint8", torch.uint8)):
        for v in values:
            if name == "uint8" and v < 0 or name == "int8" and not -129 < v < 128:
                continue
            want = torch.tensor([v], dtype=torch.float32).to(dtype).item()
            assert encode(v, name).stored == want, (name, v)
    clipped = encode(300, "int8")
    assert clipped.stored == 127 and clipped.overflow


def test_overflow_rules_per_format(api):
    e4m3 = api.ok("/api/v1/dtypes/encode", {"value": 500, "dtype": "fp8"})
    assert e4m3["stored"] == 448 and e4m3["overflow"] and e4m3["overflow_rule"] == "saturate"
    nonsat = api.ok("/api/v1/dtypes/encode", {"value": 500, "dtype": "fp8", "saturate": False})
    assert nonsat["category"] == "nan" and nonsat["stored"] is None and nonsat["abs_error"] is None
    fp16 = api.ok("/api/v1/dtypes/encode", {"value": 70000, "dtype": "fp16"})
    assert fp16["category"] == "inf" and fp16["stored_text"] == "inf" and fp16["overflow"]
    clamp = api.ok("/api/v1/dtypes/encode", {"value": -70000, "dtype": "fp16", "saturate": True})
    assert clamp["stored"] == -65504.0


def test_string_values_are_read_exactly(api):
    # 0.1 as a decimal string, not the double nearest to it.
    exact = api.ok("/api/v1/dtypes/encode", {"value": "0.1", "dtype": "float64"})
    assert exact["inexact"] and exact["stored"] == 0.1
    assert exact["stored_exact"] == "0.1000000000000000055511151231257827021181583404541015625"
    hexed = api.ok("/api/v1/dtypes/encode", {"value": "0x1.8p-3", "dtype": "float32"})
    assert hexed["stored"] == 0.1875
    inf = api.ok("/api/v1/dtypes/encode", {"value": "-inf", "dtype": "bf16"})
    assert inf["category"] == "inf" and inf["stored_text"] == "-inf" and inf["bits"] == "1|11111111|0000000"


def test_large_integers_round_once(api):
    # 2^60 + 2^36 + 1: a float64 cast first would land on the tie 2^60 + 2^36 and round
    # to even (2^60) in float32; read exactly, the +1 breaks the tie upwards.
    value = 2**60 + 2**36 + 1
    body = api.ok("/api/v1/dtypes/encode", {"value": value, "dtype": "float32"})
    assert body["stored"] == 2**60 + 2**37
    assert float(torch.tensor([2**60 + 2**36], dtype=torch.float64).to(torch.float32).item()) == 2**60
