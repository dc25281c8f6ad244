"""A GEMM's time from this device's own matmul runs: a fitted surface over (m, k, n) per dtype.

    measured  t(m, k, n) = alpha + flops / rate                  (the line, one per dtype)
    surface   t(m, k, n) = (alpha + flops / rate) x exp(r(m, k, n)) - alpha

The line is least squares of relative error over every measured shape (lsq.py): alpha is what a
matmul call costs whatever its size (dispatch, and the timer's one call per iteration), rate the
large-shape throughput. The shape effects the line cannot hold (tiles, cache fits, thin operands)
are its residuals r_i = ln(t_i / line_i) at the measured shapes, carried to a new shape by a
Gaussian kernel in (ln m, ln k, ln n), width KERNEL_WIDTH, shrunk towards the line by PRIOR_WEIGHT:
a shape near measured ones takes their residual, a shape far from all of them the line's time.
alpha is taken off the answer: a step charges every op's dispatch once, in its own per-op term
(step.py), and a GEMM there is one of those ops. No shape runs faster than the fastest measured
work rate (the ceiling), as mamf-finder's best shape bounds a GPU's.
"""

import math
from dataclasses import dataclass

from app.accounting.calibration import lsq
from app.accounting.calibration.profile import MatmulSample
from app.accounting.errors import InvalidInput

KERNEL_WIDTH = 1.0
"""In natural-log units of each dimension: a shape 2.7x away in one dimension weighs e^-1/2."""
PRIOR_WEIGHT = 0.1
"""How much the line's own answer (residual 0) weighs against the kernel's weights, each <= 1."""


@dataclass(frozen=True, slots=True)
class Surface:
    dtype: str
    alpha_s: float
    rate_flop_per_s: float
    """The line's slope: large-shape throughput."""
    ceiling_flop_per_s: float
    """The fastest measured shape's work rate: FLOPs over its time less alpha (at most half its time
    is taken off, so a shape that is nearly all call cost cannot set a runaway ceiling)."""
    points: tuple[tuple[float, float, float, float], ...]
    """(ln m, ln k, ln n, residual) per measured shape."""
    rms_relative_error: float
    """Of the line alone over the measured shapes: how much the residuals have to carry."""

    def seconds(self, m: int, k: int, n: int, groups: int = 1) -> float:
        """Work seconds of (m x k) @ (k x n), `groups` times in one kernel (alpha not included)."""
        if m <= 0 or k <= 0 or n <= 0 or groups <= 0:
            return 0.0
        flops = 2.0 * m * k * n
        at = (math.log(m), math.log(k), math.log(n))
        total = weighted = 0.0
        for lm, lk, ln_, r in self.points:
            d2 = (lm - at[0]) ** 2 + (lk - at[1]) ** 2 + (ln_ - at[2]) ** 2
            w = math.exp(-d2 / (2 * KERNEL_WIDTH ** 2))
            total, weighted = total + w, weighted + w * r
        residual = weighted / (total + PRIOR_WEIGHT)
        work = (self.alpha_s + flops / self.rate_flop_per_s) * math.exp(residual) - self.alpha_s
        return groups * max(work, flops / self.ceiling_flop_per_s)


def fit(samples: list[MatmulSample], dtype: str, *, field: str = "calibration") -> Surface:
    """The surface of one dtype's samples; InvalidInput naming `field` without at least two shapes."""
    mine = [s for s in samples if s.dtype == dtype and s.seconds > 0]
    if len({(s.m, s.k, s.n) for s in mine}) < 2:
        raise InvalidInput(field, f"the profile has {len(mine)} {dtype} matmul shape(s); a surface needs two "
                                  "or more (run the matmul probe in this dtype)")
    flops = [2.0 * s.m * s.k * s.n for s in mine]
    # Relative error: rows [1/t, F/t] . [alpha, 1/rate] ~ 1.
    rows = [[1 / s.seconds, f / s.seconds] for s, f in zip(mine, flops, strict=True)]
    alpha, per_flop = lsq.nonnegative(rows, [1.0] * len(mine))
    per_flop = per_flop or 1 / max(f / s.seconds for s, f in zip(mine, flops, strict=True))  # all in alpha
    ceiling = max(f / max(s.seconds - alpha, s.seconds / 2) for s, f in zip(mine, flops, strict=True))
    line = [alpha + f * per_flop for f in flops]
    points = tuple((math.log(s.m), math.log(s.k), math.log(s.n), math.log(s.seconds / t))
                   for s, t in zip(mine, line, strict=True))
    rms = math.sqrt(sum((t / s.seconds - 1) ** 2 for s, t in zip(mine, line, strict=True)) / len(mine))
    return Surface(dtype, alpha, 1 / per_flop, ceiling, points, rms)
