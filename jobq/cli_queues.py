"""``jobq queues list | pause NAME | resume NAME`` (``--all`` for every queue) and
``jobq dead groups``: the operator's commands of :mod:`jobq.queues` and of the dead
letters grouped by cause. jobq.cli attaches them to its ``main`` and ``dead`` groups;
this module imports jobq.cli's helpers only when a command runs (no import cycle)."""

from __future__ import annotations

import json

import click

from jobq import audit, db


@click.group()
def queues() -> None:
    """Queues: list them, pause and resume them."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def queues_list(as_json: bool) -> None:
    """Every queue known, with its pause, depth per status, workers and oldest due job."""
    from rich.console import Console
    from rich.table import Table

    from jobq.job import STATUSES
    from jobq.queues import list_queues

    from jobq.cli import database, load_settings

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
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
    Console().print(table)


@queues.command("pause")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Every queue known now.")
@click.option("--reason", help="Why (shown by `jobq queues list` and GET /queues).")
def queues_pause(name: str | None, every: bool, reason: str | None) -> None:
    """Stop workers from starting the jobs of queue NAME (running jobs finish)."""
    from jobq.queues import pause, pause_all

    _one_or_all(name, every)
    from jobq.cli import database, load_settings

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        if every:
            change = pause_all(reason=reason, actor=audit.cli_actor(), conn=conn)
        else:
            change = pause(name, reason=reason, actor=audit.cli_actor(), conn=conn)  # type: ignore[arg-type]
    _report("paused", change.queues, change.changed)


@queues.command("resume")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Every paused queue.")
def queues_resume(name: str | None, every: bool) -> None:
    """Let workers start the jobs of queue NAME again (idle ones wake at once)."""
    from jobq.queues import resume, resume_all

    _one_or_all(name, every)
    from jobq.cli import database, load_settings

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        if every:
            change = resume_all(actor=audit.cli_actor(), conn=conn)
        else:
            change = resume(name, actor=audit.cli_actor(), conn=conn)  # type: ignore[arg-type]
    _report("resumed", change.queues, change.changed)


def _one_or_all(name: str | None, every: bool) -> None:
    if (name is None) == (not every):
        raise click.UsageError("give either a queue NAME or --all")


def _report(verb: str, named: list[str], changed: list[str]) -> None:
    if not named:
        click.echo(f"jobq: no queue to be {verb}")
    for queue in named:
        click.echo(f"jobq: queue {queue} {verb}" if queue in changed else f"jobq: queue {queue} was already {verb}")


@click.command("groups")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def dead_groups(limit: int, as_json: bool) -> None:
    """Dead letters waiting, grouped by type and cause, most recently seen first."""
    from rich.console import Console
    from rich.table import Table

    from jobq.dead_letter import groups

    from jobq.cli import database, load_settings

    settings = load_settings()
    with database(settings) as conn, db.database_errors():
        found = groups(limit=limit, conn=conn)
    if as_json:
        click.echo(json.dumps({"groups": [group.to_dict() for group in found]}, indent=2))
        return
    table = Table(title=f"dead-letter groups ({len(found)})", title_justify="left", title_style="bold")
    for column in ("group", "type", "waiting", "first seen", "last seen", "example", "signature"):
        table.add_column(column, overflow="fold")
    for g in found:
        table.add_row(
            g.id, g.type, str(g.count), f"{g.first_seen:%Y-%m-%d %H:%M:%S}", f"{g.last_seen:%Y-%m-%d %H:%M:%S}",
            str(g.example_id), g.signature,
        )
    Console().print(table)
