"""Tables of sustained runs (app/probes/sustained.py) for `tally probe` and `tally burn-in`:
the rate held, and what NVML saw meanwhile. GB = 10^9 bytes; W, J, MHz, degrees C."""

from typing import Any


def _g(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:,.0f}" if abs(x) >= 10_000 else f"{x:.{digits}g}"


def rate(s: Any) -> str:
    """The rate held: TFLOP/s for work with FLOPs, GB/s for a copy."""
    if s is None:
        return "-"
    if s.flop_per_sec is not None:
        return f"{_g(s.flop_per_sec / 1e12)} TFLOP/s"
    return f"{_g(s.bytes_per_sec / 1e9)} GB/s"


def reasons(s: Any) -> str:
    return ", ".join(f"{name} {share * 100:.0f}%" for name, share in s.reasons.items()) or "none"


def row(what: str, s: Any) -> list[str]:
    clock = s.sm_clock_mhz
    return [what, _g(s.seconds, 3), rate(s), _g(s.average_power_watts), _g(s.joules_per_iteration),
            _g(None if s.flop_per_sec_per_watt is None else s.flop_per_sec_per_watt / 1e9),
            "-" if clock is None else f"{clock.mean:.0f} ({clock.min:.0f}-{clock.max:.0f})",
            "-" if s.temperature_c is None else f"{s.temperature_c.max:.0f}",
            reasons(s) if s.samples else "no NVML"]


HEADERS = ["sustained", "seconds", "rate held", "watts", "J/iteration", "GFLOP/s per W", "SM MHz (min-max)",
           "max C", "clock-event reasons"]


def table(rows: list[list[str]]) -> Any:
    from rich.table import Table

    out = Table()
    for i, header in enumerate(HEADERS):
        out.add_column(header, justify="left" if i in (0, len(HEADERS) - 1) else "right")
    for r in rows:
        out.add_row(*r)
    return out


def burn_in(result: Any) -> list:
    env = result.environment
    best = next(iter(result.matmul.best.values()), None)
    shape = f"matmul {best.dtype} {best.m}x{best.k}x{best.n}" if best else "matmul"
    t = result.train_step
    rows = [row(shape, result.matmul.sustained), row("device copy", result.bandwidth.sustained),
            row(f"train step {t.model} b{t.batch_size}x{t.seq_len} {t.precision}", t.sustained)]
    burst = _g(best and best.flop_per_sec / 1e12)
    return [f"burn_in on {result.gpu_uuid or env.device_name} ({env.device}), torch {env.torch_version}",
            table(rows), f"matmul burst (median iteration, best shape): {burst} TFLOP/s; the rates above are "
            "held back to back, at the power and thermal state a long run sees"]
