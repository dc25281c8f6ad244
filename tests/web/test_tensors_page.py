"""The Tensors page gives a tensor's bytes in its dtype beside its layout (issue 28, point 9),
with counts grouped by thousands. The course: torch.empty(12288 * 4, 12288) in float32 holds
2304 x 1024 x 1024 bytes."""

import html
import json
import re
from urllib.parse import urlencode

COURSE_BYTES = 2304 * 1024 * 1024  # the course's assert on get_memory_usage: 2,415,919,104


def _testid(page: str, name: str) -> str:
    return html.unescape(re.search(rf'data-testid="{name}">([^<]*)<', page).group(1)).strip()


def _page(api, **form) -> str:
    response = api.get("/ui/tensors?" + urlencode(form))
    assert response.status_code == 200
    errors = json.loads(html.unescape(re.search(r"data-errors='([^']*)'", response.text).group(1)))
    assert errors == {}, errors
    return response.text


def test_the_courses_matrix_in_float32_and_bf16(api):
    page = _page(api, shape="49152, 12288", dtype="float32", stride="", index="", view_shape="")
    assert _testid(page, "bytes-exact") == f"{COURSE_BYTES:,}" == "2,415,919,104"
    assert _testid(page, "bytes") == "2.42 GB"
    assert _testid(page, "numel") == "603,979,776"
    assert api.ok("/api/v1/tensors/memory", {"shape": [49152, 12288], "dtype": "float32"})["bytes"] == COURSE_BYTES
    half = _page(api, shape="49152, 12288", dtype="bf16", stride="", index="", view_shape="")
    assert _testid(half, "bytes-exact") == f"{COURSE_BYTES // 2:,}"


def test_the_page_opens_with_bytes_and_offers_the_courses_example(api):
    page = api.get("/tensors").text
    assert _testid(page, "bytes-exact") == "24"  # 3 x 2 float32
    link = html.unescape(re.search(r'href="/tensors\?([^"]*)" data-testid="example-course"', page).group(1))
    assert _testid(api.get("/ui/tensors?" + link).text, "bytes-exact") == "2,415,919,104"
