"""``/stats``: the per-minute rollup (:func:`jobq.observe.rollup.series`) over a window, for the
dashboard's charts."""

from __future__ import annotations

import dataclasses

from jobq.observe import rollup
from web.blueprints import resource
from web.context import api
from web.schemas import Error
from web.schemas_stats import StatsOut, StatsQuery

stats = resource("stats", __name__, "Per-minute history: completions, failures, depth and percentiles")


@stats.get("/stats", responses={200: StatsOut, 400: Error})
def get_stats(query: StatsQuery) -> dict:
    """One point per minute of the window (15m, 1h or 24h), oldest first, for one queue
    or all of them; a minute without data has zeros (and null percentiles)."""
    with api().database.connection() as conn:
        points = rollup.series(query.window, queue=query.queue, conn=conn)
    return {"window": query.window, "queue": query.queue, "points": [dataclasses.asdict(p) for p in points]}
