"""One table shape for every `tally` table: rich, text columns left, numbers right. A probe's table
face (app/probes/faces.Table) prints the same way; its text is printed as it is (rich markup off:
a note such as "data[i:i+seq_len]" is no markup)."""

from typing import Any


def table(headers: list[str], rows: list[list[str]], text_columns: int = 1) -> Any:
    """Text in the first text_columns columns, left-aligned; numbers right-aligned."""
    from rich.table import Table
    from rich.text import Text

    out = Table()
    for i, header in enumerate(headers):
        out.add_column(Text(header), justify="left" if i < text_columns else "right")
    for row in rows:
        out.add_row(*(Text(cell) for cell in row))
    return out


def rendered(part: Any) -> Any:
    """A line of a probe's table face as plain text, or its table as a rich table."""
    from rich.text import Text

    if isinstance(part, str):
        return Text(part)
    said = table(part.headers, part.rows, part.text_columns)
    if part.title:
        said.title = part.title
    return said
