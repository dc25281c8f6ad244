"""Two runs side by side on the compare page: each probe's headline figures (its faces,
app/probes/faces.py) with B - A and B / A, what the runs did differently, and both on one chart."""

from typing import Any

from app.probes.faces import delta, ratio
from app.probes.registry import PROBES


def differences(a: Any, b: Any) -> list[str]:
    """What the two runs did differently, named: the reason their figures may not compare."""
    faces = PROBES[a.probe].faces
    said = []
    for what, x, y in [("device", a.environment.device_name, b.environment.device_name),
                       *((name, getattr(a, name), getattr(b, name)) for name in faces.compared)]:
        if x != y:
            said.append(f"{what.replace('_', ' ')}: A {x}, B {y}")
    return said + (faces.differences(a, b) if faces.differences else [])


def compare(a: Any, b: Any) -> dict:
    """What the compare page shows for two results (either may be None: a run without one)."""
    if a is None or b is None:
        return {"message": "Only runs that succeeded have figures to compare: "
                           + " and ".join(run for run, r in (("A", a), ("B", b)) if r is None)
                           + " has no result."}
    if a.probe != b.probe:
        return {"message": f"Run A is a {a.probe} run and run B a {b.probe} run: they measure different "
                           "things, so there is nothing to set side by side. Pick two runs of one probe."}
    faces = PROBES[a.probe].faces
    ma, mb = {m.key: m for m in faces.headline(a)}, {m.key: m for m in faces.headline(b)}
    rows = []
    for key in [*ma, *(k for k in mb if k not in ma)]:
        x, y = ma.get(key), mb.get(key)
        shown = x or y
        va, vb = (None if m is None else m.value for m in (x, y))
        rows.append({"label": shown.label, "a": x.text if x else "—", "b": y.text if y else "—",
                     "delta": delta(va, vb, shown.kind),
                     "ratio": "n/a" if shown.kind in ("fraction", "signed_fraction") else ratio(va, vb)})
    return {"rows": rows, "differences": differences(a, b), "chart": faces.overlay(a, b)}
