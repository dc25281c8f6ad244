"""FLOP counts: a matmul, the course's linear stack, a transformer step."""

from typing import Annotated

from fastapi import APIRouter, Response
from pydantic import Field

from app.accounting import flops
from app.api.errors import REQUEST_ERRORS
from app.contract.fields import Input, count
from app.api.responses import respond
from app.contract.schemas import DtypeName, ModelSpec, engine_model

router = APIRouter(prefix="/flops", tags=["flops"])

Size = count(1, 2**40)


class MatmulRequest(Input):
    m: Size
    k: Size
    n: Size
    batch: Size = 1
    dtype: DtypeName | None = Field(None, description="Adds bytes moved and arithmetic intensity.")


class MlpRequest(Input):
    batch: Size = Field(description="Rows of x: tokens or data points.")
    dims: Annotated[list[Size], Field(min_length=2, max_length=1024)] = Field(
        description="Widths D0, D1, ..., Dn: layer i maps D(i-1) to D(i).", examples=[[256, 256, 64]])
    input_requires_grad: bool = Field(
        False, description="Whether dL/dx of the first layer's input is computed.")


class TransformerRequest(Input):
    model: ModelSpec
    batch_size: count(1, 2**31) = 1
    seq_len: count(1, 10_000_000) = 1024
    causal: flops.Causal = Field(
        "full", description="full counts every score as FlopCounterMode does; halved counts "
                            "the lower triangle only (causal masking skips the rest).")


@router.post("/transformer", response_model=flops.TransformerFlops, responses=REQUEST_ERRORS)
async def transformer_flops(body: TransformerRequest) -> Response:
    """Exact matmul FLOPs of a training step by component, beside 6ND."""
    cfg = engine_model(body.model)
    return respond(flops.transformer(cfg, body.batch_size, body.seq_len, body.causal))


@router.post("/matmul", response_model=flops.MatmulFlops, responses=REQUEST_ERRORS)
async def matmul_flops(body: MatmulRequest) -> Response:
    """FLOPs (2 per MAC), MACs, and the count without fused multiply-add."""
    return respond(flops.matmul(body.m, body.k, body.n, body.batch, body.dtype))


@router.post("/mlp", response_model=flops.MlpFlops, responses=REQUEST_ERRORS)
async def mlp_flops(body: MlpRequest) -> Response:
    """Forward and backward FLOPs per layer, beside 2/4/6 x tokens x params."""
    return respond(flops.mlp(body.batch, body.dims, body.input_requires_grad))
