"""One job from the command line: ``jobq enqueue TYPE [PAYLOAD_JSON] [options]`` and
``jobq show ID`` (the job with its timeline and each failed attempt's error, as the
dashboard's job page shows it). ``--json`` prints the job as the API answers it."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click
from rich.table import Table

import jobq
from jobq.cli.common import console, session
from jobq.handlers import known
from jobq.jobs.timeline import timeline
from jobq.settings import current
from jobq.store import connections
from jobq.observe.moments import relative as ago


@click.command()
@click.argument("job_type", metavar="TYPE")
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False, default="{}")
@click.option("--queue", default="default", show_default=True, help="The queue to put it on.")
@click.option("--priority", type=int, default=None, help="1 (lowest) to 10 (highest) [5].")
@click.option("--run-at", "run_at", help="When it is due: ISO-8601, UTC without an offset [now].")
@click.option("--tag", "tags", multiple=True, help="A label to find it by (repeatable).")
@click.option("--max-retries", "max_retries", type=int, default=None, help="Failed runs retried [3].")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
def enqueue(job_type: str, payload: str, queue: str, priority: int | None, run_at: str | None,
            tags: tuple[str, ...], max_retries: int | None, as_json: bool) -> None:
    """Enqueue one job of TYPE with PAYLOAD_JSON (an object; {} if omitted)."""
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD_JSON") from None
    options: dict[str, Any] = {"queue": queue, "run_at": run_at, "tags": list(tags) or None}
    options.update({k: v for k, v in {"priority": priority, "max_retries": max_retries}.items() if v is not None})
    with session() as conn, connections.database_errors():
        unhandled = known.check(job_type, current().unknown_types, conn=conn)
        job = jobq.enqueue(job_type, body, conn=conn, **options)
    if unhandled is not None:
        click.echo(f"jobq: warning: {unhandled}", err=True)
    if as_json:
        click.echo(json.dumps(job.to_dict(), indent=2, default=str))
        return
    now = datetime.now(timezone.utc)
    due = "due now" if job.run_at <= now else f"due {ago(job.run_at, now)} ({job.run_at:%Y-%m-%d %H:%M:%S} UTC)"
    click.echo(f"jobq: enqueued job {job.id} ({job.type} on {job.queue}, {due})")


@click.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON, as GET /jobs/ID answers.")
def show(job_id: int, as_json: bool) -> None:
    """One job: its fields, payload, result, progress, timeline and failed attempts."""
    with session() as conn, connections.database_errors():
        job = jobq.get(job_id, conn=conn)
    if as_json:
        click.echo(json.dumps(job.to_dict(), indent=2, default=str))
        return
    now = datetime.now(timezone.utc)
    out = console()
    fields = Table(title=f"job {job.id}: {job.type} ({job.status})", title_justify="left", title_style="bold",
                   show_header=False)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    for name in ("queue", "priority", "attempt", "max_retries", "tags", "worker_id", "idempotency_key", "schedule"):
        value = getattr(job, name)
        if value not in (None, [], ""):
            fields.add_row(name, str(value))
    for name in ("payload", "result", "progress"):
        value = getattr(job, name)
        if value is not None:
            fields.add_row(name, json.dumps(value, default=str))
    out.print(fields)
    steps = Table(title="timeline (UTC)", title_justify="left", title_style="bold")
    for column in ("when", "", "what", "detail"):
        steps.add_column(column)
    for step in timeline(job, now):
        when = f"{step.at:%Y-%m-%d %H:%M:%S}" if step.at else "?"
        steps.add_row(when, ago(step.at, now) if step.at else "", step.what, step.detail)
    out.print(steps)
    for failure in job.errors or []:
        out.print(f"[bold]attempt {failure.get('attempt', '?')} failed[/bold] at {failure.get('at', '?')}:", highlight=False)
        out.print(str(failure.get("error") or "").rstrip(), markup=False, highlight=False)
