"""Putting jobs in the queue: ``enqueue`` and ``enqueue_many``.

Both work inside the caller's transaction when given a connection: the jobs exist,
and wake a worker, only when the caller commits. Without one they use the default
pool for ``DATABASE_URL`` and commit before returning.

``submit_reserved`` is what the API's grouped ``POST /jobs`` use (:mod:`jobq.jobs.group_commit`):
jobs go in under ids reserved before the insert is sent, so that a caller whose
connection is lost while the insert is in flight can learn what was stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


import psycopg
from psycopg.rows import class_row

from jobq.store.sql.counters import COUNTER_GET_PENDING
from jobq.store.sql.enqueue import (
    JOB_COPY,
    JOB_COPY_WITH_KEYS,
    JOB_COPY_WITH_TAGS,
    JOB_GET_BY_IDS,
    JOB_GET_KEY_HOLDERS,
    JOB_INSERT,
    JOB_INSERT_MANY,
    JOB_INSERT_RESERVED,
    JOB_INSERT_RESERVED_IF_ABSENT,
    JOB_INSERT_HANDED,
    JOB_INSERT_UNKEYED,
    JOB_RESERVE_IDS,
)
from jobq.jobs.copy_rows import job_rows
from jobq.jobs.params import array_params, row_params
from jobq.jobs.debounce import insert_debounced
from jobq.store.connections import Connection, connection, first_line, own_transaction
from jobq.observe import tracing
from jobq.errors import DatabaseUnavailable, InvalidArgument, JobNotFound, OutcomeUnknown, Overloaded
from jobq.job import Job
from jobq.spec import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    DEFAULT_UNIQUE_WHILE,
    JobSpec,
    Row,
    key_scope,
    parse_rows,
    parse_spec,
    parse_specs,
)

COPY_THRESHOLD = 100  # jobs without idempotency keys from which a batch goes in by COPY
# Positions in a spec Row that are read by name here.
QUEUE, RUN_AT, KEY, TAGS, SCOPE, CONCURRENCY_KEY = 1, 5, 6, 7, 8, 9
RESERVE_ATTEMPTS = 3  # submit_reserved reserves anew if the id sequence was restarted meanwhile
# A key's holder can leave its scope (be claimed, finish) between the insert that met it
# and the read of it: the insert is tried again, this many times at most.
KEY_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A job and whether this call created it (False: another job held its idempotency key)."""

    job: Job
    created: bool


def enqueue(
    type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    priority: int = DEFAULT_PRIORITY,
    max_retries: int = DEFAULT_MAX_RETRIES,
    run_at: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
    idempotency_key: str | None = None,
    tags: Iterable[str] | None = None,
    unique_while: str | None = None,
    concurrency_key: str | None = None,
    debounce: float | None = None,
    debounce_max_wait: float | None = None,
    conn: Connection | None = None,
) -> Job:
    """Add one job and return it.

    ``tags``: up to 20 distinct labels of 1-100 characters (``list_jobs(tag=...)``
    finds the job by any of them). With an ``idempotency_key`` held by another job,
    returns that job and adds nothing. A key is held, by the job that has it, for as
    long as ``unique_while`` says: ``"always"`` (the default: while that job's row
    exists), ``"active"`` (while it is pending, claimed or running) or ``"pending"``
    (while it waits to run). ``concurrency_key`` (``"tenant:42"``): the key rules on keys
    (:func:`jobq.set_limit`) count it under; ``debounce``: see :mod:`jobq.jobs.debounce`.
    Raises :class:`InvalidArgument` naming a bad argument, :class:`DatabaseUnavailable` if the database cannot be reached. With ``conn``, the
    caller commits; without, the job is committed before this returns.
    """
    spec = parse_spec(
        {
            "type": type,
            "payload": payload,
            "priority": priority,
            "max_retries": max_retries,
            "run_at": run_at,
            "queue": queue,
            "idempotency_key": idempotency_key,
            "tags": tags if tags is None or isinstance(tags, (str, list)) else list(tags),
            "unique_while": unique_while,
            "concurrency_key": concurrency_key,
            "debounce": debounce,
            "debounce_max_wait": debounce_max_wait,
        }
    )
    return submit(spec, conn=conn).job


