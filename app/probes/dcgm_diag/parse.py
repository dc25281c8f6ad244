"""`dcgmi diag -j`'s output read into per-GPU, per-test results and a verdict per GPU.

Two layouts, both read from NVIDIA/DCGM's dcgmi/Diag.cpp (HelperJsonBuildOutput and the
functions it calls; the keys are nvvs/include/NvvsJsonStrings.h's), each written by jsoncpp:

- 4.x (DCGM 4.0 to 4.6, commits d2a3091 to 72fa3fe): {"DCGM Diagnostic": {"test_categories":
  [{"category", "tests": [{"name", "results": [{"entity_group", "entity_group_id", "entity_id",
  "status", "warnings": [{"warning", "error_id", "error_category", "error_severity"}], "info":
  [...]}], "test_summary": {"status", "warnings"}}]}]}, "entity_groups": [{"entity_group",
  "entities": [{"entity_id", "serial_num", "device_id"}]}], "metadata": {"version", "Driver
  Version Detected"}}. A result without an entity (DCGM_FE_NONE) is the whole run's.
- 3.x (DCGM 3.3.1 to 3.3.9, commits a33560c to b0ec3c6; 3.0 to 3.2, f6fe565 to 4e0a87a, write
  "gpu_ids" for "gpu_id" and a warning as bare text, both read here, and 3.0 no version):
  {"DCGM GPU Diagnostic": {"test_categories": [...]},
  "version", "Driver Version Detected", "GPU Device Serials": {"0": ...}, "GPU Device IDs": [...]}.
  A per-GPU result names its GPU as text ("gpu_id": "0") and its info as one string; a deployment
  test (Denylist, Persistence Mode ...) has one result for the run, naming a GPU only beside an
  error, whose warning text sits under "warnings" (a slip in HelperJsonAddBasicTests).

Both print DCGM's WARN as "Fail" (Diag::HelperDisplayDiagResult without DDR_DISPLAY_WARN), so a
warning DCGM raised (persistence mode off) reads as a failure here, as in dcgmi's exit status. A
run that did not start prints {"DCGM Diagnostic": {"runtime_error", "version"}}: DiagRuntimeError.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.probes.dcgm_diag.result import DiagWarning, Figure, GpuVerdict, Outcome, Status, Verdict

ROOTS = {"DCGM Diagnostic": "4.x", "DCGM GPU Diagnostic": "3.x"}
"""nvvs/include/NvvsJsonStrings.h's NVVS_NAME in each layout."""
ALL_GPUS = "all GPUs"
STATUSES: dict[str, Status] = {"pass": "pass", "fail": "fail", "skip": "skip", "warn": "warn",
                               "not run": "skip"}
RANK = {"pass": 0, "skip": 1, "warn": 2, "fail": 3}


class DiagOutputError(ValueError):
    """dcgmi's output is not a diagnostic's JSON: the message names what is missing, and where."""


class DiagRuntimeError(RuntimeError):
    """DCGM printed a runtime_error: the diagnostic did not run."""


_NUMBER = r"(\d+(?:\.\d+)?)"
FIGURES: tuple[tuple[re.Pattern, Callable[[re.Match], list[tuple[str, str, str]]]], ...] = (
    # nvvs/plugin_src/pcie/PcieMain.cpp, addBandwidthInfo and addLatencyInfo
    (re.compile(rf"(GPU to Host|Host to GPU|bidirectional) bandwidth:\s*{_NUMBER} GB/s"),
     lambda m: [(f"{m[1]} bandwidth", m[2], "GB/s")]),
    (re.compile(rf"(GPU to Host|Host to GPU|bidirectional) latency:\s*{_NUMBER} us"),
     lambda m: [(f"{m[1]} latency", m[2], "us")]),
    # nvvs/plugin_src/diagnostic/DiagnosticPlugin.cpp
    (re.compile(rf"calculated at approximately {_NUMBER} gigaflops"),
     lambda m: [("compute", m[1], "GFLOP/s")]),
    # nvvs/plugin_src/targetedpower/TargetedPower_wrapper.cpp
    (re.compile(rf"max power: {_NUMBER} W average power usage: {_NUMBER} W"),
     lambda m: [("max power", m[1], "W"), ("average power", m[2], "W")]),
    # nvvs/plugin_src/targetedstress/TargetedStress_wrapper.cpp
    (re.compile(rf"relative stress level\s+{_NUMBER}"), lambda m: [("relative stress level", m[1], "")]),
    # nvvs/plugin_src/memory/memory.cpp
    (re.compile(rf"Allocated (\d+) bytes \({_NUMBER}%\)"),
     lambda m: [("allocated", m[1], "bytes"), ("allocated share", m[2], "%")]),
)
"""The info lines whose figures are read, each from the DCGM plugin that writes it."""


