"""Times as people read them: relative ("3 min ago", "in 2 h") with the absolute time
in UTC beside it, for the dashboard (its ``moment`` filter) and the CLI. Pure functions."""

from __future__ import annotations

from datetime import datetime, timezone

_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def span(seconds: float) -> str:
    """A duration in the largest whole unit, one decimal under ten: ``42 s``, ``3.5 min``,
    ``2 h``, ``12 d``; ``0.25 s`` and ``850 ms`` below a second."""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.2f} s"
    for size, unit in _UNITS:
        if seconds >= size:
            value = seconds / size
            return f"{value:.1f} {unit}".replace(".0 ", " ") if value < 10 and size > 1 else f"{value:.0f} {unit}"
    return f"{seconds:.0f} s"  # pragma: no cover (the last unit matches)


def relative(at: datetime, now: datetime) -> str:
    """``at`` from ``now``: ``just now`` within a second, else ``3 min ago`` or ``in 3 min``."""
    delta = (at - now).total_seconds()
    if abs(delta) < 1:
        return "just now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def utc(at: datetime) -> str:
    """``2026-12-05 03:04:05 UTC``: whole seconds, always in UTC."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
