"""FLOP counts: a matmul, the course's linear stack, a transformer step."""

from typing import Annotated

from pydantic import Field

from app.accounting import flops
from app.inputs.fields import Input, count, sequence_length
from app.inputs.schemas import DtypeName, ModelSpec, engine_model

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
    seq_len: sequence_length(1, 10_000_000) = 1024
    causal: flops.Causal = Field(
        "full", description="full counts every score as FlopCounterMode does; halved counts "
                            "the lower triangle only (causal masking skips the rest).")


def transformer(body: TransformerRequest) -> flops.TransformerFlops:
    return flops.transformer(engine_model(body.model), body.batch_size, body.seq_len, body.causal)


def matmul(body: MatmulRequest) -> flops.MatmulFlops:
    return flops.matmul(body.m, body.k, body.n, body.batch, body.dtype)


def mlp(body: MlpRequest) -> flops.MlpFlops:
    return flops.mlp(body.batch, body.dims, body.input_requires_grad)
