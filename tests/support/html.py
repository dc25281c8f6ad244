"""Pages read as text, without a browser: an element by its data-testid, a chart's data."""

import json
import re
from html import unescape


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def element(html: str, testid: str) -> str:
    """The text of the element with this data-testid (its first closing tag of the same name)."""
    match = re.search(rf'<(\w+)[^>]*data-testid="{re.escape(testid)}"[^>]*>(.*?)</\1>', html, re.S)
    assert match, testid
    return text(match.group(2))


def chart(html: str, index: int = 0) -> dict:
    return json.loads(unescape(re.findall(r"data-chart='([^']*)'", html)[index]))


def form_post(api, path: str, fields: dict[str, str]):
    """POST `fields` urlencoded, as htmx posts a page's form."""
    from urllib.parse import urlencode

    return api.post(path, content=urlencode(fields), headers={"Content-Type": "application/x-www-form-urlencoded"})
