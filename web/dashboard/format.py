"""How the dashboard writes numbers, times and JSON (Jinja filters and globals)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from flask import Flask, request, url_for
from markupsafe import Markup, escape

from jobq.observe import moments
from jobq.schedules.cron import describe
from web.dashboard import charts


def count(n: int | None, exact: bool = True) -> str:
    """``12,345``; a capped count reads ``10,000+``."""
    if n is None:
        return "—"
    return f"{n:,}" if exact else f"{n:,}+"


def due_count(pending: int, scheduled: int, cap: int) -> str:
    """Pending jobs due now: the pending depth less those scheduled ahead (``≤ n`` when
    the scheduled ones were counted only up to ``cap``)."""
    if scheduled > cap:
        return f"≤ {max(0, pending - cap):,}"
    return f"{max(0, pending - scheduled):,}"


def capped(n: int, cap: int) -> str:
    """A count read up to ``cap`` + 1: ``cap+`` past it."""
    return f"{cap:,}+" if n > cap else f"{n:,}"


def run_time(job: Any) -> float | None:
    """Seconds a job ran (started to completed), or has been running; None before it started."""
    if job.started_at is None:
        return None
    end = job.completed_at or datetime.now(timezone.utc)
    return max(0.0, (end - job.started_at).total_seconds())


def duration(seconds: float | None) -> str:
    """``850 ms``, ``42 s``, ``7 min 3 s``, ``5 h 12 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def moment(value: datetime | None, now: datetime | None = None) -> Markup:
    """A ``<time>`` read relative to now ("3 min ago", "in 2 h"), its absolute time in
    UTC on hover (``title``) and in ``datetime``. ``now``: the page's (default: this call's)."""
    if value is None:
        return Markup("—")
    utc = value.astimezone(timezone.utc)
    shown = moments.relative(utc, now or datetime.now(timezone.utc))
    return Markup('<time datetime="{}" title="{}">{}</time>').format(utc.isoformat(), moments.utc(utc), shown)


def exact_moment(value: datetime | None) -> Markup:
    """A ``<time>`` in UTC, to the second (where the exact time is the point: a job's fields)."""
    if value is None:
        return Markup("—")
    utc = value.astimezone(timezone.utc)
    return Markup('<time datetime="{}">{}</time>').format(utc.isoformat(), moments.utc(utc))


def cron_words(expression: str) -> str:
    """``Every 15 seconds`` for ``* * * * * */15``."""
    return describe(expression)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def rate(value: float | None) -> str:
    return "—" if value is None else (f"{value:.2f}/s" if value < 100 else f"{value:,.0f}/s")


def worker_place(worker_id: str | None) -> str:
    """``host pid`` out of a worker id (``host:pid:token``)."""
    if not worker_id:
        return "—"
    parts = worker_id.rsplit(":", 2)
    return f"{parts[0]} pid {parts[1]}" if len(parts) == 3 else worker_id


def status_badge(status: str | None) -> Markup:
    if not status:
        return Markup("—")
    return Markup('<span class="badge badge-{0}">{0}</span>').format(escape(status))


def url_with(**changes: Any) -> str:
    """The current page's URL with some query parameters changed (None removes one)."""
    args = request.args.to_dict(flat=False)
    for name, value in changes.items():
        if value is None:
            args.pop(name, None)
        else:
            args[name] = [str(value)]
    return url_for(request.endpoint or "dashboard.overview", **(request.view_args or {}), **args)


def install(app: Flask) -> None:
    app.jinja_env.filters.update(
        count=count, capped=capped, duration=duration, moment=moment, exact_moment=exact_moment,
        cron_words=cron_words, run_time=run_time, pretty_json=pretty_json, due_count=due_count,
        percent=percent, rate=rate, worker_place=worker_place, status_badge=status_badge,
        chart_svg=charts.svg, chart_legend=charts.legend,
    )
    app.jinja_env.globals.update(url_with=url_with)
