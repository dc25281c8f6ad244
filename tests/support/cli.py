"""The `tally` command as a shell runs it (a fresh interpreter), and in process."""

import os
import subprocess
import sys
from pathlib import Path

from app.cli import main
from tests.support import ROOT

TALLY = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


def tally(*argv: str, env: dict | None = None, cwd: Path | None = None, stdin: str | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter, as a shell runs it (stdout and stderr are pipes, not TTYs)."""
    return subprocess.run([*TALLY, *argv], capture_output=True, text=True, input=stdin, timeout=timeout,
                          cwd=cwd or ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    """In process; argparse's own exits (help, usage errors) come back as their status."""
    try:
        status = main(list(argv))
    except SystemExit as exit:
        status = exit.code
    out, err = capsys.readouterr()
    return status, out, err
