"""The two links a collective crosses, read from the catalogue's interconnect row with each
figure a request gives in its place. Bandwidths per GPU per direction; latencies per ring step.
A figure neither gives is None: the caller says what stands in, or which field to give."""

from app.accounting.hardware import Accelerator

Figures = tuple[float | None, float | None]
"""(bytes_per_sec, latency_s)."""


def node(acc: Accelerator | None, bytes_per_sec: float | None, latency_s: float | None) -> Figures:
    """Inside a node: the row's node link, or the part's interconnect where it has no row."""
    ic = acc.interconnect if acc else None
    catalogue = ic.node_link_bytes_per_sec if ic else acc.interconnect_bytes_per_sec if acc else None
    return bytes_per_sec or catalogue, latency_s if latency_s is not None else ic and ic.node_link_latency_s


def network(acc: Accelerator | None, bytes_per_sec: float | None, latency_s: float | None) -> Figures:
    """Between nodes: each GPU's share of the reference node's NICs."""
    ic = acc.interconnect if acc else None
    return (bytes_per_sec or (ic.network_bytes_per_sec_per_gpu if ic else None),
            latency_s if latency_s is not None else ic and ic.network_latency_s)
