"""The two links a collective crosses, read from the catalogue's interconnect row with each
figure a request gives in its place. Bandwidths per GPU per direction; latencies per ring step.
A figure neither gives is None: the caller says what stands in, or which field to give.

The catalogue's figures are line rates, and its row says what the node link is made of (`kind`),
which sets the share of the line rate NCCL gets (app/accounting/comm/achievable.py). A bandwidth
a request gives is a figure measured on the caller's own fabric (nccl-tests' busbw): `link`
marks it achieved, so it is not derated again."""

from app.accounting.comm.achievable import NETWORK, Kind
from app.accounting.comm.collectives import Link
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


def node_kind(acc: Accelerator | None) -> Kind | None:
    """What the catalogue row says the node link is: NVLink (its generation, through NVSwitch or
    not), PCIe or Infinity Fabric; None for a part with no row (a custom GPU, a TPU)."""
    ic = acc.interconnect if acc else None
    if ic is None:
        return None
    nvlink = ic.link == "nvlink"
    return Kind(ic.link, ic.nvlink_generation if nvlink else None, nvlink and ic.nvswitch)


def link(bytes_per_sec: float, latency_s: float, *, given: bool, kind: Kind | None) -> Link:
    """A collective's link: a given bandwidth is achieved (not derated), a catalogue one a line
    rate of `kind`."""
    return Link(bytes_per_sec, latency_s, kind=None if given else kind, achieved=given)


def node_link(acc: Accelerator | None, bytes_per_sec: float | None, latency_s: float | None,
              default_latency_s: float) -> Link | None:
    """The node link as `node` reads it, with its kind; None where neither names a bandwidth."""
    bw, lat = node(acc, bytes_per_sec, latency_s)
    if bw is None:
        return None
    return link(bw, default_latency_s if lat is None else lat, given=bytes_per_sec is not None,
                kind=node_kind(acc))


def network_link(acc: Accelerator | None, bytes_per_sec: float | None, latency_s: float | None,
                 default_latency_s: float) -> Link | None:
    """The network as `network` reads it (a line rate of kind network); None where neither names one."""
    bw, lat = network(acc, bytes_per_sec, latency_s)
    if bw is None:
        return None
    return link(bw, default_latency_s if lat is None else lat, given=bytes_per_sec is not None, kind=NETWORK)
