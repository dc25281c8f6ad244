"""python -m app (and `tally serve`): serve Tally with the settings from the environment."""

import uvicorn

from app import logs
from app.config import settings_or_exit


def main() -> int:
    settings = settings_or_exit()
    uvicorn.run("app.main:create_app", factory=True, host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=logs.config(settings.log_level, settings.log_format, settings.secrets()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
