"""``/dashboard``: per queue its depth, scheduled jobs, oldest pending age, throughput,
error rate and pause; pending jobs of types no live worker has a handler for; the
charts of the chosen window. ``/`` redirects here."""

from __future__ import annotations

from flask import request

import jobq
from jobq.handlers import known
from jobq.observe import metrics
from jobq.observe import tallies
from jobq.jobs.ledger import COUNT_LIMIT
from web.dashboard import common, trends
from web.dashboard.blueprints import pages


@pages.get("")
def overview() -> str:
    window = trends.window_of(request.args.get("window"))
    queue = request.args.get("queue") or None
    with common.database() as conn:
        snapshot = metrics.snapshot(stale_seconds=common.stale_seconds(), conn=conn)
        scheduled = tallies.scheduled(sorted(snapshot.queues), conn=conn)
        pending = {t: depth.get("pending", 0) for t, depth in jobq.counts(conn=conn).types.items()}
        declared = known.declared(stale_seconds=common.stale_seconds(), conn=conn)
        charts = trends.charts_for(window, queue if queue in snapshot.queues else None, conn)
    return common.page(
        "overview.html", "Overview", metrics=snapshot, scheduled=scheduled, cap=COUNT_LIMIT,
        no_handler=known.pending_without_handler(pending, declared),
        window=window, windows=trends.WINDOWS, charts=charts, chart_queue=queue,
    )