def submit(spec: JobSpec, *, conn: Connection | None = None, max_pending: int | None = None) -> Enqueued:
    """Add one validated job; see :func:`enqueue`. ``max_pending`` turns on admission
    control: :class:`Overloaded` is raised, and nothing added, above that many pending jobs."""
    row = spec.row()
    params = row_params(row)
    with connection(conn) as c, tracing.recorded_on(c, spec.queue, 1):
        if max_pending is not None:
            check_admission(c, max_pending)
        if spec.debounce is None:
            # A hand-off locks the waiting worker's row until the commit: never in a caller's transaction.
            return _insert_one(c, row, params, handed=conn is None or own_transaction(c))
        found = insert_debounced(c, params, spec.debounce, spec.debounce_max_wait, spec.key_scope())
        if found is None:
            raise _key_unsettled([spec.idempotency_key])
        return Enqueued(*found)


def _insert_one(conn: Connection, row: Row, params: dict[str, Any], *, handed: bool = False) -> Enqueued:
    """One row (JOB_INSERT_HANDED, or JOB_INSERT_UNKEYED if not ``handed``, without a
    key; else JOB_INSERT), or the job holding its key."""
    if row[KEY] is None:
        inserted = conn.execute(JOB_INSERT_HANDED if handed else JOB_INSERT_UNKEYED, params).fetchone()
        assert inserted is not None
        return Enqueued(_new_job(row, *inserted), True)
    with conn.cursor(row_factory=class_row(Job)) as cur:
        for _ in range(KEY_ATTEMPTS):
            cur.execute(JOB_INSERT, params)
            job = cur.fetchone()
            if job is not None:
                return Enqueued(job, True)
            cur.execute(JOB_GET_KEY_HOLDERS, {"keys": [params["idempotency_key"]]})
            holder = cur.fetchone()
            if holder is not None:
                return Enqueued(holder, False)
    raise _key_unsettled([params["idempotency_key"]])


def enqueue_many(jobs: Iterable[Mapping[str, Any]], *, conn: Connection | None = None) -> list[Job]:
    """Add many jobs in one round trip and return them in the order given.

    Each mapping takes the keyword arguments of :func:`enqueue` (``type`` required).
    All or nothing: one bad mapping raises :class:`InvalidArgument` naming its index and
    field, and nothing is added. One wake-up per queue, however many jobs.
    """
    items = list(jobs)
    if any(isinstance(item, Mapping) and item.get("debounce") is not None for item in items):
        return [entry.job for entry in submit_many(parse_specs(items), conn=conn)]
    return _store(parse_rows(items), conn, None)[0]


def submit_many(
    specs: list[JobSpec], *, conn: Connection | None = None, max_pending: int | None = None
) -> list[Enqueued]:
    """Add many validated jobs (see :func:`enqueue_many`, :func:`submit`); with a debounced one, one by one."""
    if any(spec.debounce is not None for spec in specs):
        with connection(conn) as c, c.transaction():
            return [submit(spec, conn=c, max_pending=max_pending if i == 0 else None) for i, spec in enumerate(specs)]
    jobs, held = _store([spec.row() for spec in specs], conn, max_pending)
    return [Enqueued(job, index not in held) for index, job in enumerate(jobs)]


def _store(rows: list[Row], conn: Connection | None, max_pending: int | None) -> tuple[list[Job], set[int]]:
    """Insert ``rows``; return their jobs in order, and the indexes of those that are
    another job holding the row's idempotency key (nothing inserted for them).

    Batches of COPY_THRESHOLD jobs or more without idempotency keys go in by binary
    COPY, under ids reserved first (two statements, the least work per row for the
    client and the server); smaller ones, and any with keys, by one array INSERT.
    """
    if not rows:
        return [], set()
    keys = [row[KEY] for row in rows if row[KEY] is not None]
    if len(set(keys)) != len(keys):
        raise InvalidArgument("idempotency_key", "appears more than once in one batch")
    for index, row in enumerate(rows):
        if row[SCOPE] is not None:
            try:
                key_scope(row[SCOPE], row[KEY])
            except InvalidArgument as exc:
                raise InvalidArgument(f"jobs[{index}].{exc.field}", exc.message) from None
    with connection(conn) as c, tracing.recorded_on(c, rows[0][QUEUE], len(rows)):
        if max_pending is not None:
            check_admission(c, max_pending)
        if len(rows) == 1:  # the single-row INSERT: cheaper to send than one-element arrays
            entry = _insert_one(c, rows[0], row_params(rows[0]))
            return [entry.job], set() if entry.created else {0}
        if keys or len(rows) < COPY_THRESHOLD:
            return _insert(c, rows, keys)
        return _copy(c, rows), set()


