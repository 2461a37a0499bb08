"""``jobq schedules``: list, show, pause, resume, run and prune periodic schedules
(:mod:`jobq.schedules.stored`). jobq.cli.main adds the group to its ``main``; every action is
audited as the OS user (:func:`jobq.jobs.audit.cli_actor`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from jobq.cli.common import console, session
from jobq.job import last_line
from jobq.jobs import audit
from jobq.schedules import stored
from jobq.store import connections

T = TypeVar("T")


@click.group()
def schedules() -> None:
    """Periodic schedules: list, show, pause, resume, run now, prune orphans."""



def _act(action: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """An operator's action on the schedules, audited as the OS user, on the command's
    connection."""
    with session() as conn, connections.database_errors():
        return action(*args, actor=audit.cli_actor(), conn=conn, **kwargs)


def _when(value: datetime | None) -> str:
    return "" if value is None else f"{value:%Y-%m-%d %H:%M:%S%z}"


def _state(schedule: stored.Schedule) -> str:
    if schedule.paused:
        return "paused"
    return "orphaned" if schedule.orphaned else "active"


@schedules.command("list")
def schedules_list() -> None:
    """Every schedule: its expression, state, next and last run, last job's status."""
    from rich.table import Table

    with session() as conn, connections.database_errors():
        rows = stored.list_schedules(conn=conn)
    table = Table(title=f"schedules: {len(rows)}")
    for column in ("name", "cron", "tz", "type", "queue", "state", "next run", "last run", "last job"):
        table.add_column(column)
    for s in rows:
        last_job = f"{s.last_job_id} {s.last_job_status or 'gone'}" if s.last_job_id else ""
        table.add_row(s.name, s.cron, s.tz, s.type, s.queue, _state(s), _when(s.next_run_at), _when(s.last_run_at), last_job)
    console().print(table)


@schedules.command("show")
@click.argument("name")
def schedules_show(name: str) -> None:
    """One schedule and its latest jobs."""
    from rich.table import Table

    with session() as conn, connections.database_errors():
        detail = stored.show(name, conn=conn)
    s = detail.schedule
    click.echo(f"{s.name}: {s.cron} ({s.tz}) -> {s.type} on queue {s.queue}, priority {s.priority}")
    click.echo(f"  state: {_state(s)}, declared by {s.declared_by} live worker(s), definition {s.hash}")
    if s.paused:
        click.echo(f"  paused {_when(s.paused_at)} by {s.paused_by}" + (f": {s.reason}" if s.reason else ""))
    click.echo(f"  catch_up {s.catch_up}, overlap {s.overlap}; next run {_when(s.next_run_at)}, last run {_when(s.last_run_at)}")
    table = Table(title=f"latest jobs: {len(detail.jobs)}")
    for column in ("id", "slot", "status", "attempt", "created", "error"):
        table.add_column(column)
    for job in detail.jobs:
        table.add_row(str(job.id), _when(job.scheduled_for) or "run now", job.status, str(job.attempt),
                      _when(job.created_at), last_line(job.error)[:60])
    console().print(table)


@schedules.command("pause")
@click.argument("name")
@click.option("--reason", help="Why, for whoever looks next.")
def schedules_pause(name: str, reason: str | None) -> None:
    """Stop a schedule firing (it stays paused across deploys) until resumed."""
    _act(stored.pause, name, reason=reason)
    click.echo(f"jobq: schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
def schedules_resume(name: str) -> None:
    """Let a paused schedule fire again; its missed slots follow its catch_up policy."""
    s = _act(stored.resume, name)
    click.echo(f"jobq: schedule {name} resumed; next run {_when(s.next_run_at)}")


@schedules.command("run")
@click.argument("name")
def schedules_run(name: str) -> None:
    """Enqueue one job of the schedule now, outside its slots."""
    job = _act(stored.run, name)
    click.echo(f"jobq: schedule {name} enqueued job {job.id}")


@schedules.command("prune")
def schedules_prune() -> None:
    """Delete the orphaned schedules: those no live worker declares."""
    names = _act(stored.prune)
    click.echo(f"jobq: pruned {len(names)} orphaned schedule(s)" + (f": {', '.join(names)}" if names else ""))
