"""A worker's jobs in flight: the one owner of what a claimed job is, from its claim
until the worker is done with it.

Each job the worker claimed is a :class:`Flight`, in one :class:`Stage` at a time::

    CLAIMED --start_next--> STARTED --finished--> FINISHED --buffer--> BUFFERED
      |  |                                                   take_outcomes |  ^ returned
      |  +--relocked (pending again)--> TAKEN_AWAY                         v  | (write failed)
      +--take_waiting, take_withdrawn, overdue--> GIVEN_BACK            WRITING --written--> WRITTEN

CLAIMED jobs wait in line; one at a time is STARTED (its handler runs); FINISHED lasts until its
outcome is decided. The last three are ends: the job is let go (GIVEN_BACK: for the caller to release).

Everything else asks :class:`InFlight`; nothing keeps a copy. What others must see is
written at transitions, never read back for a decision: the job board
(:mod:`jobq.daemon.boards.jobs`, read by the supervisor) shows a job when it is STARTED,
before its handler is called, until :meth:`InFlight.idle`; the finished area
(:mod:`jobq.daemon.boards.finished`, read by the supervisor once the worker is dead)
notes an outcome when BUFFERED and lets it go when WRITTEN; the handler's view
(:mod:`jobq.handlers.context`) is the :class:`~jobq.handlers.context.Run` made when
STARTED, installed by :func:`jobq.handlers.execution.run` while the handler runs.

Threads. The main thread makes every transition but these: the heartbeat thread marks
the long-running job (:meth:`InFlight.overdue`, which gives the waiting jobs back) and
writes outcomes; a reconnect, on whichever thread meets it, applies what the re-lock
found (:meth:`InFlight.relocked`); the signal handler records cancels and pauses (on the
main thread, on top of any frame: it never takes the lock). Every other method takes
the one lock and does no I/O but the boards' memory.

The hand-off of outcomes. Both threads write outcomes (the heartbeat while the main
thread is inside a long handler, so that an outcome is committed within milliseconds
whatever the next job does). :meth:`InFlight.take_outcomes` moves every BUFFERED flight
to WRITING under the lock, as one :class:`Taken` that is the calling thread's alone
(nothing more can be taken while it is out) until it says :meth:`InFlight.written` or
:meth:`InFlight.returned` (BUFFERED again, first). So an outcome is always in exactly one
place, the buffer, the one Taken or written: written at most once, by one thread, never
lost.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from jobq.daemon.boards.finished import Failure, FinishedArea
from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.messages import Started
from jobq.handlers import context
from jobq.handlers.context import Progress
from jobq.handlers.execution import RunResult
from jobq.jobs.leases import Claim
from jobq.daemon.worker.pacing import DEFER_RUNNING, FLUSH_AFTER


class Stage(enum.Enum):
    CLAIMED = "claimed"  # held (its lock taken), waiting in line to run
    STARTED = "started"  # its handler runs: the job board shows it
    FINISHED = "finished"  # its handler returned; its outcome is being decided
    BUFFERED = "buffered"  # its outcome waits to be written (a success: also in the finished area)
    WRITING = "writing"  # its outcome is in one thread's write (a Taken)
    WRITTEN = "written"  # end: its outcome is written (accepted, or rejected by the lease)
    GIVEN_BACK = "given back"  # end: never started, to be released by the caller
    TAKEN_AWAY = "taken away"  # end: pending again after a reconnect, not to run here


# By their bare names below: a member read through its Enum class costs 70 ns, a dozen a job.
CLAIMED, STARTED, FINISHED, BUFFERED, WRITING, WRITTEN, GIVEN_BACK, TAKEN_AWAY = Stage


@dataclass
class Outcome:
    """What a run comes to: its result, and for a failure or a snooze the delay before
    the job is due again (and the retries its handler allows)."""

    claim: Claim
    result: RunResult
    delay: float = 0.0
    max_retries: int | None = None


class Flight:
    """One job in flight. Changed only by :class:`InFlight`; others read it."""

    __slots__ = ("job_id", "claim", "stage", "run", "started", "deadline", "marked", "outcome")

    def __init__(self, claim: Claim) -> None:
        self.job_id = claim.job_id
        self.claim = claim  # as held now: after a reconnect, locked is what the re-lock found
        self.stage = CLAIMED
        self.run: context.Run | None = None  # from STARTED: the handler's view of its run
        self.started = 0.0  # monotonic
        self.deadline = 0.0  # monotonic; the supervisor kills the worker there
        self.marked = False  # marked running by the heartbeat (the long-job rule)
        self.outcome: Outcome | None = None  # from BUFFERED


@dataclass(slots=True)
class Taken:
    """Outcomes one thread took to write: its alone until it says written or returned."""

    flights: list[Flight]
    noted_upto: int  # the finished area's end when they were taken
    oldest: float | None
    unnoted: bool


@dataclass(frozen=True, slots=True)
class Overdue:
    """A running job past DEFER_RUNNING: to be marked running, ``elapsed`` seconds after
    it started, with the jobs that waited behind it, let go, to be given back."""

    claim: Claim
    elapsed: float
    waiting: list[Claim]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the heartbeat writes: the running job, the jobs held, the outcomes recorded."""

    running: int | None
    held: list[Claim]
    recorded: int