def submit_reserved(
    specs: list[JobSpec],
    ids: list[int] | None = None,
    *,
    conn: Connection | None = None,
    max_pending: int | None = None,
    traceparents: list[str | None] | None = None,
) -> list[Job]:
    """Add jobs without idempotency keys in one statement, under ids reserved for them
    before it is sent, and return them in order: so that if the connection is lost while
    the insert is in flight, the caller can learn what became of them.

    ``ids`` None: they are reserved first (one more round trip; :func:`reserve_ids`), and
    again if the sequence was restarted before the insert went in (it would hand them out
    a second time).
    Given (one per spec, in order: those of an :class:`OutcomeUnknown`), the call settles
    that earlier attempt: a job already stored under its id is returned as it now is and
    not inserted again (if the earlier insert is still in flight, this one waits for
    it), the others are inserted; so each job is stored once. ``max_pending`` as for
    :func:`submit` (checked first: a refused call stored nothing).

    Raises OutcomeUnknown (with the ids) when the connection fails once the insert may
    have been sent; DatabaseUnavailable when nothing can have been stored by this call;
    JobNotFound for a job an earlier attempt stored and someone deleted since. With
    ``conn``, the caller commits; on an autocommit connection (the web pool's) the
    statement commits itself, so what this call returns is stored.

    ``traceparents``: each job's (its caller's OpenTelemetry producer span, made by the
    caller; :mod:`jobq.jobs.group_commit` groups several callers); None: this call's own
    producer span (:mod:`jobq.observe.tracing`) is every job's.
    """
    if not specs:
        return []
    if any(spec.idempotency_key is not None for spec in specs):
        raise InvalidArgument("idempotency_key", "jobs inserted under reserved ids take no idempotency key")
    for spec in specs:
        spec.key_scope()  # InvalidArgument for a scope without a key
    rows = [spec.row() for spec in specs]
    own_span = tracing.producing(rows[0][QUEUE], len(rows)) if traceparents is None else contextlib.nullcontext()
    with connection(conn) as c, own_span as traceparent:
        traceparents = traceparents or [traceparent] * len(rows)
        if max_pending is not None:
            check_admission(c, max_pending)
        again = ids is not None
        for _ in range(RESERVE_ATTEMPTS):
            if not again:
                ids = reserve_ids(len(rows), conn=c)
            assert ids is not None
            try:
                jobs = _insert_reserved(c, rows, ids, traceparents, again=again)
            except psycopg.errors.QueryCanceled:
                raise  # cancelled: rolled back (the statement timeout stops before the commit)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                raise OutcomeUnknown(ids, first_line(exc)) from exc
            if jobs is not None:
                return jobs
        raise DatabaseUnavailable("database unavailable: the jobs' id sequence was restarted during every attempt")


def reserve_ids(n: int, *, conn: Connection | None = None) -> list[int]:
    """``n`` new ids from the jobs' identity sequence, never handed out again, for
    :func:`submit_reserved`. Raises DatabaseUnavailable."""
    with connection(conn) as c:
        row = c.execute(JOB_RESERVE_IDS, {"n": n}).fetchone()
    assert row is not None
    return list(row[1])


def _insert_reserved(
    conn: Connection, rows: list[Row], ids: list[int], traceparents: list[str | None], *, again: bool
) -> list[Job] | None:
    """The jobs inserted (or, ``again``, found) under ``ids``; None if a first attempt
    inserted nothing because the sequence was restarted since ``ids`` were reserved."""
    params = {"ids": ids, "last_id": max(ids), "traceparents": traceparents, **array_params(rows)}
    # (id, run_at, created_at) of the rows inserted now; again, an id already stored returns nothing
    statement = JOB_INSERT_RESERVED_IF_ABSENT if again else JOB_INSERT_RESERVED
    inserted = {row[0]: row for row in conn.execute(statement, params)}
    if not again and not inserted:
        return None
    earlier: dict[int, Job] = {}
    if len(inserted) < len(ids):
        with conn.cursor(row_factory=class_row(Job)) as cur:
            cur.execute(JOB_GET_BY_IDS, {"ids": [job_id for job_id in ids if job_id not in inserted]})
            earlier = {job.id: job for job in cur.fetchall()}
    jobs = []
    for row, job_id in zip(rows, ids, strict=True):
        if job_id in inserted:
            jobs.append(_new_job(row, *inserted[job_id]))
        elif job_id in earlier:
            jobs.append(earlier[job_id])
        else:
            raise JobNotFound(job_id)
    return jobs


