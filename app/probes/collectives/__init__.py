"""The collectives probe: all_reduce, all_gather, reduce_scatter, all_to_all and broadcast over the
job's GPUs (gloo processes on a CPU), algbw and busbw by size as nccl-tests reports them, values
checked, beside a fitted latency-bandwidth model and the catalogue's link. params.py: what it
takes and the calculators' view; result.py: what it reports. Its torch side is
app/bench/collectives.py. Bandwidths in GB/s (10^9 bytes/s), times in microseconds."""

from app import numbers
from app.probes import energy
from app.probes.base import Kind, Least, Need, Probe
from app.probes.collectives.params import CollectivesParams, collectives_need
from app.probes.collectives.result import CollectivesResult
from app.probes.faces import Faces, Metric, Table, skipped, where
from app.probes.past import Past


def least_seconds(params: CollectivesParams, kind: Kind) -> Least:
    # Runs count iterations, not seconds: no floor from the parameters beyond starting the ranks.
    return 0.0, "params.iterations"


def need(params: CollectivesParams, kind: Kind) -> Need:
    return collectives_need(params, kind)


def headline(r: CollectivesResult) -> list[Metric]:
    """Each collective's busbw at its largest size."""
    out = []
    for op in dict.fromkeys(p.collective for p in r.points):
        p = max((p for p in r.points if p.collective == op), key=lambda p: p.size_bytes)
        out.append(Metric(f"{op}/busbw", f"{op}: busbw, largest size (median)", p.busbw_bytes_per_sec / 1e9,
                          "gb_per_sec", numbers.human_bytes(p.size_bytes, binary=True)))
    return out


def tables(r: CollectivesResult) -> list:
    sig, per = numbers.sig, numbers.per
    rows = [[p.collective, f"{p.size_bytes:,}", per(p.time.median, 1e-6), per(p.algbw_bytes_per_sec, 1e9),
             per(p.busbw_bytes_per_sec, 1e9), per(p.fitted_busbw_bytes_per_sec, 1e9),
             per(p.catalogue_busbw_bytes_per_sec, 1e9), "n/a" if p.errors is None else str(p.errors)]
            for p in r.points]
    headers = ["collective", "S bytes", "median us", "algbw GB/s", "busbw GB/s", "fitted busbw",
               "catalogue busbw", "wrong values"]
    if any(p.joules_per_run_all_ranks is not None for p in r.points):  # every rank's GPU, summed
        headers += ["J/run, all ranks", "W, all ranks"]
        rows = [row + [sig(p.joules_per_run_all_ranks), sig(p.watts_all_ranks)]
                for row, p in zip(rows, r.points, strict=True)]
    fits = [[f.collective, str(f.steps), per(f.latency_s, 1e-6), per(f.bytes_per_sec, 1e9),
             numbers.percent(f.rms_relative_error)] for f in r.fits]
    checked = ("not checked" if r.check_passed is None else "all correct" if r.check_passed
               else "WRONG VALUES")
    return [f"{where(r)}: {r.ranks} ranks over {r.backend}, {r.dtype}", Table(headers, rows, 1),
            "fitted: t = latency x ring steps + bus_factor x S / bandwidth",
            Table(["collective", "ring steps", "latency us per step", "GB/s", "rms error"], fits),
            f"values: {checked}", *spanning_tables(r), *skipped(r), *energy.note(r)]


def spanning_tables(r: CollectivesResult) -> list:
    """A job across boxes: each link alone, and the world's points beside their predictions."""
    s = r.spanning
    if s is None:
        return []
    per, pct = numbers.per, numbers.percent
    levels = [[level.what, " <-> ".join(level.boxes), str(level.ranks),
               per(level.points[-1].busbw_bytes_per_sec, 1e9), per(level.fit.bytes_per_sec, 1e9),
               per(level.fit.latency_s, 1e-6)] for level in s.per_node + s.per_link]
    points = [[p.collective, f"{p.size_bytes:,}", per(p.measured_seconds, 1e-6),
               per(p.hierarchical_seconds, 1e-6), pct(p.hierarchical_error), per(p.flat_seconds, 1e-6),
               pct(p.flat_error)] + ([per(p.catalogue_seconds, 1e-6)] if s.catalogue else [])
              for p in s.points]
    said = ("the world's points beside their predictions from those links (hierarchical: NCCL's scheme; "
            "flat: one ring at the slowest link, gloo's kind)")
    head = ["level", "boxes", "ranks", "busbw GB/s (largest S)", "fitted GB/s", "latency us/step"]
    return [f"across {s.nodes} boxes ({', '.join(s.boxes)}), {s.ranks_per_node} ranks on each: each link "
            "alone",
            Table(head, levels),
            said + (f"; catalogue: {s.catalogue}" if s.catalogue else ""),
            Table(["collective", "S bytes", "measured us", "hierarchical us", "error", "flat us", "error"]
                  + (["catalogue us (prediction)"] if s.catalogue else []), points, 1)]


def busbw_chart(r: CollectivesResult) -> dict:
    """busbw (GB/s, 10^9 bytes/s) against nccl-tests' size S per collective: the measured medians
    as points, the latency-bandwidth model fitted to them as a dashed line, and on a GPU the
    catalogue's link through the communication engine as a dotted one."""
    # A list, not a mapping keyed by collective: the template's tojson sorts keys, and the
    # collectives keep the run's order.
    series: list[dict] = []
    for p in r.points:
        if not series or series[-1]["collective"] != p.collective:
            series.append({"collective": p.collective, "measured": [], "fitted": [], "catalogue": []})
        for kind, busbw in (("measured", p.busbw_bytes_per_sec), ("fitted", p.fitted_busbw_bytes_per_sec),
                            ("catalogue", p.catalogue_busbw_bytes_per_sec)):
            if busbw is not None:
                series[-1][kind].append({"x": p.size_bytes, "y": busbw / 1e9})
    link = r.catalogue_link
    said = (f"busbw (GB/s, median run, slowest rank) against S in bytes, per collective, over {r.ranks} "
            f"{r.backend} ranks. Dashed: the latency-bandwidth model fitted to this run.")
    if link is not None:
        said += (" Dotted: the communication engine at the catalogue's link, "
                 f"{numbers.sig(link.bytes_per_sec / 1e9)} GB/s per GPU per direction ({link.source}).")
    else:
        said += f" No catalogue link for {r.environment.device_name}, so no engine line."
    return {"type": "collective_busbw", "series": series, "caption": said}


def charts(r: CollectivesResult, past: Past) -> dict[str, dict]:
    return {"busbw": busbw_chart(r)}


PROBE = Probe(
    "collectives", "all_reduce, all_gather, reduce_scatter, all_to_all and broadcast over the job's GPUs "
    "(gloo processes on a CPU): algbw and busbw by size as nccl-tests reports them, values checked, beside "
    "a fitted latency-bandwidth model and the catalogue's link", CollectivesParams, CollectivesResult,
    "app.bench.collectives:run", need, least_seconds,
    faces=Faces(headline=headline, tables=tables, charts=charts, page="probes/collectives.html", form=(),
                compared=("ranks", "backend", "dtype")), spans_boxes=True)
