# Two commands do all the set-up on a fresh machine:
#   make run    create .venv, install Tally and torch, serve http://127.0.0.1:8000 with the worker
#   make test   install the test extras too (torch CPU wheel, pytest, schemathesis), run the suite
#   (make test-fast: the engine and the API alone; make screenshots: the README's pictures)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run worker test test-fast screenshots fuzz bench load gpu-targets clean postgres slurm docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[worker]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/python -m app

worker: $(VENV)/.installed  # a dispatcher alone; serve with TALLY_EMBEDDED_WORKER=false beside it
	$(BIN)/tally worker

# The browser tests drive Debian's chromium (no Playwright browser download).
CHROMIUM ?= /usr/bin/chromium

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# The fleet's tests start throw-away clusters from Debian's PostgreSQL server binaries.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql)

# The `tally slurm` tests start throw-away clusters (tests/support/slurm.py) from Debian's Slurm:
# slurmctld, slurmd, the clients and munge, without the recommended optional plugins.
slurm:
	@(for p in slurmctld slurmd munged srun sbatch; do \
	    PATH="$$PATH:/usr/sbin:/sbin" command -v $$p >/dev/null || exit 1; done) || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    slurmctld slurmd slurm-client munge)

# Then the tests that hold timings to a bound (marked solo), alone: beside the other worker's
# probes a CPU step runs several times slower. Exit 5 is pytest's "none selected".
test: $(VENV)/.installed-test $(CHROMIUM) postgres slurm
	TALLY_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -n 2 -m "not solo" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m solo $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The engine and the API in under three minutes on two cores: no browser, no PostgreSQL, no
# oracle library, nothing marked slow (tests/conftest.py lists the folders and their markers).
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 -m "not slow and not browser and not postgres and not oracle" \
	  tests/engine tests/api $(PYTEST_ARGS)

# The README's pictures: the browser tests, writing their screenshots into docs/screenshots/
# (make test writes them to a temporary directory and leaves the checkout as it was).
screenshots: $(VENV)/.installed-test $(CHROMIUM)
	TALLY_SCREENSHOTS_DIR=docs/screenshots TALLY_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -n 2 \
	  tests/web/browser $(PYTEST_ARGS)

fuzz: $(VENV)/.installed-test  # fresh random schemathesis cases, 1000 per operation
	TALLY_FUZZ_RANDOM=1 TALLY_FUZZ_EXAMPLES=1000 $(BIN)/python -m pytest -n 2 tests/fuzz/test_schemathesis.py

# The documentation site from docs/ (mkdocs.yml), built strictly (a broken link or anchor fails)
# into a fresh temporary directory, never into the checkout.
docs: $(VENV)/.installed-test
	@site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet \
	  --site-dir $$site && echo "built: $$site/index.html"

bench: $(VENV)/.installed-test
	$(BIN)/python bench/api_throughput.py

load: $(VENV)/.installed  # 32 wrk clients on the calculators for 30 s while a CPU probe runs
	$(BIN)/python bench/load.py

gpu-targets: $(VENV)/.installed  # the worker's GPU targets, the calibration campaign and its held-out sweep
	$(BIN)/python bench/gpu_targets.py
	$(BIN)/tally calibrate --held-out --output docs/measurements/calibration-profile.json \
	  | tee docs/measurements/calibration-held-out.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis tally.db tally.db-wal tally.db-shm
