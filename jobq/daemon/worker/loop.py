"""A worker process: claim due jobs of its queues, run them one at a time, record their
outcomes, and sleep on LISTEN when there is nothing to do.

The supervisor builds a :class:`WorkerLoop` before the fork and calls :meth:`run` in the
child; everything that opens a file, a socket or a connection happens there. The loop,
top to bottom::

    a batch of short CPU-bound jobs next -> wait for a turn at the cores (turns.py)
    exchange: write the buffered outcomes and claim the next batch, one round trip
              (or take the jobs handed to this worker by their enqueue: handed.py)
    nothing claimed -> show idle, wait (notification, poll interval, next run_at)
    run the batch: one job at a time, outcome into the buffer, written within FLUSH_AFTER
                   seconds (by this thread or the heartbeat) or with the next claim
    stop asked -> give back claimed jobs, flush, leave

Operators reach a worker through its control pipe (:meth:`WorkerLoop.handle_control`, on
SIGUSR1 from the supervisor): a cancel of the running job raises :class:`jobq.Cancelled` in
its handler; cancelled jobs and jobs of a paused queue waiting in the batch go back unstarted.

Every job the worker claimed is held by one object, its :class:`~jobq.daemon.worker.flight.InFlight`
(:mod:`jobq.daemon.worker.flight`: each job's stage, and the boards and handler's view it
writes); this loop, the heartbeat thread and the claim session ask it. What a run comes
to and how outcomes are written is :mod:`jobq.daemon.worker.outcomes`.
"""

from __future__ import annotations

import logging
import os
import functools
import signal
import threading
import time

import psycopg

from jobq.jobs import leases
from jobq.store import locks
from jobq.jobs.leases import Claim
from jobq.limits.gate import Gate
from jobq.daemon.worker import backlog, collector, control, held, outcomes, registration
from jobq.daemon.worker.registration import BootFailure
from jobq.handlers import coroutines, execution, registry
from jobq.observe import tracing
from jobq.daemon import messages, presence
from jobq.daemon.worker.flight import Flight, InFlight, Outcome
from jobq.daemon.worker.pacing import Pace
from jobq.daemon.worker.reports import Reports
from jobq.daemon.worker.turns import Turns
from jobq.daemon.boards.cores import CoreTokens
from jobq.daemon.boards.finished import FinishedArea
from jobq.daemon.worker.handed import HandedJobs
from jobq.daemon.worker.heartbeat import Heartbeat
from jobq.daemon.worker.lifeline import Lifeline
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.listener import Listener
from jobq.daemon.worker.outcomes import OutcomeWriter
from jobq.daemon.worker.served import ServedQueues
from jobq.daemon.worker.session import ClaimSession
from jobq.daemon.wakeup import SelfPipe
from jobq.daemon.exits import EXIT_BOOT_ERROR, EXIT_DATABASE_ERROR, EXIT_OK
from jobq.store.connections import first_line
from jobq.errors import Cancelled, ConfigError, DatabaseUnavailable, SchemaError
from jobq.store.migrate import check_schema
from jobq.settings import Settings

log = logging.getLogger(__name__)

IDLE_RECHECK = 0.05  # a due job we could not claim (locked by a peer): look again this soon
UNASKED = object()  # WorkerLoop.next_in before the database was asked


