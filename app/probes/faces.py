"""How a probe's results are shown, declared beside the probe (its `Faces`), so the job page,
the compare page, the launch form, the CSV export and `tally probe` need no chain of
`if probe == ...`: each reads the record. Plain data and functions over a result; the web layer
renders them as HTML, the CLI as rich tables. Every field has a default, so a new probe gets a
job page, a compare view, a CSV, a launch form and a table from its params and result alone.

Words, one per meaning (pages and tables use the same):
- "median": FLOPs (or bytes, or tokens) over the median timed iteration's seconds;
- "best iteration": the same over the fastest iteration's seconds;
- "best shape": per dtype, the matmul shape with the highest median.
"""

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_core import PydanticUndefined

from app import numbers
from app.inputs.fields import members
from app.probes.past import Past

MetricKind = Literal["flop_per_sec", "seconds", "gb_per_sec", "tokens_per_sec", "fraction", "signed_fraction",
                     "watts", "ratio", "number"]


@dataclass(slots=True)
class Metric:
    """A headline figure: what the job page shows at the top, and the compare page sets beside
    the same figure of another run (by `key`)."""

    key: str
    """Names the same figure in two runs of one probe."""
    label: str
    value: float | None
    kind: MetricKind
    detail: str = ""
    """Where the figure was taken (a shape, a size), shown beside it on the job page."""

    @property
    def text(self) -> str:
        return show(self.value, self.kind)


def show(value: float | None, kind: MetricKind) -> str:
    if value is None:
        return "n/a"
    if kind == "flop_per_sec":
        return numbers.tflops(value)
    if kind == "seconds":
        return f"{numbers.sig(value * 1e3)} ms"
    if kind == "gb_per_sec":
        return f"{numbers.sig(value)} GB/s"
    if kind == "tokens_per_sec":
        return f"{numbers.sig(value)} tokens/s"
    if kind == "watts":
        return f"{numbers.sig(value)} W"
    if kind == "ratio":
        return f"{numbers.sig(value)}×"
    if kind == "number":
        return numbers.sig(value)
    return numbers.percent(value, signed=kind == "signed_fraction")


def delta(a: float | None, b: float | None, kind: MetricKind) -> str:
    """B - A in the figure's unit; fractions in percentage points."""
    if a is None or b is None:
        return "n/a"
    d = b - a
    if kind in ("fraction", "signed_fraction"):
        return f"{numbers.percent(d, signed=True)[:-1]} pp"
    text = show(d, kind)
    return "+" + text if d > 0 else text


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or a == 0 else f"{numbers.sig(b / a)}×"


@dataclass(frozen=True)
class Table:
    """Rows of text, already formatted: `tally probe` prints it (rich), a page without a
    template of its own shows it (HTML)."""

    headers: list[str]
    rows: list[list[str]]
    text_columns: int = 1
    """The first columns hold text (left-aligned); the rest numbers (right-aligned)."""
    title: str = ""


Said = str | Table
"""A probe's table face: lines and tables, in reading order."""


def where(result: Any) -> str:
    """The line above every probe's table: what ran where."""
    env = result.environment
    return f"{result.probe} on {env.device_name} ({env.device}), torch {env.torch_version}"


def skipped(result: Any) -> list[str]:
    return [f"skipped {s.what}: {s.reason}" for s in getattr(result, "skipped", [])]


def compare_lines(a: Any, b: Any, points: Callable[[Any], list], group: Callable[[Any], str],
                  x: Callable[[Any], float], y: Callable[[Any], float], *, x_label: str, y_label: str,
                  caption: str) -> dict:
    """Both runs on one line chart for the compare page: a line per group (a dtype, a transfer
    mode), run A's solid and run B's dashed (static/app.js, "compare_lines")."""
    series: list[dict] = []
    for run, r in (("A", a), ("B", b)):
        for point in points(r):
            name = group(point)
            found = next((s for s in series if s["run"] == run and s["group"] == name), None)
            if found is None:
                found = {"run": run, "group": name, "label": f"{run} {name}", "points": []}
                series.append(found)
            found["points"].append({"x": x(point), "y": y(point)})
    return {"type": "compare_lines", "x": x_label, "y": y_label, "series": series, "caption": caption}


# --- the launch form ---------------------------------------------------------------------------

InputKind = Literal["text", "number", "list", "select", "checks", "check"]


@dataclass(frozen=True)
class Input:
    """One control of the launch form. The page reads what was posted by `kind` (a number as
    the API's JSON value, "64MiB" left as text for the API to read; a list split on commas; the
    checked values of `checks`), leaves out an empty one, and keys it by `param`."""

    name: str
    """The posted field's name and the element's id: unique on the launch page."""
    label: str = ""
    """The row's label for its first input, the aria-label of the others."""
    kind: InputKind = "text"
    param: str = ""
    """The parameter it fills (default: name)."""
    options: tuple[str | tuple[str, str], ...] = ()
    """select: its values, or (value, text) pairs; checks: the values offered."""
    value: str = ""
    """The initial text, or the option selected; checks: the values checked, comma-separated."""
    placeholder: str = ""
    shown_when: tuple[str, str] | None = None
    """(another input's name, a value): shown, and sent, only while that input has it."""

    @property
    def key(self) -> str:
        return self.param or self.name

    def choices(self) -> list[tuple[str, str]]:
        return [(o, o) if isinstance(o, str) else o for o in self.options]


