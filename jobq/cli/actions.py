"""The operator's commands: ``jobq cancel | delete | retry | run-now ID``, ``jobq bulk
ACTION [filter options] [--dry-run]``, ``jobq dead replay-group | discard-group ID`` and
``jobq audit``. jobq.cli.main adds them to its groups (:func:`attach`). Every action is
audited as ``cli:<OS user>@<host>``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from jobq.cli.common import console, fail, session
from jobq.job import STATUSES
from jobq.jobs import audit, control, operations
from jobq.store import connections

EXIT_INTERRUPTED = 130  # Ctrl-C: the operation is left to the daemon to finish


def _one_job(name: str, act: Callable[..., Any], said: Callable[[Any], str], help: str) -> click.Command:
    """``jobq NAME ID``: ``act(id, actor=..., conn=...)``, then one line of what it did."""

    @click.command(name, help=help)
    @click.argument("job_id", type=click.IntRange(min=1))
    def command(job_id: int) -> None:
        with session() as conn, connections.database_errors():
            result = act(job_id, actor=audit.cli_actor(), conn=conn)
        click.echo(f"jobq: job {job_id} {said(result)}")

    return command


cancel = _one_job("cancel", control.cancel, lambda _: "cancelled",
                  "Cancel a job that has not finished (a running one's handler is asked to stop).")
delete = _one_job("delete", control.delete, lambda _: "deleted", "Delete a pending job.")
retry = _one_job("retry", control.retry, lambda job: f"retried as job {job.id}",
                 "Enqueue a dead job again (the replay of its dead letter) or a copy of a cancelled one; once.")
run_now = _one_job("run-now", control.run_now, lambda _: "is due now", "Make a pending job scheduled in the future due now.")


@click.command()
@click.argument("action", type=click.Choice(operations.JOB_ACTIONS))
@click.option("--status", type=click.Choice(STATUSES), help="Jobs in this status.")
@click.option("--queue", help="Jobs of this queue.")
@click.option("--type", "job_type", help="Jobs of this type.")
@click.option("--tag", help="Jobs carrying this tag.")
@click.option("--id", "ids", type=click.IntRange(min=1), multiple=True, help="This job (repeatable).")
@click.option("--created-after", help="Created strictly after (ISO-8601; UTC without an offset).")
@click.option("--created-before", help="Created strictly before (ISO-8601; UTC without an offset).")
@click.option("--error", help="Whose last error contains this text (any case).")
@click.option("--priority", type=int, help="The new priority (set_priority: 1-10).")
@click.option("--dry-run", is_flag=True, help="Count the matching jobs and change nothing.")
def bulk(action: str, ids: tuple[int, ...], job_type: str | None, priority: int | None, dry_run: bool,
         **criteria: Any) -> None:
    """Act on every job matching the filter, 1,000 rows a transaction, and wait.

    ACTION: cancel (pending, claimed or running jobs), retry (dead or cancelled ones,
    once), delete (pending or finished ones, never claimed or running), run_now
    (pending ones scheduled later), set_priority (pending ones). Rows not eligible, or
    held by a worker, are skipped and counted. Ctrl-C leaves the operation to the
    daemon's maintenance, which finishes it.
    """
    job_filter = {"type": job_type, "ids": list(ids) or None, **criteria}
    job_filter = {name: value for name, value in job_filter.items() if value is not None}
    checked = operations.check_job_action(action, job_filter, priority)
    with session() as conn, connections.database_errors():
        matching = operations.count(checked, conn=conn)
        if dry_run:
            click.echo(f"jobq: {matching} job(s) match; nothing changed (dry run)")
            return
        operation = operations.start(conn, action, actor=audit.cli_actor(), job_filter=checked, priority=priority)
        try:
            with click.progressbar(length=max(matching, 1), label=f"operation {operation.id}: {action}") as bar:
                operation = operations.run(
                    conn, operation, on_chunk=lambda op: bar.update(min(op.matched, bar.length) - bar.pos)
                )
        except KeyboardInterrupt:
            click.echo(f"\njobq: interrupted; the daemon's maintenance will finish operation {operation.id}", err=True)
            sys.exit(EXIT_INTERRUPTED)
    _report(operation)


@click.command("replay-group")
@click.argument("group_id")
def dead_replay_group(group_id: str) -> None:
    """Replay every waiting dead letter of a group (jobq dead groups lists them), and wait."""
    _group_action("replay", group_id)


@click.command("discard-group")
@click.argument("group_id")
def dead_discard_group(group_id: str) -> None:
    """Delete every waiting dead letter of a group for good, and wait."""
    _group_action("discard", group_id)


def _group_action(action: str, group_id: str) -> None:
    with session() as conn, connections.database_errors():
        operation = operations.start(conn, action, actor=audit.cli_actor(), dead_letter_group=group_id)
        operation = operations.run(conn, operation)
    _report(operation)


def _report(operation: operations.Operation) -> None:
    counts = f"{operation.matched} matched, {operation.changed} changed, {operation.skipped} skipped"
    if operation.state == "failed":
        fail(f"operation {operation.id} failed after {counts}: {operation.error}")
    click.echo(f"jobq: operation {operation.id} {operation.state}: {counts}")


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--before", type=click.IntRange(min=1), help="Rows older than this id (the next page).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, for scripts.")
def audit_trail(limit: int, before: int | None, as_json: bool) -> None:
    """Who did what to the queue, newest first."""
    from rich.table import Table

    with session() as conn, connections.database_errors():
        entries = audit.entries(limit=limit, before=before, conn=conn)
    if as_json:
        for entry in entries:
            click.echo(json.dumps(entry.to_dict()))
        return
    table = Table(title=f"audit trail ({len(entries)} rows)", title_justify="left", title_style="bold")
    for column in ("id", "at", "actor", "action", "target", "counts"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            str(entry.id), f"{entry.at:%Y-%m-%d %H:%M:%S}", entry.actor, entry.action,
            json.dumps(entry.target, separators=(",", ":")), json.dumps(entry.counts, separators=(",", ":")),
        )
    console().print(table)
    if len(entries) == limit:
        click.echo(f"jobq: more with --before {entries[-1].id}")


def attach(main: click.Group, dead: click.Group) -> None:
    """Add the commands to ``jobq`` (``main``) and ``jobq dead``."""
    for command in (cancel, delete, retry, run_now, bulk, audit_trail):
        main.add_command(command)
    dead.add_command(dead_replay_group)
    dead.add_command(dead_discard_group)

