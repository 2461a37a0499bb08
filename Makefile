# jobq: the commands a newcomer needs. `make test` is what CI runs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# A plain (non-editable) install with the test extra, then the whole suite against a
# throwaway PostgreSQL (JOBQ_TEST_DATABASE_URL, Docker, or the embedded pgserver).
# (pytest runs as a console script, so the checkout is not on sys.path: the tests import
# the installed package, with the migrations it ships.)
test: $(BIN)/python
	$(BIN)/python -m pip install --quiet '.[test]'
	$(BIN)/pytest $(PYTEST_ARGS)

venv: $(BIN)/python

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache htmlcov .coverage
