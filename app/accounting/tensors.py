"""Tensors as pointers into storage: bytes, strides, contiguity and views.

The rules are PyTorch's: `is_contiguous` ignores size-1 dimensions and the
storage offset (c10 compute_contiguous), and `view` succeeds exactly when
ATen's computeStride finds strides for the new shape without a copy.
"""

import math
from dataclasses import dataclass

from app.accounting.dtypes import lookup
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.accounting.units import GB, GIB, MAX_BYTES
from app.numbers import human_bytes


@dataclass(slots=True)
class TensorMemory:
    """What a dense tensor of this shape and dtype occupies."""

    shape: list[int]
    dtype: str
    numel: int
    element_size: float | int
    """Bytes per element (0.5 for packed 4-bit formats)."""
    bytes: int
    gb: float
    """bytes / 10^9"""
    gib: float
    """bytes / 2^30"""
    human_gb: str
    human_gib: str

    __pydantic_config__ = RECORD


def numel_of(shape: list[int], *, field: str = "shape") -> int:
    n = math.prod(shape)
    if n > MAX_BYTES:
        raise InvalidInput(field, f"{n} elements exceed int64, the largest tensor PyTorch can index")
    return n


def memory(shape: list[int], dtype: str) -> TensorMemory:
    """Bytes of a contiguous tensor: numel x element size, rounded up to whole bytes."""
    fmt = lookup(dtype)
    n = numel_of(shape)
    nbytes = math.ceil(n * fmt.storage_bits / 8)
    if nbytes > MAX_BYTES:
        raise InvalidInput("shape", f"{nbytes} bytes exceed int64 (2^63 - 1), the largest storage")
    return TensorMemory(
        shape=list(shape), dtype=fmt.name, numel=n, element_size=fmt.storage_bytes, bytes=nbytes,
        gb=nbytes / GB, gib=nbytes / GIB,
        human_gb=human_bytes(nbytes, binary=False), human_gib=human_bytes(nbytes, binary=True),
    )


def contiguous_stride(shape: list[int]) -> list[int]:
    """Row-major strides, in elements: the last dimension moves fastest."""
    stride, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        stride[d] = step
        step *= max(shape[d], 1)
    return stride


def is_contiguous(shape: list[int], stride: list[int]) -> bool:
    """c10's compute_contiguous: size-1 dimensions may have any stride."""
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride), strict=True):
        if size != 1:
            if st != expected:
                return False
            expected *= size
    return True


def view_stride(shape: list[int], stride: list[int], new_shape: list[int]) -> list[int] | None:
    """ATen's computeStride: strides for `new_shape` over the same storage, or
    None when some new dimension would span two non-contiguous chunks.

    The old dimensions are cut into chunks that are each contiguous in memory;
    a view works when every new dimension falls inside one chunk.
    """
    if not shape:
        return [1] * len(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        chunk_ends = tensor_d == 0 or (
            shape[tensor_d - 1] != 1 and stride[tensor_d - 1] != tensor_numel * chunk_base_stride)
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = stride[tensor_d - 1]
                tensor_numel = view_numel = 1
    return None if view_d != -1 else new_stride


def infer_view_shape(view_shape: list[int], numel: int) -> list[int]:
    """Resolve one -1 entry, as Tensor.view does; reject shapes of another size."""
    holes = [i for i, s in enumerate(view_shape) if s == -1]
    if len(holes) > 1:
        raise InvalidInput("view_shape", "only one dimension can be inferred (-1)")
    known = math.prod(s for s in view_shape if s != -1)
    resolved = list(view_shape)
    if holes:
        if numel % known:
            raise InvalidInput("view_shape", f"shape {view_shape} is invalid for input of size {numel}")
        resolved[holes[0]] = numel // known
    if math.prod(resolved) != numel:
        raise InvalidInput("view_shape", f"shape {view_shape} is invalid for input of size {numel}")
    return resolved


@dataclass(slots=True)
class ViewResult:
    """Whether `tensor.view(shape)` works without a copy."""

    shape: list[int]
    """The requested shape with any -1 resolved."""
    possible: bool
    stride: list[int] | None
    """The view's strides when possible."""
    reason: str | None
    """Why not, when impossible; reshape() would copy instead."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class TensorLayout:
    """How a strided tensor maps onto its storage. Strides count elements."""

    shape: list[int]
    stride: list[int]
    storage_offset: int
    numel: int
    is_contiguous: bool
    contiguous_stride: list[int]
    """The strides a contiguous tensor of this shape would have."""
    storage_elements: int
    """Smallest storage (in elements) that holds every element: offset + span + 1."""
    index: list[int] | None
    """The requested index with negative entries resolved."""
    storage_index: int | None
    """storage_offset + sum(index[d] * stride[d]): where `index` lives in storage."""
    view: ViewResult | None

    __pydantic_config__ = RECORD


def layout(
    shape: list[int],
    stride: list[int] | None = None,
    storage_offset: int = 0,
    index: list[int] | None = None,
    view_shape: list[int] | None = None,
) -> TensorLayout:
    """Describe a strided tensor, locate one element, and try one view."""
    numel = numel_of(shape)
    contiguous = contiguous_stride(shape)
    stride = contiguous if stride is None else list(stride)
    if len(stride) != len(shape):
        raise InvalidInput("stride", f"has {len(stride)} entries for a {len(shape)}-d shape")
    extent = storage_offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1
    if extent > MAX_BYTES:
        raise InvalidInput("stride", "the tensor would span more than 2^63 - 1 storage elements")

    resolved_index = storage_index = None
    if index is not None:
        if len(index) != len(shape):
            raise InvalidInput("index", f"has {len(index)} entries for a {len(shape)}-d shape")
        resolved_index = []
        for d, (i, n) in enumerate(zip(index, shape, strict=True)):
            if not -n <= i < n:
                raise InvalidInput("index", f"index {i} is out of bounds for dimension {d} with size {n}")
            resolved_index.append(i + n if i < 0 else i)
        storage_index = storage_offset + sum(i * s for i, s in zip(resolved_index, stride, strict=True))

    view = None
    if view_shape is not None:
        target = infer_view_shape(view_shape, numel)
        new_stride = view_stride(shape, stride, target)
        view = ViewResult(
            shape=target, possible=new_stride is not None, stride=new_stride,
            reason=None if new_stride is not None else (
                "view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces); reshape() would copy"),
        )
    return TensorLayout(
        shape=list(shape), stride=stride, storage_offset=storage_offset, numel=numel,
        is_contiguous=is_contiguous(shape, stride), contiguous_stride=contiguous,
        storage_elements=extent, index=resolved_index, storage_index=storage_index, view=view,
    )
