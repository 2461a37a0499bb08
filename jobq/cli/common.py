"""What every ``jobq`` command shares: reading the settings (and configuring logging),
a one-shot connection, waiting for the database, and failing with one line.

The command modules (:mod:`jobq.cli.main` and one per command group) import these; this
module imports none of them."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import jobq.settings
from jobq import logs
from jobq.cli import dev_database
from jobq.errors import DatabaseUnavailable
from jobq.settings import Settings
from jobq.store import connections

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 100_000  # columns of a piped table: wider than any row
EXIT_ERROR = 1  # the command ran and failed (a job not found, the database down)


def fail(message: str, code: int = EXIT_ERROR) -> None:
    click.echo(f"jobq: {message}", err=True)
    sys.exit(code)


def load_settings(*, find_dev_database: bool = True, **overrides: Any) -> Settings:
    """Settings from the environment and the command's flags, this process's from now on
    (:func:`jobq.settings.adopt`: its workers and library calls share this one read);
    configures logging as a side effect. With ``DATABASE_URL`` unset, the database of a
    running ``jobq dev`` of this checkout (:mod:`jobq.cli.dev_database`), said in one
    line on stderr."""
    settings = Settings.from_env(**{k: v for k, v in overrides.items() if v is not None})
    if settings.database_url is None and find_dev_database:
        url = dev_database.find(Path.cwd())
        if url is not None:
            click.echo(f"jobq: DATABASE_URL is not set: using the embedded PostgreSQL of jobq dev ({url})", err=True)
            settings = settings.model_copy(update={"database_url": url})
    jobq.settings.adopt(settings)
    logs.configure(log_format=settings.log_format, level=settings.log_level)
    return settings


def wait_for(action: Callable[[], Any], *, seconds: float, what: str) -> Any:
    """Run ``action`` until the database answers or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    backoff = connections.ReconnectDelay(first=0.2)
    while True:
        try:
            return action()
        except DatabaseUnavailable as exc:
            delay = backoff.next()
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(f"{what}: {exc} (gave up after {seconds:g} s)") from exc
            click.echo(f"jobq: {exc}; retrying in {delay:.1f} s", err=True)
            time.sleep(delay)


def database(settings: Settings) -> connections.Connection:
    """An autocommit connection for a one-shot command."""
    return connections.connect(settings.require_database_url())


def console() -> Console:
    """Where a command prints its tables: as wide as the terminal; piped, as wide as the
    rows need (a line per row, never wrapped at 80 columns), unless COLUMNS says."""
    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPED_WIDTH)


def session() -> connections.Connection:
    """The command's autocommit connection, with the settings read (and logging configured)."""
    return database(load_settings())
