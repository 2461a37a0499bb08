"""The ``jobq`` command line (also ``python -m jobq``).

Errors print one line, ``jobq: <message>``, on stderr. Exit codes: 1 when the command
ran and failed (a job not found, the database unavailable); 2 when it was called wrong:
click's usage errors and a bad configuration value (``EXIT_CONFIG``, the message naming
the variable or flag), before anything starts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from jobq.cli import actions
from jobq.cli.common import console, database, fail, load_settings, wait_for
from jobq.cli.dead import dead
from jobq.cli.jobs import enqueue, show
from jobq.cli.limits import limits, queue_limit
from jobq.cli.queues import queues
from jobq.cli.schedules import schedules
from jobq.cli.workflows import workflows
from jobq.errors import ConfigError, JobqError
from jobq.settings import EXIT_CONFIG
from jobq.store import connections
from jobq.store.migrate import migrate as apply_migrations
from jobq.store.migrate import required_version


class Group(click.Group):
    """Turns JobqError from any command into one line and exit 1 (ConfigError: 2)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            fail(str(exc), EXIT_CONFIG)
        except JobqError as exc:
            fail(str(exc))


@click.group(cls=Group)
@click.version_option(package_name="jobq")
def main() -> None:
    """jobq: a job queue that runs entirely on PostgreSQL."""


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
    conn = wait_for(lambda: connections.connect(url), seconds=wait_seconds, what="migrate")
    with conn, connections.database_errors():
        applied = apply_migrations(conn, namespace=settings.advisory_namespace, schema=settings.db_schema, convert=convert)
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        click.echo(f"jobq: applied {len(applied)} migration(s): {names}; schema at version {applied[-1].version}")
    else:
        click.echo(f"jobq: schema already at version {required_version()}, nothing to do")


@main.command()
@click.option("--concurrency", type=click.IntRange(min=1), help="Worker processes at most [JOBQ_CONCURRENCY; CPU count].")
@click.option("--min-workers", "min_workers", type=click.IntRange(min=1),
              help="Worker processes kept however idle; more start while jobs wait or run long [JOBQ_MIN_WORKERS; CPU count].")
@click.option("--queues", help="Comma-separated queues to work [JOBQ_QUEUES; default].")
@click.option("--all-queues", "all_queues", is_flag=True, default=None,
              help="Work every queue that has jobs, queues created later too [JOBQ_ALL_QUEUES]; "
                   "for small deployments (make run's default).")
def worker(concurrency: int | None, min_workers: int | None, queues: str | None, all_queues: bool | None) -> None:
    """Run the supervisor: worker processes and one maintenance process."""
    from jobq.daemon.supervisor import Supervisor

    if queues is not None and all_queues:
        raise click.UsageError("--queues and --all-queues: name the queues or serve them all, not both")
    settings = load_settings(concurrency=concurrency, min_workers=min_workers, queues=queues, all_queues=all_queues)
    settings.require_database_url()
    sys.exit(Supervisor(settings).run())


@main.command()
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True, help="Seconds between refreshes.")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def inspect(watch: bool, interval: float, as_json: bool) -> None:
    """Queue depth, workers, the oldest pending job, failures, dead letters, locks."""
    import json
    from rich.live import Live

    from jobq.cli.inspect_view import render
    from jobq.observe.inspection import snapshot

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        take = lambda: snapshot(conn, namespace=settings.advisory_namespace)  # noqa: E731
        if as_json:
            click.echo(json.dumps(take().to_dict(), indent=2))
        elif not watch:
            console().print(render(take()))
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
    from jobq.store.retention import prune as prune_jobs

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        deleted = prune_jobs(conn, older_than)
    click.echo(f"jobq: deleted {deleted} finished job(s) older than {older_than:g} s")


@main.command()
@click.option("--reset", is_flag=True, help="Start with an empty embedded database.")
@click.option("--port", type=click.IntRange(1, 65535), help="The API's port [PORT; 8000].")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".jobq"), show_default=True,
              help="Where the embedded PostgreSQL keeps its data.")
@click.option("--procfile", type=click.Path(path_type=Path), default=Path("Procfile"), show_default=True)
def dev(reset: bool, port: int | None, data_dir: Path, procfile: Path) -> None:
    """Run everything locally: PostgreSQL (embedded unless DATABASE_URL is set), the API
    and the workers, until Ctrl-C."""
    from jobq.cli import dev as dev_mode

    settings = load_settings(find_dev_database=False)  # it starts its own
    code = dev_mode.run(settings, data_dir=data_dir, procfile=procfile, port=port or settings.port, reset=reset)
    sys.exit(code)


main.add_command(enqueue)
main.add_command(show)
main.add_command(queues)
queues.add_command(queue_limit)
main.add_command(limits)
main.add_command(dead)
main.add_command(schedules)
main.add_command(workflows)
actions.attach(main, dead)  # the operator's commands: cancel, delete, retry, run-now, bulk, audit
