"""FLOP counts: a matmul, the course's linear stack, a transformer step."""

from fastapi import APIRouter, Response

from app.accounting import flops
from app.api.errors import REQUEST_ERRORS
from app.api.responses import answer, respond
from app.api.services import flops as service
from app.api.services.flops import MatmulRequest, MlpRequest, TransformerRequest

router = APIRouter(prefix="/flops", tags=["flops"])


@router.post("/transformer", response_model=answer(flops.TransformerFlops), responses=REQUEST_ERRORS)
async def transformer_flops(body: TransformerRequest) -> Response:
    """Exact matmul FLOPs of a training step by component, beside 6ND."""
    return respond(service.transformer(body), body)


@router.post("/matmul", response_model=answer(flops.MatmulFlops), responses=REQUEST_ERRORS)
async def matmul_flops(body: MatmulRequest) -> Response:
    """FLOPs (2 per MAC), MACs, and the count without fused multiply-add."""
    return respond(service.matmul(body), body)


@router.post("/mlp", response_model=answer(flops.MlpFlops), responses=REQUEST_ERRORS)
async def mlp_flops(body: MlpRequest) -> Response:
    """Forward and backward FLOPs per layer, beside 2/4/6 x tokens x params."""
    return respond(service.mlp(body), body)
