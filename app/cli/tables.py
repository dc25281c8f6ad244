"""One table shape for every `tally` table: rich, text columns left, numbers right."""

from typing import Any


def table(headers: list[str], rows: list[list[str]], text_columns: int = 1) -> Any:
    """Text in the first text_columns columns, left-aligned; numbers right-aligned."""
    from rich.table import Table

    out = Table()
    for i, header in enumerate(headers):
        out.add_column(header, justify="left" if i < text_columns else "right")
    for row in rows:
        out.add_row(*row)
    return out
