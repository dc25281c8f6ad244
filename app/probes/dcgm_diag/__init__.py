"""The dcgm_diag probe: NVIDIA DCGM's own diagnostic (`dcgmi diag -r LEVEL -j`) on the job's GPUs,
its JSON kept per GPU and per test beside Tally's burn-in of the same GPU (the Burn-in page folds
the last verdict into each GPU's row: app/measured/dcgm_diag.py). params.py: the level and its
time; result.py: what it reports; parse.py: dcgmi's two JSON layouts (DCGM 3.x, 4.x). Its child
side is app/bench/dcgm_diag.py, which needs dcgmi on the PATH and a running nv-hostengine; a job
that would run on a CPU is refused at submission, naming params.device."""

from app.probes.base import Kind, Least, Need, Probe
from app.probes.dcgm_diag.params import LEVELS, DcgmDiagParams, needs_gpu
from app.probes.dcgm_diag.result import SEVERITIES, DcgmDiagResult, DiagWarning
from app.probes.faces import Faces, Fieldset, Input, Metric, Row, Table, rows_of
from app.probes.params import MIB

NEED_BYTES = MIB
"""The child allocates nothing on the GPU; DCGM's memory tests take a share of whatever is free
when they run (memory's and memtest's minimum allocation percentages), so no size is asked of it."""


def need(params: DcgmDiagParams, kind: Kind) -> Need:
    needs_gpu(kind)
    return NEED_BYTES, "params.level"


def least_seconds(params: DcgmDiagParams, kind: Kind) -> Least:
    needs_gpu(kind)
    return LEVELS[params.level].least_s, "params.level"


def headline(r: DcgmDiagResult) -> list[Metric]:
    where = f"level {r.level}, DCGM {r.dcgm_version or '?'}"
    failed = sum(1 for o in r.results if o.status == "fail")
    return [Metric("gpus_failed", "GPUs failed", sum(g.verdict == "fail" for g in r.gpus), "number", where),
            Metric("gpus_warned", "GPUs warned", sum(g.verdict == "warn" for g in r.gpus), "number", where),
            Metric("results_failed", "test results failed", failed, "number", where),
            Metric("tests", "tests run", len({(o.category, o.test) for o in r.results}), "number", where)]


def _names(tests: list[str]) -> str:
    return ", ".join(tests) or "–"


def _value(x: float) -> str:
    return f"{int(x):,}" if x.is_integer() else f"{x:,.3f}".rstrip("0")


def tables(r: DcgmDiagResult) -> list:
    level = LEVELS.get(r.level)
    said = [f"dcgm_diag level {r.level} ({level.name if level else '?'}) with DCGM {r.dcgm_version or '?'} "
            f"({r.layout} layout), driver {r.driver_version or '?'}: {r.verdict.upper()}; `{r.command}` "
            f"exited {r.exit_code} after {r.seconds:.0f} s"]
    said.append(Table(["GPU", "UUID", "serial", "verdict", "failed", "warned", "skipped", "passed"],
                      [[f"GPU {g.gpu_id}", g.uuid or "–", g.serial or "–", g.verdict, _names(g.failed),
                        _names(g.warned), _names(g.skipped), str(g.passed)] for g in r.gpus],
                      7, "Each GPU: fail when a test failed on it or on all GPUs, warn when one warned"))
    entities = list(dict.fromkeys(o.entity for o in r.results))
    tests: dict[tuple[str, str], dict[str, str]] = {}
    for o in r.results:
        tests.setdefault((o.category, o.test), {})[o.entity] = o.status
    said.append(Table(["category", "test", *entities],
                      [[c, t, *(by.get(e, "–") for e in entities)] for (c, t), by in tests.items()],
                      2 + len(entities), "DCGM's result per test and entity"))
    notes = [[o.test, o.entity, "warning", f"{w.message}{_code(w)}"] for o in r.results for w in o.warnings]
    notes += [[o.test, o.entity, "info", line] for o in r.results for line in o.info]
    if notes:
        said.append(Table(["test", "entity", "kind", "message"], notes, 4, "What DCGM said"))
    figures = [[o.test, o.entity, f.name, _value(f.value), f.unit] for o in r.results for f in o.figures]
    if figures:
        said.append(Table(["test", "entity", "figure", "value", "unit"], figures, 3,
                          "Figures DCGM wrote in its info lines"))
    return said


def _code(w: DiagWarning) -> str:
    if w.error_id is None:
        return ""
    severity = "" if w.severity is None else f", severity {SEVERITIES.get(w.severity, w.severity)}"
    return f" (error {w.error_id}{severity})"


LEVEL_INPUT = Input("dcgm_diag_level", "level", "select", "level",
                    tuple((str(n), f"{n}: {lv.name} (+ {lv.adds.split(' (')[0]})") for n, lv in
                          LEVELS.items()), "1")
TIMEOUT_INPUT = Input("dcgm_diag_timeout", "dcgmi time limit (s)", "number", "dcgmi_timeout_s",
                      placeholder="by level")


FORM = (Fieldset("DCGM diagnostic", (Row("level", (LEVEL_INPUT,)),
                                     Row("dcgmi time limit (s)", (TIMEOUT_INPUT,)))),)
"""The level's select posts text ("3"), which the level's count reads as the number."""

PROBE = Probe(
    "dcgm_diag", "NVIDIA DCGM's diagnostic (dcgmi diag -r 1 to 4) on the job's GPUs: each test's result per "
    "GPU and a verdict per GPU, beside the burn-in; needs DCGM installed and a GPU", DcgmDiagParams,
    DcgmDiagResult, "app.bench.dcgm_diag:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, form=FORM, csv_rows=rows_of("results"),
                compared=("level",)))
