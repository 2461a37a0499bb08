"""The limits an operator sets: on a queue (``set_queue_limits``) and on concurrency
keys (``set_limit``: rules on key patterns), each persisted and audited in the same
transaction, and listed with their use now.

A rule's pattern names one key (``"tenant:42"``) or, ending in ``*``, every key under a
prefix (``"tenant:*"``), each of which gets a limit of its own: a new tenant needs no
configuration. A key falls under the rule naming it exactly, else the longest prefix
pattern it matches; a key under no rule is unlimited. Workers see a change within a
second (:mod:`jobq.limits.gate`); a limit counts the jobs claimed under limits, so a
job that was already running when the first limit of its queue or key was set is not
counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobq.errors import InvalidArgument
from jobq.jobs import audit
from jobq.jobs.queues import check_name
from jobq.limits.rates import Rate, of_row, parse_rate
from jobq.spec import MAX_CONCURRENCY_KEY_LENGTH, check_text
from jobq.store.connections import Connection, connection
from jobq.store.sql.limits import LIMIT_DELETE, LIMIT_LIST, LIMIT_UPSERT, QUEUE_LIST_LIMITS, QUEUE_SET_LIMITS

MAX_CONCURRENCY = 100_000
UNCHANGED: Any = object()  # set_queue_limits: a limit not given keeps its value
DUE_CAP = 100_000  # queue_limits counts due jobs no further


@dataclass(frozen=True, slots=True)
class KeyRule:
    """A rule on keys and its use now: slots taken by the keys it governs, how many keys
    hold them, and due jobs held back because their key's slots are all taken."""

    pattern: str
    concurrency: int | None
    rate: Rate | None
    updated_at: datetime | None
    updated_by: str | None
    in_use: int = 0
    keys: int = 0
    held: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "concurrency": self.concurrency,
            "rate": str(self.rate) if self.rate else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "updated_by": self.updated_by,
            "in_use": self.in_use,
            "keys": self.keys,
            "held": self.held,
        }


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's limits and their use now: slots taken, and due jobs held back while
    they are all taken (counted up to DUE_CAP)."""

    queue: str
    concurrency: int | None
    rate: Rate | None
    fair: bool
    in_use: int = 0
    held: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "concurrency": self.concurrency,
            "rate": str(self.rate) if self.rate else None,
            "fair": self.fair,
            "in_use": self.in_use,
            "held": self.held,
        }


def check_concurrency(value: Any, field: str = "concurrency") -> int | None:
    """``value`` if it is None or an int from 1 to MAX_CONCURRENCY; InvalidArgument naming ``field``."""
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidArgument(field, f"must be an integer from 1 to {MAX_CONCURRENCY:,}, or null for no limit")
    return value


def check_pattern(pattern: Any, field: str = "pattern") -> str:
    """A key pattern: 1-255 storable characters, ``*`` only at the end."""
    if not isinstance(pattern, str) or not 1 <= len(pattern) <= MAX_CONCURRENCY_KEY_LENGTH:
        raise InvalidArgument(field, f"must be a string of 1 to {MAX_CONCURRENCY_KEY_LENGTH} characters")
    if "*" in pattern[:-1]:
        raise InvalidArgument(field, "may hold '*' only as its last character (a prefix: 'tenant:*')")
    try:
        return check_text(pattern)
    except ValueError as exc:
        raise InvalidArgument(field, str(exc)) from None


def set_limit(
    pattern: str,
    *,
    concurrency: int | None = None,
    rate: str | Rate | None = None,
    actor: str | None = None,
    conn: Connection | None = None,
) -> KeyRule:
    """Create or replace the rule on ``pattern``: at most ``concurrency`` jobs of each key
    it governs claimed or running at once, at most ``rate`` (``"100/m"``) starts of each
    key in any window of one period, across every host. A rule with neither is refused
    (``clear_limit`` removes one). Raises :class:`InvalidArgument` naming the field."""
    pattern = check_pattern(pattern)
    concurrency = check_concurrency(concurrency)
    parsed = parse_rate(rate)
    if concurrency is None and parsed is None:
        raise InvalidArgument("concurrency", "a rule needs a concurrency or a rate (clear_limit removes a rule)")
    actor = actor or audit.library_actor()
    params = {
        "pattern": pattern,
        "concurrency": concurrency,
        "rate_count": parsed.count if parsed else None,
        "rate_seconds": parsed.seconds if parsed else None,
        "actor": actor,
    }
    with connection(conn) as c, c.transaction():
        row = c.execute(LIMIT_UPSERT, params).fetchone()
        audit.record(c, actor, "set_limit", {"pattern": pattern}, {"concurrency": concurrency, "rate": str(parsed) if parsed else None})
    assert row is not None
    return KeyRule(pattern, concurrency, parsed, row[0], actor)


def clear_limit(pattern: str, *, actor: str | None = None, conn: Connection | None = None) -> bool:
    """Remove the rule on ``pattern``; whether there was one. Jobs running under it keep
    their slots until their outcome."""
    pattern = check_pattern(pattern)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        found = c.execute(LIMIT_DELETE, {"pattern": pattern}).fetchone() is not None
        audit.record(c, actor, "clear_limit", {"pattern": pattern}, {"changed": int(found)})
    return found


def list_limits(*, conn: Connection | None = None) -> list[KeyRule]:
    """Every rule on keys, by pattern, with its use now."""
    with connection(conn) as c:
        rows = c.execute(LIMIT_LIST).fetchall()
    return [
        KeyRule(pattern, concurrency, of_row(count, seconds), at, by, int(in_use), int(keys), int(held))
        for pattern, concurrency, count, seconds, at, by, in_use, keys, held in rows
    ]


def set_queue_limits(
    queue: str,
    *,
    concurrency: int | None = UNCHANGED,
    rate: str | Rate | None = UNCHANGED,
    fair: bool | None = UNCHANGED,
    actor: str | None = None,
    conn: Connection | None = None,
) -> QueueLimits:
    """Change a queue's limits: ``concurrency`` (at most that many of its jobs claimed or
    running at once, across every host), ``rate`` (``"50/s"``: at most that many starts
    in any window of one period), ``fair`` (claims take turns between the queue's
    concurrency keys, jobs without a key counting as one, at most ten jobs a claim,
    instead of strict priority-then-age across all of them). An argument not given
    keeps its value; ``None`` removes that limit. Returns the queue's limits after the
    change. Raises :class:`InvalidArgument` naming the field."""
    name = check_name(queue, "queue")
    set_concurrency, set_rate, set_fair = concurrency is not UNCHANGED, rate is not UNCHANGED, fair is not UNCHANGED
    concurrency = check_concurrency(concurrency) if set_concurrency else None
    parsed = parse_rate(rate) if set_rate else None
    if set_fair and fair is not None and type(fair) is not bool:
        raise InvalidArgument("fair", "must be true or false")
    actor = actor or audit.library_actor()
    params = {
        "name": name,
        "concurrency": concurrency,
        "rate_count": parsed.count if parsed else None,
        "rate_seconds": parsed.seconds if parsed else None,
        "fair": bool(fair) if set_fair else None,
        "set_concurrency": set_concurrency,
        "set_rate": set_rate,
        "set_fair": set_fair,
        "actor": actor,
    }
    changes = {
        key: value
        for key, value, given in (
            ("concurrency", concurrency, set_concurrency),
            ("rate", str(parsed) if parsed else None, set_rate),
            ("fair", bool(fair), set_fair),
        )
        if given
    }
    with connection(conn) as c, c.transaction():
        row = c.execute(QUEUE_SET_LIMITS, params).fetchone()
        audit.record(c, actor, "set_queue_limits", {"queue": name}, changes)
    assert row is not None
    _, concurrency_now, count, seconds, fair_now = row
    return QueueLimits(name, concurrency_now, of_row(count, seconds), fair_now)


def queue_limits(*, conn: Connection | None = None) -> list[QueueLimits]:
    """Every queue with a limit, by name, with its slots in use and its held jobs."""
    with connection(conn) as c:
        rows = c.execute(QUEUE_LIST_LIMITS, {"cap": DUE_CAP}).fetchall()
    listed = []
    for name, concurrency, count, seconds, fair, in_use, due in rows:
        full = concurrency is not None and in_use >= concurrency
        listed.append(QueueLimits(name, concurrency, of_row(count, seconds), fair, int(in_use), int(due) if full else 0))
    return listed
