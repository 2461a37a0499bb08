"""``jobq dead``: the dead-letter table (list, replay, discard) and its letters grouped
by cause (groups). jobq.cli.main adds the group to ``jobq``; the group actions
(replay-group, discard-group) come from :mod:`jobq.cli.actions`."""

from __future__ import annotations

import json

import click

from jobq.cli.common import console, database, load_settings
from jobq.store import connections


@click.group()
def dead() -> None:
    """The dead-letter table: list, replay, discard."""


@dead.command("list")
@click.option("--type", "job_type", help="Only this job type.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
def dead_list(job_type: str | None, limit: int) -> None:
    """Dead-letter rows, newest first."""
    from rich.table import Table

    from jobq.job import last_line
    from jobq.jobs.dead_letters import list_dead

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        page = list_dead(type=job_type, limit=limit, conn=conn)
    table = Table(title=f"dead letters: {len(page.items)} of {page.total}")
    for column in ("id", "job", "type", "queue", "attempts", "died", "replayed as", "error"):
        table.add_column(column)
    for row in page.items:
        table.add_row(
            str(row.id), str(row.original_id), row.type, row.queue, str(row.attempts),
            f"{row.died_at:%Y-%m-%d %H:%M:%S}", str(row.replayed_as or ""), last_line(row.error)[:80],
        )
    console().print(table)


@dead.command("replay")
@click.argument("dead_letter_id", type=click.IntRange(min=1))
def dead_replay(dead_letter_id: int) -> None:
    """Enqueue a dead job again, as a new job."""
    from jobq.jobs.dead_letters import replay

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        job = replay(dead_letter_id, conn=conn)
    click.echo(f"jobq: dead letter {dead_letter_id} replayed as job {job.id}")


@dead.command("discard")
@click.argument("dead_letter_id", type=click.IntRange(min=1))
def dead_discard(dead_letter_id: int) -> None:
    """Delete a dead-letter row for good."""
    from jobq.jobs.dead_letters import discard

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        discard(dead_letter_id, conn=conn)
    click.echo(f"jobq: dead letter {dead_letter_id} discarded")


@dead.command("groups")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def dead_groups(limit: int, as_json: bool) -> None:
    """Dead letters waiting, grouped by type and cause, most recently seen first."""
    from rich.table import Table

    from jobq.jobs.dead_letters import groups


    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
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
    console().print(table)
