"""Training data on disk: a tokenized dataset's bytes, shards and loader bandwidth."""

from typing import Annotated

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from app.accounting import dataset
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import data as service
from app.api.services.data import DatasetRequest
from app.deps import StoreDep

router = APIRouter(prefix="/data", tags=["data"])

# The course's LLaMA figure: 1.4T tokens at 2 bytes each, 2.8e12 bytes; and a run reading it.
DATASET = examples(
    llama_1_4t_tokens_in_uint16={"tokens": "1.4T", "vocab_size": 32000},
    llama3_data_in_1gb_shards_fed_at_4m_tokens_per_s={
        "tokens": "15T", "model": "llama3-8b", "shard_bytes": "1GB", "tokens_per_s": 4e6, "seq_len": 8192,
        "storage_read_bytes_per_s": "2GB"})


@router.post("/dataset", response_model=answer(dataset.Dataset), responses=REQUEST_ERRORS)
async def dataset_bytes(body: Annotated[DatasetRequest, Body(openapi_examples=DATASET)],
                        jobs: StoreDep) -> Response:
    """Bytes of a memmapped array of token ids, its shards, the read bandwidth a run needs, and
    the loaders' headroom."""
    if service.reads_store(body):  # a database read: off the event loop
        return respond(await run_in_threadpool(service.answer, body, store=jobs), body)
    return respond(service.answer(body), body)
