"""The standalone dispatcher: `python -m app.jobs.worker` (the `tally worker` command).

Runs beside a server started with TALLY_EMBEDDED_WORKER=false, sharing its database; or, on a
PostgreSQL database (TALLY_DATABASE_URL), on any machine of a fleet that reaches the server.
SIGTERM or SIGINT stops it cleanly: the running child is stopped and its job requeued,
this attempt not counted. A SIGKILL leaves the job running in the table; the child
sees its stdin close and exits, and once the job's heartbeat is stale_after_s old any
dispatcher on the database requeues it (never sooner: a worker id says nothing of life).
"""

import argparse
import logging
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app import logs
from app.config import database_url, settings_or_exit
from app.jobs.storage import StoreUnavailable

log = logging.getLogger("tally.jobs")


def run(database: str | Path, worker_id: str, child_argv: list[str] | None = None,
        child_env: dict[str, str] | None = None, stop: threading.Event | None = None,
        gpu: int | None = None, stale_after_s: float | None = None,
        worker_loss_retries: int | None = None, served: list[int] | None = None,
        host: str | None = None, address: str | None = None, gather_wait_s: float | None = None) -> None:
    """Dispatch jobs from `database` until SIGTERM or SIGINT (or `stop`, when given, is set)."""
    # Here, not at the top: `tally --help` builds this module's parser and should stay quick.
    from app.jobs.dispatcher import GATHER_WAIT_S, Dispatcher
    from app.jobs.store import STALE_AFTER_S, WORKER_LOSS_RETRIES, Store

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum: int, _frame: object) -> None:
            log.info("dispatcher %s: %s received; stopping", worker_id, signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    retries = WORKER_LOSS_RETRIES if worker_loss_retries is None else worker_loss_retries
    from app.device import fleet_device

    host = host or socket.gethostname()
    Dispatcher(Store(database), worker_id, child_argv=child_argv, child_env=child_env, gpu=gpu,
               stale_after_s=stale_after_s or STALE_AFTER_S, worker_loss_retries=retries, served=served,
               host=host, fleet_device=fleet_device(host, gpu), address=address,
               gather_wait_s=gather_wait_s or GATHER_WAIT_S).run_forever(stop)


def _database(text: str) -> str | Path:
    if "://" not in text:
        return Path(text)
    try:
        return database_url(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _shown(database: str | Path) -> str:
    """The database as help may print it: a URL's password hidden."""
    parts = urlsplit(str(database))
    if parts.password is None:
        return str(database)
    return str(database).replace(f":{parts.password}@", ":***@", 1)


def _gpu_index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a GPU index is 0 or more, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    settings = settings_or_exit()
    cli = argparse.ArgumentParser(
        prog="tally worker",
        description="Run queued benchmark jobs, one at a time, each in a fresh child process. "
                    "Stops cleanly on SIGTERM or Ctrl-C, putting the running job back in the queue.")
    cli.add_argument("--database", type=_database, default=settings.database(),
                     help="the job queue: a SQLite file, or a URL (postgresql://USER:PASSWORD@HOST:PORT/"
                          "DATABASE, sqlite:///PATH); the server's TALLY_DATABASE_URL, else its "
                          f"TALLY_DATABASE_PATH (default: {_shown(settings.database())})".replace("%", "%%"))
    cli.add_argument("--worker-id",
                     help="name of this dispatcher in the job rows (default: host, process id and device, "
                          "so no two dispatchers share one; TALLY_WORKER_ID replaces host and process)")
    cli.add_argument("--gpu", type=_gpu_index, metavar="INDEX",
                     help="serve this GPU only (NVML's index): take the jobs that name it or none, and run "
                          "them there, and the jobs on several GPUs that include it (TALLY_GPUS, else every "
                          "GPU, are the ones such a job may use). Start one worker per GPU, each with its "
                          "own --worker-id. Default: take every job, running one that names a GPU "
                          "on that GPU")
    cli.add_argument("--log-level", default=settings.log_level,
                     choices=["critical", "error", "warning", "info", "debug"],
                     help="default: TALLY_LOG_LEVEL, %(default)s")
    return cli


def main(argv: list[str] | None = None) -> int:
    return start(parser().parse_args(argv))


def start(args: argparse.Namespace) -> int:
    """Run with parsed arguments (also `tally worker`'s)."""
    settings = settings_or_exit()
    logs.configure(args.log_level, settings.log_format, settings.secrets())
    # Here, not at the top: `tally --help` should stay quick.
    from app.device import served_gpus
    from app.jobs.dispatcher import default_worker_id

    try:
        served = served_gpus(settings.gpus)
        if args.gpu is None and len(served) > 1:  # one dispatcher per GPU, as the server runs them
            return _per_gpu(args, settings, served)
        gpu = args.gpu if args.gpu is not None else next(iter(served), None)
        run(args.database, args.worker_id or default_worker_id(settings.worker_id, gpu), gpu=gpu,
            **_from_settings(settings), served=served)
    except StoreUnavailable as e:  # one line naming the file, as a bad setting gets
        print(f"tally: {e}", file=sys.stderr)
        return 2
    return 0


def _from_settings(settings: Any) -> dict[str, Any]:
    return {"worker_loss_retries": settings.worker_loss_retries, "host": settings.box(),
            "stale_after_s": settings.stale_after_s, "address": settings.node_address,
            "gather_wait_s": settings.gather_wait_s}


def _per_gpu(args: argparse.Namespace, settings: Any, served: list[int]) -> int:
    """A dispatcher thread per GPU of the box, all stopped by one SIGTERM or Ctrl-C."""
    from app.jobs.dispatcher import default_worker_id

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    threads = [threading.Thread(target=run, name=f"dispatcher-gpu{gpu}", kwargs={
        "database": args.database, "worker_id": args.worker_id or default_worker_id(settings.worker_id, gpu),
        "stop": stop, "gpu": gpu, "served": served, **_from_settings(settings)}) for gpu in served]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
