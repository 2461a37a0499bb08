"""Putting jobs in the queue: ``enqueue`` and ``enqueue_many``.

Both work inside the caller's transaction when given a connection: the jobs exist,
and wake a worker, only when the caller commits. Without one they use the default
pool for ``DATABASE_URL`` and commit before returning.

``submit_reserved`` is what the API's grouped ``POST /jobs`` use (:mod:`jobq.group`):
jobs go in under ids reserved before the insert is sent, so that a caller whose
connection is lost while the insert is in flight can learn what was stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from jobq import queries
from jobq.db import Connection, connection, first_line
from jobq.errors import DatabaseUnavailable, InvalidArgument, JobNotFound, OutcomeUnknown, Overloaded
from jobq.job import Job
from jobq.spec import DEFAULT_MAX_RETRIES, DEFAULT_PRIORITY, DEFAULT_QUEUE, JobSpec, parse_spec, parse_specs


COPY_THRESHOLD = 1000
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
    conn: Connection | None = None,
) -> Job:
    """Add one job and return it.

    ``tags``: up to 20 distinct labels of 1-100 characters (``list_jobs(tag=...)``
    finds the job by any of them). With an ``idempotency_key`` held by another job,
    returns that job and adds nothing. A key is held, by the job that has it, for as
    long as ``unique_while`` says: ``"always"`` (the default: while that job's row
    exists), ``"active"`` (while it is pending, claimed or running) or ``"pending"``
    (while it waits to run). Raises :class:`InvalidArgument` naming a bad argument, and
    :class:`DatabaseUnavailable` if the database cannot be reached. With ``conn``, the
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
        }
    )
    return submit(spec, conn=conn).job


def submit(spec: JobSpec, *, conn: Connection | None = None, max_pending: int | None = None) -> Enqueued:
    """Add one validated job; see :func:`enqueue`. ``max_pending`` turns on admission
    control: :class:`Overloaded` is raised, and nothing added, above that many pending jobs."""
    params = _row_params(spec)
    with connection(conn) as c:
        if max_pending is not None:
            check_admission(c, max_pending)
        with c.cursor(row_factory=class_row(Job)) as cur:
            for _ in range(KEY_ATTEMPTS):
                cur.execute(queries.JOB_INSERT, params)
                job = cur.fetchone()
                if job is not None:
                    return Enqueued(job, True)
                cur.execute(queries.JOB_GET_KEY_HOLDERS, {"keys": [spec.idempotency_key]})
                holder = cur.fetchone()
                if holder is not None:
                    return Enqueued(holder, False)
    raise _key_unsettled([spec.idempotency_key])


def enqueue_many(jobs: Iterable[Mapping[str, Any]], *, conn: Connection | None = None) -> list[Job]:
    """Add many jobs in one round trip and return them in the order given.

    Each mapping takes the keyword arguments of :func:`enqueue` (``type`` required).
    All or nothing: one bad mapping raises :class:`InvalidArgument` naming its index and
    field, and nothing is added. One wake-up per queue, however many jobs.
    """
    return [entry.job for entry in submit_many(parse_specs(jobs), conn=conn)]


def submit_many(
    specs: list[JobSpec], *, conn: Connection | None = None, max_pending: int | None = None
) -> list[Enqueued]:
    """Add many validated jobs; see :func:`enqueue_many` and :func:`submit`.

    Up to COPY_THRESHOLD jobs, or any with idempotency keys, go in by one array INSERT
    (one round trip); larger batches by COPY, with their ids and the transaction's
    timestamp fetched first (faster per row once the batch is large).
    """
    if not specs:
        return []
    keys = [spec.idempotency_key for spec in specs if spec.idempotency_key is not None]
    if len(set(keys)) != len(keys):
        raise InvalidArgument("idempotency_key", "appears more than once in one batch")
    for index, spec in enumerate(specs):
        try:
            spec.key_scope()
        except InvalidArgument as exc:
            raise InvalidArgument(f"jobs[{index}].{exc.field}", exc.message) from None
    with connection(conn) as c:
        if max_pending is not None:
            check_admission(c, max_pending)
        if len(specs) == 1:  # the single-row INSERT: cheaper to send than one-element arrays
            return [submit(specs[0], conn=c)]
        if keys or len(specs) <= COPY_THRESHOLD:
            return _insert(c, specs, keys)
        return _copy(c, specs)


