"""The Tensors page: one strided tensor's layout (POST /api/v1/tensors/layout) and, in a dtype,
the bytes it holds (POST /api/v1/tensors/memory: the course's [49152, 12288] in float32 is
2,415,919,104 bytes), answered together from one form."""

from dataclasses import dataclass

from pydantic import Field

from app.accounting.records import RECORD
from app.accounting.tensors import TensorLayout, TensorMemory
from app.api.services import tensors
from app.api.services.tensors import LayoutRequest, MemoryRequest
from app.web.spec import Calculator, Input


class TensorsPageRequest(LayoutRequest):
    """The layout request and the memory request's dtype."""

    dtype: MemoryRequest.model_fields["dtype"].annotation = Field(  # type: ignore[name-defined]
        "float32", description="The elements' dtype, for the bytes the tensor holds.")


@dataclass(slots=True)
class TensorsAnswer:
    layout: TensorLayout
    memory: TensorMemory
    """Of the dense tensor of this shape: numel x the dtype's bytes."""

    __pydantic_config__ = RECORD


def answer(body: TensorsPageRequest) -> TensorsAnswer:
    return TensorsAnswer(layout=tensors.layout(body),
                         memory=tensors.memory(MemoryRequest(shape=body.shape, dtype=body.dtype)))


PAGE = Calculator(
    "tensors", "Tensors",
    "A tensor's bytes in its dtype, where each element of a strided tensor lives in storage, whether "
    "the tensor is contiguous, and whether view() can reshape it without a copy, by PyTorch's own "
    "rule. The example is a transposed 2 x 3 matrix: x.t() has shape (3, 2) and strides (1, 3).",
    TensorsPageRequest, lambda body, jobs: answer(body),
    (Input("shape", "Shape", "3, 2", "comma-separated sizes", is_list=True),
     Input("dtype", "Dtype", hint="bytes per element: GET /api/v1/dtypes"),
     Input("stride", "Strides", "1, 3", "elements per step; empty for contiguous", is_list=True),
     Input("storage_offset", "Storage offset"),
     Input("index", "Element", "2, 1", "an index to locate in storage", is_list=True),
     Input("view_shape", "View as", "2, 3", "a shape for view(); one entry may be -1", is_list=True)))
