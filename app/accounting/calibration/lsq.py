"""Small least squares with non-negative coefficients, in plain Python: a calibration fits two or
three coefficients to a handful of runs, so neither numpy nor an iterative solver is needed."""

import math


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """a x = b by Gaussian elimination with partial pivoting; None when a is singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(v) for row in m for v in row[:n]) or 1.0
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def nonnegative(rows: list[list[float]], targets: list[float]) -> list[float]:
    """Coefficients c >= 0 minimising sum((rows[i] . c - targets[i])^2): the unconstrained
    solution over an active set that drops the most negative coefficient until none is (Lawson
    and Hanson's NNLS, which for three columns needs at most three passes). Columns are scaled
    to unit norm first, so seconds per op and seconds per byte (15 orders apart) solve alike."""
    width = len(rows[0]) if rows else 0
    norms = [math.sqrt(sum(r[j] ** 2 for r in rows)) or 1.0 for j in range(width)]
    scaled = [[r[j] / norms[j] for j in range(width)] for r in rows]
    active = [j for j in range(width) if any(r[j] for r in rows)]
    while active:
        ata = [[sum(r[i] * r[j] for r in scaled) for j in active] for i in active]
        atb = [sum(r[i] * t for r, t in zip(scaled, targets, strict=True)) for i in active]
        found = _solve(ata, atb)
        if found is None:  # collinear columns: keep the first, as one run cannot tell them apart
            active = active[:1] if len(active) > 1 else []
            continue
        worst = min(range(len(found)), key=lambda i: found[i])
        if found[worst] >= 0:
            out = [0.0] * width
            for j, value in zip(active, found, strict=True):
                out[j] = value / norms[j]
            return out
        del active[worst]
    return [0.0] * width
