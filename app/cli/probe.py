"""`tally probe PROBE`: one benchmark probe on this box's device, in the terminal.

It goes the server's way: the job is submitted through the real POST /api/v1/jobs route
(same validation, admission and time limit, same messages) into a private job store in a
temporary directory, and a Dispatcher runs it in a fresh `python -m app.bench.child`, with
its timeout, kill, oom and crash handling. This process only follows the job's row: a
progress bar while it runs, then a table of measurements beside the calculators' predictions.
"""

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.cli import energy, io_tables, options, sustained
from app.cli.tables import table as _table

EXAMPLES = """examples:
  tally probe matmul --sweep quick --dtypes bfloat16,float32
  tally probe matmul --sweep custom --shapes '[{"m": 64, "k": 32, "n": 16}]' --dtypes float32
  tally probe train_step --model gpt2 --batch-size 2 --seq-len 128 --optimizer adamw
  tally probe train_step --model llama3.2-1b --mode lora --lora-targets q,k,v,o --precision bf16
  tally probe generate --model llama3.2-1b --batch-sizes 1,8,32 --contexts 1024,4096
  tally probe bandwidth --output json
  tally probe collectives --collectives all_reduce,all_gather --sizes-bytes 1024,1048576 --ranks 2
  tally probe data_loader --file-bytes 256MiB --batch-size 8 --seq-len 1024 --model gpt2
  tally probe checkpoint --model gpt2 --optimizer adamw"""
POLL_S = 0.1  # how often the job's row is read for the progress bar


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    options.add_deferred(commands, name, help_text)


def parser() -> argparse.ArgumentParser:
    from app.config import get_settings
    from app.probes.registry import PROBES

    settings = get_settings()
    raw = argparse.RawDescriptionHelpFormatter
    cli = argparse.ArgumentParser(
        prog="tally probe", formatter_class=raw,
        description=options.wrap(
            "Run one benchmark probe on this box (CUDA when there is a GPU, else the CPU at small sizes) "
            "in a fresh child process, as the server's worker does; a progress bar on stderr, then a "
            "table on stdout (--output json: the whole result). Exit 0 when it succeeded, 1 when it "
            "failed, timed out, ran out of memory or crashed, 2 when the parameters are refused (the "
            "API's error JSON on stderr), 130 on Ctrl-C (the child is stopped). `tally probe PROBE "
            "--help` lists each probe's parameters."),
        epilog=EXAMPLES)
    probes = cli.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name, probe in PROBES.items():
        sub = probes.add_parser(name, help=probe.summary, formatter_class=raw,
                                description=f"The {name} probe: {probe.summary}.",
                                epilog=options.wrap(options.VALUES_HELP))
        fields = options.add_fields(sub, probe.params, "probe parameters (`params` of POST /api/v1/jobs)")
        options.add_json(sub, "the whole params object")
        running = sub.add_argument_group("running")
        running.add_argument("--timeout", type=options.value, metavar="SECONDS", help=(
            f"hard time limit (default TALLY_JOB_TIMEOUT_S, {settings.job_timeout_s:g}; at most "
            f"TALLY_JOB_TIMEOUT_MAX_S, {settings.job_timeout_max_s:g})"))
        running.add_argument("--gpu", type=options.value, metavar="INDEX", help=(
            "run on this GPU (NVML's index; the child sees it alone, as CUDA_VISIBLE_DEVICES); default "
            "the first GPU served (TALLY_GPUS, else every GPU)"))
        running.add_argument("--num-gpus", type=options.value, metavar="N", help=(
            "run on N GPUs at once, the lowest-numbered served ones (the child sees them as cuda:0..N-1); "
            "not with --gpu"))
        running.add_argument("--gpus", type=options.list_value, metavar="I,J,...", help=(
            "run on these GPUs at once (NVML's indices); not with --gpu"))
        running.add_argument("--output", choices=("table", "json"), default="table",
                             help="table (default), or the whole result as JSON")
        sub.set_defaults(fields=fields)
    return cli


