"""The bodies of the plugin's fixtures (``pytest_jobq`` names them and imports this only
when one is used)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.store import connections
from jobq.testing.database import Databases, throwaway_server


@contextlib.contextmanager
def databases(base_dir: Path) -> Iterator[Databases]:
    """A throwaway server and its migrated template, for the whole test session."""
    with throwaway_server(base_dir) as server_url:
        made = Databases(server_url)
        try:
            yield made
        finally:
            made.close()


@contextlib.contextmanager
def database(made: Databases, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database of the test's own; ``DATABASE_URL`` and jobq's default pool
    (what ``jobq.enqueue()`` without ``conn`` uses) point at it until the test ends."""
    url = made.clone()
    monkeypatch.setenv("DATABASE_URL", url)
    connections.close_default_pool()  # settings read earlier, and a pool for another database, go
    try:
        yield url
    finally:
        connections.close_default_pool()
        made.drop(url)
