"""The dead-letter table: jobs that ran out of retries, kept until replayed or discarded;
and its letters grouped by cause (:func:`groups`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import class_row

from jobq.store.sql.dead_letters import (
    DEAD_LETTER_GET_GROUP_OF_JOB,
    DEAD_LETTER_DELETE,
    DEAD_LETTER_DISCARD_IF_WAITING,
    DEAD_LETTER_GET,
    DEAD_LETTER_GET_REPLAYED_AS,
    DEAD_LETTER_GROUP_GET,
    DEAD_LETTER_GROUP_LIST_WAITING,
    DEAD_LETTER_LIST_COUNT,
    DEAD_LETTER_LIST_FILTER_TYPE,
    DEAD_LETTER_LIST_OF_GROUP,
    DEAD_LETTER_LIST_ORDER,
    DEAD_LETTER_LIST_SELECT,
    DEAD_LETTER_REPLAY_IF_NOT_REPLAYED,
    DEAD_LETTER_REPLAY_IF_WAITING,
    DEAD_LETTER_SIGNATURE_OF,
)
from jobq.jobs import audit
from jobq.store.connections import Connection, again_if_moved, connection
from jobq.errors import AlreadyReplayed, DeadLetterGroupNotFound, DeadLetterNotFound, InvalidArgument
from jobq.job import DeadLetter, Job
from jobq.jobs.ledger import DEFAULT_LIMIT, Page, check_id, check_page, fetch_by_id

MAX_GROUPS = 1000


@dataclass(frozen=True, slots=True)
class Group:
    """Dead letters of one type and one error signature (the exception's line, with
    numbers, ids and hex normalised): ``count`` of them waiting (not replayed), the
    first and last time one died, and the newest one (``example_id``). ``id`` is
    opaque (a hash of type and signature), stored on each letter as ``group_id``."""

    id: str
    type: str
    signature: str
    count: int
    first_seen: datetime
    last_seen: datetime
    example_id: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "signature": self.signature,
            "count": self.count,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "example_id": self.example_id,
        }


def get(dead_letter_id: int, *, conn: Connection | None = None) -> DeadLetter:
    """One dead-letter row. Raises :class:`DeadLetterNotFound`."""
    return fetch_by_id(DeadLetter, DEAD_LETTER_GET, dead_letter_id, DeadLetterNotFound, conn)


def list_dead(
    *, type: str | None = None, limit: int = DEFAULT_LIMIT, offset: int = 0, conn: Connection | None = None
) -> Page[DeadLetter]:
    """Dead-letter rows, newest first, optionally of one type."""
    check_page(limit, offset)
    where: sql.Composable = sql.SQL("")
    if type is not None:
        where = sql.SQL(" WHERE ") + sql.SQL(DEAD_LETTER_LIST_FILTER_TYPE)
    params = {"type": type, "limit": limit, "offset": offset}
    with connection(conn) as c:
        with c.cursor(row_factory=class_row(DeadLetter)) as cur:
            query = sql.SQL(DEAD_LETTER_LIST_SELECT) + where + sql.SQL(DEAD_LETTER_LIST_ORDER)
            items = cur.execute(query, params).fetchall()
        total = c.execute(sql.SQL(DEAD_LETTER_LIST_COUNT) + where, params).fetchone()[0]  # type: ignore[index]
    return Page(items, int(total), limit, offset)


def group_of_job(job_id: int, *, conn: Connection | None = None) -> tuple[int, str | None] | None:
    """The dead letter job ``job_id`` left (its id) and the group it is in, or None."""
    with connection(conn) as c:
        found = c.execute(DEAD_LETTER_GET_GROUP_OF_JOB, {"job_id": job_id}).fetchone()
    return (int(found[0]), found[1]) if found else None


def replay(dead_letter_id: int, *, conn: Connection | None = None) -> Job:
    """Enqueue a new pending job from a dead one (same type, queue, payload, priority
    and retries) and record it on the dead-letter row.

    Raises :class:`DeadLetterNotFound`, or :class:`AlreadyReplayed` the second time.
    """
    check_id(dead_letter_id)
    with connection(conn) as c:
        with c.cursor(row_factory=class_row(Job)) as cur:
            params = {"id": dead_letter_id}
            job = again_if_moved(c, DEAD_LETTER_REPLAY_IF_NOT_REPLAYED, params, cursor=cur).fetchone()
        if job is not None:
            return job
        row = c.execute(DEAD_LETTER_GET_REPLAYED_AS, {"id": dead_letter_id}).fetchone()
    if row is None:
        raise DeadLetterNotFound(dead_letter_id)
    raise AlreadyReplayed(dead_letter_id, row[1])


def discard(dead_letter_id: int, *, conn: Connection | None = None) -> None:
    """Delete a dead-letter row for good. Raises :class:`DeadLetterNotFound`."""
    check_id(dead_letter_id)
    with connection(conn) as c:
        deleted = c.execute(DEAD_LETTER_DELETE, {"id": dead_letter_id}).fetchone()
    if deleted is None:
        raise DeadLetterNotFound(dead_letter_id)


def groups(*, limit: int = 100, conn: Connection | None = None) -> list[Group]:
    """The groups that have dead letters waiting, the most recently seen first; read from
    the groups table (kept exact by triggers in the transaction that writes a letter),
    never from the letters. Raises :class:`InvalidArgument` unless 1 <= limit <= 1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_GROUPS:
        raise InvalidArgument("limit", f"must be an integer from 1 to {MAX_GROUPS}")
    with connection(conn) as c, c.cursor(row_factory=class_row(Group)) as cur:
        return cur.execute(DEAD_LETTER_GROUP_LIST_WAITING, {"limit": limit}).fetchall()


