"""The partitions of finished jobs: made ahead of time, dropped whole by retention.

Schema 13 keeps finished jobs in ``jobs_finished``, partitioned by range of
``completed_at``, one partition per JOBQ_PARTITION_INTERVAL, aligned on whole
multiples of it since the epoch (a day's partition runs midnight to midnight UTC).
The maintenance leader keeps the current partition and the next ones in place
(:func:`make_ahead`); a job finishing while none covers the hour (a leader gone for
longer than that) lands in ``jobs_finished_default`` and is pruned by ``DELETE``
(:mod:`jobq.store.retention`), never refused.

:func:`drop_before` retires the partitions whose whole range is older than the
retention: so a finished job is kept for JOBQ_RETENTION at least and one interval
more at most. Dropping fires no trigger, so the same transaction takes the
partition's rows off the depth counters and lets go of their 'always' keys.

Each change runs in its own short transaction under a lock timeout: DDL on
``jobs_finished`` waits for the completions that hold it and they wait behind it, so
a wait is cut short and the change is tried again next pass. A drop's wait for
``jobs_finished`` itself is the one completions queue behind (a reader of the whole
table holds it: a listing, a report): it is taken last, 50 ms at a time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg import sql

from jobq.store.sql.database import DATABASE_NOW
from jobq.store.sql.partitions import (
    FINISHED_DEFAULT_LAST_IN_RANGE,
    FINISHED_DEFAULT_LOCK,
    FINISHED_PARENT_LOCK,
    FINISHED_PARTITION_ATTACH,
    FINISHED_PARTITION_CREATE,
    FINISHED_PARTITION_DETACH,
    FINISHED_PARTITION_DROP,
    FINISHED_PARTITION_FORGET_KEYS,
    FINISHED_PARTITION_ID_KEY,
    FINISHED_PARTITION_LIST,
    FINISHED_PARTITION_LOCK,
    FINISHED_PARTITION_UNCOUNT,
    LOCK_TIMEOUT_SET,
)
from jobq.store.sql.statistics import JOB_ANALYSIS_DUE, JOB_ANALYZE
from jobq.store.connections import Connection
from jobq.store.give_way import giving_way

log = logging.getLogger(__name__)

AHEAD = 2  # partitions made beyond the current one
LOCK_TIMEOUT_MS = 500
# A drop's wait for jobs_finished itself, which every completion writes through: the
# completions queue behind that wait, so it is short, and tried a few times.
PARENT_LOCK_TIMEOUT_MS = 50
PARENT_LOCK_PAUSE = 0.05  # seconds between two tries: the completions that queued go through
PARENT_LOCK_WITHIN = 0.25  # seconds of tries: three of 50 ms with their pauses, fewer if the server is slow
PREFIX = "jobs_finished_"
# The partitioned table is analysed after partitions were made or dropped only if its
# last analysis is this old (seconds). The analysis samples every partition, the
# parent's own sample in one transaction: 1.0 to 2.9 s of a core each time in the soak
# of 4 December, 13:00 UTC, where partitions of a minute had it run every minute and
# stall the claims on a 2-core machine. With partitions of a day it runs once a day, as
# before; the parent's statistics change slowly (each partition is planned from its own,
# which autovacuum keeps).
ANALYSE_EVERY = 3600.0
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Partition:
    name: str
    lo: datetime
    hi: datetime


def listed(conn: Connection) -> list[Partition]:
    """The range partitions of jobs_finished, oldest first."""
    return [Partition(*row) for row in conn.execute(FINISHED_PARTITION_LIST)]


def slot_start(at: datetime, interval: float) -> datetime:
    """The start of the interval-long slot (counted from the epoch) that holds ``at``."""
    seconds = (at - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=math.floor(seconds / interval) * interval)


def name_of(lo: datetime) -> str:
    """A partition's name, from the start of its range in UTC."""
    utc = lo.astimezone(timezone.utc)
    return PREFIX + utc.strftime("%Y%m%d_%H%M%S") + (f"_{utc.microsecond:06d}" if utc.microsecond else "")


def make_ahead(conn: Connection, interval: float, now: datetime) -> list[Partition]:
    """Make the partitions that cover ``now`` and AHEAD intervals after it, each
    starting where the latest one ends (or at its slot's start). ``conn`` must be in
    autocommit mode. Returns those made; raises ``LockNotAvailable`` when a lock was not
    had in time (the rest waits for the next pass)."""
    made: list[Partition] = []
    existing = listed(conn)
    until = slot_start(now, interval) + timedelta(seconds=interval * (AHEAD + 1))
    lo = existing[-1].hi if existing else slot_start(now, interval)
    while lo < until:
        hi = slot_start(lo, interval) + timedelta(seconds=interval)
        partition = _attach(conn, lo, hi)
        if partition is not None:
            made.append(partition)
        lo = hi
    return made


