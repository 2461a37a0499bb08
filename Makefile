# jobq: the commands a newcomer needs.
#   make run    the whole system on this machine (embedded PostgreSQL, API, workers)
#   make test   the whole test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The test areas, each a pytest marker (setup.cfg): make test-once runs -m once.
AREAS := unit once dlq retry reaper daemon api chaos control schedules dashboard

.PHONY: run test $(addprefix test-,$(AREAS)) coverage clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installed (not editable) with the dev extra: pgserver's PostgreSQL 16 and honcho.
run: $(BIN)/python
	rm -rf build
	$(BIN)/python -m pip install --quiet '.[dev]'
	$(BIN)/jobq dev $(ARGS)

# A plain (non-editable) install with the test extra, then pytest against a throwaway
# PostgreSQL (JOBQ_TEST_DATABASE_URL, Docker, or the embedded pgserver). pytest runs as a
# console script, so the checkout is not on sys.path: the tests import the installed
# package, with the migrations it ships.
test: $(BIN)/python
	rm -rf build  # setuptools keeps modules moved or deleted since the last build there
	$(BIN)/python -m pip install --quiet '.[test]'
	$(BIN)/pytest $(PYTEST_ARGS)

# One area at a time, like the seed's run_tests.sh modes.
$(addprefix test-,$(AREAS)): test-%:
	$(MAKE) test PYTEST_ARGS="-m $* $(PYTEST_ARGS)"

# Everything, with line coverage of the installed package in every process the tests
# start (setup.cfg's [coverage:run]); the report is htmlcov/index.html.
coverage:
	$(MAKE) test PYTEST_ARGS="--cov --cov-report=term --cov-report=html $(PYTEST_ARGS)"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache htmlcov .coverage*
