"""``jobq limits list | set PATTERN | clear PATTERN`` and ``jobq queues limit NAME``:
the operator's commands of :mod:`jobq.limits`. jobq.cli.main adds them (``limit`` to the
``queues`` group). A bad value is one line naming it, and exit 1 (InvalidArgument,
turned into that by jobq.cli.main.Group)."""

from __future__ import annotations

import json
from typing import Any

import click

from jobq.cli.common import database, load_settings
from jobq.jobs import audit
from jobq.store import connections

NONE = "none"  # what --concurrency and --rate take to remove a queue's limit


@click.group()
def limits() -> None:
    """Limits on concurrency keys (rules on key patterns) and on queues."""


@limits.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def limits_list(as_json: bool) -> None:
    """Every rule on keys and every limited queue, with slots in use and held jobs."""
    from rich.console import Console

    from jobq.limits import list_limits, queue_limits

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        rules, queues = list_limits(conn=conn), queue_limits(conn=conn)
    if as_json:
        click.echo(json.dumps({"rules": [r.to_dict() for r in rules], "queues": [q.to_dict() for q in queues]}, indent=2))
        return
    console = Console()
    console.print(limits_table(rules, queues))


def limits_table(rules: list[Any], queues: list[Any]) -> Any:
    """One table of both: a row per rule (``key PATTERN``) and per queue (``queue NAME``);
    also what ``jobq inspect`` shows."""
    from rich.table import Table

    table = Table(title=f"limits ({len(rules) + len(queues)})", title_justify="left", title_style="bold")
    for column in ("limit on", "concurrency", "rate", "in use", "keys", "held", "fair"):
        table.add_column(column, overflow="fold")
    for q in queues:
        table.add_row(f"queue {q.queue}", _or_dash(q.concurrency), _or_dash(q.rate), str(q.in_use), "-",
                      str(q.held), "yes" if q.fair else "no")
    for r in rules:
        table.add_row(f"key {r.pattern}", _or_dash(r.concurrency), _or_dash(r.rate), str(r.in_use), str(r.keys),
                      str(r.held), "-")
    return table


@limits.command("set")
@click.argument("pattern")
@click.option("--concurrency", type=int, help="At most N jobs of each key at once, across every host.")
@click.option("--rate", help="At most N starts of each key per period: N/s, N/m or N/h.")
def limits_set(pattern: str, concurrency: int | None, rate: str | None) -> None:
    """Create or replace the rule on PATTERN: one key, or every key under a prefix
    ending in '*' ('tenant:*'), each with its own limit."""
    from jobq.limits import set_limit

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        rule = set_limit(pattern, concurrency=concurrency, rate=rate, actor=audit.cli_actor(), conn=conn)
    click.echo(f"jobq: limit on {rule.pattern}: concurrency {_or_dash(rule.concurrency)}, rate {_or_dash(rule.rate)}")


@limits.command("clear")
@click.argument("pattern")
def limits_clear(pattern: str) -> None:
    """Remove the rule on PATTERN (jobs running under it keep their slots until they end)."""
    from jobq.limits import clear_limit

    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        found = clear_limit(pattern, actor=audit.cli_actor(), conn=conn)
    click.echo(f"jobq: limit on {pattern} cleared" if found else f"jobq: no limit on {pattern}")


@click.command("limit")
@click.argument("name")
@click.option("--concurrency", help="At most N of its jobs at once, across every host ('none' removes it).")
@click.option("--rate", help="At most N starts per period: N/s, N/m or N/h ('none' removes it).")
@click.option("--fair/--no-fair", default=None, help="Claims take turns between concurrency keys.")
def queue_limit(name: str, concurrency: str | None, rate: str | None, fair: bool | None) -> None:
    """Change the limits of queue NAME; an option not given keeps its value."""
    from jobq.errors import InvalidArgument
    from jobq.limits import set_queue_limits

    changes: dict[str, Any] = {}
    if concurrency is not None:
        try:
            changes["concurrency"] = None if concurrency == NONE else int(concurrency)
        except ValueError:
            raise InvalidArgument("--concurrency", "must be a whole number or 'none'") from None
    if rate is not None:
        changes["rate"] = None if rate == NONE else rate
    if fair is not None:
        changes["fair"] = fair
    if not changes:
        raise click.UsageError("give --concurrency, --rate or --fair/--no-fair")
    settings = load_settings()
    with database(settings) as conn, connections.database_errors():
        q = set_queue_limits(name, **changes, actor=audit.cli_actor(), conn=conn)
    click.echo(f"jobq: queue {q.queue}: concurrency {_or_dash(q.concurrency)}, rate {_or_dash(q.rate)}, "
               f"fair {'yes' if q.fair else 'no'}")


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
