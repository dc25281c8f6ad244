"""The data_loader and checkpoint job pages' figures: their charts and headline metrics, beside the
other probes' in app/web/benchmarks.py and app/web/measures.py. GB = 10^9 bytes."""

from typing import Any

from app.probes.checkpoint import CheckpointResult
from app.probes.data_loader import DataLoaderResult
from app.web import numbers


def charts(result: Any) -> dict | None:
    """Chart specs ("bars", static/app.js) for a data_loader or checkpoint result; None otherwise."""
    if isinstance(result, DataLoaderResult):
        return {"tokens": loader_chart(result)}
    if isinstance(result, CheckpointResult):
        return {"bytes": checkpoint_bytes_chart(result), "speed": checkpoint_speed_chart(result)}
    return None


def loader_chart(r: DataLoaderResult) -> dict:
    """get_batch's tokens/s per copy mode beside the train step's, on a log axis when they are
    more than two decades apart."""
    labels = [f"get_batch, {m.mode}" for m in r.modes] + [f"train step ({r.train_source})"]
    loader = [m.tokens_per_sec for m in r.modes] + [None]
    train = [None] * len(r.modes) + [r.train_tokens_per_s]
    values = [v for v in loader + train if v]
    headroom = ", ".join(f"{m.mode} {numbers.sig(m.headroom)}×" for m in r.modes)
    return {
        "type": "bars",
        "labels": labels,
        "y": "tokens/s",
        "stacked": False,
        "log": max(values) / min(values) > 100,
        "sets": [
            {"label": "get_batch (median batch)", "data": loader},
            {"label": "train step", "data": train},
        ],
        "caption": f"Tokens per second: the loader's (batch_size × seq_len over the median batch's seconds) "
        f"per copy mode, beside the train step's ({r.train_model}, {r.train_precision}, "
        f"{r.train_optimizer}). Headroom, the loader's over the train step's: {headroom}.",
    }


def checkpoint_bytes_chart(r: CheckpointResult) -> dict:
    """The engine's checkpoint_bytes by kind, stacked, beside the file's bytes by what holds them."""
    scale, unit = (1e9, "GB") if r.file_bytes >= 1e9 else (1e6, "MB")
    pred, t = r.predicted, r.tensor_bytes
    sets = [
        {"label": "parameters", "data": [pred.get("parameters", 0) / scale, t["model"] / scale]},
        {"label": "master weights", "data": [pred.get("master_weights", 0) / scale, 0]},
        {
            "label": "optimizer state",
            "data": [pred.get("optimizer_state", 0) / scale, t["optimizer_state"] / scale],
        },
        {"label": "overhead (step counters, pickle, zip)", "data": [0, r.overhead_bytes / scale]},
    ]
    return {
        "type": "bars",
        "labels": ["predicted (checkpoint_bytes)", "measured (the file)"],
        "y": unit,
        "stacked": True,
        "log": False,
        "sets": [s for s in sets if any(s["data"])],
        "caption": f"Bytes, {unit} (10^{9 if unit == 'GB' else 6}): the memory engine's checkpoint_bytes "
        f"by kind beside the torch.save file's {r.file_bytes:,} bytes by what holds them; "
        f"predicted / measured - 1 = {numbers.percent(r.relative_error, 3, signed=True)}, the "
        f"overhead {numbers.percent(r.overhead_fraction, 3)} of the file.",
    }


def checkpoint_speed_chart(r: CheckpointResult) -> dict:
    cold = "after its pages were dropped" if r.read_cache == "dropped" else "page cache kept"
    return {
        "type": "bars",
        "labels": ["write (save, flush, fsync)", f"read ({cold})", "read again (warm)"],
        "y": "GB/s",
        "stacked": False,
        "log": False,
        "sets": [
            {
                "label": "GB/s (median)",
                "data": [r.write_bytes_per_s / 1e9, r.read_bytes_per_s / 1e9, r.read_warm_bytes_per_s / 1e9],
            }
        ],
        "caption": f"GB/s (10^9 bytes per second), the file's bytes over the median seconds of "
        f"{r.write_s.iterations} writes and reads, on {r.directory_filesystem or 'an unknown'} "
        f"filesystem.",
    }


def headline(result: Any, metric: Any) -> list | None:
    """The headline figures (app/web/measures.Metric, passed in as `metric`); None for other probes."""
    if isinstance(result, DataLoaderResult):
        out = []
        for m in result.modes:
            out += [
                metric(
                    f"{m.mode}/tokens",
                    f"get_batch {m.mode}, tokens/s (median batch)",
                    m.tokens_per_sec,
                    "tokens_per_sec",
                ),
                metric(f"{m.mode}/headroom", f"headroom over the train step, {m.mode}", m.headroom, "ratio"),
            ]
        return [
            *out,
            metric(
                "train",
                "train step tokens/s, " + ("given" if result.train_source == "params" else "measured"),
                result.train_tokens_per_s,
                "tokens_per_sec",
                result.train_model,
            ),
        ]
    if isinstance(result, CheckpointResult):
        r = result
        return [
            metric("write", "write, median (save, flush, fsync)", r.write_bytes_per_s / 1e9, "gb_per_sec"),
            metric(
                "read", f"read, median (page cache {r.read_cache})", r.read_bytes_per_s / 1e9, "gb_per_sec"
            ),
            metric(
                "bytes",
                "checkpoint bytes, predicted vs file",
                r.relative_error,
                "signed_fraction",
                f"{r.file_bytes:,} bytes",
            ),
            metric("overhead", "serialisation overhead", r.overhead_fraction, "fraction"),
        ]
    return None
