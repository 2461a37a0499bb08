"""A worker's outcomes: run but not yet written, then written in batches.

The main thread adds each job's outcome as its handler returns and writes the
buffer with its next claim, or on its own once the oldest outcome has waited
FLUSH_AFTER seconds. While the main thread is inside a long handler, the heartbeat
thread writes what waits (and always before it marks the next job running), so a
finished job's outcome is committed within milliseconds whatever the job after it
does. Until then, each success is also noted in the finished area (memory shared
with the supervisor, :mod:`jobq.daemon.boards.finished`), and what is not noted there (a
failure, a snooze, a result too large) is written before the next job starts: a
worker killed at any moment runs again at most the job it was running.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from jobq.jobs import leases
from jobq.jobs.leases import Claim
from jobq.daemon.worker.hand import Hand
from jobq.handlers.execution import RunResult
from jobq.daemon.boards.finished import FinishedArea
from jobq.daemon.worker.session import ClaimSession
from jobq.store.connections import Connection

log = logging.getLogger(__name__)

T = TypeVar("T")

FLUSH_AFTER = 0.005  # seconds an outcome may wait in the buffer while the batch goes on


@dataclass
class Outcome:
    claim: Claim
    result: RunResult
    delay: float = 0.0
    max_retries: int | None = None


@dataclass
class Written:
    """What one write recorded: the fate of each failed job, and the ids whose write a
    stale lease rejected."""

    done: list[Outcome] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    snoozed: list[Outcome] = field(default_factory=list)
    failures: list[leases.Failure] = field(default_factory=list)
    rejected: set[int] = field(default_factory=set)
    noted_upto: int = 0  # the finished area's end when they were taken

    @property
    def outcomes(self) -> list[Outcome]:
        return self.done + self.failed + self.snoozed


class Outcomes:
    """The buffer of outcomes not yet written, and their writing. Both threads use it;
    a write happens on the claim session, under its lock, so that the hand forgets a
    job in the same locked section that recorded it."""

    def __init__(self, hand: Hand, finished: FinishedArea, *, worker_id: str, lock_base: int) -> None:
        self.hand = hand
        self.finished = finished
        self.worker_id = worker_id
        self.lock_base = lock_base
        self._lock = threading.Lock()
        self._done: list[Outcome] = []
        self._failed: list[Outcome] = []
        self._snoozed: list[Outcome] = []
        self._oldest: float | None = None
        self._unnoted = False  # an outcome waits that only this process knows of

    def add(self, outcome: Outcome) -> None:
        result, claim = outcome.result, outcome.claim
        with self._lock:
            (self._done if result.ok else self._snoozed if result.snooze is not None else self._failed).append(outcome)
            if self._oldest is None:
                self._oldest = time.monotonic()
            noted = result.ok and self.finished.note(claim.job_id, claim.lease, result.seconds, result.result_json)
            self._unnoted = self._unnoted or not noted

    def due(self) -> bool:
        """Whether to write now: an outcome that a kill would lose waits (it is not in
        the finished area), or the oldest has waited FLUSH_AFTER seconds."""
        with self._lock:
            return self._unnoted or (self._oldest is not None and time.monotonic() - self._oldest >= FLUSH_AFTER)

    def _take(self) -> Written:
        with self._lock:
            taken = Written(self._done, self._failed, self._snoozed, noted_upto=self.finished.end())
            self._done, self._failed, self._snoozed, self._oldest, self._unnoted = [], [], [], None, False
            return taken

    # -- writing --------------------------------------------------------------------

    def write(self, session: ClaimSession, also: Callable[[Connection], leases.Deferred[T]] | None = None) -> T | None:
        """Write what waits and, in the same round trip (a pipeline), send ``also`` (the
        next claim); returns its answer. Under the session's lock from the write to the
        hand's update, so that the heartbeat never sees a recorded job as still held."""
        with session.lock:
            taken = self._take()
            if also is None and not taken.outcomes:
                return None

            def send(conn: Connection, retried: bool) -> T | None:
                # The answers are read once the pipeline is closed: its Sync (the commit)
                # goes out with the statements, one round trip; read inside, they would
                # cost one of their own before it.
                with conn.pipeline():
                    sent_done = self._send_done(conn, taken.done)
                    sent_failed = self._send_failed(conn, taken.failed)
                    sent_snoozed = self._send_snoozed(conn, taken.snoozed)
                    sent = also(conn) if also is not None else None
                rejected = sent_done.result() if sent_done else set()
                taken.failures, rejected_failed = sent_failed.result() if sent_failed else ([], set())
                rejected_snoozed = sent_snoozed.result() if sent_snoozed else set()
                answer = sent.result() if sent else None
                taken.rejected = rejected | rejected_failed | rejected_snoozed
                self._count_rejections(conn, taken, retried=retried)
                return answer

            answer = session.run(send)
            self._written(taken)
            return answer

    def _count_rejections(self, conn: Connection, taken: Written, *, retried: bool) -> None:
        """On a retry after a broken connection, a rejected write our first try had in
        fact committed is not a rejection; count the rest."""
        outcomes = taken.outcomes
        if retried and taken.rejected:
            ids = taken.rejected
            taken.rejected -= leases.finished_under_lease(conn, [o.claim for o in outcomes if o.claim.job_id in ids])
        if taken.rejected:
            jobs = [(o.claim.job.queue, o.claim.job.type) for o in outcomes if o.claim.job_id in taken.rejected]
            leases.count_events(conn, leases.STALE_LEASE_COUNTER, jobs)

    def _written(self, taken: Written) -> None:
        """Let go of the written jobs (from the hand and the finished area) and log each
        outcome."""
        outcomes = taken.outcomes
        with self._lock:
            self.finished.written(taken.noted_upto)
        self.hand.forget((o.claim.job_id for o in outcomes), recorded=len(outcomes) - len(taken.rejected))
        fates = {f.job_id: f for f in taken.failures}
        for o in outcomes:
            job = o.claim.job
            if job.id in taken.rejected:
                log.warning(
                    "job.stale_lease_rejected id=%s type=%s queue=%s attempt=%s worker=%s lease=%s",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, o.claim.lease,
                )
                continue
            fate = fates.get(job.id)
            if o.result.snooze is not None:
                log.info(
                    "job.snoozed id=%s type=%s queue=%s attempt=%s worker=%s delay=%.1fs snoozes=%s",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, o.delay, job.snoozes + 1,
                )
            elif fate is None:
                log.debug(  # per job on the hot path: DEBUG (the failures below stay INFO)
                    "job.succeeded id=%s type=%s queue=%s attempt=%s worker=%s duration=%.4fs",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, o.result.seconds,
                )
            elif fate.status == "cancelled":
                log.info(
                    "job.superseded id=%s type=%s queue=%s attempt=%s worker=%s: another job took its key",
                    job.id, job.type, job.queue, job.attempt, self.worker_id,
                )
            elif fate.status == "pending":
                log.info(
                    "job.retry_scheduled id=%s type=%s queue=%s attempt=%s worker=%s delay=%.1fs error=%s",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, o.delay, o.result.error_kind,
                )
            else:
                log.warning(
                    "job.dead_lettered id=%s type=%s queue=%s attempt=%s worker=%s error=%s",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, o.result.error_kind,
                )

    def _send_done(self, conn: Connection, done: list[Outcome]) -> leases.Deferred[set[int]] | None:
        if not done:
            return None
        return leases.complete(
            conn,
            [self.hand.presented(o.claim) for o in done],
            [o.result.result_json for o in done],  # type: ignore[misc]
            [o.result.seconds for o in done],
            lock_base=self.lock_base,
        )

    def _send_snoozed(self, conn: Connection, snoozed: list[Outcome]) -> leases.Deferred[set[int]] | None:
        if not snoozed:
            return None
        claimed = [self.hand.presented(o.claim) for o in snoozed]
        return leases.snooze(conn, claimed, [o.delay for o in snoozed], lock_base=self.lock_base)

    def _send_failed(
        self, conn: Connection, failed: list[Outcome]
    ) -> leases.Deferred[tuple[list[leases.Failure], set[int]]] | None:
        if not failed:
            return None
        return leases.fail(
            conn,
            [self.hand.presented(o.claim) for o in failed],
            [o.result.error for o in failed],  # type: ignore[misc]
            [o.delay for o in failed],
            [o.result.seconds for o in failed],
            max_retries=[o.max_retries for o in failed],
            lock_base=self.lock_base,
        )
