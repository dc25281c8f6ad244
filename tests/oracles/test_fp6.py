"""FP6, both OCP MX element formats (E2M3 and E3M2), against ml_dtypes' float6_e2m3fn and float6_e3m2fn
(Google's NumPy dtypes, the formats JAX and the MX emulation libraries use): every one of the 64 bit
patterns decodes to the value Tally stores for it, and random values round to nearest even as
ml_dtypes casts them."""

import random

import ml_dtypes
import numpy as np
import pytest

from app.accounting.encode import encode

FORMATS = {"fp6": ml_dtypes.float6_e2m3fn, "fp6_e3m2": ml_dtypes.float6_e3m2fn}


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_bit_pattern_is_ml_dtypes_value(name):
    values = np.arange(64, dtype=np.uint8).view(FORMATS[name])
    for pattern, value in enumerate(float(v) for v in values):
        got = encode(value, name)
        assert (got.stored, int(got.hex, 16)) == (value, pattern), pattern


@pytest.mark.parametrize("name", list(FORMATS))
def test_values_round_as_ml_dtypes_casts_them(name):
    dtype = FORMATS[name]
    top = float(ml_dtypes.finfo(dtype).max)
    assert top == {"fp6": 7.5, "fp6_e3m2": 28.0}[name]  # OCP MX v1.0, section 5.3.2
    rng = random.Random(6)
    for _ in range(3000):
        x = rng.uniform(-top, top)
        assert encode(x, name).stored == float(np.array(x).astype(dtype)), x
    # Past the largest finite value there is no inf and no NaN: Tally saturates, as MX conversions do.
    assert encode(2 * top, name).stored == top
