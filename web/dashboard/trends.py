"""The overview's charts: the per-minute rollup (:mod:`jobq.rollup`) drawn as SVG."""

from __future__ import annotations

from typing import Any

from jobq.db import Connection
from web.dashboard import charts

try:  # the rollup comes with the dashboard's data branch
    from jobq import rollup
except ImportError:  # pragma: no cover - until it lands
    rollup = None  # type: ignore[assignment]

WINDOWS = ("15m", "1h", "24h")
DEFAULT_WINDOW = "1h"


def window_of(value: str | None) -> str:
    return value if value in WINDOWS else DEFAULT_WINDOW


def charts_for(window: str, queue: str | None, conn: Connection) -> list[Any] | None:
    """The four charts of ``window`` (one queue's, or all), or None without a rollup."""
    if rollup is None:
        return None
    return charts.charts_of(rollup.series(window, queue=queue, conn=conn))