@dataclass(frozen=True)
class Row:
    label: str
    inputs: tuple[Input, ...]


@dataclass(frozen=True)
class Fieldset:
    """Controls that set some of a probe's parameters; one fieldset may serve several probes
    (the train step's fields serve train_step, data_loader and checkpoint)."""

    legend: str
    rows: tuple[Row, ...]
    assemble: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """The values read, by param -> the parameters they set (the cruncher's width and layers into
    its model); None: as read."""

    @property
    def inputs(self) -> list[Input]:
        return [i for row in self.rows for i in row.inputs]


BASE_FIELDS = ("device", "seed", "warmup_s", "measure_s", "min_iters", "max_iters", "sustain_s")
"""Every probe's timing fields (app/probes/params.py): the API takes them, the form leaves them at
their defaults."""


def derived_form(name: str, params: type) -> tuple[Fieldset, ...]:
    """A fieldset for a probe that declares none: one input per parameter that a form can hold
    (a choice, a flag, a number, a list, text), named `<probe>_<parameter>`, empty for its
    default; parameters of other shapes keep their defaults."""
    rows = []
    for field_name, info in params.model_fields.items():
        if field_name in BASE_FIELDS:
            continue
        kinds = [m for m in members(info.annotation) if m is not type(None)]
        default = "" if info.default is None or info.default is PydanticUndefined else str(info.default)
        choices = [v for m in kinds if typing.get_origin(m) is Literal for v in typing.get_args(m)]
        label = field_name.replace("_", " ")
        if choices:
            inp = Input(f"{name}_{field_name}", label, "select", field_name, tuple(map(str, choices)),
                        default)
        elif kinds == [bool]:
            inp = Input(f"{name}_{field_name}", label, "check", field_name, value=default.lower())
        elif kinds and all(m in (int, float) for m in kinds):
            inp = Input(f"{name}_{field_name}", label, "number", field_name, placeholder=default or "default")
        elif kinds and all(typing.get_origin(m) is list for m in kinds):
            inp = Input(f"{name}_{field_name}", label, "list", field_name, placeholder="default")
        elif kinds == [str]:
            inp = Input(f"{name}_{field_name}", label, "text", field_name, placeholder=default or "default")
        else:
            continue
        rows.append(Row(label, (inp,)))
    return (Fieldset(name, tuple(rows)),) if rows else ()


# --- the CSV export --------------------------------------------------------------------------------

def flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields as dotted columns (time.median, memory.predicted.total); lists other than
    the measurements (assumptions, skipped) stay in the JSON export."""
    row: dict[str, Any] = {}
    for key, v in value.items():
        name = f"{prefix}{key}"
        if isinstance(v, dict):
            row |= flatten(v, f"{name}.")
        elif not isinstance(v, list):
            row[name] = v
    return row


def rows_of(listed: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """CSV rows: one per item of the result's `listed` measurements (points), else one."""
    def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
        items = result.get(listed)
        return [flatten(item) for item in items] if isinstance(items, list) else [flatten(result)]
    return rows


# --- the record ----------------------------------------------------------------------------------

def _no_metrics(result: Any) -> list[Metric]:
    return []


def _no_charts(result: Any, past: Past) -> dict[str, dict]:
    return {}


def _no_overlay(a: Any, b: Any) -> dict | None:
    return None


@dataclass(frozen=True)
class Faces:
    headline: Callable[[Any], list[Metric]] = _no_metrics
    """The figures a person compares runs by, in reading order (the job page's top, the
    compare page's rows)."""
    tables: Callable[[Any], list[Said]] | None = None
    """`tally probe`'s table, and the job page's body where the probe has no `page`. None: the
    headline as a table."""
    charts: Callable[[Any, Past], dict[str, dict]] = _no_charts
    """Chart specs by name (static/app.js draws them by their "type"), with captions."""
    page: str | None = None
    """A template (under templates/) that shows the result on the job page; None: `tables`."""
    form: tuple[Fieldset, ...] | None = None
    """The launch form's fieldsets; None: derived from the parameters (derived_form)."""
    csv_rows: Callable[[dict[str, Any]], list[dict[str, Any]]] = field(default=rows_of("points"))
    """The result as JSON, without its environment -> CSV rows (the export adds job and device)."""
    compared: tuple[str, ...] = ()
    """Result fields that must match for two runs' figures to compare (model, batch_size ...)."""
    differences: Callable[[Any, Any], list[str]] | None = None
    """What else two runs did differently, in words, beyond the device and `compared`."""
    overlay: Callable[[Any, Any], dict | None] = _no_overlay
    """Both runs on one chart for the compare page, or None."""
    sustained: str = ""
    """What a sustained run held, for the job page ("The best shape"), where the result has one."""


def table_of(faces: Faces, result: Any) -> list[Said]:
    """The table face, or the headline as a table."""
    if faces.tables is not None:
        return faces.tables(result)
    metrics = faces.headline(result)
    rows = [[m.label, m.text, m.detail] for m in metrics]
    return [where(result), Table(["figure", "value", "where"], rows)]
