"""``jobq queues list | pause NAME | resume NAME`` (``--all`` for every queue): the
operator's commands of :mod:`jobq.jobs.queues`. jobq.cli.main adds the group to ``jobq``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from jobq.cli.common import console, database, load_settings
from jobq.jobs import audit
from jobq.store import connections

if TYPE_CHECKING:
    from jobq.jobs.queues import Change


@click.group()
def queues() -> None:
    """Queues: list them, pause and resume them."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def queues_list(as_json: bool) -> None:
    """Every queue known, with its pause, depth per status, workers and oldest due job."""
    from rich.table import Table

    from jobq.job import STATUSES
    from jobq.jobs.queues import list_queues


    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        listed = list_queues(stale_seconds=settings.stale_threshold, conn=conn)
    if as_json:
        click.echo(json.dumps({"queues": [queue.to_dict() for queue in listed]}, indent=2))
        return
    table = Table(title=f"queues ({len(listed)})", title_justify="left", title_style="bold")
    for column in ("queue", "paused since", *STATUSES, "workers", "oldest due", "paused by: reason"):
        table.add_column(column, overflow="fold")
    for q in listed:
        since = f"{q.paused_at:%Y-%m-%d %H:%M:%S}" if q.paused_at else "-"
        why = f"{q.paused_by}: {q.reason or '-'}" if q.paused_at else ""
        oldest = "-" if q.oldest_pending_age_seconds is None else f"{q.oldest_pending_age_seconds:.1f} s"
        table.add_row(q.name, since, *(str(q.depth[s]) for s in STATUSES), str(q.workers), oldest, why)
    console().print(table)


@queues.command("pause")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Every queue known now.")
@click.option("--reason", help="Why (shown by `jobq queues list` and GET /queues).")
def queues_pause(name: str | None, every: bool, reason: str | None) -> None:
    """Stop workers from starting the jobs of queue NAME (running jobs finish)."""
    from jobq.jobs.queues import pause, pause_all

    _one_or_all(name, every)

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        if every:
            change = pause_all(reason=reason, actor=audit.cli_actor(), conn=conn)
        else:
            change = pause(name, reason=reason, actor=audit.cli_actor(), conn=conn)  # type: ignore[arg-type]
    _report("paused", change)


@queues.command("resume")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Every paused queue.")
def queues_resume(name: str | None, every: bool) -> None:
    """Let workers start the jobs of queue NAME again (idle ones wake at once)."""
    from jobq.jobs.queues import resume, resume_all

    _one_or_all(name, every)

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        if every:
            change = resume_all(actor=audit.cli_actor(), conn=conn)
        else:
            change = resume(name, actor=audit.cli_actor(), conn=conn)  # type: ignore[arg-type]
    _report("resumed", change)


def _one_or_all(name: str | None, every: bool) -> None:
    if (name is None) == (not every):
        raise click.UsageError("give either a queue NAME or --all")


def _report(verb: str, change: Change) -> None:
    for queue in change.unknown:
        click.echo(f"jobq: warning: no job, worker or schedule has ever named queue {queue!r}: a typo?", err=True)
    if not change.queues:
        click.echo(f"jobq: no queue to be {verb}")
    for queue in change.queues:
        if queue in change.changed:
            click.echo(f"jobq: queue {queue} {verb}")
        elif queue not in change.unknown:
            click.echo(f"jobq: queue {queue} was already {verb}")
        else:
            click.echo(f"jobq: queue {queue} not {verb}: it was never paused")


#END
