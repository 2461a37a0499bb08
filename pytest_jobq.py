"""jobq's pytest plugin (entry point ``pytest11``: ``jobq``), for users' tests of their
handlers and of the code that enqueues.

pytest loads it in every run of an environment where jobq is installed, so this module
imports nothing but pytest: jobq itself, the database and testcontainers are imported
by a fixture's body, when a test uses it. The fixtures' code is :mod:`jobq.testing`.

- ``jobq_database``: the URL of a migrated throwaway database of the test's own
  (``JOBQ_TEST_DATABASE_URL``'s server, else a testcontainers PostgreSQL where Docker
  answers, else the embedded pgserver), with ``DATABASE_URL`` and jobq's default
  connection pointed at it for the test.
- ``jobq_drain``: :func:`jobq.testing.drain`, bound to that database: call it to run
  every due job in the test's process and get what ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def _jobq_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from jobq.testing.fixtures import databases

    with databases(tmp_path_factory.mktemp("jobq-pg")) as made:
        yield made


@pytest.fixture
def jobq_database(_jobq_databases: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated throwaway database (its URL); jobq's default connection points at it."""
    from jobq.testing.fixtures import database

    with database(_jobq_databases, monkeypatch) as url:
        yield url


@pytest.fixture
def jobq_drain(jobq_database: str) -> Callable[..., Any]:
    """Run every due job in this process (:func:`jobq.testing.drain`); returns the runs."""
    from jobq.testing import drain

    return drain
