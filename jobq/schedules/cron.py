"""Slot arithmetic: the times a cron expression names, in a time zone, as UTC instants.

Expressions are croniter's: five fields, or six with the sixth for seconds
(``"* * * * * */2"``: every 2 seconds). croniter parses them and walks the wall clock;
this module turns wall-clock times into instants, with one rule for DST:

- a schedule's slots are **wall-clock times in its zone**, and each fires once;
- a slot that does not exist (spring forward: 02:30 in Europe/Berlin on the last
  Sunday of March) fires once, at the first instant after the gap (03:00 CEST); every
  slot inside one gap is that one run;
- a slot that exists twice (fall back: 02:30 on the last Sunday of October) fires once,
  at its first occurrence (02:30 CEST). The repeated hour fires nothing: a schedule of
  every 10 minutes in a zone with DST has a gap of 70 minutes there (keep such
  schedules in UTC, the default, which has no DST).

Pure: no database. Instants in and out are aware datetimes in UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from cron_descriptor import ExpressionDescriptor, Options
from croniter import croniter

UTC = timezone.utc
_SECOND = timedelta(seconds=1)
_SEARCH_YEARS = 5  # an expression with no slot within this many years (Feb 30) is refused


class CronError(ValueError):
    """An expression croniter does not accept, or one that names no time at all."""


class Cron:
    """One expression in one zone. ``next_after`` and ``due`` are all a schedule needs."""

    def __init__(self, expression: str, tz: str = "UTC") -> None:
        """Raises :class:`CronError` for a bad expression, ZoneInfoNotFoundError (a
        KeyError) for an unknown zone."""
        fields = expression.split()
        if len(fields) not in (5, 6):
            raise CronError(f"{expression!r}: 5 fields, or 6 with seconds last (got {len(fields)})")
        if not croniter.is_valid(expression):
            raise CronError(f"{expression!r}: not a valid cron expression")
        self.expression = " ".join(fields)
        self.zone = ZoneInfo(tz)
        try:
            first = croniter(self.expression, datetime(2001, 1, 1)).get_next(datetime)
        except Exception as exc:  # croniter's own errors for expressions it accepted above
            raise CronError(f"{expression!r}: {exc}") from None
        if first.year > 2001 + _SEARCH_YEARS:
            raise CronError(f"{expression!r}: names no time within {_SEARCH_YEARS} years")

    def next_after(self, instant: datetime) -> datetime:
        """The first slot strictly after ``instant``."""
        return next(self._forward(instant))

    def due(self, since: datetime, until: datetime, limit: int) -> tuple[list[datetime], bool]:
        """The slots from ``since`` to ``until`` (both included), oldest first, at most the
        latest ``limit`` of them; and whether older ones were left out."""
        latest: list[datetime] = []
        for slot in self._backward(until):
            if slot < since:
                return latest[::-1], False
            if len(latest) == limit:
                return latest[::-1], True
            latest.append(slot)
        return latest[::-1], False

    # -- walking the wall clock ---------------------------------------------------------

    def _forward(self, instant: datetime) -> Iterator[datetime]:
        walk = croniter(self.expression, self._wall(instant))
        while True:
            slot = self._instant(walk.get_next(datetime))
            if slot > instant:  # skips the repeated hour's slots, and a gap's slots after its first
                yield slot
                instant = slot

    def _backward(self, instant: datetime) -> Iterator[datetime]:
        local = instant.astimezone(self.zone)
        wall = local.replace(tzinfo=None, microsecond=0) + _SECOND  # get_prev is exclusive
        if local.fold:  # in the repeated hour: the first occurrence of later wall times is past
            wall += local.replace(fold=0).utcoffset() - local.utcoffset()  # type: ignore[operator]
        walk = croniter(self.expression, wall)
        previous = None
        while True:
            slot = self._instant(walk.get_prev(datetime))
            if slot <= instant and slot != previous:  # one gap's slots are one instant
                yield slot
                previous = slot

    def _wall(self, instant: datetime) -> datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None)

    def _instant(self, wall: datetime) -> datetime:
        """The instant a wall-clock slot fires at: its first occurrence, or the end of
        the gap it falls in."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        at = first.astimezone(UTC)
        if at.astimezone(self.zone).replace(tzinfo=None) == wall:
            return at
        # In a gap: fold=0 reads it with the offset before the jump (an instant after
        # the gap), fold=1 with the offset after (an instant before it). The gap ends
        # at the first instant that has the later offset.
        later = wall.replace(tzinfo=self.zone, fold=1).utcoffset()
        lo, hi = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC), at
        while hi - lo > _SECOND:
            mid = lo + (hi - lo) / 2
            if mid.astimezone(self.zone).utcoffset() == later:
                hi = mid
            else:
                lo = mid
        return hi.replace(microsecond=0)


def describe(expression: str) -> str:
    """The expression in words (cron-descriptor's English, 24-hour times): ``"* * * * *
    */15"`` -> ``"Every 15 seconds"``; the expression itself if it cannot say."""
    fields = expression.split()
    if len(fields) == 6:  # croniter puts seconds last, cron-descriptor first
        fields = [fields[5], *fields[:5]]
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(" ".join(fields), options).get_description())
    except Exception:  # cron-descriptor's own errors: words are a courtesy, never a failure
        return expression
