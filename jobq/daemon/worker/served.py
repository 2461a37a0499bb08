"""The queues a worker claims from: those named (JOBQ_QUEUES, ``--queues``), or with
``--all-queues`` every queue that holds jobs, queues that appear later included.

An all-queues worker looks the queues up in the counters (a small table: no jobs scan)
before a claim, at most every RECHECK seconds while it is busy and after every wait but
one ended by a notification for a queue it serves already (anything else may be a new
queue's: another queue's notification, the poll, a signal). Paused queues and priorities
are the claim's business, as for named queues."""

from __future__ import annotations

import time

from jobq.daemon.worker.session import ClaimSession
from jobq.jobs import queues
from jobq.settings import Settings

RECHECK = 1.0  # seconds: how stale an all-queues worker's list may get while it is busy


class ServedQueues:
    def __init__(self, settings: Settings) -> None:
        self.every = settings.all_queues
        self.names: list[str] = [] if self.every else list(settings.queues)
        self._checked: float | None = None  # monotonic; None: look again before the next claim

    @property
    def listened(self) -> list[str] | None:
        """Whose wake-ups to take: None for every queue's."""
        return None if self.every else self.names

    @property
    def registered(self) -> list[str]:
        """The queues on the worker's row (none with ``all_queues`` set there)."""
        return [] if self.every else self.names

    def __str__(self) -> str:
        return "(all)" if self.every else ",".join(self.names)

    def refresh(self, session: ClaimSession) -> None:
        """Before a claim: an all-queues worker's list, when it may be stale."""
        now = time.monotonic()
        if not self.every or (self._checked is not None and now - self._checked < RECHECK):
            return
        self.names = session.run(lambda conn, _: queues.with_pending(conn))
        self._checked = now

    def woken(self, queue: str | None) -> None:
        """The worker waited; ``queue``: the queue of the notification that ended the wait
        (None: something else did). Look at the queues again unless it is one of them."""
        if queue is None or queue not in self.names:
            self._checked = None
