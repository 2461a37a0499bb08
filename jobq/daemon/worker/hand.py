"""A worker's batch: what it has in hand, and how it sizes and splits its claims.

Short jobs are claimed in batches: the size doubles while every job of a batch ran
shorter than SHORT_JOB and drops to 1 when one ran longer. A job goes from claimed
straight to done with its started_at; one that has run DEFER_RUNNING seconds is
marked running, and the jobs still waiting behind it go back to the queue, so that
no idle worker waits behind a long job.

:class:`Hand` is the state that the worker's two threads share: the main thread
lines jobs up, runs them one at a time and forgets the ones recorded; the heartbeat
thread reads what is held and applies the long-job rule. Every method takes the
hand's own lock, and none does I/O.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from jobq.jobs.leases import Claim

DEFER_RUNNING = 0.05  # a job running longer than this is marked running, and its batch handed back
SHORT_JOB = DEFER_RUNNING  # a batch of jobs all shorter than this grows the next claim


def next_size(size: int, *, all_short: bool, cap: int) -> int:
    """The size of the next claim after a batch of ``size``."""
    return min(size * 2, cap) if all_short else 1


@dataclass(frozen=True, slots=True)
class Overdue:
    """A running job past DEFER_RUNNING: to be marked running, ``elapsed`` seconds after
    it started, with the jobs that waited behind it to be given back."""

    claim: Claim
    elapsed: float
    waiting: list[Claim]


@dataclass(frozen=True, slots=True)
class InHand:
    """What the heartbeat writes: the running job, the jobs held, the outcomes recorded."""

    running: int | None
    held: list[Claim]
    recorded: int


@dataclass
class _Running:
    claim: Claim
    started: float
    marked: bool = False
    deadline: float | None = None  # monotonic; the supervisor kills the worker there


class Hand:
    """The jobs a worker claimed and has not recorded yet (each with its lease and
    whether its session holds the lock), the ones waiting to run in claim order, and
    the one running now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, Claim] = {}
        self._waiting: deque[Claim] = deque()
        self._running: _Running | None = None
        self._recorded = 0

    # -- the main thread -------------------------------------------------------------

    def hold(self, claims: Iterable[Claim]) -> None:
        """Take newly claimed jobs in hand (locked or not: all are the worker's to record
        or give back)."""
        with self._lock:
            self._held.update((claim.job_id, claim) for claim in claims)

    def line_up(self, claims: Iterable[Claim]) -> None:
        """Queue held jobs to run, in the order given."""
        with self._lock:
            self._waiting.extend(claims)

    def start_next(self) -> Claim | None:
        """The next waiting job, now the running one; None when none waits."""
        with self._lock:
            if not self._waiting:
                return None
            claim = self._waiting.popleft()
            self._running = _Running(claim, time.monotonic())
            return claim

    def runs_until(self, deadline: float) -> None:
        """The running job's deadline (monotonic), past which the supervisor kills the
        worker."""
        with self._lock:
            if self._running is not None:
                self._running.deadline = deadline

    def finished(self) -> None:
        """The running job's handler returned."""
        with self._lock:
            self._running = None

    def take_waiting_where(self, withdrawn: Callable[[Claim], bool]) -> list[Claim]:
        """The waiting jobs for which ``withdrawn`` is true, no longer waiting (to be
        given back); the others keep their place in the line."""
        with self._lock:
            taken = [claim for claim in self._waiting if withdrawn(claim)]
            if taken:
                self._waiting = deque(claim for claim in self._waiting if not withdrawn(claim))
            return taken

    def take_waiting(self) -> list[Claim]:
        """The jobs still waiting, no longer waiting (to be given back)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
            return waiting

    def forget(self, job_ids: Iterable[int], *, recorded: int = 0) -> list[Claim]:
        """Let go of jobs whose outcome was written (``recorded`` of them were accepted)
        or that were given back; returns the claims let go."""
        with self._lock:
            self._recorded += recorded
            return [self._held.pop(job_id) for job_id in job_ids if job_id in self._held]

    def presented(self, claim: Claim) -> Claim:
        """The claim to present for a held job now: after a reconnect, whether the session
        holds its lock again is what the re-lock found."""
        with self._lock:
            return self._held.get(claim.job_id, claim)

    # -- the heartbeat thread --------------------------------------------------------

    def running_claim(self) -> Claim | None:
        """The claim of the job running now, as held (its lock as the session has it)."""
        with self._lock:
            return self._held.get(self._running.claim.job_id) if self._running else None

    def in_hand(self) -> InHand:
        with self._lock:
            running = self._running.claim.job_id if self._running else None
            return InHand(running, list(self._held.values()), self._recorded)

    def overdue(self) -> Overdue | None:
        """Once per job: the running job if it has run DEFER_RUNNING seconds, and the jobs
        waiting behind it, taken out of the line."""
        with self._lock:
            running = self._running
            if running is None or running.marked:
                return None
            elapsed = time.monotonic() - running.started
            if elapsed < DEFER_RUNNING:
                return None
            running.marked = True
            waiting, self._waiting = list(self._waiting), deque()
            return Overdue(running.claim, elapsed, waiting)

    def past_deadline(self, grace: float) -> bool:
        """Whether the running job has outlived its deadline by ``grace`` seconds: the
        supervisor, which kills at the deadline, did not (it never got the report)."""
        with self._lock:
            running = self._running
            return running is not None and running.deadline is not None and time.monotonic() > running.deadline + grace

    # -- the claim session, after a reconnect ----------------------------------------

    def held(self) -> list[Claim]:
        with self._lock:
            return list(self._held.values())

    def relocked(self, lost: set[int], taken_back: set[int]) -> None:
        """After a reconnect re-locked the held jobs: the session holds the lock of every
        one but ``lost``; those of ``taken_back`` (pending again, perhaps running elsewhere
        already) that were waiting to run here are let go. (One running or finished
        keeps its place: its outcome, under a lease gone, is rejected.)"""
        with self._lock:
            for job_id, claim in self._held.items():
                self._held[job_id] = replace(claim, locked=job_id not in lost)
            dropped = [claim.job_id for claim in self._waiting if claim.job_id in taken_back]
            if dropped:
                self._waiting = deque(claim for claim in self._waiting if claim.job_id not in taken_back)
                for job_id in dropped:
                    del self._held[job_id]