class WorkerLoop:
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
        cores: CoreTokens | None = None,
    ) -> None:
        self.settings = settings
        self.token = token
        self.reports = Reports(report_fd, pool_grows=settings.min_workers < settings.concurrency)
        self.control_fd = control_fd
        self.board = board
        self.slot = slot
        self.seat = board.seat(slot)  # who wakes for a notification: wait_for_work
        # Every job claimed, each in its stage; it writes the boards shared with the
        # supervisor (of its own when run alone).
        self.in_flight = InFlight(jobs, slot, finished)
        self.worker_id = ""  # known in the child: presence.worker_name(host, pid, token)
        self.parent_pid = 0
        self.queues = ServedQueues(settings)
        self.gate = Gate()  # whether a limit applies to its queues: the claim under limits
        self.backlog = backlog.BacklogWatch()  # a burst the planner was not told of: analysed
        self.lock_base = locks.key(settings.advisory_namespace, 0)
        self.stopping = threading.Event()
        self.stop_reason = ""
        self.jobs_run = 0  # handlers started (what JOBQ_MAX_JOBS_PER_CHILD counts)
        self.pace = Pace(settings.claim_batch)  # the claim size (jobq.daemon.worker.pacing)
        self.cores = cores or CoreTokens(0)  # turns at the cores for batches of short jobs (run alone: none needed)
        # Set by exchange for wait_for_work: whether the last claim found fewer jobs than
        # its limit, and then the seconds until the next due job (None: none pending).
        self.last_claim_short = True
        self.next_in: float | None | object = UNASKED
        self.lifeline: Lifeline | None = None  # made in boot: a control signal may come first

    # -- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        """Boot, work until asked to stop, leave. Returns the process exit code."""
        self.worker_id = self.reports.worker_id = presence.worker_name(self.settings.hostname, os.getpid(), self.token)
        self.parent_pid = os.getppid()
        try:
            self.boot()
        except BootFailure as exc:
            log.error("worker.boot_failed worker=%s reason=%s", self.worker_id, exc)
            self.reports.boot_error(str(exc))
            return EXIT_BOOT_ERROR
        except DatabaseUnavailable:
            log.info("worker.exited worker=%s reason=%s before connecting", self.worker_id, self.stop_reason)
            return EXIT_OK
        log.info("worker.started worker=%s queues=%s pid=%s", self.worker_id, self.queues, os.getpid())
        code = EXIT_OK
        try:
            self.work()
        except DatabaseUnavailable:
            pass  # asked to stop while the database was down: nothing more can be written
        except psycopg.Error as exc:
            log.error("worker.database_error worker=%s error=%s: %s", self.worker_id, type(exc).__name__, first_line(exc))
            self.stop_reason, code = "database error", EXIT_DATABASE_ERROR
        finally:
            self.leave(write_outcomes=code != EXIT_DATABASE_ERROR)
        recorded = self.in_flight.snapshot().recorded
        log.info("worker.exited worker=%s reason=%s jobs=%s", self.worker_id, self.stop_reason, recorded)
        return code

    def boot(self) -> None:
        self.wakeup = SelfPipe.for_child(stop=self.handle_stop, quit=self.handle_quit, control=self.handle_control)
        self.control = messages.Reader(self.control_fd) if self.control_fd >= 0 else None
        registration.load_handlers(self.settings)
        try:
            url = self.settings.require_database_url()
        except ConfigError as exc:
            raise BootFailure(str(exc)) from exc
        self.outcomes = OutcomeWriter(self.in_flight, worker_id=self.worker_id, lock_base=self.lock_base)
        self.session = ClaimSession(
            url, worker_id=self.worker_id, lock_base=self.lock_base, stopping=self.stopping, in_flight=self.in_flight
        )
        self.session.connect()
        try:
            self.session.run(lambda conn, _: check_schema(conn))
        except SchemaError as exc:
            raise BootFailure(str(exc)) from exc
        announce = functools.partial(
            registration.announce, worker_id=self.worker_id, hostname=self.settings.hostname, queues=self.queues
        )
        self.session.run(lambda conn, _: announce(conn))
        registration.declare_schedules(self.session, worker_id=self.worker_id, stale_seconds=self.settings.stale_threshold)
        # Connected by the first wait for work: a worker kept busy from its start opens none.
        hand_to = self.worker_id if self.settings.hand_off else None  # jobs handed by their enqueue: handed.py
        self.listener = Listener(url, self.queues.listened, application_name=f"jobq listener {self.worker_id}", hand_to=hand_to)
        self.handed = HandedJobs(self.session, self.listener, self.in_flight, lock_base=self.lock_base)
        dead_after = self.settings.dead_connection_timeout  # 0: connections not watched
        self.lifeline = lifeline = Lifeline(
            self.session, self.in_flight, worker_id=self.worker_id, dead_after=dead_after, grace=self.settings.cancel_grace
        )
        self.session.on_lost = lifeline.lose
        self.turns = Turns(self.cores, self.slot, wakeup=self.wakeup, stopping=self.stopping,
                           after_wait=self.stop_if_orphaned, board=self.board)
        self.heartbeat = Heartbeat(
            self.session,
            self.in_flight,
            self.outcomes,
            worker_id=self.worker_id,
            announce=announce,
            interval=lifeline.beat_interval(self.settings.heartbeat_interval),
            parent_pid=self.parent_pid,
            orphaned=self.orphaned,
            lost=lifeline.lose,
            long_job=self.job_ran_long,
        )
        self.heartbeat.start()
        lifeline.start()
        collector.settle()

    def handle_stop(self, signum: int, frame: object) -> None:
        self.request_stop(signal.Signals(signum).name)

    def handle_quit(self, signum: int, frame: object) -> None:
        os._exit(EXIT_OK)  # immediate: the supervisor's maintenance recovers our jobs

    def handle_control(self, signum: int, frame: object) -> None:
        """The supervisor passed on a cancel or a pause. The one signal handler that does
        more than record: a cancel of the job whose handler runs now raises
        :class:`Cancelled` right here, in the handler's frame, as KeyboardInterrupt
        would (a handler in a blocking call, e.g. sleep, is interrupted too). Jobs not
        started yet are only marked; the loop gives them back. (The jobs in flight
        record both without their lock: this frame may be on top of one holding it.)
        While an ``async def`` handler runs, its task is cancelled instead, by the loop
        (:func:`jobq.handlers.coroutines.cancel_running`)."""
        if self.control_arrived() and not coroutines.cancel_running():
            raise Cancelled()

    def control_arrived(self) -> bool:
        """Whether the handler running now is to be stopped (:func:`jobq.daemon.worker.control.arrived`)."""
        return control.arrived(self.control, self.in_flight, self.lifeline)

    def request_stop(self, reason: str) -> None:
        """Stop claiming; the running job finishes (signal-safe: only records)."""
        if not self.stopping.is_set():
            self.stop_reason = reason
            self.stopping.set()

    def orphaned(self) -> None:
        """The parent is gone (seen by the heartbeat thread): stop, and wake the loop."""
        self.request_stop("parent died")
        self.wakeup.wake()

    def leave(self, *, write_outcomes: bool = True) -> None:
        """Give back the jobs not started, write the outcomes waiting (not after a
        database error: the worker leaves them to the supervisor's maintenance, which
        records the successes noted in its finished area; the rest go back to pending)
        and remove the worker's row."""
        try:
            self.handed.leave()
            self.session.give_back(self.in_flight.take_waiting())
            if write_outcomes:
                self.outcomes.write(self.session)
            self.session.run(lambda conn, _: presence.leave(conn, self.worker_id))
        except (DatabaseUnavailable, psycopg.Error):
            unrecorded = len(self.in_flight.held())
            log.warning("worker.leaving_without_database worker=%s unrecorded=%s", self.worker_id, unrecorded)
        self.turns.give_back()
        self.heartbeat.stop()
        self.lifeline.stop()  # type: ignore[union-attr]  # made in boot, before anything leaves
        self.listener.close()
        self.session.close()

    # -- the loop ----------------------------------------------------------------------

    def work(self) -> None:
        max_jobs = self.settings.max_jobs_per_child
        first = True  # the first claim: see Turns.take
        while not self.stopping.is_set():
            if not self.turns.take(self.pace.wants_a_core, flush=self.write_held, first=first):
                continue
            first = False
            if not self.exchange():
                self.turns.give_back()
                self.in_flight.idle()
                self.wait_for_work()
                continue
            self.run_batch()
            if max_jobs and self.jobs_run >= max_jobs:
                self.request_stop(f"recycled after {self.jobs_run} jobs")

    def write_held(self) -> None:
        """Write the buffered outcomes now (before a wait for a turn: no job waits on it)."""
        if self.in_flight.held():
            self.outcomes.write(self.session)

    def wait_for_work(self) -> None:
        next_in = self.next_in  # asked with the last claim when it looked like the end of the queue
        if next_in is UNASKED:
            next_in = self.session.run(lambda conn, _: leases.next_run_in(conn, self.queues.names).result())
        self.next_in = UNASKED
        timeout = self.settings.poll_interval
        if next_in is not None:
            timeout = min(timeout, max(next_in, self.gate.recheck_after(IDLE_RECHECK)))  # type: ignore[arg-type]
        # Counted idle only while listening: a worker without a notification to wait
        # for must not keep the others from waking.
        self.board.mark(self.slot, self.listener.listening)
        try:
            self.listener.wait(timeout, [self.wakeup.read_fd], self.seat)
            held.gather_wake_ups(self.listener, self.gate, self.wakeup, self.seat)  # jobs its keys hold back
        finally:
            self.board.mark(self.slot, False)
            self.seat.forget()
        self.wakeup.drain()
        self.handed.waited()
        self.queues.woken(self.listener.woken_by)  # a queue may have appeared
        self.stop_if_orphaned()

    def stop_if_orphaned(self) -> None:
        """After a wait: a worker whose supervisor is gone stops."""
        if os.getppid() != self.parent_pid:
            self.request_stop("parent died")

    def run_batch(self) -> None:
        """Run the jobs in line, one at a time, each outcome into the buffer (written
        when due); then give back what a stop, or a batch that ran too long, left in line."""
        self.pace.batch_started()
        while not self.stopping.is_set() and (flight := self.next_job()) is not None:
            outcome = self.run_one(flight)
            self.in_flight.buffer(outcome)
            if self.in_flight.due():
                self.outcomes.write(self.session)
            if not self.pace.ran(outcome.result.seconds):
                break
        self.session.give_back(self.in_flight.take_waiting())
        self.in_flight.batch_over()  # new claims never take cancelled jobs or paused queues
        self.pace.batch_over()
        if self.pace.waited:
            self.reports.blocked()

    def job_ran_long(self, elapsed: float) -> None:
        """The heartbeat's long-job rule (a job has run ``elapsed`` s): the turn at the cores
        goes to another worker; the supervisor hears of it unless the job only waited for a CPU."""
        self.turns.give_back()
        if self.pace.long_by_itself(elapsed):
            self.reports.blocked()

    def next_job(self) -> Flight | None:
        """The next job of the batch, started, after giving back those an operator
        withdrew (cancelled, or of a queue paused) since the batch was claimed."""
        withdrawn = self.in_flight.take_withdrawn()
        if withdrawn:
            log.info("worker.withdrawn worker=%s jobs=%s", self.worker_id, ",".join(str(c.job_id) for c in withdrawn))
            self.session.give_back(withdrawn)
        self.session.check_if_suspect()  # a dead session's locks are gone: re-lock before a start
        return self.in_flight.start_next(self.timeout_of)

    def timeout_of(self, claim: Claim) -> float:
        """Seconds the job may run: its handler's timeout, or JOBQ_JOB_TIMEOUT."""
        handler = registry.find(claim.job.type)
        return handler.timeout if handler and handler.timeout else self.settings.job_timeout

    def run_one(self, flight: Flight) -> Outcome:
        """Run the started job's handler; what the run comes to."""
        job = flight.claim.job
        handler = registry.find(job.type)
        self.jobs_run += 1
        result = execution.run(job, handler, flight.run)
        self.in_flight.finished()
        return outcomes.decide(flight.claim, result, handler, self.settings)

    # -- talking to the database ---------------------------------------------------------

    def exchange(self) -> bool:
        """Write the buffered outcomes and claim the next batch: one round trip (a
        pipeline), one transaction. The jobs claimed are in flight, in line; returns
        whether any is to run here (locked by this session).

        With nothing in flight (an idle worker woken by a notification: no outcome can be
        waiting) the claim goes alone, without a pipeline: its rows and its commit come
        back in one exchange of messages instead of two. When the last claim found fewer
        jobs than it asked for, the seconds until the next due job are asked in the same
        round trip, for the wait that probably follows (wait_for_work). Jobs handed to this
        worker by their enqueue (:mod:`jobq.daemon.worker.handed`) are taken instead."""
        if (handed := self.handed.take()) is not None and self.listener.woken_by is None:
            return handed  # handed alone: no claim (with a wake-up of ours too, both)
        self.queues.refresh(self.session)
        limit = min(self.pace.size, self.session.lock_budget)
        if self.settings.max_jobs_per_child:
            limit = min(limit, self.settings.max_jobs_per_child - self.jobs_run)
        ask_next = self.last_claim_short
        self.next_in = UNASKED
        claim = functools.partial(self.gate.claim_for(self.session, self.queues.names, hand_off=self.settings.hand_off),
                                  queues=self.queues.names, worker_id=self.worker_id, limit=limit, lock_base=self.lock_base)
        asked: list[leases.Deferred[float | None]] = []

        def claim_and_ask(conn: psycopg.Connection, freed: list[Claim]) -> leases.Deferred[list[Claim]]:
            claimed = claim(conn, freed=freed)
            if ask_next:  # in the same pipeline, read after it: no round trip of its own
                asked[:] = [leases.next_run_in(conn, self.queues.names)]
            return claimed

        # The claimed jobs are in flight before the session's lock is let go: a reconnect
        # in between would give back, as orphans, jobs this worker is about to run.
        started = time.monotonic()
        with tracing.span("jobq claim", **{"jobq.claim.limit": limit}), self.session.lock:
            if self.in_flight.held():  # outcomes may be waiting (a job is let go once its outcome is written)
                claimed = self.outcomes.write(self.session, also=claim_and_ask) or []
                if asked:
                    self.next_in = asked[0].result()
            else:
                claimed = self.session.run(lambda conn, _: claim(conn, freed=[]).result())
            refused = self.in_flight.hold(claimed)
        self.last_claim_short = len(claimed) < limit
        self.gate.claimed(len(claimed), time.monotonic() - started)
        self.backlog.claimed(self.session, len(claimed), limit)
        if log.isEnabledFor(logging.DEBUG):  # per job: not even a record at INFO
            for job in claimed:
                log.debug("job.claimed id=%s type=%s queue=%s attempt=%s worker=%s",
                          job.job.id, job.job.type, job.job.queue, job.job.attempt, self.worker_id)
        if refused:
            # Another session holds the job's lock: never run it here.
            self.session.give_back(refused)
            self.next_in = UNASKED  # asked before these went back to pending
        return len(refused) < len(claimed) or bool(handed)
