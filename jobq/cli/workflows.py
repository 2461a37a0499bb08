"""``jobq workflows list | show ID | cancel ID | retry ID``: the operator's commands of
:mod:`jobq.workflows`. jobq.cli.main adds the group to ``jobq``."""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from jobq.cli.common import session
from jobq.jobs import audit
from jobq.store import connections
from jobq.workflows.runs import MAX_LIST_LIMIT, WORKFLOW_STATUSES, WorkflowRun


@click.group()
def workflows() -> None:
    """Workflows: list them, show one's steps, cancel or retry one."""


@workflows.command("list")
@click.option("--status", type=click.Choice(WORKFLOW_STATUSES), help="Only workflows in this status.")
@click.option("--limit", type=click.IntRange(1, MAX_LIST_LIMIT), default=50, show_default=True)
@click.option("--before", type=click.IntRange(min=1), help="Only workflows older than this id (the next page).")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def workflows_list(status: str | None, limit: int, before: int | None, as_json: bool) -> None:
    """Workflows newest first, with their status and how many steps are done."""
    from rich.console import Console
    from rich.table import Table

    from jobq.workflows.runs import list_workflows

    with session() as conn, connections.database_errors():
        listed = list_workflows(status=status, before=before, limit=limit, conn=conn)
    if as_json:
        click.echo(json.dumps({"workflows": listed}, indent=2, default=str))
        return
    table = Table(title=f"workflows ({len(listed)})", title_justify="left", title_style="bold")
    for column in ("id", "name", "status", "done / steps", "created"):
        table.add_column(column, overflow="fold")
    for w in listed:
        table.add_row(str(w["id"]), w["name"] or "-", w["status"], f"{w['done']} / {w['steps']}",
                      f"{w['created_at']:%Y-%m-%d %H:%M:%S}")
    Console().print(table)


@workflows.command("show")
@click.argument("workflow_id", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON, for scripts.")
def workflows_show(workflow_id: int, as_json: bool) -> None:
    """One workflow: each step with its job, status and parents."""
    from jobq.workflows.runs import get_workflow

    with session() as conn, connections.database_errors():
        run = get_workflow(workflow_id, conn=conn)
    _print(run, as_json)


@workflows.command("cancel")
@click.argument("workflow_id", type=click.IntRange(min=1))
def workflows_cancel(workflow_id: int) -> None:
    """Cancel every step of a workflow that has not finished."""
    from jobq.workflows.operations import cancel_workflow

    _act(cancel_workflow, workflow_id)


@workflows.command("retry")
@click.argument("workflow_id", type=click.IntRange(min=1))
def workflows_retry(workflow_id: int) -> None:
    """New jobs for a workflow's dead and cancelled steps, the edges re-pointed to them."""
    from jobq.workflows.operations import retry_workflow

    _act(retry_workflow, workflow_id)


def _act(action: Callable[..., WorkflowRun], workflow_id: int) -> None:
    """Run an operator's action on a workflow, audited as the CLI's actor; say its status after."""
    with session() as conn, connections.database_errors():
        run = action(workflow_id, actor=audit.cli_actor(), conn=conn)
    click.echo(f"jobq: workflow {run.id} {run.status}")


def _print(run: WorkflowRun, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    parents: dict[str, list[str]] = {}
    for parent, child, _ in run.edges:
        parents.setdefault(child, []).append(parent)
    title = f"workflow {run.id} {run.name or ''} {run.status}".replace("  ", " ")
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in ("step", "job", "type", "status", "after"):
        table.add_column(column, overflow="fold")
    for s in run.steps:
        job = s.job
        table.add_row(s.name, str(job.id) if job else "-", job.type if job else "-", job.status if job else "gone",
                      ", ".join(parents.get(s.name, [])) or "-")
    Console().print(table)
