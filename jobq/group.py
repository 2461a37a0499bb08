"""Group commit for enqueues: concurrent :func:`submit` calls of one process share one
INSERT.

A web process serving many ``POST /jobs`` at once pays, per request, a statement, its
trigger and a WAL flush. :class:`GroupSubmitter` lets the threads that arrive while an
insert is in flight wait for it to end, then go in together as the next one (one
statement, one trigger run, one commit), so that the cost per job falls as load rises
and nothing waits when there is no load: the first caller inserts at once. Every
caller still gets its own job, or its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from jobq.errors import DatabaseUnavailable, Overloaded
from jobq.job import Job
from jobq.spec import JobSpec

MAX_GROUP = 1000  # jobs in one statement at most: submit_many's array insert

SubmitMany = Callable[[list[JobSpec]], list[Job]]

# Errors that are about the database or the queue, not about one job: every caller of
# the group gets them. Any other error is retried job by job, so that a job the
# database refuses fails alone.
SHARED_ERRORS = (DatabaseUnavailable, Overloaded)


@dataclass
class _Caller:
    spec: JobSpec
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

    ``submit_many`` inserts a list of jobs in one statement and returns them in order
    (raising for the whole list); it is called by one thread at a time.
    """

    def __init__(self, submit_many: SubmitMany, *, max_group: int = MAX_GROUP) -> None:
        self._submit_many = submit_many
        self._max_group = max_group
        self._lock = threading.Lock()
        self._waiting: list[_Caller] = []
        self._inserting = False

    def submit(self, spec: JobSpec) -> Job:
        """Insert ``spec`` (alone, or with the jobs of other threads) and return its job.

        Raises what ``submit_many`` raised for this job. Must not be given a job with
        an idempotency key (two keyed jobs of one group could collide).
        """
        me = _Caller(spec)
        with self._lock:
            self._waiting.append(me)
            leads = not self._inserting
            self._inserting = True
        if not leads:
            me.done.wait()
            if not me.leads:
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

    def _insert(self, group: list[_Caller]) -> None:
        try:
            for caller, job in zip(group, self._submit_many([caller.spec for caller in group]), strict=True):
                caller.job = job
        except SHARED_ERRORS as exc:
            for caller in group:
                caller.error = exc
        except Exception as exc:
            if len(group) == 1:
                group[0].error = exc
            else:
                for caller in group:
                    self._insert([caller])
        except BaseException as exc:  # the process is going down: nobody is left waiting
            for caller in group:
                caller.error = exc
            raise
        finally:
            for caller in group:
                if not caller.leads:
                    caller.done.set()
