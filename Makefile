# jobq: the commands a newcomer needs.
#   make run    the whole system on this machine (embedded PostgreSQL, API, workers)
#   make test   the whole test suite (what CI runs), in parallel
#   make docs   the documentation site into site/ (mkdocs --strict, offline)
#   make screenshots   every dashboard page photographed into docs/screenshots (chromium)
#   make test-hosts  the three-hosts harness alone (network namespaces: root and iproute2)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The test areas, each a pytest marker (setup.cfg): make test-once runs -m once.
AREAS := unit once dlq retry reaper daemon api chaos control schedules workflows dashboard scale docs schema otel sentry hosts aio django sqlalchemy plugin limits
# The suite runs in this many pytest-xdist processes, each on a PostgreSQL database of its
# own (tests/support/db.py). Much of it waits on subprocesses, so more processes than
# cores: measured on 2 cores, 4 is faster than 3 (docs/contributing.md).
# TEST_PROCESSES=0 (or PYTEST_ARGS='-n 0') runs it serially in one process, for pdb and -x.
TEST_PROCESSES ?= 4

.PHONY: run test docs browser screenshots iproute2 $(addprefix test-,$(AREAS)) coverage clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installed (not editable) with the dev extra: pgserver's PostgreSQL 16 and honcho.
run: $(BIN)/python
	rm -rf build
	$(BIN)/python -m pip install --quiet '.[dev]'
	$(BIN)/jobq dev $(ARGS)

# A plain (non-editable) install with the test extra, then pytest against throwaway
# PostgreSQL databases (on JOBQ_TEST_DATABASE_URL's server, or a Docker container or an
# embedded pgserver of each test process's own). pytest runs as a console script, so the
# checkout is not on sys.path: the tests import the installed package, with the migrations
# it ships. --dist load hands the tests out by index to whichever process is free: the
# schedulers that group tests (loadscope, loadfile, loadgroup) key them by node id and
# silently run one of the schemathesis cases that share one (and on pytest 9.2 loadgroup
# no longer groups: pytest-xdist issue 1386). --maxschedchunk 1: after two tests each,
# a process is handed one test at a time as it finishes one, in collection order, which
# puts the long fault scenarios first (tests/conftest.py): each goes to whichever
# process is free. Without it the first chunk (a twelfth of the suite) held every long
# scenario: one process ran them all, for 145 s after the other two had finished.
test: $(BIN)/python
	rm -rf build  # setuptools keeps modules moved or deleted since the last build there
	@case "$(PYTEST_ARGS)" in *"not dashboard"*) ;; *-m*dashboard*) $(MAKE) --no-print-directory browser ;; \
	  *-m*) ;; *) $(MAKE) --no-print-directory browser ;; esac
	@case "$(PYTEST_ARGS)" in *"not hosts"*) ;; *-m*hosts*|*-m*chaos*) $(MAKE) --no-print-directory iproute2 ;; \
	  *-m*) ;; *) $(MAKE) --no-print-directory iproute2 ;; esac
	$(BIN)/python -m pip install --quiet '.[test]'
	$(BIN)/pytest -n $(TEST_PROCESSES) --dist load --maxschedchunk 1 $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): its tools are the docs extra. --strict
# fails on a broken link, anchor or API reference; the build needs no network.
docs: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "make docs: open site/index.html"

# The dashboard's browser tests drive Debian's chromium through chromedriver (never a
# browser downloaded at test time). Installed with apt-get when missing and run as root;
# otherwise one line says what to do. Runs for the whole suite and the dashboard area only.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make test: installing chromium and chromium-driver for the dashboard's browser tests"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	else \
	  echo "make test: the dashboard's browser tests need chromium and chromedriver: run 'sudo apt-get install chromium chromium-driver' (or skip them: make test PYTEST_ARGS='-m \"not dashboard\"')" >&2; \
	  exit 1; \
	fi

# The hosts harness (tests/support/netns.py) makes network namespaces with iproute2's ip,
# as root. Installed with apt-get when missing (as root); otherwise one line says what to
# do. Without root its tests fail saying why: they never count as passed.
iproute2:
	@if command -v ip >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make test: installing iproute2 for the hosts harness"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/dev/null || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/dev/null; }; \
	else \
	  echo "make test: the hosts harness needs root and iproute2: run 'sudo apt-get install iproute2' and the tests as root (or skip them: make test PYTEST_ARGS='-m \"not hosts\"')" >&2; \
	  exit 1; \
	fi

# One area at a time, like the seed's run_tests.sh modes (in parallel too).
$(addprefix test-,$(AREAS)): test-%:
	$(MAKE) test PYTEST_ARGS="-m $* $(PYTEST_ARGS)"

# Everything, with line coverage of the installed package in every process the tests
# start (setup.cfg's [coverage:run]); the report is htmlcov/index.html.
coverage:
	$(MAKE) test PYTEST_ARGS="--cov --cov-report=term --cov-report=html $(PYTEST_ARGS)"

screenshots: $(BIN)/python browser
	sh docs/screenshots.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache htmlcov .coverage* site
