"""What every dashboard page shares: its template context, the database, the actor."""

from __future__ import annotations

from datetime import datetime, timezone

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import render_template, request

from jobq.store.connections import Connection
from web.context import api
from web.dashboard import security

REFRESH_CHOICES = (1, 2, 5, 15)  # seconds; 0 is paused (dashboard.js remembers the choice)
DEFAULT_REFRESH = 2
PAGE_SIZE = 50


def context() -> dict[str, Any]:
    """The variables of every dashboard template."""
    settings = api().settings
    return {
        "can_act": settings.dashboard == "full",
        "hide_payloads": settings.dashboard_hide_payloads,
        "auth_enabled": bool(settings.api_token),
        "csrf_token": security.csrf_token(),
        "refresh_choices": REFRESH_CHOICES,
        "default_refresh": DEFAULT_REFRESH,
    }


def page(template: str, title: str, **values: Any) -> str:
    """Render a page; ``now`` (UTC) is the one instant its relative times are read from."""
    values.setdefault("now", datetime.now(timezone.utc))
    return render_template(f"dashboard/{template}", title=title, **values)


@contextmanager
def database() -> Iterator[Connection]:
    """A connection of the web process's pool (autocommit)."""
    with api().database.connection() as conn:
        yield conn


def stale_seconds() -> float:
    return api().settings.stale_threshold


def database_url() -> str:
    return api().settings.require_database_url()


def pause_or_resume(library: Any, name: str, action: str) -> None:
    """Pause (with the form's reason, if any) or resume a queue or a schedule:
    ``library`` is :mod:`jobq.jobs.queues` or :mod:`jobq.schedules.stored`, whose pause and resume
    take the same arguments; audited as the dashboard's actor."""
    actor = security.actor()
    with database() as conn:
        if action == "pause":
            library.pause(name, reason=request.form.get("reason") or None, actor=actor, conn=conn)
        else:
            library.resume(name, actor=actor, conn=conn)
