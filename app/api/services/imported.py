"""Results run elsewhere, brought in: POST /api/v1/import/job keeps one (a probe that Slurm or
torchrun launched across boxes, `tally slurm`), POST /api/v1/import/campaign several of one probe
as a campaign (a burn-in on every node of a Slurm partition). `tally import` posts the files the
launched probes write. The store keeps them as succeeded jobs (app/jobs/imported.py)."""

import copy
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from app.accounting.errors import InvalidInput
from app.api.services import fleet as fleet_service
from app.config import BOX_NAME
from app.inputs.fields import Input, count, number
from app.jobs.imported import Imported
from app.jobs.job import Job
from app.jobs.store import Store
from app.probes.registry import PROBES, RESULTS, ProbeName

Text = Annotated[str, Field(min_length=1, max_length=253)]


class ImportedBox(Input):
    box: Annotated[str, Field(min_length=1, max_length=253, pattern=BOX_NAME)]
    """The node's name (Slurm's SLURMD_NODENAME, or TALLY_BOX_NAME)."""
    node: count(0, 255)  # type: ignore[valid-type]
    """Its node rank, as the rendezvous numbered it."""
    device: Text | None = None
    """The fleet's name of its device: a GPU's NVML UUID, or "<box>:cpu"."""


class ImportedDevice(Input):
    """What app/device.fleet_device says of the device a one-box result ran on."""

    device: Text
    host: Annotated[str, Field(min_length=1, max_length=253, pattern=BOX_NAME)]
    kind: Literal["cuda", "cpu"]
    name: Text
    gpu_index: count(0, 1023) | None = None  # type: ignore[valid-type]
    catalogue_id: Text | None = None
    # At most 1 PiB: a bound a JSON number holds exactly (2**60 does not, beyond 2**53).
    memory_bytes: count(0, 2**50) | None = None  # type: ignore[valid-type]
    driver_version: Text | None = None
    cuda_driver_version: Text | None = None
    compute_capability: Text | None = None
    max_sm_clock_mhz: count(0, 100_000) | None = None  # type: ignore[valid-type]
    max_memory_clock_mhz: count(0, 100_000) | None = None  # type: ignore[valid-type]
    power_limit_watts: number(ge=0, le=100_000) | None = None  # type: ignore[valid-type]


class ImportedJob(Input):
    probe: ProbeName  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=dict, description="The probe's parameters, as it ran.")
    # A plain object here, read as the probe's result type by the service: the result types stay one
    # schema each in the OpenAPI document (as responses), not an input and an output variant.
    result: dict[str, Any] = Field(description="The probe's result, as its child reports it (GET "
                                               "/api/v1/jobs/{id}'s result).")
    launcher: Literal["slurm", "torchrun"] = Field(description="What started its ranks.")
    external_id: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="Its id there: Slurm's job id."
    )
    started_at: number(ge=0, le=1e11) = Field(description="Unix seconds.")  # type: ignore[valid-type]
    finished_at: number(ge=0, le=1e11) = Field(description="Unix seconds.")  # type: ignore[valid-type]
    boxes: Annotated[list[ImportedBox], Field(min_length=1, max_length=256)]
    device: ImportedDevice | None = Field(None, description="A one-box result's device, for the fleet.")


class ImportedCampaign(Input):
    probe: ProbeName  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=dict)
    outlier_fraction: number(ge=0, le=1) = 0.10  # type: ignore[valid-type]
    jobs: Annotated[list[ImportedJob], Field(min_length=1, max_length=4096)]


def _result(raw: dict[str, Any]) -> Any:
    """The probe's result type from `raw`, a null field left out read as null: JSON writers drop
    them (FastAPI's own OpenAPI examples do). A field left out that may not be null is still
    refused, by the second reading."""
    try:
        return RESULTS.validate_python(raw)
    except ValidationError as e:
        missing = [err["loc"][1:] for err in e.errors() if err["type"] == "missing"]  # loc[0]: the tag
        if not missing:
            raise
    filled = copy.deepcopy(raw)
    for loc in missing:
        node: Any = filled
        for key in loc[:-1]:
            node = node[key]
        node[loc[-1]] = None
    return RESULTS.validate_python(filled)


def _checked(body: ImportedJob, where: str = "") -> Imported:
    """The store's Imported; InvalidInput naming the field that does not hold together."""
    if body.result.get("probe") != body.probe:
        raise InvalidInput(f"{where}result", f"a {body.result.get('probe')} result for a {body.probe} job")
    try:
        result = _result(body.result)
    except ValidationError as e:
        said = e.errors()[0]
        raise InvalidInput(f"{where}result", f"not a {body.probe} result: {'.'.join(map(str, said['loc']))}: "
                                             f"{said['msg']}") from None
    probe = PROBES[body.probe]
    try:
        params = probe.params.model_validate(body.params).model_dump(mode="json")
    except ValidationError as e:
        said = e.errors()[0]["msg"]
        raise InvalidInput(f"{where}params", f"not {body.probe}'s parameters: {said}") from None
    if body.finished_at < body.started_at:
        raise InvalidInput(f"{where}finished_at", "is before started_at")
    nodes = sorted(b.node for b in body.boxes)
    if nodes != list(range(len(nodes))):
        raise InvalidInput(f"{where}boxes", "number the boxes' nodes 0, 1, ... once each")
    if len(body.boxes) > 1 and not probe.spans_boxes:
        raise InvalidInput(f"{where}boxes", f"the {body.probe} probe runs on one box")
    kind = "cuda" if result.environment.device == "cuda" else "cpu"
    worker = f"{body.launcher}:{body.external_id}" if body.external_id else body.launcher
    return Imported(
        body.probe,
        params,
        result,
        kind,
        body.started_at,
        body.finished_at,
        worker,
        [(b.box, b.node, b.device) for b in sorted(body.boxes, key=lambda b: b.node)],
        None if body.device is None else body.device.model_dump(),
    )


def import_job(body: ImportedJob, *, jobs: Store) -> Job:
    return jobs.record(_checked(body))


def import_campaign(body: ImportedCampaign, *, jobs: Store) -> "fleet_service.CampaignOut":
    results = [_checked(j, f"jobs.{i}.") for i, j in enumerate(body.jobs)]
    for i, (job, result) in enumerate(zip(body.jobs, results, strict=True)):
        if job.probe != body.probe:
            raise InvalidInput(f"jobs.{i}.probe", f"a {job.probe} job in a {body.probe} campaign")
        if result.device is None:
            raise InvalidInput(f"jobs.{i}.device", "a campaign compares devices: name each job's")
    campaign, _ = jobs.record_campaign(
        probe=body.probe, params=body.params, outlier_fraction=body.outlier_fraction, results=results
    )
    return fleet_service.campaign_out(jobs, campaign.id)