def _attach(conn: Connection, lo: datetime, hi: datetime) -> Partition | None:
    with conn.transaction():
        conn.execute(LOCK_TIMEOUT_SET, {"ms": str(LOCK_TIMEOUT_MS)})
        conn.execute(FINISHED_DEFAULT_LOCK)
        (latest,) = conn.execute(FINISHED_DEFAULT_LAST_IN_RANGE, {"lo": lo, "hi": hi}).fetchone()  # type: ignore[misc]
        if latest is not None:  # jobs that finished while no partition covered [lo, latest]
            lo = latest + timedelta(microseconds=1)
            if lo >= hi:
                return None
        name = name_of(lo)
        leaf = sql.Identifier(name)
        conn.execute(sql.SQL(FINISHED_PARTITION_CREATE).format(leaf=leaf))
        key = sql.Identifier(name + "_id_key")
        conn.execute(sql.SQL(FINISHED_PARTITION_ID_KEY).format(key=key, leaf=leaf))
        conn.execute(
            sql.SQL(FINISHED_PARTITION_ATTACH).format(leaf=leaf, lo=sql.Literal(lo), hi=sql.Literal(hi))
        )
    log.info("partitions.made partition=%s from=%s to=%s", name, lo.isoformat(), hi.isoformat())
    return Partition(name, lo, hi)


def drop_before(conn: Connection, cutoff: datetime) -> int:
    """Drop the partitions whose whole range ends at or before ``cutoff``, oldest
    first, each in a transaction of its own that takes its rows off the depth counters
    and lets go of their 'always' keys. ``conn`` must be in autocommit mode. Returns how
    many jobs went. A lock not had in time leaves the rest to the next call."""
    dropped = 0
    for partition in listed(conn):
        if partition.hi > cutoff:
            break
        leaf = sql.Identifier(partition.name)
        try:
            with conn.transaction():
                conn.execute(LOCK_TIMEOUT_SET, {"ms": str(LOCK_TIMEOUT_MS)})
                conn.execute(sql.SQL(FINISHED_PARTITION_LOCK).format(leaf=leaf))
                (rows,) = conn.execute(sql.SQL(FINISHED_PARTITION_UNCOUNT).format(leaf=leaf)).fetchone()  # type: ignore[misc]
                conn.execute(sql.SQL(FINISHED_PARTITION_FORGET_KEYS).format(leaf=leaf))
                _lock_parent(conn)
                conn.execute(sql.SQL(FINISHED_PARTITION_DETACH).format(leaf=leaf))
                conn.execute(sql.SQL(FINISHED_PARTITION_DROP).format(leaf=leaf))
        except psycopg.errors.LockNotAvailable:
            log.info("partitions.busy partition=%s: a lock was not had in time, tried again next pass", partition.name)
            break
        log.info("partitions.dropped partition=%s jobs=%s before=%s", partition.name, rows, partition.hi.isoformat())
        dropped += rows
    return dropped


def _lock_parent(conn: Connection) -> None:
    """Take jobs_finished for the DETACH that follows (ACCESS EXCLUSIVE), waiting at most
    PARENT_LOCK_TIMEOUT_MS at a time for its readers, giving way PARENT_LOCK_PAUSE between
    tries for PARENT_LOCK_WITHIN seconds, each try in a savepoint: the completions that
    queue behind a wait go through in the pause. The DETACH then waits for the partition
    and the default partition under the same short timeout (their only other users are
    autovacuum and direct readers; a reader of jobs holds jobs_finished first, so it is
    gone). Raises LockNotAvailable."""
    giving_way(conn, lambda: conn.execute(FINISHED_PARENT_LOCK), wait_ms=PARENT_LOCK_TIMEOUT_MS,
               pause=PARENT_LOCK_PAUSE, within=PARENT_LOCK_WITHIN, gave_way=(psycopg.errors.LockNotAvailable,))


def oldest_start(conn: Connection) -> datetime | None:
    """Where the oldest range partition starts (None: there is none): finished jobs
    before it are in the default partition."""
    partitions = listed(conn)
    return partitions[0].lo if partitions else None


def analyse_if_due(conn: Connection) -> bool:
    """ANALYZE the partitioned table (autovacuum analyses each partition, never it),
    unless its last analysis is younger than ANALYSE_EVERY; whether it did."""
    if not conn.execute(JOB_ANALYSIS_DUE, {"every": ANALYSE_EVERY}).fetchone()[0]:  # type: ignore[index]
        return False
    conn.execute(JOB_ANALYZE)
    return True


def maintain(conn: Connection, interval: float) -> int:
    """The leader's pass: make what is missing ahead of now, and analyse the table after
    a change of its partitions (:func:`analyse_if_due`). Returns how many partitions
    were made."""
    (now,) = conn.execute(DATABASE_NOW).fetchone()  # type: ignore[misc]
    try:
        made = make_ahead(conn, interval, now)
    except psycopg.errors.LockNotAvailable:
        log.info("partitions.busy: a lock was not had in time, tried again next pass")
        made = []
    if made:
        analyse_if_due(conn)
    return len(made)