class InFlight:
    """Every job the worker claimed and is not done with, each in its stage."""

    def __init__(
        self, job_board: JobBoard | None = None, slot: int = 0, finished_area: FinishedArea | None = None
    ) -> None:
        """The boards it writes, shared with the supervisor (its own when none is given)."""
        self.job_board = job_board or JobBoard(slot + 1)
        self.slot = slot  # the worker's record on the job board
        self.finished_area = finished_area or FinishedArea()
        self._lock = threading.Lock()
        self._flights: dict[int, Flight] = {}  # every job not at an end, by id
        self._line: deque[Flight] = deque()  # CLAIMED, in claim order
        self._running: Flight | None = None  # STARTED
        self._buffer: list[Flight] = []  # BUFFERED, in the order they finished
        self._oldest: float | None = None  # when the oldest buffered outcome was buffered
        self._unnoted = False  # an outcome is buffered that the finished area does not hold
        self._taken: Taken | None = None  # WRITING: out with one thread
        self._recorded = 0  # outcomes written and accepted
        # Added to by the signal handler without the lock (membership tests only elsewhere).
        self._cancelled: set[int] = set()  # cancels heard since the batch was claimed
        self._paused: set[str] = set()  # queues paused since the batch was claimed

    # -- the main thread: claimed, started, finished, buffered ---------------------------

    def hold(self, claims: Iterable[Claim]) -> list[Claim]:
        """Newly claimed jobs, CLAIMED, in line in the order given. A claim whose lock
        another session holds is never run here: never in flight, it is returned for the
        caller to give back."""
        refused = []
        with self._lock:
            for claim in claims:
                if claim.locked:
                    flight = Flight(claim)
                    self._flights[claim.job_id] = flight
                    self._line.append(flight)
                else:
                    refused.append(claim)
        return refused

    def start_next(self, timeout_of: Callable[[Claim], float]) -> Flight | None:
        """The next job in line, now STARTED and shown on the job board with its deadline
        (``timeout_of`` its claim, from now); None when none waits."""
        with self._lock:
            if not self._line:
                return None
            if self._running is not None:
                raise InvalidTransition(f"job {self._running.job_id} runs: one job at a time")
            flight = self._line.popleft()
            if flight.stage is not CLAIMED:
                self._refuse(flight, CLAIMED)
            timeout = timeout_of(flight.claim)
            flight.stage, flight.started = STARTED, time.monotonic()
            flight.deadline = flight.started + timeout
            flight.run = context.Run(flight.job_id)
            self._running = flight
            # After _running is set: a cancel heard from here on marks the run itself.
            flight.run.cancel_requested = flight.job_id in self._cancelled
        self.job_board.show(self.slot, Started(flight.job_id, flight.claim.lease, flight.deadline, timeout))
        return flight

    def finished(self) -> Flight:
        """The running job's handler returned: FINISHED."""
        with self._lock:
            flight = self._running
            if flight is None:
                raise InvalidTransition("no job is running")
            if flight.stage is not STARTED:
                self._refuse(flight, STARTED)
            flight.stage, self._running = FINISHED, None
            return flight

    def buffer(self, outcome: Outcome) -> None:
        """The finished job's outcome: BUFFERED, and noted in the finished area; one that is not (a cancel, a
        record too large for the room left) makes the buffer :meth:`due` at once: a kill never loses it."""
        result, claim = outcome.result, outcome.claim
        failure = None
        if result.error is not None and result.snooze is None and not result.cancelled:
            failure = Failure(result.error, outcome.delay, outcome.max_retries, result.span)
        with self._lock:
            flight = self._flights[claim.job_id]
            if flight.stage is not FINISHED:
                self._refuse(flight, FINISHED)
            flight.stage, flight.outcome = BUFFERED, outcome
            snooze = outcome.delay if result.snooze is not None else None
            noted = not result.cancelled and self.finished_area.note(
                claim.job_id, claim.lease, result.seconds, result.result_json, failure, snooze)
            self._buffer.append(flight)
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._unnoted = self._unnoted or not noted

    def take_waiting(self) -> list[Claim]:
        """Every job still in line, GIVEN_BACK (the caller releases them)."""
        with self._lock:
            waiting, self._line = list(self._line), deque()
            return self._let_go(waiting, GIVEN_BACK)

    def take_withdrawn(self) -> list[Claim]:
        """The jobs in line that an operator withdrew since the batch was claimed
        (cancelled, or of a queue paused), GIVEN_BACK; the others keep their place."""
        if not self._cancelled and not self._paused:
            return []
        with self._lock:
            kept: deque[Flight] = deque()
            taken = []
            for flight in self._line:
                withdrawn = flight.job_id in self._cancelled or flight.claim.job.queue in self._paused
                (taken if withdrawn else kept).append(flight)
            self._line = kept
            return self._let_go(taken, GIVEN_BACK)

    def batch_over(self) -> None:
        """Its cancels and pauses are of no more use (new claims never take them)."""
        self._cancelled.clear()
        self._paused.clear()

    def idle(self) -> None:
        """A claim brought nothing: the job board shows no job."""
        self.job_board.show(self.slot, None)

    # -- the signal handler: no lock ---------------------------------------------------

    def request_cancel(self, job_id: int) -> bool:
        """An operator cancelled ``job_id``: a waiting job is withdrawn before it starts
        (:meth:`take_withdrawn`), a running one's handler sees
        :func:`jobq.cancel_requested`. True if its handler runs now (the caller raises
        :class:`jobq.Cancelled` in it). Signal-safe: takes no lock."""
        self._cancelled.add(job_id)
        flight = self._running
        if flight is None or flight.job_id != job_id or flight.run is None:
            return False
        flight.run.cancel_requested = True
        return context.current() is flight.run

    def pause(self, queue: str) -> None:
        """An operator paused ``queue``: its waiting jobs are withdrawn. Signal-safe."""
        self._paused.add(queue)

    def running(self) -> Flight | None:  # the STARTED job (its handler runs), if any; one read: signal-safe
        return self._running

    def was_cancelled(self, job_id: int) -> bool:
        """Whether a cancel of ``job_id`` was heard since the batch was claimed."""
        return job_id in self._cancelled

    # -- the hand-off: either thread writes outcomes --------------------------------------

    def due(self) -> bool:
        """Whether to write now: an outcome that a kill would lose waits (it is not in
        the finished area), or the oldest has waited FLUSH_AFTER seconds."""
        with self._lock:
            return self._unnoted or (self._oldest is not None and time.monotonic() - self._oldest >= FLUSH_AFTER)

    def take_outcomes(self) -> Taken | None:
        """Every buffered outcome, now WRITING and the calling thread's alone, which ends
        it with :meth:`written` or :meth:`returned`. None when nothing is buffered, or
        another thread's outcomes are out (they are its to end)."""
        with self._lock:
            if not self._buffer or self._taken is not None:
                return None
            taken = Taken(self._buffer, self.finished_area.end(), self._oldest, self._unnoted)
            for flight in taken.flights:
                flight.stage = WRITING
            self._buffer, self._oldest, self._unnoted, self._taken = [], None, False, taken
            return taken

    def written(self, taken: Taken, rejected: set[int]) -> None:
        """The taken outcomes are written (those of ``rejected`` refused by their lease):
        WRITTEN, let go from here and from the finished area."""
        with self._lock:
            self._end_taken(taken)
            self._let_go(taken.flights, WRITTEN)
            self._recorded += len(taken.flights) - len(rejected)
            self.finished_area.written(taken.noted_upto)

    def returned(self, taken: Taken) -> None:
        """The write of the taken outcomes failed: BUFFERED again, ahead of those buffered
        since, as old and as unnoted as they were."""
        with self._lock:
            self._end_taken(taken)
            for flight in taken.flights:
                flight.stage = BUFFERED
            self._buffer[:0] = taken.flights
            if taken.oldest is not None:
                self._oldest = taken.oldest if self._oldest is None else min(self._oldest, taken.oldest)
            self._unnoted = self._unnoted or taken.unnoted

    # -- the heartbeat thread ---------------------------------------------------------

    def overdue(self) -> Overdue | None:
        """Once per job: the running job if it has run DEFER_RUNNING seconds, and the jobs
        waiting behind it, GIVEN_BACK."""
        with self._lock:
            running = self._running
            if running is None or running.marked:
                return None
            elapsed = time.monotonic() - running.started
            if elapsed < DEFER_RUNNING:
                return None
            running.marked = True
            waiting, self._line = list(self._line), deque()
            return Overdue(running.claim, elapsed, self._let_go(waiting, GIVEN_BACK))

    def past_deadline(self, grace: float) -> bool:
        """Whether the running job has outlived its deadline by ``grace`` seconds: the
        supervisor, which kills at the deadline, did not (it never saw it)."""
        with self._lock:
            running = self._running
            return running is not None and time.monotonic() > running.deadline + grace

    def running_progress(self) -> tuple[Claim, Progress] | None:
        """The running job's claim and the latest progress its handler told, if any."""
        with self._lock:
            running = self._running
            if running is None or running.run is None or running.run.progress is None:
                return None
            return running.claim, running.run.progress

    def snapshot(self) -> Snapshot:
        with self._lock:
            running = self._running.job_id if self._running else None
            return Snapshot(running, [flight.claim for flight in self._flights.values()], self._recorded)

    # -- the claim session, after a reconnect ----------------------------------------

    def held(self) -> list[Claim]:
        """The claims of every job in flight, as held now."""
        with self._lock:
            return [flight.claim for flight in self._flights.values()]

    def presented(self, claim: Claim) -> Claim:
        """The claim to present for a job now: as held (after a reconnect, whether the
        session holds its lock again is what the re-lock found), or as given if not held."""
        with self._lock:
            flight = self._flights.get(claim.job_id)
            return flight.claim if flight is not None else claim

    def relocked(self, lost: set[int], taken_back: set[int]) -> None:
        """After a reconnect re-locked the jobs in flight: the session holds the lock of
        every one but ``lost``; those of ``taken_back`` (pending again, perhaps running
        elsewhere already) still in line are TAKEN_AWAY. (One started keeps its place:
        its outcome, under a lease gone, is rejected.)"""
        with self._lock:
            for flight in self._flights.values():
                flight.claim = replace(flight.claim, locked=flight.job_id not in lost)
            dropped = [flight for flight in self._line if flight.job_id in taken_back]
            if dropped:
                self._line = deque(flight for flight in self._line if flight.job_id not in taken_back)
                self._let_go(dropped, TAKEN_AWAY)

    # -- inside the lock ---------------------------------------------------------------

    def _let_go(self, flights: list[Flight], end: Stage) -> list[Claim]:
        for flight in flights:
            flight.stage = end
            del self._flights[flight.job_id]
        return [flight.claim for flight in flights] if end is not WRITTEN else []

    def _end_taken(self, taken: Taken) -> None:
        if taken is not self._taken:
            raise InvalidTransition("outcomes ended twice, or by a thread that did not take them")
        self._taken = None

    @staticmethod
    def _refuse(flight: Flight, stage: Stage) -> None:
        raise InvalidTransition(f"job {flight.job_id} is {flight.stage.value}, not {stage.value}")


class InvalidTransition(RuntimeError):
    """A transition asked of a job in another stage: a bug of the worker, never of a job."""
