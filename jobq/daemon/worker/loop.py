"""A worker process: claim due jobs of its queues, run them one at a time, record
their outcomes, and sleep on LISTEN when there is nothing to do.

The supervisor builds a :class:`Worker` before the fork and calls :meth:`run` in the
child; everything that opens a file, a socket or a connection happens there. The
loop, top to bottom::

    exchange: write the buffered outcomes and claim the next batch, one round trip
    nothing claimed -> report idle, wait (notification, poll interval, next run_at)
    run the batch: one job at a time, outcome into the buffer, written within
                   FLUSH_AFTER seconds (by this thread or the heartbeat) or with
                   the next claim
    stop asked -> give back claimed jobs, flush, leave

Operators reach a worker through its control pipe (:meth:`Worker.handle_control`, on
SIGUSR1 from the supervisor): a cancel of the running job raises
:class:`jobq.Cancelled` in its handler; cancelled jobs and jobs of a paused queue
still waiting in the batch are given back unstarted.

How batches are sized and split is :mod:`jobq.daemon.worker.hand`, and how outcomes wait
and are written :mod:`jobq.daemon.worker.outcomes`; what the worker has in hand (its
:class:`~jobq.daemon.worker.hand.Hand`) and its outcomes are shared with the heartbeat
thread.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import replace

import psycopg

from jobq.jobs import leases
from jobq.schedules import declarations
from jobq.store import locks
from jobq.handlers import context
from jobq.schedules import stored
from jobq.jobs.leases import Claim
from jobq.daemon import presence
from jobq.daemon.worker import hand
from jobq.handlers import execution
from jobq.daemon import messages
from jobq.daemon.worker.hand import Hand
from jobq.daemon.boards.finished import FinishedArea
from jobq.daemon.worker.heartbeat import Heartbeat
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.listener import Listener
from jobq.daemon.worker.outcomes import Outcome, Outcomes
from jobq.daemon.worker.session import ClaimSession
from jobq.daemon.wakeup import SelfPipe
from jobq.store.connections import first_line
from jobq.errors import Cancelled, DatabaseUnavailable, SchemaError
from jobq.handlers import registry
from jobq.store.migrate import check_schema
from jobq.settings import Settings

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_BOOT_ERROR = 3
# A statement failed for a reason of its own (not a lost connection): the worker leaves
# without recording what it holds; its jobs go back to pending with no attempt charged.
EXIT_DATABASE_ERROR = 4

IDLE_RECHECK = 0.05  # a due job we could not claim (locked by a peer): look again this soon
UNASKED = object()  # Worker.next_in before the database was asked


def worker_name(hostname: str, pid: int, token: str) -> str:
    """A worker's id, in ``workers.id`` and ``jobs.worker_id``: host, pid, and a token
    drawn at spawn so that a reused pid is a different worker."""
    return f"{hostname}:{pid}:{token}"


class BootFailure(Exception):
    """The worker cannot start (a handler module does not import, the schema is too old)."""


class Worker:
    """One worker process. The constructor has no side effects; :meth:`run` does the work."""

    def __init__(
        self,
        settings: Settings,
        token: str,
        report_fd: int,
        board: IdleBoard,
        slot: int,
        *,
        control_fd: int = -1,
        jobs: JobBoard | None = None,
        finished: FinishedArea | None = None,
    ) -> None:
        self.settings = settings
        self.token = token
        self.report_fd = report_fd
        self.control_fd = control_fd
        self.board = board
        self.slot = slot
        self.seat = board.seat(slot)  # who wakes for a notification: wait_for_work
        # shared with the supervisor; of its own when run alone
        self.jobs = jobs or JobBoard(slot + 1)
        self.finished = finished or FinishedArea()
        self.worker_id = ""  # known in the child: worker_name(host, pid, token)
        self.parent_pid = 0
        self.queues = list(settings.queues)
        self.lock_base = locks.key(settings.advisory_namespace, 0)
        self.stopping = threading.Event()
        self.stop_reason = ""
        self.hand = Hand()
        # Queues paused since the batch was claimed (added by the signal handler, read
        # by the loop between two jobs; membership tests and adds only, no lock). The
        # jobs cancelled meanwhile are jobq.handlers.context's.
        self.paused_queues: set[str] = set()
        self.jobs_run = 0  # handlers started (what JOBQ_MAX_JOBS_PER_CHILD counts)
        self.batch_size = 1
        # Set by exchange for wait_for_work: whether the last claim found fewer jobs than
        # its limit, and then the seconds until the next due job (None: none pending).
        self.last_claim_short = True
        self.next_in: float | None | object = UNASKED

    # -- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        """Boot, work until asked to stop, leave. Returns the process exit code."""
        self.worker_id = worker_name(self.settings.hostname, os.getpid(), self.token)
        self.parent_pid = os.getppid()
        try:
            self.boot()
        except BootFailure as exc:
            log.error("worker.boot_failed worker=%s reason=%s", self.worker_id, exc)
            self.report(messages.BootError(str(exc)))
            return EXIT_BOOT_ERROR
        except DatabaseUnavailable:
            log.info("worker.exited worker=%s reason=%s before connecting", self.worker_id, self.stop_reason)
            return EXIT_OK
        log.info("worker.started worker=%s queues=%s pid=%s", self.worker_id, ",".join(self.queues), os.getpid())
        code = EXIT_OK
        try:
            self.work()
        except DatabaseUnavailable:
            pass  # asked to stop while the database was down: nothing more can be written
        except psycopg.Error as exc:
            log.error("worker.database_error worker=%s error=%s: %s", self.worker_id, type(exc).__name__, first_line(exc))
            self.stop_reason, code = "database error", EXIT_DATABASE_ERROR
        finally:
            self.leave()
        log.info("worker.exited worker=%s reason=%s jobs=%s", self.worker_id, self.stop_reason, self.hand.in_hand().recorded)
        return code

    def boot(self) -> None:
        self.wakeup = SelfPipe.for_child(stop=self.handle_stop, quit=self.handle_quit, control=self.handle_control)
        self.control = messages.Reader(self.control_fd) if self.control_fd >= 0 else None
        try:
            registry.load(self.settings.handlers)
        except Exception as exc:  # any error while importing a handler module stops the boot
            raise BootFailure(f"cannot import handler modules {self.settings.handlers}: {exc!r}") from exc
        url = self.settings.require_database_url()
        self.outcomes = Outcomes(self.hand, self.finished, worker_id=self.worker_id, lock_base=self.lock_base)
        self.session = ClaimSession(
            url, worker_id=self.worker_id, lock_base=self.lock_base, stopping=self.stopping, hand=self.hand
        )
        self.session.connect()
        try:
            self.session.run(lambda conn, _: check_schema(conn))
        except SchemaError as exc:
            raise BootFailure(str(exc)) from exc
        self.session.run(
            lambda conn, _: presence.register(conn, self.worker_id, self.settings.hostname, os.getpid(), self.queues)
        )
        self.declare_schedules()
        self.listener = Listener(url, self.queues, application_name=f"jobq listener {self.worker_id}")
        self.listener.connect()
        self.heartbeat = Heartbeat(
            self.session,
            self.hand,
            self.outcomes,
            worker_id=self.worker_id,
            hostname=self.settings.hostname,
            queues=self.queues,
            interval=self.settings.heartbeat_interval,
            parent_pid=self.parent_pid,
            orphaned=self.orphaned,
        )
        self.heartbeat.start()

    def declare_schedules(self) -> None:
        """Record the periodic schedules the handler modules declared on this worker's row,
        and upsert them (the newest changed definition wins; a pause stays)."""
        declared = declarations.declared()
        hashes = {name: schedule.definition_hash() for name, schedule in declared.items()}
        stale = self.settings.stale_threshold
        self.session.run(lambda conn, _: presence.declare(conn, self.worker_id, hashes))
        self.session.run(lambda conn, _: stored.declare(conn, self.worker_id, declared, stale_seconds=stale))

    def handle_stop(self, signum: int, frame: object) -> None:
        self.request_stop(signal.Signals(signum).name)

    def handle_quit(self, signum: int, frame: object) -> None:
        os._exit(EXIT_OK)  # immediate: the supervisor's maintenance recovers our jobs

    def handle_control(self, signum: int, frame: object) -> None:
        """The supervisor passed on a cancel or a pause. The one signal handler that does
        more than record: a cancel of the job whose handler runs now raises
        :class:`Cancelled` right here, in the handler's frame, as KeyboardInterrupt
        would (a handler in a blocking call, e.g. sleep, is interrupted too). Jobs not
        started yet are only marked; the loop gives them back."""
        if self.control is None:
            return
        try:
            arrived, _ = self.control.read()
        except ValueError:
            return  # garbage on the pipe: nothing we can act on
        interrupt = False
        for message in arrived:
            if isinstance(message, messages.Cancel):
                interrupt = context.request_cancel(message.job_id) or interrupt
            elif isinstance(message, messages.Pause):
                self.paused_queues.add(message.queue)
        if interrupt:
            raise Cancelled()

    def request_stop(self, reason: str) -> None:
        """Stop claiming; the running job finishes (signal-safe: only records)."""
        if not self.stopping.is_set():
            self.stop_reason = reason
            self.stopping.set()

    def orphaned(self) -> None:
        """The parent is gone (seen by the heartbeat thread): stop, and wake the loop."""
        self.request_stop("parent died")
        self.wakeup.wake()

    def leave(self) -> None:
        try:
            self.session.give_back(self.hand.take_waiting())
            self.outcomes.write(self.session)
            self.session.run(lambda conn, _: presence.leave(conn, self.worker_id))
        except (DatabaseUnavailable, psycopg.Error):
            unrecorded = len(self.hand.held())
            log.warning("worker.leaving_without_database worker=%s unrecorded=%s", self.worker_id, unrecorded)
        self.heartbeat.stop()
        self.listener.close()
        self.session.close()

    # -- the loop ----------------------------------------------------------------------

    def work(self) -> None:
        max_jobs = self.settings.max_jobs_per_child
        while not self.stopping.is_set():
            claimed = self.exchange()
            if not claimed:
                self.jobs.show(self.slot, None)
                self.wait_for_work()
                continue
            self.run_batch(claimed)
            if max_jobs and self.jobs_run >= max_jobs:
                self.request_stop(f"recycled after {self.jobs_run} jobs")

    def wait_for_work(self) -> None:
        next_in = self.next_in  # asked with the last claim when it looked like the end of the queue
        if next_in is UNASKED:
            next_in = self.session.run(lambda conn, _: leases.next_run_in(conn, self.queues).result())
        self.next_in = UNASKED
        timeout = self.settings.poll_interval
        if next_in is not None:
            timeout = min(timeout, max(next_in, IDLE_RECHECK))  # type: ignore[arg-type]
        # Counted idle only while listening: a worker without a notification to wait
        # for must not keep the others from waking.
        self.board.mark(self.slot, self.listener.listening)
        try:
            self.listener.wait(timeout, [self.wakeup.read_fd], self.seat)
        finally:
            self.board.mark(self.slot, False)
            self.seat.forget()
        self.wakeup.drain()
        if os.getppid() != self.parent_pid:
            self.request_stop("parent died")

    def run_batch(self, claimed: list[Claim]) -> None:
        self.hand.line_up(claimed)
        all_short = True
        while not self.stopping.is_set() and (claim := self.next_job()) is not None:
            outcome = self.run_one(claim)
            self.hand.finished()
            if outcome.result.cancelled:
                self.session.record_cancelled(claim, by=f"worker:{self.worker_id}")
                log.info("job.cancelled id=%s type=%s worker=%s", claim.job.id, claim.job.type, self.worker_id)
            else:
                self.outcomes.add(outcome)
            all_short = all_short and outcome.result.seconds < hand.SHORT_JOB
            if self.outcomes.due():
                self.outcomes.write(self.session)
        self.session.give_back(self.hand.take_waiting())
        context.forget_cancels()  # new claims never take cancelled jobs or paused queues
        self.paused_queues.clear()
        self.batch_size = hand.next_size(self.batch_size, all_short=all_short, cap=self.settings.claim_batch)

    def next_job(self) -> Claim | None:
        """The next job of the batch to run, after giving back those an operator withdrew
        (cancelled, or of a queue paused) since the batch was claimed."""
        withdrawn = []
        if self.paused_queues or context.cancels_pending():
            withdrawn = self.hand.take_waiting_where(
                lambda c: context.was_cancelled(c.job_id) or c.job.queue in self.paused_queues
            )
        if withdrawn:
            log.info("worker.withdrawn worker=%s jobs=%s", self.worker_id, ",".join(str(c.job_id) for c in withdrawn))
            self.session.give_back(withdrawn)
        return self.hand.start_next()

    def run_one(self, claim: Claim) -> Outcome:
        job = claim.job
        handler = registry.find(job.type)
        timeout = handler.timeout if handler and handler.timeout else self.settings.job_timeout
        deadline = time.monotonic() + timeout
        self.hand.runs_until(deadline)
        self.jobs.show(self.slot, messages.Started(job.id, claim.lease, deadline, timeout))
        self.jobs_run += 1
        result = execution.run(job, handler)
        if result.ok:
            return Outcome(claim, result)
        if result.snooze is not None:
            if job.snoozes < self.settings.max_snoozes:
                return Outcome(claim, result, result.snooze)
            error = f"snoozed {job.snoozes} times, the most JOBQ_MAX_SNOOZES allows; this snooze is a failed run"
            result = replace(result, error=error, error_kind="Snooze", snooze=None)
        if result.not_retried is not None:  # the handler's policy: dead now, no retry spent
            return Outcome(claim, result, 0.0, job.attempt)
        delay = handler.retry_delay(job.attempt) if handler is not None else None
        if delay is None:
            if handler is not None and handler.backoff is not None:
                log.error("job.backoff_failed id=%s type=%s: the handler's backoff gave no delay; the global one is used",
                          job.id, job.type)
            delay = self.settings.retry_delay(job.attempt)
        return Outcome(claim, result, delay, handler.max_retries if handler else None)

    # -- talking to the database ---------------------------------------------------------

    def exchange(self) -> list[Claim]:
        """Write the buffered outcomes and claim the next batch: one round trip (a
        pipeline), one transaction. Returns the jobs to run (locked by this session).

        With nothing in hand (an idle worker woken by a notification: no outcome can be
        waiting) the claim goes alone, without a pipeline: its rows and its commit come
        back in one exchange of messages instead of two. When the last claim found fewer
        jobs than it asked for, the seconds until the next due job are asked in the same
        round trip, for the wait that probably follows (wait_for_work)."""
        limit = self.batch_size
        if self.settings.max_jobs_per_child:
            limit = min(limit, self.settings.max_jobs_per_child - self.jobs_run)
        ask_next = self.last_claim_short
        self.next_in = UNASKED

        def claim(conn: psycopg.Connection) -> leases.Deferred[list[Claim]]:
            return leases.claim(conn, self.queues, worker_id=self.worker_id, limit=limit, lock_base=self.lock_base)

        asked: list[leases.Deferred[float | None]] = []

        def claim_and_ask(conn: psycopg.Connection) -> leases.Deferred[list[Claim]]:
            claimed = claim(conn)
            if ask_next:  # in the same pipeline, read after it: no round trip of its own
                asked[:] = [leases.next_run_in(conn, self.queues)]
            return claimed

        # The claimed jobs are in hand before the session's lock is let go: a reconnect
        # in between would give back, as orphans, jobs this worker is about to run.
        with self.session.lock:
            if self.hand.held():  # outcomes may be waiting (a job is let go once its outcome is written)
                claimed = self.outcomes.write(self.session, also=claim_and_ask) or []
                if asked:
                    self.next_in = asked[0].result()
            else:
                claimed = self.session.run(lambda conn, _: claim(conn).result())
            self.hand.hold(claimed)
        self.last_claim_short = len(claimed) < limit
        if log.isEnabledFor(logging.DEBUG):  # per job: not even a record at INFO
            for job in claimed:
                log.debug(
                    "job.claimed id=%s type=%s queue=%s attempt=%s worker=%s",
                    job.job.id, job.job.type, job.job.queue, job.job.attempt, self.worker_id,
                )
        unlocked = [job for job in claimed if not job.locked]
        if unlocked:
            # Another session holds the job's lock: never run it here.
            self.session.give_back(unlocked)
            claimed = [job for job in claimed if job.locked]
            self.next_in = UNASKED  # asked before these went back to pending
        return claimed

    # -- the supervisor's pipe -----------------------------------------------------------

    def report(self, message: messages.Message) -> None:
        try:
            os.write(self.report_fd, messages.encode(message))
        except BlockingIOError:
            log.warning("worker.report_dropped worker=%s: the supervisor is not reading", self.worker_id)
        except OSError:
            pass  # the supervisor is gone; the parent check stops us
