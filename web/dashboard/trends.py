"""The overview's charts: the per-minute rollup (:func:`jobq.observe.rollup.series`) drawn as SVG."""

from __future__ import annotations

from jobq.observe import rollup
from jobq.store.connections import Connection
from web.dashboard import charts

WINDOWS = tuple(rollup.WINDOWS)  # 15m, 1h, 24h
DEFAULT_WINDOW = "1h"


def window_of(value: str | None) -> str:
    return value if value in WINDOWS else DEFAULT_WINDOW


def charts_for(window: str, queue: str | None, conn: Connection) -> list[charts.Chart]:
    """The four charts of ``window``, of one queue or of all."""
    return charts.charts_of(rollup.series(window, queue=queue, conn=conn))
