"""A worker's outcomes: what a run comes to (:func:`decide`), and their writing in
batches (:class:`OutcomeWriter`).

The outcomes wait in the worker's jobs in flight (:mod:`jobq.daemon.worker.flight`), which
says when they are due: the main thread writes them with its next claim, or on its own
once the oldest has waited FLUSH_AFTER seconds or one waits that the finished area does
not hold (a cancel, a record too large for its room: written before the next job
starts). While the main thread is inside a long handler, the heartbeat thread writes what
waits (and always before it marks the next job running), so a finished job's outcome is
committed within milliseconds whatever the job after it does. Either thread writes
through the same hand-off: it takes every outcome buffered, and only it ends them,
written or, when its write fails, returned to the buffer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from jobq.jobs import leases
from jobq.jobs.leases import Claim
from jobq.limits import claims as limited
from jobq.daemon.worker.flight import Flight, InFlight, Outcome, Taken
from jobq.daemon.worker.session import ClaimSession
from jobq.handlers.execution import RunResult
from jobq.handlers.registry import Handler
from jobq.handlers.verdict import decide as decided
from jobq.observe import tracing
from jobq.settings import Settings
from jobq.store.connections import Connection

log = logging.getLogger(__name__)

T = TypeVar("T")


def decide(claim: Claim, result: RunResult, handler: Handler | None, settings: Settings) -> Outcome:
    """What a run of ``claim``'s job by ``handler`` comes to (:func:`jobq.handlers.verdict.decide`)."""
    verdict = decided(claim.job, result, handler, settings)
    return Outcome(claim, verdict.result, verdict.delay, verdict.max_retries)


@dataclass
class Written:
    """What one write sends and recorded: the taken outcomes by kind (each with its
    claim as held when sent), the fate of each failed job, and the ids whose write a
    stale lease rejected."""

    done: list[Flight] = field(default_factory=list)
    failed: list[Flight] = field(default_factory=list)
    snoozed: list[Flight] = field(default_factory=list)
    cancelled: list[Flight] = field(default_factory=list)
    failures: list[leases.RecordedFailure] = field(default_factory=list)
    rejected: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, taken: Taken | None) -> Written:
        written = cls()
        for flight in taken.flights if taken else ():
            result = flight.outcome.result  # type: ignore[union-attr]
            kind = (
                written.cancelled if result.cancelled else written.done if result.ok
                else written.snoozed if result.snooze is not None else written.failed
            )
            kind.append(flight)
        return written

    @property
    def fenced(self) -> list[Flight]:
        """The outcomes whose write is refused by a stale lease (a cancel's is not: it
        finds the job cancelled by an operator, usually)."""
        return self.done + self.failed + self.snoozed