def _copy(conn: Connection, rows: list[Row]) -> list[Job]:
    """Binary COPY of rows without idempotency keys, under ids reserved first, with the
    reservation's timestamp as created_at (and run_at for those due now): what the column
    defaults would give in one transaction, and the same in autocommit."""
    now, ids = conn.execute(JOB_RESERVE_IDS, {"n": len(rows)}).fetchone()  # type: ignore[misc]
    # The tags column only when some job has tags, the keys' only when some has a
    # concurrency key (with tags): fewer fields per row otherwise.
    keyed = any(row[CONCURRENCY_KEY] is not None for row in rows)
    tagged = keyed or any(row[TAGS] for row in rows)
    statement = JOB_COPY_WITH_KEYS if keyed else JOB_COPY_WITH_TAGS if tagged else JOB_COPY
    with conn.cursor().copy(statement) as copy:
        for data in job_rows(rows, ids, now, tags=tagged, keys=keyed, encoding=conn.info.encoding):
            copy.write(data)  # the server takes in these rows while the next are made...
        # ...and the last ones while the jobs are built
        return [_new_job(row, job_id, row[RUN_AT] or now, now) for job_id, row in zip(ids, rows)]


def _insert(conn: Connection, rows: list[Row], keys: list[str]) -> tuple[list[Job], set[int]]:
    """One array INSERT; then, for the keys another job held, those holders. A key whose
    holder left its scope in between is inserted again (the jobs without a key went in
    the first time)."""
    # (id, key, run_at, created_at) of the rows inserted; ids follow the input order
    inserted = sorted(conn.execute(JOB_INSERT_MANY, array_params(rows)).fetchall())
    new = {row[1]: row for row in inserted if row[1] is not None}
    unkeyed = iter([row for row in inserted if row[1] is None])
    held: dict[str, Job] = {}
    waiting = [key for key in keys if key not in new]
    with conn.cursor(row_factory=class_row(Job)) as cur:
        for _ in range(KEY_ATTEMPTS):
            if not waiting:
                break
            cur.execute(JOB_GET_KEY_HOLDERS, {"keys": waiting})
            held.update((job.idempotency_key, job) for job in cur.fetchall())  # type: ignore[misc]
            unheld = set(waiting) - held.keys()
            again = [row for row in rows if row[KEY] in unheld]
            if again:
                more = conn.execute(JOB_INSERT_MANY, array_params(again)).fetchall()
                new.update((row[1], row) for row in more)
            waiting = [key for key in waiting if key not in new and key not in held]
    if waiting:
        raise _key_unsettled(waiting)
    jobs, holders = [], set()
    for index, row in enumerate(rows):
        key = row[KEY]
        if key is not None and key in held:
            jobs.append(held[key])
            holders.add(index)
        else:
            job_id, _, run_at, created_at = new[key] if key is not None else next(unkeyed)
            jobs.append(_new_job(row, job_id, run_at, created_at))
    return jobs, holders


def _key_unsettled(keys: list[str | None]) -> DatabaseUnavailable:
    """Every insert of a key met a holder that was gone when read: the key's jobs come
    and go faster than this caller; nothing of it was added."""
    return DatabaseUnavailable(
        f"idempotency keys {keys[:3]} changed hands {KEY_ATTEMPTS} times during one call; try again"
    )


def _new_job(
    row: Row, job_id: int, run_at: datetime, created_at: datetime, traceparent: str | None = None,
    worker_id: str | None = None, lease: int | None = None,
) -> Job:
    """The row just inserted, built here rather than read back: every other column holds
    its default (``traceparent``: the one it was given, if known; ``worker_id`` and
    ``lease``: the worker it was handed to, claimed in the insert's transaction, whose
    now() is its created_at). Positional, in the order of Job's fields (a third of the
    cost of keywords; tests/test_enqueue.py compares it with the row as read back)."""
    type_, queue, payload, priority, max_retries, _, key, tags, scope, concurrency_key = row
    claimed_at = None if worker_id is None else created_at
    return Job(
        job_id, type_, queue, payload, "pending" if worker_id is None else "claimed", priority, 0, max_retries,
        run_at, claimed_at, None, claimed_at, None, created_at,  # claimed_at, started_at, heartbeat_at, completed_at
        None, None, [], worker_id, lease,  # result, error, errors, worker_id, lease
        key, tags, None, None, None, None, None, 0,  # ...; progress, cancelled_by, retried_as, schedule, scheduled_for, snoozes
        scope or DEFAULT_UNIQUE_WHILE, traceparent=traceparent, concurrency_key=concurrency_key,
    )


def check_admission(conn: Connection, max_pending: int) -> None:
    """Raise :class:`Overloaded` while more than ``max_pending`` jobs are pending (from
    the counters, not a scan)."""
    row = conn.execute(COUNTER_GET_PENDING).fetchone()
    pending = int(row[0]) if row else 0
    if pending > max_pending:
        raise Overloaded(pending, max_pending)
