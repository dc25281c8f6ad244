"""Tensor memory and layout, checked against torch's own strides and view rules."""

import random

import pytest
import torch

from app.accounting import tensors
from tests.support.api import assert_names_field


def test_course_gpt3_ffn_matrix_is_2304_mib(api):
    body = api.ok("/api/v1/tensors/memory", {"shape": [12288 * 4, 12288], "dtype": "float32"})
    assert body["bytes"] == 2304 * 1024 * 1024 == 2_415_919_104
    assert body["numel"] == 12288 * 4 * 12288 and body["element_size"] == 4
    assert body["human_gib"] == "2.25 GiB" and body["human_gb"] == "2.42 GB"
    assert body["gib"] == 2.25


def test_memory_matches_torch_for_each_dtype(api):
    for name, dtype in [("float32", torch.float32), ("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn),
                        ("int64", torch.int64), ("float64", torch.float64)]:
        t = torch.empty(4, 8, 3, dtype=dtype, device="meta")
        body = api.ok("/api/v1/tensors/memory", {"shape": [4, 8, 3], "dtype": name})
        assert body["bytes"] == t.numel() * t.element_size() and body["element_size"] == t.element_size()


def test_course_strides_and_index(api):
    x = torch.arange(16.0).view(4, 4)
    body = api.ok("/api/v1/tensors/layout", {"shape": [4, 4], "index": [1, 2]})
    assert body["stride"] == list(x.stride()) == [4, 1]
    assert body["storage_index"] == 6 and x[1, 2].item() == 6


def test_course_slice_is_a_strided_view(api):
    y = torch.arange(10)[2:9:2]
    body = api.ok("/api/v1/tensors/layout",
                  {"shape": list(y.shape), "stride": list(y.stride()), "storage_offset": y.storage_offset(),
                   "index": [-1]})
    assert body["stride"] == [2] and body["storage_offset"] == 2
    assert body["storage_index"] == y[-1].item() == 8
    assert body["is_contiguous"] is False


def test_course_transpose_cannot_view(api):
    y = torch.tensor([[1.0, 2, 3], [4, 5, 6]]).transpose(1, 0)
    body = api.ok("/api/v1/tensors/layout",
                  {"shape": list(y.shape), "stride": list(y.stride()), "view_shape": [2, 3]})
    assert body["is_contiguous"] is False and body["view"]["possible"] is False
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        y.view(2, 3)
    ok = api.ok("/api/v1/tensors/layout", {"shape": [2, 3], "view_shape": [3, -1]})
    assert ok["view"] == {"shape": [3, 2], "possible": True, "stride": [2, 1], "reason": None}


def _random_strided(rng: random.Random) -> torch.Tensor:
    """A view of a random kind: permuted, sliced, expanded or plain."""
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
    t = torch.empty(shape, device="meta")
    kind = rng.choice(["plain", "permute", "slice", "expand", "transpose_slice"])
    if kind == "permute":
        t = t.permute(*rng.sample(range(t.dim()), t.dim()))
    if kind in ("slice", "transpose_slice"):
        index = [slice(None)] * t.dim()
        index[rng.randrange(t.dim())] = slice(rng.randint(0, 1), None, rng.randint(1, 3))
        t = t[tuple(index)]
        if t.numel() == 0:  # Tally refuses empty tensors
            t = torch.empty(shape, device="meta")
    if kind == "transpose_slice" and t.dim() > 1:
        t = t.transpose(0, -1)
    if kind == "expand":
        t = torch.empty([1] + shape, device="meta").expand([rng.randint(1, 3)] + shape)
    return t


def _factorizations(numel: int, rng: random.Random) -> list[int]:
    dims, rest = [], numel
    while rest > 1 and len(dims) < 4:
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    return dims


def test_layout_and_view_agree_with_torch_on_random_tensors():
    rng = random.Random(2024)
    checked_views = impossible = 0
    for _ in range(1500):
        t = _random_strided(rng)
        shape, stride = list(t.shape), list(t.stride())
        new_shape = _factorizations(t.numel(), rng)
        got = tensors.layout(shape, stride, t.storage_offset(), view_shape=new_shape)
        assert got.is_contiguous == t.is_contiguous(), (shape, stride)
        assert got.contiguous_stride == list(torch.empty(shape, device="meta").stride())
        try:
            want = list(t.view(new_shape).stride())
        except RuntimeError:
            want = None
            impossible += 1
        assert got.view.stride == want, (shape, stride, new_shape)
        checked_views += 1
    assert impossible > 100 and checked_views - impossible > 100  # both outcomes exercised


def test_storage_index_matches_torch_as_strided():
    rng = random.Random(7)
    storage = torch.arange(10_000)
    for _ in range(500):
        shape = [rng.randint(1, 5) for _ in range(rng.randint(1, 4))]
        stride = [rng.randint(0, 7) for _ in shape]
        offset = rng.randint(0, 9)
        t = storage.as_strided(shape, stride, offset)
        index = [rng.randrange(-n, n) for n in shape]
        got = tensors.layout(shape, stride, offset, index=index)
        assert got.storage_index == t[tuple(index)].item()
        assert got.is_contiguous == t.is_contiguous()


def test_overflowing_shape_names_shape(api):
    memory = "/api/v1/tensors/memory"
    assert_names_field(api.post(memory, {"shape": [2**40, 2**40], "dtype": "fp32"}), "shape")
    assert_names_field(api.post(memory, {"shape": [2**31, 2**31], "dtype": "fp64"}), "shape")


def test_layout_rejections_name_their_field(api):
    layout = "/api/v1/tensors/layout"
    assert_names_field(api.post(layout, {"shape": [2, 3], "stride": [1]}), "stride")
    assert_names_field(api.post(layout, {"shape": [2, 3], "index": [2, 0]}), "index")
    assert_names_field(api.post(layout, {"shape": [2, 3], "view_shape": [4, -1]}), "view_shape")
    assert_names_field(api.post(layout, {"shape": [2, 3], "view_shape": [-1, -1]}), "view_shape")
    assert_names_field(api.post(layout, {"shape": [0, 3]}), "shape.0")
