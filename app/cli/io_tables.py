"""Tables of the data_loader and checkpoint probes for `tally probe`: the loader's tokens/s per
copy mode beside the train step's, and a checkpoint file's bytes beside the memory engine's.
GB = 10^9 bytes; MiB = 2^20 bytes; seconds shown as ms."""

from typing import Any

from app.cli import energy
from app.cli.tables import table as _table


def _g(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:,.0f}" if abs(x) >= 10_000 else f"{x:.{digits}g}"



def _said(lines: list[str]) -> list[str]:
    """Prose as printed: rich would read "data[i:i+seq_len]" as markup and drop it."""
    from rich.markup import escape

    return [escape(line) for line in lines]


def _where(r: Any) -> str:
    env = r.environment
    return f"{r.probe} on {env.device_name} ({env.device}), torch {env.torch_version}"


def data_loader(r: Any) -> list:
    joules = energy.shown(m.time for m in r.modes)
    where = (f"{_where(r)}: {r.file_bytes / 2**20:,.0f} MiB of {r.token_dtype} tokens "
             f"({r.tokens_in_file:,}), batch {r.batch_size} x seq {r.seq_len} ({r.tokens_per_batch:,} "
             f"tokens, {r.batch_bytes:,} bytes on the device); file written in {_g(r.write_s * 1e3)} ms")
    rows = [[m.mode, _g(m.time.median * 1e3), _g(m.time.p20 * 1e3), _g(m.time.p80 * 1e3),
             _g(m.batches_per_sec), _g(m.tokens_per_sec), _g(m.bytes_per_sec / 1e9), _g(m.headroom),
             "yes" if m.keeps_up else "NO", *(energy.cells(m.time, per_token=True) if joules else [])]
            for m in r.modes]
    rows.append([f"train step ({r.train_source})", "", "", "", "", _g(r.train_tokens_per_s), "", "", "",
                 *(["", ""] if joules else [])])
    headers = ["get_batch", "median ms", "p20 ms", "p80 ms", "batches/s", "tokens/s", "GB/s", "headroom",
               "keeps up", *(energy.headers("token") if joules else [])]
    train = f"train step: {r.train_model}, {r.train_precision}, {r.train_optimizer}"
    return [where, _table(headers, rows), train,
            *_said([*(f"skipped {s.what}: {s.reason}" for s in r.skipped), *r.notes]), *energy.note(r)]


def checkpoint(r: Any) -> list:
    where = f"{_where(r)}: {r.model} ({r.params:,} params), {r.optimizer}, {r.precision}"
    t = r.tensor_bytes
    rows = [[name.replace("_", " "), f"{n:,}", ""] for name, n in r.predicted.items() if name != "total"]
    rows += [["model tensors", "", f"{t['model']:,}"],
             ["optimizer state tensors", "", f"{t['optimizer_state']:,}"],
             ["overhead (step counters, pickle, zip)", "", f"{r.overhead_bytes:,}"],
             ["total", f"{r.predicted_bytes:,}", f"{r.file_bytes:,}"]]
    speed = [["write (torch.save, flush, fsync)", _g(r.write_s.median * 1e3), _g(r.write_s.best * 1e3),
              _g(r.write_bytes_per_s / 1e9)],
             [f"read (torch.load, page cache {r.read_cache})", _g(r.read_s.median * 1e3),
              _g(r.read_s.best * 1e3), _g(r.read_bytes_per_s / 1e9)],
             ["read again (page cache warm)", _g(r.read_warm_s.median * 1e3), _g(r.read_warm_s.best * 1e3),
              _g(r.read_warm_bytes_per_s / 1e9)]]
    joules = energy.shown([r.write_s, r.read_warm_s])
    if joules:  # the GPU's energy over saves and warm loads run back to back (none for the cold read)
        for row, stats in zip(speed, (r.write_s, r.read_s, r.read_warm_s), strict=True):
            row += energy.cells(stats, rate="GB/J")
    return [where, _table(["bytes", "predicted", "measured"], rows),
            f"error = predicted / measured - 1 = {r.relative_error * 100:.3f} %; overhead "
            f"{r.overhead_fraction * 100:.3f} % of the file ({t['step_counters']:,} bytes of step counters, "
            f"{r.tensors} tensors); filesystem {r.directory_filesystem or 'unknown'}",
            _table(["", "median ms", "best ms", "GB/s (median)",
                    *(energy.headers("run", "GB/J") if joules else [])], speed, 1),
            *_said([f"assumes {a}" for a in r.assumptions]), *energy.note(r)]
