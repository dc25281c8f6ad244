"""Checkpoints: size, write and read time, and the share of a run spent saving them."""

from typing import Annotated

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from app.accounting import checkpoint
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import checkpoint as service
from app.api.services.checkpoint import CheckpointRequest
from app.deps import StoreDep

router = APIRouter(tags=["checkpoints"])

CHECKPOINT = examples(
    llama3_8b_every_1000_steps_at_2gb_per_s={
        "model": "llama3-8b", "write_bytes_per_s": "2GB", "read_bytes_per_s": "2GB", "every_n_steps": 1000,
        "step_seconds": 1.5, "total_steps": 100000, "keep_last": 3},
    a_bare_parameter_count={"model": 7e9, "precision": "bf16_mixed", "write_bytes_per_s": 1e9,
                            "read_bytes_per_s": 3e9})


@router.post("/checkpoint", response_model=answer(checkpoint.CheckpointTime), responses=REQUEST_ERRORS)
async def checkpoint_time(body: Annotated[CheckpointRequest, Body(openapi_examples=CHECKPOINT)],
                          jobs: StoreDep) -> Response:
    """Checkpoint bytes, seconds to write and read one, and the share of a run spent saving them."""
    if service.reads_store(body):  # a database read: off the event loop
        return respond(await run_in_threadpool(service.answer, body, store=jobs), body)
    return respond(service.answer(body, store=jobs), body)
