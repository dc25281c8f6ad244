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
from pathlib import Path
from typing import Any

from app.cli import options

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
    for part in printed(row.result):
        console.print(part)
    return 0


def printed(result: Any) -> list:
    """A result as `tally probe` prints it: its probe's table face (app/probes/faces.py), rich."""
    from app.cli.tables import rendered
    from app.probes.faces import table_of
    from app.probes.registry import PROBES

    return [rendered(part) for part in table_of(PROBES[result.probe].faces, result)]
