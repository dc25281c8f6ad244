"""Tensor memory, strides, contiguity and views."""

from typing import Annotated, Literal

from pydantic import Field

from app.accounting import tensors
from app.inputs.fields import JSON_SAFE_INT, Input, count
from app.inputs.schemas import DtypeName

MAX_DIMS = 32
BIG = JSON_SAFE_INT
Dim = count(1, BIG)
Shape = Annotated[list[Dim], Field(max_length=MAX_DIMS, description="Sizes, outermost first.")]


class MemoryRequest(Input):
    shape: Shape = Field(examples=[[49152, 12288]])
    dtype: DtypeName = "float32"


class LayoutRequest(Input):
    shape: Shape = Field(examples=[[2, 3]])
    stride: Annotated[list[count(0, BIG)], Field(max_length=MAX_DIMS)] | None = Field(
        None, description="Elements to skip per step along each dimension; null means contiguous.")
    storage_offset: count(0, BIG) = Field(
        0, description="Index in storage of the first element.")
    index: Annotated[list[count(-BIG, BIG)], Field(max_length=MAX_DIMS)] | None = Field(
        None, description="An element to locate; negative entries count from the end.")
    view_shape: Annotated[list[Literal[-1] | Dim], Field(max_length=MAX_DIMS)] | None = Field(
        None, description="A shape to try tensor.view() with; one entry may be -1.")


def memory(body: MemoryRequest) -> tensors.TensorMemory:
    return tensors.memory(body.shape, body.dtype)


def layout(body: LayoutRequest) -> tensors.TensorLayout:
    return tensors.layout(body.shape, body.stride, body.storage_offset, body.index, body.view_shape)
