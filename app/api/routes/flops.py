"""FLOP counts: a matmul, the course's linear stack, a transformer step."""

from typing import Annotated

from fastapi import APIRouter, Body, Response

from app.accounting import flops
from app.api.errors import REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import flops as service
from app.api.services.flops import MatmulRequest, MlpRequest, TransformerRequest

router = APIRouter(prefix="/flops", tags=["flops"])

# The README's questions: LLaMA-3-8B at 8k context; a matmul; the course's small MLP.
TRANSFORMER = examples(llama3_8b_at_8k_context={"model": "llama3-8b", "batch_size": 1, "seq_len": 8192,
                                                "causal": "halved"})
MATMUL = examples(a_bf16_matmul={"m": 1024, "k": 256, "n": 64, "dtype": "bf16"})
MLP = examples(a_two_layer_mlp={"batch": 1024, "dims": [256, 256, 64]})
TransformerBody = Annotated[TransformerRequest, Body(openapi_examples=TRANSFORMER)]


@router.post("/transformer", response_model=answer(flops.TransformerFlops), responses=REQUEST_ERRORS)
async def transformer_flops(body: TransformerBody) -> Response:
    """Exact matmul FLOPs of a training step by component, beside 6ND."""
    return respond(service.transformer(body), body)


@router.post("/matmul", response_model=answer(flops.MatmulFlops), responses=REQUEST_ERRORS)
async def matmul_flops(body: Annotated[MatmulRequest, Body(openapi_examples=MATMUL)]) -> Response:
    """FLOPs (2 per MAC), MACs, and the count without fused multiply-add."""
    return respond(service.matmul(body), body)


@router.post("/mlp", response_model=answer(flops.MlpFlops), responses=REQUEST_ERRORS)
async def mlp_flops(body: Annotated[MlpRequest, Body(openapi_examples=MLP)]) -> Response:
    """Forward and backward FLOPs per layer, beside 2/4/6 x tokens x params."""
    return respond(service.mlp(body), body)