def submit_reserved(
    specs: list[JobSpec],
    ids: list[int] | None = None,
    *,
    conn: Connection | None = None,
    max_pending: int | None = None,
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
    """
    if not specs:
        return []
    if any(spec.idempotency_key is not None for spec in specs):
        raise InvalidArgument("idempotency_key", "jobs inserted under reserved ids take no idempotency key")
    with connection(conn) as c:
        if max_pending is not None:
            check_admission(c, max_pending)
        again = ids is not None
        for _ in range(RESERVE_ATTEMPTS):
            if not again:
                ids = reserve_ids(len(specs), conn=c)
            assert ids is not None
            try:
                jobs = _insert_reserved(c, specs, ids, again=again)
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
        row = c.execute(queries.JOB_IDS_RESERVE, {"n": n}).fetchone()
    assert row is not None
    return list(row[1])


def _insert_reserved(conn: Connection, specs: list[JobSpec], ids: list[int], *, again: bool) -> list[Job] | None:
    """The jobs inserted (or, ``again``, found) under ``ids``; None if a first attempt
    inserted nothing because the sequence was restarted since ``ids`` were reserved."""
    params = {"ids": ids, "last_id": max(ids), **_array_params(specs)}
    # (id, run_at, created_at) of the rows inserted now; again, an id already stored returns nothing
    statement = queries.JOB_INSERT_RESERVED_IF_ABSENT if again else queries.JOB_INSERT_RESERVED
    inserted = {row[0]: row for row in conn.execute(statement, params)}
    if not again and not inserted:
        return None
    earlier: dict[int, Job] = {}
    if len(inserted) < len(ids):
        with conn.cursor(row_factory=class_row(Job)) as cur:
            cur.execute(queries.JOB_GET_BY_IDS, {"ids": [job_id for job_id in ids if job_id not in inserted]})
            earlier = {job.id: job for job in cur.fetchall()}
    jobs = []
    for spec, job_id in zip(specs, ids, strict=True):
        if job_id in inserted:
            jobs.append(_new_job(spec, *inserted[job_id]))
        elif job_id in earlier:
            jobs.append(earlier[job_id])
        else:
            raise JobNotFound(job_id)
    return jobs


def _copy(conn: Connection, specs: list[JobSpec]) -> list[Enqueued]:
    now, ids = conn.execute(queries.JOB_IDS_RESERVE, {"n": len(specs)}).fetchone()  # type: ignore[misc]
    # The tags column only when some job has tags: a column fewer per row otherwise.
    if any(spec.tags for spec in specs):
        with conn.cursor().copy(queries.JOB_COPY_WITH_TAGS) as copy:
            for job_id, spec in zip(ids, specs):
                copy.write_row((job_id, spec.type, spec.queue, spec.payload_json(), spec.priority,
                                spec.max_retries, spec.run_at or now, spec.tags))
    else:
        with conn.cursor().copy(queries.JOB_COPY) as copy:
            for job_id, spec in zip(ids, specs):
                copy.write_row((job_id, spec.type, spec.queue, spec.payload_json(), spec.priority,
                                spec.max_retries, spec.run_at or now))
    return [Enqueued(_new_job(spec, job_id, spec.run_at or now, now), True) for job_id, spec in zip(ids, specs)]


def _insert(conn: Connection, specs: list[JobSpec], keys: list[str]) -> list[Enqueued]:
    """One array INSERT; then, for the keys another job held, those holders. A key whose
    holder left its scope in between is inserted again (the jobs without a key went in
    the first time)."""
    # (id, key, run_at, created_at) of the rows inserted; ids follow the input order
    inserted = sorted(conn.execute(queries.JOB_INSERT_MANY, _array_params(specs)).fetchall())
    new = {row[1]: row for row in inserted if row[1] is not None}
    unkeyed = iter([row for row in inserted if row[1] is None])
    held: dict[str, Job] = {}
    waiting = [key for key in keys if key not in new]
    with conn.cursor(row_factory=class_row(Job)) as cur:
        for _ in range(KEY_ATTEMPTS):
            if not waiting:
                break
            cur.execute(queries.JOB_GET_KEY_HOLDERS, {"keys": waiting})
            held.update((job.idempotency_key, job) for job in cur.fetchall())  # type: ignore[misc]
            unheld = set(waiting) - held.keys()
            again = [spec for spec in specs if spec.idempotency_key in unheld]
            if again:
                rows = conn.execute(queries.JOB_INSERT_MANY, _array_params(again)).fetchall()
                new.update((row[1], row) for row in rows)
            waiting = [key for key in waiting if key not in new and key not in held]
    if waiting:
        raise _key_unsettled(waiting)
    results = []
    for spec in specs:
        key = spec.idempotency_key
        if key is not None and key in held:
            results.append(Enqueued(held[key], False))
        else:
            job_id, _, run_at, created_at = new[key] if key is not None else next(unkeyed)
            results.append(Enqueued(_new_job(spec, job_id, run_at, created_at), True))
    return results


def _key_unsettled(keys: list[str | None]) -> DatabaseUnavailable:
    """Every insert of a key met a holder that was gone when read: the key's jobs come
    and go faster than this caller; nothing of it was added."""
    return DatabaseUnavailable(
        f"idempotency keys {keys[:3]} changed hands {KEY_ATTEMPTS} times during one call; try again"
    )


def _new_job(spec: JobSpec, job_id: int, run_at: datetime, created_at: datetime) -> Job:
    """The row just inserted for ``spec``, built here rather than read back: every
    other column holds its default."""
    return Job(
        id=job_id, type=spec.type, queue=spec.queue, payload=spec.payload, status="pending",
        priority=spec.priority, attempt=0, max_retries=spec.max_retries, run_at=run_at,
        claimed_at=None, started_at=None, heartbeat_at=None, completed_at=None, created_at=created_at,
        result=None, error=None, errors=[], worker_id=None, lease=None, idempotency_key=spec.idempotency_key,
        tags=spec.tags, unique_while=spec.key_scope(),
    )


def check_admission(conn: Connection, max_pending: int) -> None:
    """Raise :class:`Overloaded` while more than ``max_pending`` jobs are pending (from
    the counters, not a scan)."""
    row = conn.execute(queries.COUNTERS_GET_PENDING).fetchone()
    pending = int(row[0]) if row else 0
    if pending > max_pending:
        raise Overloaded(pending, max_pending)


def _row_params(spec: JobSpec) -> dict[str, Any]:
    return {
        "type": spec.type,
        "queue": spec.queue,
        "payload": spec.payload_json(),
        "priority": spec.priority,
        "max_retries": spec.max_retries,
        "run_at": spec.run_at,
        "idempotency_key": spec.idempotency_key,
        "tags": spec.tags,
        "unique_while": spec.key_scope(),
    }


def _array_params(specs: list[JobSpec]) -> dict[str, list[Any]]:
    return {
        "types": [spec.type for spec in specs],
        "queues": [spec.queue for spec in specs],
        "payloads": [spec.payload_json() for spec in specs],
        "priorities": [spec.priority for spec in specs],
        "max_retries": [spec.max_retries for spec in specs],
        "run_ats": [spec.run_at for spec in specs],
        "idempotency_keys": [spec.idempotency_key for spec in specs],
        "tags": [None if spec.tags is None else array_literal(spec.tags) for spec in specs],
        "unique_whiles": [spec.key_scope() for spec in specs],
    }


def array_literal(texts: list[str]) -> str:
    """``texts`` as a PostgreSQL array literal (``{"a","b\\"c"}``): every element quoted,
    its backslashes and double quotes escaped."""
    return "{" + ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in texts) + "}"
