"""The attention core's time from this device's own scaled-dot-product attention runs (the
attention probe), beside its matmul surface.

One layer's core is two batched GEMMs a head over the (query, key) pairs it scores:

    scores   Q K^T   (s x d) @ (d x s)
    values   P V     (s x s) @ (s x d)

With a causal mask a fused kernel skips the masked tiles: the share below is half the pairs, the
6ND-era convention Tally's FLOP counts keep (blocks/base.score_pairs_doubled; the diagonal's
s/2 more is under 1% at s >= 64). The backward recomputes the scores (FlashAttention-2,
section 3.1) and runs dP = dO V^T (a scores shape), dV = P^T dO and dQ = dS K (values shapes) and
dK^T = Q^T dS ((d x s) @ (s x s)): five more, as torch's flop_counter.sdpa_backward_flop_count.
A fused kernel (flash, memory-efficient) also runs the softmax and its
online rescaling between them; the math path writes the s x s scores out and reads them back.
Neither is a GEMM the matmul surface timed, so the profile keeps SDPA's own runs and this module
takes, per measured shape, the ratio

    r = measured seconds / the surface's seconds for the same GEMMs (at their causal share)

for the forward and for the forward with its backward, and carries it to a new shape by the
core's forward FLOPs: linear in ln FLOPs between measured shapes, held flat beyond them. A small
core is bound by its launches and softmax, a large one by its GEMMs; r moves between the two as
the core grows, so the nearest measured sizes say most about a new one.
"""

import math
from dataclasses import dataclass

from app.accounting import matmul as mm
from app.accounting.blocks.base import score_pairs_doubled
from app.accounting.calibration.profile import AttentionSample, median
from app.accounting.calibration.surface import Surface


def share(seq_len: int, causal: bool, window: int | None = None) -> float:
    """The fraction of the s x s (query, key) pairs a kernel computes: all, or the causal half,
    within a sliding window where the layer has one."""
    pairs = score_pairs_doubled(seq_len, window, "halved" if causal else "full")
    return pairs / (2 * seq_len * seq_len)


@dataclass(frozen=True, slots=True)
class Core:
    """One attention layer's core over a batch: `groups` = batch x heads GEMMs of each shape."""

    forward: tuple[mm.Gemm, ...]
    backward: tuple[mm.Gemm, ...]
    share: float

    @property
    def forward_flops(self) -> float:
        """FLOPs the forward computes (its causal share of the two GEMMs)."""
        return self.share * sum(g.flops for g in self.forward)

    def gemm_seconds(self, surface: Surface, *, backward: bool) -> float:
        """The surface's seconds for the core's GEMMs at their share, the backward's too when asked."""
        gemms = self.forward + (self.backward if backward else ())
        return self.share * sum(surface.seconds(g.m, g.k, g.n, g.groups) for g in gemms)

    def seconds(self, surface: Surface, curve: "Curve | None", *, backward: bool) -> float:
        """The core's seconds: its GEMMs on the surface, scaled by SDPA's measured ratio where the
        profile has attention runs in the surface's dtype (curve), as bare GEMMs where it has none."""
        ratio = 1.0 if curve is None else curve.ratio(self.forward_flops, backward=backward)
        return ratio * self.gemm_seconds(surface, backward=backward)


def core(*, batch: int, heads: int, seq_len: int, head_dim: int, causal: bool = True,
         window: int | None = None) -> Core:
    groups = batch * heads
    scores = mm.Gemm("scores", seq_len, seq_len, head_dim, groups)  # Gemm(name, m, n, k, groups)
    values = mm.Gemm("values", seq_len, head_dim, seq_len, groups)
    key_grad = mm.Gemm("key_grad", head_dim, seq_len, seq_len, groups)  # dK^T = Q^T dS: (d x s) @ (s x s)
    return Core((scores, values), (scores, scores, values, values, key_grad), share(seq_len, causal, window))


@dataclass(frozen=True, slots=True)
class Curve:
    """SDPA's seconds over the surface's for the same GEMMs, by the core's forward FLOPs."""

    dtype: str
    points: tuple[tuple[float, float, float], ...]
    """(ln forward FLOPs, forward ratio, forward-and-backward ratio), ascending."""
    jobs: tuple[int, ...]

    def ratio(self, forward_flops: float, *, backward: bool) -> float:
        column = 2 if backward else 1
        x = math.log(max(forward_flops, 1.0))
        pts = self.points
        if x <= pts[0][0]:
            return pts[0][column]
        for lo, hi in zip(pts, pts[1:], strict=False):
            if x <= hi[0]:
                t = (x - lo[0]) / (hi[0] - lo[0]) if hi[0] > lo[0] else 1.0
                return lo[column] + t * (hi[column] - lo[column])
        return pts[-1][column]


def fit(samples: tuple[AttentionSample, ...], surface: Surface) -> Curve | None:
    """The curve of the samples in the surface's dtype; None where there are none. Samples of one
    FLOP count (two shapes that differ only in how they split the work) take their median ratio."""
    by_flops: dict[float, list[tuple[float, float]]] = {}
    jobs: set[int] = set()
    for s in samples:
        if s.dtype != surface.dtype:
            continue
        c = core(batch=s.batch, heads=s.heads, seq_len=s.seq_len, head_dim=s.head_dim, causal=s.causal)
        forward, both = c.gemm_seconds(surface, backward=False), c.gemm_seconds(surface, backward=True)
        if forward <= 0 or both <= 0:
            continue
        by_flops.setdefault(math.log(c.forward_flops), []).append(
            (s.forward_seconds / forward, s.forward_backward_seconds / both))
        jobs.update(s.jobs)
    if not by_flops:
        return None
    points = tuple((x, median([f for f, _ in r]), median([b for _, b in r]))
                   for x, r in sorted(by_flops.items()))
    return Curve(surface.dtype, points, tuple(sorted(jobs)))



@dataclass(frozen=True, slots=True)
class Rates:
    """SDPA's measured rates at the profile's largest attention core in a dtype, in the count a
    fused kernel runs (the causal half; a backward is 2.5 forwards): what a plan's cores, larger
    than the probe's, run at."""

    forward_flop_per_sec: float
    backward_flop_per_sec: float
    shape: str
    jobs: tuple[int, ...]


def rates(samples: tuple[AttentionSample, ...], dtype: str) -> Rates | None:
    """None without a sample in `dtype` whose backward took longer than its forward."""
    mine = [s for s in samples if s.dtype == dtype and s.forward_backward_seconds > s.forward_seconds]
    if not mine:
        return None
    flops, top = max(((core(batch=s.batch, heads=s.heads, seq_len=s.seq_len, head_dim=s.head_dim,
                             causal=s.causal).forward_flops, s) for s in mine), key=lambda pair: pair[0])
    backward_s = top.forward_backward_seconds - top.forward_seconds
    return Rates(flops / top.forward_seconds, 2.5 * flops / backward_s,
                 f"b{top.batch} h{top.heads} s{top.seq_len} d{top.head_dim}", top.jobs)
