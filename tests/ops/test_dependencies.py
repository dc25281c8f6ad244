"""Every module app/ imports is declared where app/ may rely on it (deptry, configured in
pyproject.toml's [tool.deptry]): in the dependencies, or in the extra its part of app/ runs
with (worker: torch, numpy, bitsandbytes for the probes), never only in the test extras. A fresh
`make run` installs `.[worker]` alone; the data_loader probe once failed there for want of numpy."""

import subprocess
import sys

from tests.support import ROOT


def test_every_import_of_app_is_declared_where_app_can_rely_on_it():
    deptry = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert deptry.returncode == 0, deptry.stdout + deptry.stderr
    assert "No dependency issues found" in deptry.stdout + deptry.stderr