def run(args: argparse.Namespace) -> int:
    from app import device
    from app.config import get_settings
    from app.jobs.dispatcher import Dispatcher
    from app.jobs.store import Store
    from app.main import build_api

    cli = parser()
    opts = cli.parse_args(args.argv)
    params: Any = {}
    if opts.json is not None:
        try:
            params = json.loads(options.read_json(cli, opts.json))
        except ValueError as exc:
            cli.error(f"--json: malformed JSON: {exc}")
    given = options.given(opts, opts.fields)
    params = params | given if isinstance(params, dict) else params
    body = {"probe": opts.probe, "params": params}
    running = {"timeout_s": opts.timeout, "gpu": opts.gpu, "num_gpus": opts.num_gpus, "gpus": opts.gpus}
    body |= {key: v for key, v in running.items() if v is not None}
    with tempfile.TemporaryDirectory(prefix="tally-probe-") as tmp:
        private = {"database_path": Path(tmp) / "jobs.db", "database_url": None, "api_token": None}
        settings = get_settings().model_copy(update=private)
        store = Store(settings.database_path)
        response = options.call(build_api(settings, store), "POST", "/api/v1/jobs", json.dumps(body))
        if response.status_code != 202:
            options.print_json(response.text, False, sys.stderr)
            return options.exit_status(response.status_code)
        job = response.json()
        # As the server's dispatchers do: a job naming a GPU runs there; one naming none on the first
        # GPU served, which admission sized it against (on a box without a GPU, on the CPU).
        served = device.served_gpus(settings.gpus)
        named = job["gpu"] if job["gpu"] is not None else job["gpus"][0] if job["gpus"] else None
        gpu = named if named is not None else served[0] if served else None
        where = job["device"] if gpu is None or job["device"] == "cpu" else f"GPU {gpu}"
        if job["num_gpus"] > 1:  # a dispatcher serving no one GPU places it on any of the served ones
            gpu = None
            where = f"GPUs {', '.join(map(str, job['gpus']))}" if job["gpus"] else f"{job['num_gpus']} GPUs"
        print(f"{opts.probe} on {where}, time limit {job['timeout_s']:g} s", file=sys.stderr)
        _quiet_dispatcher()
        dispatcher = Dispatcher(store, "tally-probe", poll_s=POLL_S, gpu=gpu, served=served)
        dispatcher.start()
        try:
            row = _follow(store, job["id"])
        except KeyboardInterrupt:
            # A second Ctrl-C during stop() ends this process; the child then reads end-of-file
            # on its stdin and exits by itself (app/bench/child.py).
            dispatcher.stop()
            print("tally probe: interrupted; the probe's process was stopped", file=sys.stderr)
            return 130
        dispatcher.stop()
    return _report(row, opts.output)


def _quiet_dispatcher() -> None:
    """The dispatcher's log lines (a timeout, a protocol error) would repeat what _report says;
    without a handler of their own, Python's last-resort handler prints them on stderr."""
    log = logging.getLogger("tally.jobs")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())


def _follow(store: Any, job_id: int) -> Any:
    """Poll the job's row until it ends, drawing its progress on stderr when that is a terminal
    (in a pipe or a log file, nothing: no frames, no final line)."""
    from rich import progress
    from rich.console import Console

    console = Console(stderr=True)
    columns = (progress.SpinnerColumn(), progress.TextColumn("{task.description}"), progress.BarColumn(),
               progress.MofNCompleteColumn(), progress.TimeElapsedColumn())
    with progress.Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("starting the probe's process", total=None)
        while True:
            row = store.get(job_id)
            if row.progress_total:
                bar.update(task, total=row.progress_total, completed=row.progress_done,
                           description=row.progress_message or row.probe)
            if row.terminal:
                return row
            time.sleep(POLL_S)


def _report(row: Any, output: str) -> int:
    if row.status != "succeeded":
        error = row.error or {}
        print(f"tally probe: {row.status}: {error.get('type')}: {error.get('message')}", file=sys.stderr)
        detail = error.get("detail") or {}
        if detail.get("stderr_tail"):
            print("the child's last stderr:\n" + detail["stderr_tail"].rstrip(), file=sys.stderr)
        elif detail:
            print(json.dumps(detail), file=sys.stderr)
        if output == "json":
            options.print_json(json.dumps({"status": row.status, "error": row.error}), False)
        return 1
    if output == "json":
        from app.probes.registry import RESULTS

        options.print_json(RESULTS.dump_json(row.result).decode(), False)
        return 0
    from rich.console import Console

    # Not a terminal: rich would fold the tables at 80 columns; a file or a pipe has no width.
    console = Console(width=None if sys.stdout.isatty() else 200)
    for part in TABLES.get(row.probe, _as_json)(row.result):
        console.print(part)
    return 0