class OutcomeWriter:
    """Writes the outcomes buffered in the worker's jobs in flight, from either thread,
    on the claim session."""

    def __init__(self, in_flight: InFlight, *, worker_id: str, lock_base: int) -> None:
        self.in_flight = in_flight
        self.worker_id = worker_id
        self.lock_base = lock_base

    def write(
        self, session: ClaimSession, also: Callable[[Connection, list[Claim]], leases.Deferred[T]] | None = None
    ) -> T | None:
        """Take the outcomes buffered and write them, with ``also`` (the next claim) in the
        same round trip (a pipeline); returns its answer. The slots of the jobs written
        (:func:`jobq.limits.claims.slotted`) are freed in the same transaction: by
        ``also``, which is given them (a claim under limits passes them on to the next
        jobs of the same keys), or here when there is none. Under the session's lock from
        the take to the end, so that the heartbeat never sees a written job as still in
        flight. When the write raises, the outcomes go back to the buffer (the exception
        goes on: the worker decides)."""
        with session.lock:
            taken = self.in_flight.take_outcomes()
            if also is None and taken is None:
                return None
            written = Written.of(taken)

            def send(conn: Connection, retried: bool) -> T | None:
                # The claims are read here, after any reconnect: as held now. The answers
                # are read once the pipeline is closed: its Sync (the commit) goes out with
                # the statements, one round trip; read inside, they would cost one of their
                # own before it.
                with conn.pipeline():
                    sent_done = self._send_done(conn, written.done)
                    sent_failed = self._send_failed(conn, written.failed)
                    sent_snoozed = self._send_snoozed(conn, written.snoozed)
                    sent_cancelled = self._send_cancelled(conn, written.cancelled)
                    freed = limited.slotted([f.claim for f in taken.flights] if taken else [])
                    if also is None:
                        limited.release_slots(conn, freed)
                        sent = None
                    else:
                        sent = also(conn, freed)
                rejected = sent_done.result() if sent_done else set()
                written.failures, rejected_failed = sent_failed.result() if sent_failed else ([], set())
                rejected_snoozed = sent_snoozed.result() if sent_snoozed else set()
                if sent_cancelled:
                    sent_cancelled.result()  # the ids an operator's cancel changed first: nothing to do
                answer = sent.result() if sent else None
                written.rejected = rejected | rejected_failed | rejected_snoozed
                self._count_rejections(conn, written, retried=retried)
                self._note_finished_if_cancelled(conn, written)
                return answer

            try:
                with tracing.span("jobq outcomes", **{"jobq.outcomes": len(written.done) + len(written.failed)}):
                    answer = session.run(send)
            except BaseException:
                if taken is not None:
                    self.in_flight.returned(taken)
                raise
            if taken is not None:
                self.in_flight.written(taken, written.rejected)
                self._log(written)
            return answer

    def _count_rejections(self, conn: Connection, written: Written, *, retried: bool) -> None:
        """On a retry after a broken connection, a rejected write our first try had in
        fact committed is not a rejection; count the rest."""
        fenced = written.fenced
        if retried and written.rejected:
            ids = written.rejected
            written.rejected -= leases.finished_under_lease(conn, [f.claim for f in fenced if f.job_id in ids])
        if written.rejected:
            jobs = [(f.claim.job.queue, f.claim.job.type) for f in fenced if f.job_id in written.rejected]
            leases.count_events(conn, leases.STALE_LEASE_COUNTER, jobs)

    def _note_finished_if_cancelled(self, conn: Connection, written: Written) -> None:
        """Successes refused because an operator's cancel committed while they waited in
        the buffer: the cancelled rows keep their results and when their handlers
        finished (nothing dropped in silence)."""
        refused = [f for f in written.done if f.job_id in written.rejected]
        if not refused:
            return
        now = time.monotonic()
        noted = leases.note_finished_if_cancelled(
            conn, self.worker_id, [f.job_id for f in refused],
            [f.outcome.result.result_json for f in refused],  # type: ignore[union-attr,misc]
            [max(0.0, now - f.started - f.outcome.result.seconds) for f in refused],  # type: ignore[union-attr]
        )
        for job_id in sorted(noted):
            log.warning("job.finished_before_cancel id=%s worker=%s: its handler had finished; the cancelled job "
                        "keeps its result", job_id, self.worker_id)

    def _log(self, written: Written) -> None:
        """One line per outcome written (successes at DEBUG: per job on the hot path)."""
        for f in written.cancelled:
            log.info("job.cancelled id=%s type=%s worker=%s", f.job_id, f.claim.job.type, self.worker_id)
        fates = {fate.job_id: fate for fate in written.failures}
        for f in written.fenced:
            job, o = f.claim.job, f.outcome
            assert o is not None
            if job.id in written.rejected:
                log.warning(
                    "job.stale_lease_rejected id=%s type=%s queue=%s attempt=%s worker=%s lease=%s",
                    job.id, job.type, job.queue, job.attempt, self.worker_id, f.claim.lease,
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

    def _send_done(self, conn: Connection, done: list[Flight]) -> leases.Deferred[set[int]] | None:
        if not done:
            return None
        return leases.complete(
            conn,
            [f.claim for f in done],
            [f.outcome.result.result_json for f in done],  # type: ignore[union-attr,misc]
            [f.outcome.result.seconds for f in done],  # type: ignore[union-attr]
            lock_base=self.lock_base,
        )

    def _send_snoozed(self, conn: Connection, snoozed: list[Flight]) -> leases.Deferred[set[int]] | None:
        if not snoozed:
            return None
        delays = [f.outcome.delay for f in snoozed]  # type: ignore[union-attr]
        return leases.snooze(conn, [f.claim for f in snoozed], delays, lock_base=self.lock_base)

    def _send_cancelled(self, conn: Connection, cancelled: list[Flight]) -> leases.Deferred[set[int]] | None:
        """Runs that ended cancelled: the jobs are cancelled (by this worker, unless an
        operator's cancel already made them so) and their locks released."""
        if not cancelled:
            return None
        by = f"worker:{self.worker_id}"
        return leases.cancel(conn, [f.claim for f in cancelled], actor=by, lock_base=self.lock_base)

    def _send_failed(
        self, conn: Connection, failed: list[Flight]
    ) -> leases.Deferred[tuple[list[leases.RecordedFailure], set[int]]] | None:
        if not failed:
            return None
        outcomes = [f.outcome for f in failed]
        return leases.fail(
            conn,
            [f.claim for f in failed],
            [o.result.error for o in outcomes],  # type: ignore[union-attr,misc]
            [o.delay for o in outcomes],  # type: ignore[union-attr]
            [o.result.seconds for o in outcomes],  # type: ignore[union-attr]
            max_retries=[o.max_retries for o in outcomes],  # type: ignore[union-attr]
            spans=[o.result.span for o in outcomes],  # type: ignore[union-attr]
            lock_base=self.lock_base,
        )
