"""Communication: one collective's time over the links between GPUs."""

from pydantic import Field

from app.accounting.calibration.profile import Profile
from app.accounting.comm import collectives as cc
from app.accounting.comm import links
from app.accounting.comm.achievable import NETWORK
from app.accounting.errors import InvalidInput
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, byte_count, count, number
from app.inputs.schemas import GpuRef, GpuOverridesIn, accelerator

Bandwidth = number(ge=1, le=1e15)
Latency = number(ge=0, le=1, text=False)


class CollectiveRequest(Input):
    collective: cc.Collective = Field(description="all_reduce, all_gather, reduce_scatter, all_to_all or "
                                                  "broadcast.")
    bytes: byte_count(1, 10**15) = Field(
        description="nccl-tests' size S: each rank's buffer (all_reduce, broadcast), or the whole output "
                    "of n pieces (all_gather, reduce_scatter, all_to_all).")
    ranks: count(1, 1_000_000) = Field(description="GPUs taking part: nodes x gpus_per_node, or fewer "
                                                   "inside one node.")
    gpus_per_node: count(1, 1024) = Field(8, description="GPUs a node joins by its fast link (HGX: 8).")
    gpu: GpuRef | None = Field(
        None, description="Take the links from the catalogue's interconnect row: the node link and its "
                          "latency, the network's share per GPU and its latency; or give them.")
    gpu_overrides: GpuOverridesIn | None = None  # type: ignore[valid-type]
    intra_node_bytes_per_sec: Bandwidth | None = Field(
        None, description="Per GPU per direction inside a node, taken as the achievable bus bandwidth (what "
                          "nccl-tests reports as busbw for a ring: H100 about 370e9) and not derated; null "
                          "takes the gpu's node link, a line rate (NVLink 4: 450e9), at the share NCCL gets "
                          "of it.")
    intra_node_latency_s: Latency | None = Field(
        None, description="Per ring step inside a node; null takes the gpu's (NCCL's NVLink figure 3.4 us, "
                          "PCIe 5.7 us), or NVLink's without a gpu.")
    inter_node_bytes_per_sec: Bandwidth | None = Field(
        None, description="Per GPU per direction between nodes, taken as the achievable bus bandwidth (what "
                          "nccl-tests reports as busbw) and not derated; null takes the gpu's network / "
                          "gpus_per_node (DGX H100: 8 x 400 Gb/s NDR, 50e9 line rate, about 96% achieved), "
                          "or that NDR figure where it names none.")
    inter_node_latency_s: Latency | None = Field(
        None, description="Per ring step between nodes; null: NCCL's network figure, 9.6 us.")
    base_latency_s: Latency = Field(
        cc.RING_BASE_LATENCY_S, description="Once per collective (NCCL's ring base latency, 8.4 us).")
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: the node link's bus bandwidth and step latency left out "
        "become the profile's fit to its collectives runs (this collective's, else all_reduce's), and the "
        "base latency left out is nil (the fit's intercept holds it).")


def _fitted(body: CollectiveRequest, profile: Profile) -> tuple[cc.Link, str]:
    """The profile's fitted link for this collective (or all_reduce's), and the line that says so."""
    acc = accelerator(body.gpu, body.gpu_overrides)
    if acc is not None and profile.catalogue_id != acc.id:
        where = profile.catalogue_id or "a device outside the catalogue"
        raise InvalidInput("calibration", f"{profile.label} was measured on {where}, not {acc.id}")
    fits = sorted((f for f in profile.collectives if f.collective in (body.collective, "all_reduce")),
                  key=lambda f: (f.collective != body.collective, abs(f.ranks - body.ranks)))
    if not fits:
        raise InvalidInput("calibration", f"{profile.label} has no collectives runs to fit a link to: run the "
                                          "collectives probe on that device, or leave calibration out")
    f = fits[0]
    line = (f"calibrated: the node link is {profile.label}'s fit to its {f.collective} runs over {f.ranks} "
            f"ranks (collectives jobs {', '.join(map(str, f.jobs))}): {f.bus_bytes_per_s / 1e9:.3g} GB/s bus "
            f"bandwidth, {f.latency_s * 1e6:.3g} us a ring step, rms {f.rms_relative_error:.1%}")
    return cc.Link(f.bus_bytes_per_s, f.latency_s, achieved=True), line


def collective(body: CollectiveRequest, profile: Profile | None = None) -> cc.CollectiveTime:
    """`profile`: the one `calibration` names, read by the caller (services.calibration.resolve)."""
    acc = accelerator(body.gpu, body.gpu_overrides)
    said: list[str] = []
    if profile is not None:
        fitted, line = _fitted(body, profile)
        said = [line, *profile.flags]
        body = body.model_copy(update={
            "intra_node_bytes_per_sec": body.intra_node_bytes_per_sec or fitted.bytes_per_sec,
            "intra_node_latency_s": fitted.latency_s if body.intra_node_latency_s is None
            else body.intra_node_latency_s,
            "base_latency_s": body.base_latency_s if "base_latency_s" in body.model_fields_set else 0.0})
    intra = links.node_link(acc, body.intra_node_bytes_per_sec, body.intra_node_latency_s,
                            cc.NVLINK_STEP_LATENCY_S)
    if intra is None:
        field = "gpu" if acc is None else "intra_node_bytes_per_sec"
        raise InvalidInput(field, "give a gpu with an interconnect figure in the catalogue, or "
                                  "intra_node_bytes_per_sec")
    network = links.network_link(acc, body.inter_node_bytes_per_sec, body.inter_node_latency_s,
                                 cc.NETWORK_STEP_LATENCY_S)
    answer = cc.collective_time(
        body.collective, body.bytes, body.ranks, gpus_per_node=body.gpus_per_node, intra=intra,
        inter=network or cc.Link(cc.NDR_BYTES_PER_SEC_PER_GPU, body.inter_node_latency_s
                                 if body.inter_node_latency_s is not None else cc.NETWORK_STEP_LATENCY_S,
                                 kind=NETWORK),
        base_latency_s=body.base_latency_s)
    if answer.nodes > 1 and network is None:
        answer.assumptions.append("the gpu's reference board names no network: one 400 Gb/s NDR NIC per GPU "
                                  "(50e9 bytes/s line rate) is assumed; give inter_node_bytes_per_sec")
    if said and answer.nodes > 1:
        said.append("the profile fits one node's link; the network between nodes is the catalogue's, a prediction")
    answer.assumptions = said + answer.assumptions
    return answer
