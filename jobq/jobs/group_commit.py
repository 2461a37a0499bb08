"""Group commit for enqueues: concurrent :func:`submit` calls of one process share one
INSERT.

A web process serving many ``POST /jobs`` at once pays, per request, a statement, its
trigger and a WAL flush. :class:`GroupSubmitter` lets the threads that arrive while an
insert is in flight wait for it to end, then go in together as the next one (one
statement, one trigger run, one commit), so that the cost per job falls as load rises
and nothing waits when there is no load: the first caller inserts at once. Every
caller still gets its own job, or its own error.

Nobody waits without limit. A caller queued behind an insert in flight waits at most
``wait_timeout`` seconds for it to end; past that, its job not yet sent, it leaves the
queue with :class:`DatabaseUnavailable`. A caller whose job is in an insert waits for
that insert's outcome, which its connection's pool wait and statement timeout bound.

Each caller learns the truth, even when the connection is lost while its insert is in
flight (a dropped COMMIT: the jobs may or may not be stored). The jobs go in under ids
reserved before the insert is sent (:func:`jobq.jobs.submit.submit_reserved`); after such
a loss (:class:`OutcomeUnknown`) the same insert is sent again with the same ids, on
another connection, until it goes through or ``resolve_timeout`` has passed. The
primary key stores each job once whatever the lost attempt did (and a job stored by it
is returned as stored), so every caller gets its job, stored once. A caller is told
DatabaseUnavailable only when its job was not stored; if the database stays out of
reach past ``resolve_timeout``, OutcomeUnknown names the id its job may have.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobq.errors import DatabaseUnavailable, Overloaded
from jobq.job import Job
from jobq.spec import JobSpec
from jobq.errors import OutcomeUnknown

log = logging.getLogger(__name__)

MAX_GROUP = 1000  # jobs in one statement at most: the array insert's limit
WAIT_TIMEOUT = 10.0  # seconds a caller waits in the queue for the insert in flight to end
RESOLVE_TIMEOUT = 10.0  # seconds of retries to learn what became of an insert whose connection was lost
RETRY_INTERVAL = 0.1  # seconds between two of those retries

Insert = Callable[[list[JobSpec], list[int] | None, list[str | None]], list[Job]]
"""Inserts jobs without idempotency keys in one statement under ids reserved for them
(None: reserved anew, as :func:`jobq.jobs.submit.submit_reserved` does), each with its
caller's traceparent (None: not traced), and returns them in
order; with given ids, returns a job already stored under its id as it is, never a
second copy. Raises OutcomeUnknown (with the ids) when the connection was lost while
the insert was in flight, DatabaseUnavailable or Overloaded for the whole list when
this call stored nothing (an earlier attempt's outcome stays unknown); any other error
is about the jobs."""


@dataclass(eq=False)
class _Caller:
    spec: JobSpec
    traceparent: str | None = None  # the caller's OpenTelemetry producer span (jobq.observe.tracing)
    done: threading.Event = field(default_factory=threading.Event)
    leads: bool = False  # handed the next group to insert
    job: Job | None = None
    error: BaseException | None = None

    def outcome(self) -> Job:
        if self.error is not None:
            raise self.error
        assert self.job is not None
        return self.job


class GroupSubmitter:
    """Insert jobs for many threads of one process, grouping those that arrive together.

    ``insert`` (see :data:`Insert`) is called by one thread at a time.
    """

    def __init__(
        self,
        insert: Insert,
        *,
        max_group: int = MAX_GROUP,
        wait_timeout: float = WAIT_TIMEOUT,
        resolve_timeout: float = RESOLVE_TIMEOUT,
    ) -> None:
        self._insert_jobs = insert
        self._max_group = max_group
        self._wait_timeout = wait_timeout
        self._resolve_timeout = resolve_timeout
        self._lock = threading.Lock()
        self._waiting: list[_Caller] = []
        self._inserting = False

    def submit(self, spec: JobSpec, traceparent: str | None = None) -> Job:
        """Insert ``spec`` (alone, or with the jobs of other threads) and return its job,
        which records ``traceparent`` (the caller's span: each job of a group its own).

        Raises what ``insert`` raised for this job; DatabaseUnavailable, nothing sent,
        after ``wait_timeout`` seconds queued behind an insert that has not ended; after a
        lost connection, only if the job was not stored (OutcomeUnknown if that could not
        be learnt within ``resolve_timeout``). Must not be given a job with an idempotency
        key (two keyed jobs of one group could collide).
        """
        me = _Caller(spec, traceparent)
        with self._lock:
            self._waiting.append(me)
            leads = not self._inserting
            self._inserting = True
        if not leads and not self._wait_for_turn(me):
            return me.outcome()
        with self._lock:
            group, self._waiting = self._waiting[: self._max_group], self._waiting[self._max_group :]
        try:
            self._insert(group)
        finally:
            with self._lock:
                if self._waiting:  # they arrived during the insert: the first inserts them next
                    self._waiting[0].leads = True
                    self._waiting[0].done.set()
                else:
                    self._inserting = False
        return me.outcome()

    def _wait_for_turn(self, me: _Caller) -> bool:
        """Wait while another thread inserts: True when ``me`` is handed the next group,
        False when its outcome is set. Raises DatabaseUnavailable when ``me`` is still
        queued (its job not taken into an insert) after ``wait_timeout``."""
        if not me.done.wait(self._wait_timeout):
            with self._lock:
                queued = not me.leads and me in self._waiting
                if queued:
                    self._waiting.remove(me)
            if queued:
                log.warning("group.wait_timeout waited=%.1fs", self._wait_timeout)
                raise DatabaseUnavailable(
                    f"database unavailable: the insert in flight has not ended within {self._wait_timeout:g} s"
                )
            me.done.wait()  # in an insert, whose outcome is bounded, or handed the lead
        return me.leads

    def _insert(self, group: list[_Caller]) -> None:
        try:
            self._store(group)
        except BaseException as exc:  # the process is going down: nobody is left waiting
            for caller in group:
                if caller.job is None and caller.error is None:
                    caller.error = exc
            raise
        finally:
            for caller in group:
                if not caller.leads:
                    caller.done.set()

    def _store(self, group: list[_Caller], ids: list[int] | None = None) -> None:
        """Insert the jobs of ``group`` and give each caller its job or its error. ``ids``:
        the ids of an earlier attempt whose outcome is unknown (None: there was none)."""
        specs = [caller.spec for caller in group]
        traceparents = [caller.traceparent for caller in group]
        deadline: float | None = None
        while True:
            try:
                jobs = self._insert_jobs(specs, ids, traceparents)
            except OutcomeUnknown as exc:
                ids, reason = exc.ids, exc.reason
            except DatabaseUnavailable as exc:
                if ids is None:  # nothing was sent, or it was refused: nothing stored
                    self._fail(group, exc)
                    return
                reason = str(exc)  # a retry that could not run: still unknown
            except Overloaded as exc:
                self._fail(group, exc)
                return
            except Exception as exc:  # about the jobs: one of them fails alone
                if len(group) == 1:
                    group[0].error = exc
                else:
                    for index, caller in enumerate(group):
                        self._store([caller], None if ids is None else [ids[index]])
                return
            else:
                for caller, job in zip(group, jobs, strict=True):
                    caller.job = job
                if deadline is not None:
                    log.warning("group.outcome_settled jobs=%d first_id=%d", len(jobs), jobs[0].id)
                return
            if deadline is None:
                deadline = time.monotonic() + self._resolve_timeout
                log.warning("group.outcome_unknown jobs=%d first_id=%d reason=%s", len(ids), ids[0], reason)
            if time.monotonic() >= deadline:
                log.error("group.outcome_unresolved jobs=%d first_id=%d reason=%s", len(ids), ids[0], reason)
                for caller, job_id in zip(group, ids, strict=True):
                    caller.error = OutcomeUnknown([job_id], reason)
                return
            time.sleep(RETRY_INTERVAL)

    @staticmethod
    def _fail(group: list[_Caller], error: BaseException) -> None:
        for caller in group:
            caller.error = error
