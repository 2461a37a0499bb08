"""Waiting for jobs to end: :func:`wait` (the job, once done, dead or cancelled),
:func:`result` (its result, or :class:`JobFailed`), and :func:`wait_all` (what a
workflow run's ``wait`` uses).

Woken by a notification, not by polling: a waiter marks the jobs it waits for
(``awaited``, JOB_AWAIT_IF_UNFINISHED, which also says which are unfinished), and the
triggers of migration 0022 announce such a job's end on ``jobq_finished``, at the end
of the statement that finished it. A job nobody waits for is announced to nobody: the
row trigger's WHEN reads the old row only, so a queue without waiters pays nothing. One listening connection per process and
database (:class:`FinishedListener`, a thread) serves every waiter of the process; a
waiter holds no pooled connection while it waits (the API's ``GET /jobs/{id}?wait=N``
relies on that). A waiter checks again every :data:`RECHECK` seconds all the same,
for a notification lost with a connection (a database restart).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from jobq import settings
from jobq.errors import InvalidArgument, JobFailed
from jobq.job import Job
from jobq.jobs.ledger import check_id, get
from jobq.store.connections import ProcessPool, again_if_moved, connect, connection, moved_meanwhile
from jobq.store.sql.workflows import JOB_AWAIT_IF_UNFINISHED, LISTEN_FINISHED

log = logging.getLogger(__name__)

RECHECK = 5.0  # seconds between checks of the database while no notification comes
SKIPPED_RECHECK = 0.05  # seconds before marking again jobs whose rows were held (and skipped)
RECONNECT_DELAY = 1.0
_REMEMBERED = 100_000  # announced ids kept for waiters that have not looked yet


class FinishedListener:
    """A thread LISTENing on ``jobq_finished`` for one database, and the ids it heard."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._changed = threading.Condition()
        self._heard: dict[int, float] = {}
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobq-finished", daemon=True)
        self._thread.start()

    def ready(self, timeout: float) -> bool:
        """Whether it listens (a waiter registers only then, so that it misses nothing)."""
        return self._listening.wait(timeout)

    def wait_any(self, ids: Iterable[int], timeout: float) -> bool:
        """Block until one of ``ids`` is announced (True) or ``timeout`` passes (False)."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not wanted.intersection(self._heard):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def _run(self) -> None:
        while True:
            try:
                with connect(self._url, application_name="jobq-waiter") as conn:
                    conn.execute(LISTEN_FINISHED)
                    self._listening.set()
                    while True:
                        for note in conn.notifies(timeout=1.0):
                            self._heard_of(int(note.payload))
            except Exception as exc:  # a lost connection: waiters recheck on their own timer
                self._listening.clear()
                log.info("event=finished_listener_lost error=%s", exc)
                time.sleep(RECONNECT_DELAY)

    def _heard_of(self, job_id: int) -> None:
        with self._changed:
            self._heard[job_id] = time.monotonic()
            if len(self._heard) > _REMEMBERED:
                for old in sorted(self._heard, key=self._heard.__getitem__)[: _REMEMBERED // 2]:
                    del self._heard[old]
            self._changed.notify_all()


_listeners: dict[tuple[int, str], FinishedListener] = {}
_listeners_lock = threading.Lock()


def listener_for(url: str) -> FinishedListener:
    """This process's listener for ``url`` (a forked child starts its own)."""
    key = (os.getpid(), url)
    with _listeners_lock:
        if key not in _listeners:
            _listeners[key] = FinishedListener(url)
        return _listeners[key]


def await_unfinished(ids: list[int], *, pool: ProcessPool | None = None) -> tuple[list[int], bool]:
    """Mark ``ids`` as awaited; return those not finished yet, and whether each of them
    is marked (False: one was held by another transaction, a worker writing its outcome
    perhaps, and skipped: look again soon, its end will not be announced). On a
    connection of ``pool`` (else of the default pool) given back, committed, before it
    returns. Never on a caller's connection: a mark left uncommitted in a transaction
    would hold the job's row, and with it the outcome the caller waits for."""
    with pool.connection() if pool is not None else connection() as c:
        rows = _marked(c, ids)
    return [job_id for job_id, _ in rows], all(marked for _, marked in rows)


def _marked(conn: psycopg.Connection, ids: list[int]) -> list[tuple[int, bool]]:
    """JOB_AWAIT_IF_UNFINISHED for ``ids``, in halves while it keeps meeting rows moved
    meanwhile. One statement over many jobs whose workers are finishing them meets a
    row that left its partition after the statement's snapshot on nearly every try
    (each try is sent again MOVED_RETRIES times first); its halves meet fewer, and a
    single job's row moves only as its status does (released, finished)."""
    try:
        return [(row[0], row[1]) for row in again_if_moved(conn, JOB_AWAIT_IF_UNFINISHED, {"ids": ids})]
    except (psycopg.errors.SerializationFailure, psycopg.errors.CheckViolation) as exc:
        if len(ids) < 2 or not moved_meanwhile(exc):
            raise
    half = len(ids) // 2
    return _marked(conn, ids[:half]) + _marked(conn, ids[half:])


def wait_all(
    ids: list[int],
    timeout: float | None,
    *,
    follow: Callable[[], list[int]] | None = None,
    url: str | None = None,
    pool: ProcessPool | None = None,
) -> None:
    """Block until every job of ``ids`` has ended (or is gone). ``follow``: returns the
    ids to wait for anew once those have ended (a workflow whose steps a retry
    re-pointed or a spawn added). Raises :class:`TimeoutError` past ``timeout`` seconds
    (None: no limit). Checks on a connection of ``pool`` (else of the default pool)
    taken for each check only: none is held while it waits. ``url``: the database whose
    notifications it listens to (default: ``DATABASE_URL``)."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise InvalidArgument("timeout", "must be a number of seconds, 0 or more")
    deadline = None if timeout is None else time.monotonic() + timeout
    listener = listener_for(url or settings.current().require_database_url())
    listener.ready(RECHECK if timeout is None else min(RECHECK, timeout))
    while True:
        unfinished, marked = await_unfinished(ids, pool=pool)
        if follow is not None and not unfinished:
            ids = follow()
            unfinished, marked = await_unfinished(ids, pool=pool)
        if not unfinished:
            return
        left = RECHECK if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(unfinished)} of {len(ids)} jobs not finished after {timeout} s")
        listener.wait_any(unfinished, min(left, RECHECK if marked else SKIPPED_RECHECK))


def wait(job_id: int, timeout: float | None = None) -> Job:
    """The job once it is ``done``, ``dead`` or ``cancelled`` (the default pool, for
    ``DATABASE_URL``). Raises :class:`TimeoutError` past ``timeout`` seconds,
    :class:`~jobq.errors.JobNotFound` for a job that does not exist (or was deleted
    meanwhile)."""
    check_id(job_id)
    wait_all([job_id], timeout)
    return get(job_id)


def result(job_id: int, timeout: float | None = None) -> Any:
    """The job's result once it is ``done``; raises :class:`JobFailed` (with the job, its
    status and last error) if it ended dead or cancelled, :class:`TimeoutError` past
    ``timeout``."""
    job = wait(job_id, timeout)
    if job.status != "done":
        raise JobFailed(job)
    return job.result