def group(group_id: str, *, conn: Connection | None = None) -> Group:
    """One group, waiting letters or not. Raises :class:`DeadLetterGroupNotFound`."""
    with connection(conn) as c, c.cursor(row_factory=class_row(Group)) as cur:
        found = cur.execute(DEAD_LETTER_GROUP_GET, {"id": group_id}).fetchone()
    if found is None:
        raise DeadLetterGroupNotFound(group_id)
    return found


def signature_of(job_type: str, error: str, *, conn: Connection | None = None) -> tuple[str, str]:
    """The cause signature and the group id that a dead letter of ``job_type`` failing
    with ``error`` (the text a failed run records) has, computed by the database's own
    function (one round trip), so that an error tracker groups as the dead-letter groups do."""
    with connection(conn) as c:
        row = c.execute(DEAD_LETTER_SIGNATURE_OF, {"type": job_type, "error": error}).fetchone()
    assert row is not None
    return row[0], row[1]


def letters_of_group(group_id: str, *, limit: int = 100, conn: Connection | None = None) -> list[DeadLetter]:
    """The waiting (not replayed) letters of a group, newest first, at most ``limit``
    (1-1000)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_GROUPS:
        raise InvalidArgument("limit", f"must be an integer from 1 to {MAX_GROUPS}")
    with connection(conn) as c, c.cursor(row_factory=class_row(DeadLetter)) as cur:
        return cur.execute(DEAD_LETTER_LIST_OF_GROUP, {"group_id": group_id, "limit": limit}).fetchall()


def replay_many(ids: list[int], *, actor: str | None = None, conn: Connection | None = None) -> dict[int, int]:
    """Replay those of ``ids`` (at most 1000 letters) still waiting, skipping letters
    another session holds, with one audit row (``dead_letter.replay``); returns each
    replayed letter's id with its new job's id."""
    _check_ids(ids)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        replayed = dict(c.execute(DEAD_LETTER_REPLAY_IF_WAITING, {"ids": ids}).fetchall())
        audit.record(c, actor, "dead_letter.replay", {"ids": ids}, {"changed": len(replayed)})
    return replayed


def discard_many(ids: list[int], *, actor: str | None = None, conn: Connection | None = None) -> list[int]:
    """Delete for good those of ``ids`` (at most 1000 letters) still waiting, with one
    audit row (``dead_letter.discard``); returns the ids deleted."""
    _check_ids(ids)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        deleted = [row[0] for row in c.execute(DEAD_LETTER_DISCARD_IF_WAITING, {"ids": ids})]
        audit.record(c, actor, "dead_letter.discard", {"ids": ids}, {"changed": len(deleted)})
    return deleted


def _check_ids(ids: list[int]) -> None:
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_GROUPS:
        raise InvalidArgument("ids", f"name 1 to {MAX_GROUPS} dead letters")
    for i, value in enumerate(ids):
        check_id(value, f"ids[{i}]")