@dataclass(frozen=True)
class Parsed:
    layout: Literal["4.x", "3.x"]
    dcgm_version: str | None
    driver_version: str | None
    results: list[Outcome]
    gpus: list[GpuVerdict]
    verdict: Verdict


def loads(stdout: str) -> dict:
    """dcgmi's stdout as JSON; DiagOutputError quoting it when it holds none (dcgmi prints a
    connection failure as a line of text)."""
    text = stdout.strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        try:
            data = json.loads(text[start:end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict):
        raise DiagOutputError(f"dcgmi printed no JSON object: {text[:300]!r}")
    return data


def parse(output: str | dict, gpu_ids: list[int] | None = None) -> Parsed:
    """The results of a `dcgmi diag -j` run, and a verdict for each GPU it lists (and each of
    `gpu_ids`, the GPUs it was asked for, though it lists none of its own)."""
    data = loads(output) if isinstance(output, str) else output
    found = [name for name in ROOTS if name in data]
    if not found:
        raise DiagOutputError(f"no {' or '.join(map(repr, ROOTS))} object at the top of dcgmi's JSON "
                              f"(its keys: {', '.join(map(str, data)) or 'none'})")
    name = found[0]
    layout = ROOTS[name]
    root = _dict(data[name], name)
    if "runtime_error" in root:
        raise DiagRuntimeError(f"DCGM {root.get('version', '(version unknown)')} did not run the diagnostic: "
                               f"{str(root['runtime_error']).strip()}")
    categories = _list(root, "test_categories", name)
    results: list[Outcome] = []
    for c, category in enumerate(categories):
        where = f"{name}.test_categories[{c}]"
        category = _dict(category, where)
        label = _text(category, "category", where)
        for t, test in enumerate(_list(category, "tests", where)):
            results += _test(_dict(test, f"{where}.tests[{t}]"), label, f"{where}.tests[{t}]")
    if layout == "4.x":
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        version, driver, serials = meta.get("version"), meta.get("Driver Version Detected"), _serials4(data)
    else:
        version, driver = data.get("version"), data.get("Driver Version Detected")
        listed = data.get("GPU Device Serials")
        listed = listed if isinstance(listed, dict) else {}
        serials = {int(k): str(v) for k, v in listed.items() if str(k).isdigit()}
    ids = sorted({*serials, *(gpu_ids or ()), *(r.gpu_id for r in results if r.gpu_id is not None)})
    gpus = [verdict_of(i, results, serials.get(i)) for i in ids]
    # The worst GPU's, or a result no GPU's verdict holds (a CPU's, cpu_eud's; the whole run's where
    # no GPU is named anywhere).
    worst = max([*(g.verdict for g in gpus), _verdict([r for r in results if r.gpu_id is None])],
                key=RANK.__getitem__)
    return Parsed(layout, None if version is None else str(version), None if driver is None else str(driver),
                  results, gpus, worst)


def _test(test: dict, category: str, where: str) -> list[Outcome]:
    name = _text(test, "name", where)
    listed = test.get("results", [])
    if not isinstance(listed, list):
        raise DiagOutputError(f"{where}: 'results' is not a list")
    out = [_result(_dict(r, f"{where}.results[{i}]"), category, name, f"{where}.results[{i}]")
           for i, r in enumerate(listed)]
    summary = test.get("test_summary")
    if isinstance(summary, dict) and "status" in summary:
        # 4.x: the test's overall result, with every error of the test; one that fails where none
        # of its entities' results do carries an error of the whole run (an entity of DCGM_FE_NONE).
        whole = _result(summary, category, name, f"{where}.test_summary", whole=True)
        if not out or (RANK[whole.status] > max(RANK[r.status] for r in out)):
            seen = {w.message for r in out for w in r.warnings}
            whole.warnings = [w for w in whole.warnings if w.message not in seen]
            out.append(whole)
    if not out:
        raise DiagOutputError(f"{where} ({name}): neither 'results' nor 'test_summary'")
    return out


def _result(result: dict, category: str, test: str, where: str, whole: bool = False) -> Outcome:
    word = _text(result, "status", where)
    status = STATUSES.get(word.lower())
    if status is None:
        raise DiagOutputError(f"{where}: status {word!r} is none of DCGM's Pass, Fail, Warn, Skip")
    gpu_id, entity = (None, ALL_GPUS) if whole else _entity(result, where)
    info = result.get("info", [])
    lines = info.splitlines() if isinstance(info, str) else [str(i) for i in info] if isinstance(info, list) \
        else []
    figures = [Figure(name, float(value), unit) for line in lines for pattern, read in FIGURES
               for m in pattern.finditer(line) for name, value, unit in read(m)]
    return Outcome(category=category, test=test, gpu_id=gpu_id, entity=entity, status=status,
                   warnings=_warnings(result.get("warnings"), where), info=lines, figures=figures)


def _entity(result: dict, where: str) -> tuple[int | None, str]:
    if "entity_id" in result:  # 4.x
        group = str(result.get("entity_group", "GPU"))
        number = _whole(result["entity_id"], f"{where}.entity_id")
        return (number if group == "GPU" else None), f"{group} {number}"
    for key in ("gpu_id", "gpu_ids"):  # 3.x: "0" for a per-GPU test, 0 beside a deployment test's error
        if key in result:
            number = _whole(result[key], f"{where}.{key}")
            return number, f"GPU {number}"
    return None, ALL_GPUS


def _warnings(listed: Any, where: str) -> list[DiagWarning]:
    if listed is None:
        return []
    if isinstance(listed, str):  # DCGM 3.0 to 3.2: the message alone
        return [DiagWarning(listed, None, None, None)]
    if not isinstance(listed, list):
        raise DiagOutputError(f"{where}: 'warnings' is neither a list nor text")
    out = []
    for i, w in enumerate(listed):
        if isinstance(w, str):
            out.append(DiagWarning(w, None, None, None))
            continue
        w = _dict(w, f"{where}.warnings[{i}]")
        message = w.get("warning", w.get("warnings"))  # "warnings": 3.x's deployment tests
        if not isinstance(message, str):
            raise DiagOutputError(f"{where}.warnings[{i}]: no 'warning' text")
        out.append(DiagWarning(message, *(_optional_int(w.get(k)) for k in ("error_id", "error_category",
                                                                            "error_severity"))))
    return out


def _serials4(data: dict) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for group in data.get("entity_groups") or []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for e in group.get("entities") or []:
                if isinstance(e, dict) and isinstance(e.get("entity_id"), int):
                    out[e["entity_id"]] = e.get("serial_num")
    return out


def verdict_of(gpu_id: int, results: list[Outcome], serial: str | None = None) -> GpuVerdict:
    """GPU `gpu_id`'s verdict over `results`: its own and the whole run's."""
    mine = [r for r in results if r.gpu_id == gpu_id or r.entity == ALL_GPUS]
    by_test: dict[str, list[Outcome]] = {}
    for r in mine:
        by_test.setdefault(r.test, []).append(r)
    failed, warned, skipped, passed = [], [], [], 0
    for test, rs in by_test.items():
        worst = max((r.status for r in rs), key=RANK.__getitem__)
        if worst == "fail":
            failed.append(test)
        elif worst == "warn" or any(r.warnings for r in rs):  # a warning on a result DCGM did not fail
            warned.append(test)
        elif worst == "skip":
            skipped.append(test)
        else:
            passed += 1
    verdict: Verdict = "fail" if failed else "warn" if warned else "pass"
    return GpuVerdict(gpu_id=gpu_id, uuid=None, serial=serial, verdict=verdict, failed=failed, warned=warned,
                      skipped=skipped, passed=passed)


def _verdict(results: list[Outcome]) -> Verdict:
    if any(r.status == "fail" for r in results):
        return "fail"
    return "warn" if any(r.status == "warn" or r.warnings for r in results) else "pass"


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise DiagOutputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(parent: dict, key: str, where: str) -> list:
    if key not in parent:
        raise DiagOutputError(f"{where}: no {key!r}")
    if not isinstance(parent[key], list):
        raise DiagOutputError(f"{where}.{key}: expected a list, got {type(parent[key]).__name__}")
    return parent[key]


def _text(parent: dict, key: str, where: str) -> str:
    if not isinstance(parent.get(key), str):
        raise DiagOutputError(f"{where}: no {key!r} text")
    return parent[key]


def _whole(value: Any, where: str) -> int:
    number = isinstance(value, int) and not isinstance(value, bool)
    if not (number or (isinstance(value, str) and value.isdigit())):
        raise DiagOutputError(f"{where}: {value!r} is not a GPU id")
    return int(value)


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
