"""`tally serve` (and `python -m app`): the server, with its embedded dispatchers unless
TALLY_EMBEDDED_WORKER=false."""

import argparse


def add(commands: argparse._SubParsersAction, name: str, help_text: str) -> None:
    commands.add_parser(
        name, help=help_text, description=(
            "Serve the JSON API (/api/v1), the dashboard (/) and /healthz, /readyz, /metrics on "
            "TALLY_HOST:TALLY_PORT. With TALLY_EMBEDDED_WORKER=true (the default) it also runs the job "
            "dispatchers, one per GPU; set it false and run `tally worker` beside it instead."),
        epilog="Every setting is a TALLY_* environment variable (or .env line); see the README.")


def serve() -> int:
    """uvicorn over the app factory, with Tally's log configuration."""
    import uvicorn

    from app import logs
    from app.cli.protocol import with_limits
    from app.config import settings_or_exit

    settings = settings_or_exit()
    uvicorn.run("app.main:create_app", factory=True, host=settings.host, port=settings.port,
                log_level=settings.log_level, timeout_keep_alive=settings.timeout_keep_alive_s,
                h11_max_incomplete_event_size=settings.max_header_bytes,
                http=with_limits(settings.header_timeout_s, settings.limit_connections),
                log_config=logs.config(settings.log_level, settings.log_format, settings.secrets()))
    return 0


def run(args: argparse.Namespace) -> int:
    return serve()
