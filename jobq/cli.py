"""The ``jobq`` command line (also ``python -m jobq``).

Errors jobq raises on purpose print one line, ``jobq: <message>``, and exit 1;
click's usage errors exit 2.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import jobq.settings
from jobq import cli_actions, db, logs
from jobq.cli_queues import dead_groups, queues
from jobq.cli_schedules import schedules
from jobq.errors import DatabaseUnavailable, JobqError
from jobq.migrate import migrate as apply_migrations, required_version
from jobq.settings import Settings

EXIT_ERROR = 1


def fail(message: str) -> None:
    click.echo(f"jobq: {message}", err=True)
    sys.exit(EXIT_ERROR)


class Group(click.Group):
    """Turns JobqError from any command into one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except JobqError as exc:
            fail(str(exc))


@click.group(cls=Group)
@click.version_option(package_name="jobq")
def main() -> None:
    """jobq: a job queue that runs entirely on PostgreSQL."""


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and the command's flags, this process's from now on
    (:func:`jobq.settings.adopt`: its workers and library calls share this one read);
    configures logging as a side effect."""
    settings = jobq.settings.adopt(Settings.from_env(**{k: v for k, v in overrides.items() if v is not None}))
    logs.configure(log_format=settings.log_format, level=settings.log_level)
    return settings


def wait_for(action: Callable[[], Any], *, seconds: float, what: str) -> Any:
    """Run ``action`` until the database answers or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    backoff = db.ReconnectDelay(first=0.2)
    while True:
        try:
            return action()
        except DatabaseUnavailable as exc:
            delay = backoff.next()
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(f"{what}: {exc} (gave up after {seconds:g} s)") from exc
            click.echo(f"jobq: {exc}; retrying in {delay:.1f} s", err=True)
            time.sleep(delay)


@main.command()
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait for the database to accept connections.")
@click.option("--partition", "convert", is_flag=True,
              help="Also convert a jobs table holding jobs to the partitioned layout (schema 13; "
                   "writes to jobs wait while it runs).")
def migrate(wait_seconds: float, convert: bool) -> None:
    """Apply the schema migrations this version of jobq ships (safe to run twice)."""
    settings = load_settings()
    url = settings.require_database_url()
    conn = wait_for(lambda: db.connect(url), seconds=wait_seconds, what="migrate")
    with conn, db.database_errors():
        applied = apply_migrations(conn, namespace=settings.advisory_namespace, convert=convert)
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        click.echo(f"jobq: applied {len(applied)} migration(s): {names}; schema at version {applied[-1].version}")
    else:
        click.echo(f"jobq: schema already at version {required_version()}, nothing to do")


@main.command()
@click.option("--concurrency", type=click.IntRange(min=1), help="Worker processes [JOBQ_CONCURRENCY; CPU count].")
@click.option("--queues", help="Comma-separated queues to work [JOBQ_QUEUES; default].")
def worker(concurrency: int | None, queues: str | None) -> None:
    """Run the supervisor: worker processes and one maintenance process."""
    from jobq.daemon.supervisor import Supervisor

    settings = load_settings(concurrency=concurrency, queues=queues)
    settings.require_database_url()
    sys.exit(Supervisor(settings).run())


def database(settings: Settings) -> db.Connection:
    """An autocommit connection for a one-shot command."""
    return db.connect(settings.require_database_url())


@main.command()
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True, help="Seconds between refreshes.")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def inspect(watch: bool, interval: float, as_json: bool) -> None:
    """Queue depth, workers, the oldest pending job, failures, dead letters, locks."""
    import json

    from rich.console import Console
    from rich.live import Live

    from jobq.inspect_view import render
    from jobq.inspection import snapshot

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        take = lambda: snapshot(conn, namespace=settings.advisory_namespace)  # noqa: E731
        if as_json:
            click.echo(json.dumps(take().to_dict(), indent=2))
        elif not watch:
            Console().print(render(take()))
        else:
            try:
                with Live(render(take()), auto_refresh=False, screen=False) as live:
                    while True:
                        time.sleep(interval)
                        live.update(render(take()), refresh=True)
            except KeyboardInterrupt:
                pass


@main.command()
@click.option("--older-than", "older_than", type=click.FloatRange(min=0), required=True,
              help="Delete done and dead jobs that finished more than this many seconds ago.")
def prune(older_than: float) -> None:
    """Delete finished jobs by hand, as retention does (dead letters stay)."""
    from jobq.retention import prune as prune_jobs

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        deleted = prune_jobs(conn, older_than)
    click.echo(f"jobq: deleted {deleted} finished job(s) older than {older_than:g} s")


@main.group()
def dead() -> None:
    """The dead-letter table: list, replay, discard."""


@dead.command("list")
@click.option("--type", "job_type", help="Only this job type.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
def dead_list(job_type: str | None, limit: int) -> None:
    """Dead-letter rows, newest first."""
    from rich.console import Console
    from rich.table import Table

    from jobq.dead_letter import list_dead
    from jobq.job import last_line

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        page = list_dead(type=job_type, limit=limit, conn=conn)
    table = Table(title=f"dead letters: {len(page.items)} of {page.total}")
    for column in ("id", "job", "type", "queue", "attempts", "died", "replayed as", "error"):
        table.add_column(column)
    for row in page.items:
        table.add_row(
            str(row.id), str(row.original_id), row.type, row.queue, str(row.attempts),
            f"{row.died_at:%Y-%m-%d %H:%M:%S}", str(row.replayed_as or ""), last_line(row.error)[:80],
        )
    Console().print(table)


@dead.command("replay")
@click.argument("dead_letter_id", type=click.IntRange(min=1))
def dead_replay(dead_letter_id: int) -> None:
    """Enqueue a dead job again, as a new job."""
    from jobq.dead_letter import replay

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        job = replay(dead_letter_id, conn=conn)
    click.echo(f"jobq: dead letter {dead_letter_id} replayed as job {job.id}")


@dead.command("discard")
@click.argument("dead_letter_id", type=click.IntRange(min=1))
def dead_discard(dead_letter_id: int) -> None:
    """Delete a dead-letter row for good."""
    from jobq.dead_letter import discard

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        discard(dead_letter_id, conn=conn)
    click.echo(f"jobq: dead letter {dead_letter_id} discarded")


@main.command()
@click.option("--reset", is_flag=True, help="Start with an empty embedded database.")
@click.option("--port", type=click.IntRange(1, 65535), help="The API's port [PORT; 8000].")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".jobq"), show_default=True,
              help="Where the embedded PostgreSQL keeps its data.")
@click.option("--procfile", type=click.Path(path_type=Path), default=Path("Procfile"), show_default=True)
def dev(reset: bool, port: int | None, data_dir: Path, procfile: Path) -> None:
    """Run everything locally: PostgreSQL (embedded unless DATABASE_URL is set), the API
    and the workers, until Ctrl-C."""
    from jobq import dev as dev_mode

    settings = load_settings()
    code = dev_mode.run(settings, data_dir=data_dir, procfile=procfile, port=port or settings.port, reset=reset)
    sys.exit(code)


main.add_command(queues)
dead.add_command(dead_groups)
main.add_command(schedules)
cli_actions.attach(main, dead)  # the operator's commands: cancel, delete, retry, run-now, bulk, audit
