"""Results run elsewhere, brought in: a probe that Slurm or torchrun launched (`tally slurm`,
`tally import`), kept as a succeeded job; or several of one probe, one per device, as a campaign."""

import json
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, Request, Response

from app.api.errors import AUTH, REQUEST_ERRORS, UNAVAILABLE
from app.api.openapi import examples
from app.api.services import imported
from app.api.services import jobs as job_service
from app.api.services.fleet import CampaignOut
from app.api.services.jobs import JobOut
from app.deps import Authorized, StoreDep

router = APIRouter(prefix="/import", tags=["jobs"])

# What `tally slurm` wrote on a two-node throw-away Slurm (tests/jobs/test_slurm_launch.py): the gloo
# collectives probe across tally-n1 and tally-n2, and a burn-in on each of them.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
JOB = examples(
    collectives_across_two_slurm_nodes=json.loads((EXAMPLES / "slurm-collectives.json").read_text())
)
CAMPAIGN = examples(
    a_burn_in_on_each_node_of_a_partition=json.loads((EXAMPLES / "slurm-burn-in.json").read_text())
)


@router.post("/job", status_code=201, response_model=JobOut, responses=REQUEST_ERRORS | AUTH | UNAVAILABLE)
def import_job(
    body: Annotated[imported.ImportedJob, Body(openapi_examples=JOB)],
    request: Request,
    jobs: StoreDep,
    authorized: Authorized,
) -> Response:
    """Keep a result run elsewhere as a succeeded job: a probe that Slurm or torchrun launched
    (`tally slurm` writes such results, `tally import` posts them). 201 with the job."""
    job = imported.import_job(body, jobs=jobs)
    return Response(
        job_service.job_out(job).model_dump_json(),
        status_code=201,
        media_type="application/json",
        headers={"Location": f"{request.url.path.removesuffix('/import/job')}/jobs/{job.id}"},
    )


@router.post(
    "/campaign", status_code=201, response_model=CampaignOut, responses=REQUEST_ERRORS | AUTH | UNAVAILABLE
)
def import_campaign(
    body: Annotated[imported.ImportedCampaign, Body(openapi_examples=CAMPAIGN)],
    request: Request,
    jobs: StoreDep,
    authorized: Authorized,
) -> Response:
    """Keep results of one probe run elsewhere, one per device, as one campaign: a burn-in that
    `tally slurm burn-in` ran on every node of a partition. 201 with the campaign, compared."""
    out = imported.import_campaign(body, jobs=jobs)
    return Response(
        out.model_dump_json(),
        status_code=201,
        media_type="application/json",
        headers={"Location": f"{request.url.path.removesuffix('/import/campaign')}/campaigns/{out.id}"},
    )
