"""Rates as people write them: ``"100/m"`` is at most 100 starts in any minute.

A rate is N starts per period, the period one second (``s``), minute (``m``) or hour
(``h``). The claim enforces it as a sliding window (migration 0020): a job starts only
while fewer than N starts of its scope lie in the last period, whichever host made them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jobq.errors import InvalidArgument

PERIODS = {"s": 1, "m": 60, "h": 3600}
MAX_RATE = 1_000_000
_RATE = re.compile(r"^\s*([0-9]+)\s*/\s*([smh])\s*$")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of ``seconds`` (1, 60 or 3600)."""

    count: int
    seconds: int

    def __str__(self) -> str:
        unit = {seconds: unit for unit, seconds in PERIODS.items()}[self.seconds]
        return f"{self.count}/{unit}"


def parse_rate(value: Any, field: str = "rate") -> Rate | None:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` (N from 1 to 1,000,000) as a :class:`Rate`;
    None stays None. Raises :class:`InvalidArgument` naming ``field`` otherwise."""
    if value is None or isinstance(value, Rate):
        return value
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_RATE:
        raise InvalidArgument(field, f"must be N/s, N/m or N/h with N from 1 to {MAX_RATE:,}, e.g. '100/m'")
    return Rate(int(match.group(1)), PERIODS[match.group(2)])


def of_row(count: int | None, seconds: int | None) -> Rate | None:
    """The rate stored as (rate_count, rate_seconds), or None."""
    return None if count is None or seconds is None else Rate(count, seconds)