# --- tables: seconds shown as ms, GB = 10^9 bytes ---------------------------------------------------

def _g(x: float | None, digits: int = 4) -> str:
    """Four significant figures; whole numbers with separators from 10,000 up, never 1.1e+04."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 10_000 else f"{x:.{digits}g}"


def _ms(seconds: float | None) -> str:
    return _g(None if seconds is None else seconds * 1e3)


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f}"


def _tflops(flop_per_sec: float | None) -> str:
    """FLOP/s in TFLOP/s, as the pages write them (three significant figures: 0.00816 on a
    CPU, 412 on a GPU), so a figure reads the same in the terminal and in the browser."""
    from app.web.numbers import sig

    return "-" if flop_per_sec is None else sig(flop_per_sec / 1e12)


def _per(x: float | None, scale: float) -> str:
    return _g(None if x is None else x / scale)



def _where(result: Any) -> str:
    env = result.environment
    return f"{result.probe} on {env.device_name} ({env.device}), torch {env.torch_version}"


def _skipped(result: Any) -> list[str]:
    return [f"skipped {s.what}: {s.reason}" for s in getattr(result, "skipped", [])]


def _matmul(result: Any) -> list:
    joules = energy.shown(p.time for p in result.points)
    best = {(p.m, p.k, p.n, p.dtype) for p in result.best.values()}
    rows = [[f"{p.m}x{p.k}x{p.n}" + (" *" if (p.m, p.k, p.n, p.dtype) in best else ""),
             p.dtype, f"{p.flops:,}", _ms(p.time.median), _ms(p.time.best),
             _ms(p.predicted_seconds_at_peak), _tflops(p.flop_per_sec),
             _tflops(p.best_flop_per_sec), _tflops(p.peak_flop_per_sec), _pct(p.mfu)]
            + (energy.cells(p.time, rate="GFLOP/J") if joules else []) for p in result.points]
    headers = ["m x k x n", "dtype", "FLOPs", "median ms", "best iteration ms", "at peak ms",
               "TFLOP/s (median)", "TFLOP/s (best iteration)", "peak TFLOP/s", "MFU % (median)"]
    if joules:
        headers += energy.headers("iter", "GFLOP/J")
    return [_where(result), _table(headers, rows, 2), "* the best shape per dtype (highest median); median: "
            "over the median iteration's time, best iteration: over the fastest; at peak: the time at the "
            "catalogue's dense peak", *_skipped(result), *energy.note(result)]


def _bandwidth(result: Any) -> list:
    r = result
    percent = r.percent_of_catalogue
    row = [f"{r.size_bytes / 2**20:,.0f}", f"{r.bytes_moved / 1e9:.4g}", _ms(r.time.median),
           _ms(r.predicted_seconds), _g(r.gb_per_sec), _g(r.best_gb_per_sec),
           _g(r.catalogue_gb_per_sec), "-" if percent is None else f"{percent:.1f}"]
    headers = ["buffer MiB", "moved GB", "median ms", "at catalogue ms", "GB/s (median)",
               "GB/s (best iteration)", "catalogue GB/s", "% of catalogue"]
    if energy.shown([r.time]):
        headers, row = headers + energy.headers("copy", "GB/J"), row + energy.cells(r.time, rate="GB/J")
    return [_where(r), _table(headers, [row], 0), *energy.note(r)]


def _transfer(result: Any) -> list:
    rows = [[f"{p.size_bytes / 1024:,.0f}", p.direction.replace("_", " "), p.host_memory,
             "yes" if p.non_blocking else "no", _ms(p.time.median), _g(p.gb_per_sec),
             _g(p.best_gb_per_sec)] for p in result.points]
    headers = ["size KiB", "direction", "host memory", "non_blocking", "median ms", "GB/s (median)",
               "GB/s (best iteration)"]
    if energy.shown(p.time for p in result.points):
        headers += energy.headers("copy", "GB/J")
        rows = [row + energy.cells(p.time, rate="GB/J") for row, p in zip(rows, result.points, strict=True)]
    return [_where(result), _table(headers, rows, 0), result.note, *_skipped(result), *energy.note(result)]


def _train_step(result: Any) -> list:
    r = result
    where = (f"{_where(r)}: {r.model} ({r.params:,} params), batch {r.batch_size} x seq "
             f"{r.seq_len}, {r.optimizer}, {r.precision}")
    if r.mode != "full":
        where += f", {r.mode} ({r.trainable_params:,} trainable params)"
    timed = {"step": r.step, "forward": r.forward, "backward": r.backward, "optimizer_step": r.optimizer_step}
    phases = [[name.replace("_", " "), _ms(t.median), _ms(t.p20), _ms(t.p80), _ms(t.best), str(t.iterations)]
              for name, t in timed.items()]
    rates = [["tokens/s (median step)", _g(r.tokens_per_sec)],
             ["FLOPs/step (exact)", f"{r.flops_per_step:,}"],
             ["FLOPs/step (6ND)", f"{r.flops_per_step_6nd:,.0f}"],
             ["achieved TFLOP/s (median step)", _tflops(r.achieved_flop_per_sec)],
             ["peak TFLOP/s", _tflops(r.peak_flop_per_sec)], ["MFU % (median step)", _pct(r.mfu)],
             ["loss first -> last", f"{r.loss_first:.4g} -> {r.loss_last:.4g}"]]
    if r.step.energy is not None:
        joules, watts = energy.cells(r.step)
        rates += [["energy J/step (back to back)", joules], ["energy J/token", energy.cells(r.step, True)[0]],
                  ["average W", watts]]
    mem = r.memory
    largest = max(mem.predicted["total"], mem.measured_peak_allocated)
    unit, scale = next((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 1024), ("bytes", 1))
                       if largest >= s)
    memory = [[name.replace("_", " "), _per(n, scale), "", ""] for name, n in mem.predicted.items()
              if name != "total"]
    memory.append(["peak (total)", _per(mem.predicted["total"], scale),
                   _per(mem.measured_peak_allocated, scale), _g(mem.relative_error * 100, 3)])
    if mem.measured_reserved is not None:
        memory.append(["reserved by the allocator", "", _per(mem.measured_reserved, scale), ""])
    return [where, _table(["phase", "median ms", "p20 ms", "p80 ms", "best iteration ms", "runs"], phases),
            "throughput", _table(["", "value"], rates),
            "peak memory", _table(["bytes", f"predicted {unit}", f"measured {unit}", "error %"], memory),
            f"measured: {mem.method}; error = predicted / measured - 1",
            *(f"assumes {a}" for a in r.assumptions), *energy.note(r)]


def _binary_unit(largest: int) -> tuple[str, int]:
    units = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 1024), ("bytes", 1))
    return next(((u, s) for u, s in units if largest >= s), ("bytes", 1))


def _generate(result: Any) -> list:
    r, c = result, result.ceilings
    where = f"{_where(r)}: {r.model} ({r.params:,} params, {r.dtype}); {r.attention}"
    ceilings = (f"roofline at this job's own ceilings: {_tflops(c.matmul_flop_per_sec)} TFLOP/s (a "
                f"{c.matmul_size}^3 {c.matmul_dtype} matmul), {_g(c.bandwidth_bytes_per_sec / 1e9)} GB/s (a "
                f"device copy); CUDA graphs: {'yes' if r.cuda_graphs else 'no'}; {r.ops_per_decode_step} ops "
                f"per decode step, {_g(c.seconds_per_launch * 1e6)} us per launch")
    points = [*r.prefill, *r.decode]
    unit, scale = _binary_unit(max((max(x.memory.predicted["total"], x.memory.measured_peak_allocated)
                                    for x in points), default=1))

    def memory(m: Any) -> list[str]:
        return [_per(m.measured_peak_allocated, scale), _per(m.predicted["total"], scale),
                _g(m.relative_error * 100, 3)]

    prefill = [[str(p.prompt_len), _ms(p.time.median), _ms(p.predicted.seconds),
                _g(p.predicted.relative_error * 100, 3), p.predicted.bound, _g(p.tokens_per_sec),
                f"{p.memory.kv_cache_bytes:,}", *memory(p.memory)] for p in r.prefill]
    decode = [[str(d.batch_size), str(d.context), _ms(d.time.median), _ms(d.predicted.seconds),
               _ms(d.predicted.launch_floor_seconds) + (" *" if d.launch_bound else ""),
               _g(d.predicted.relative_error * 100, 3), d.predicted.bound, _g(d.tokens_per_sec),
               _g(d.achieved_bytes_per_sec / 1e9), f"{d.memory.kv_cache_bytes:,}",
               f"{d.memory.predicted['kv_cache']:,}", *memory(d.memory)] for d in r.decode]
    peak = [f"peak measured {unit}", f"peak predicted {unit}", "peak error %"]
    if energy.shown(x.time for x in points):  # J per prompt token, per generated token
        prefill = [row + energy.cells(p.time, True) for row, p in zip(prefill, r.prefill, strict=True)]
        decode = [row + energy.cells(d.time, True) for row, d in zip(decode, r.decode, strict=True)]
        peak += energy.headers("token")
    return [where, ceilings,
            "prefill (one prompt, batch 1)",
            _table(["prompt tokens", "median ms", "roofline ms", "error %", "bound", "tokens/s (median)",
                    "KV cache bytes", *peak], prefill, 0),
            f"decode ({r.decode_steps} steps per timed run; times per step)",
            _table(["batch", "context", "median ms", "roofline ms", "launch floor ms", "error %", "bound",
                    "tokens/s (median)", "GB/s achieved (median)", "KV cache bytes", "KV predicted", *peak],
                   decode, 0),
            "error = predicted / measured - 1; * launch-bound: the ops' launches alone take longer than the "
            "roofline's time", *r.notes, *(f"assumes {a}" for a in r.assumptions), *energy.note(r)]


def _collectives(result: Any) -> list:
    r = result
    rows = [[p.collective, f"{p.size_bytes:,}", _g(p.time.median * 1e6), _g(p.algbw_bytes_per_sec / 1e9),
             _g(p.busbw_bytes_per_sec / 1e9), _g(p.fitted_busbw_bytes_per_sec / 1e9),
             _per(p.catalogue_busbw_bytes_per_sec, 1e9), "-" if p.errors is None else str(p.errors)]
            for p in r.points]
    headers = ["collective", "S bytes", "median us", "algbw GB/s", "busbw GB/s", "fitted busbw",
               "catalogue busbw", "wrong values"]
    if any(p.joules_per_run_all_ranks is not None for p in r.points):  # every rank's GPU, summed
        headers += ["J/run, all ranks", "W, all ranks"]
        rows = [row + [_g(p.joules_per_run_all_ranks), _g(p.watts_all_ranks)]
                for row, p in zip(rows, r.points, strict=True)]
    fits = [[f.collective, str(f.steps), _g(f.latency_s * 1e6), _per(f.bytes_per_sec, 1e9),
             _g(f.rms_relative_error * 100, 3)] for f in r.fits]
    return [f"{_where(r)}: {r.ranks} ranks over {r.backend}, {r.dtype}", _table(headers, rows, 1),
            "fitted: t = latency x ring steps + bus_factor x S / bandwidth",
            _table(["collective", "ring steps", "latency us per step", "GB/s", "rms error %"], fits),
            "values: " + ("not checked" if r.check_passed is None else "all correct" if r.check_passed
                          else "WRONG VALUES"), *_skipped(r), *energy.note(r)]


def _as_json(result: Any) -> list:
    """A probe without a table of its own: its result, as JSON."""
    from app.probes.registry import RESULTS

    return [RESULTS.dump_json(result, indent=2).decode()]


def _held(table: Callable[[Any], list], what: str) -> Callable[[Any], list]:
    """A probe's table, then its sustained run's (sustain_s) when it had one."""
    def with_sustained(result: Any) -> list:
        parts = table(result)
        if result.sustained is not None:
            parts += [sustained.table([sustained.row(what, result.sustained)])]
        return parts
    return with_sustained


TABLES = {"matmul": _held(_matmul, "best shape"), "bandwidth": _held(_bandwidth, "device copy"),
          "transfer": _transfer, "train_step": _held(_train_step, "train step"), "generate": _generate,
          "collectives": _collectives, "burn_in": sustained.burn_in, "data_loader": io_tables.data_loader,
          "checkpoint": io_tables.checkpoint}
