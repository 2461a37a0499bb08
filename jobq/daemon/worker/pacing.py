"""How many jobs a worker claims at a time, how long it may keep a line of them, and
how long their outcomes wait to be written.

A claim is one round trip, and the outcomes of a batch are one more: the larger the
batch of short jobs, the less each job pays for them (a drain of noop jobs runs about
a third faster at 500 than at 50, and about 6 % faster again at 1,000: benchmark/README.md).
But every job a worker holds in line is one an idle peer cannot start. So the size
follows the jobs:

- it starts at 1 and doubles after a batch whose jobs all ran shorter than SHORT_JOB,
  up to the cap (``JOBQ_CLAIM_BATCH``) and to as many jobs as the last batch's took
  CLAIM_WORK seconds to run: noop jobs grow to the cap, 1 ms jobs to about 100, 20 ms
  jobs to 5;
- it drops to 1 after a job that ran longer (such a job is marked running at
  DEFER_RUNNING, and the jobs waiting behind it go back to the queue);
- a batch that has run for LINE_HOLD seconds gives back the jobs still in its line,
  when the jobs turned out slower than the last batch's (each shorter than
  DEFER_RUNNING, so none was marked running): no line is held for long whatever the
  cap.

The loop never claims more than its claim session's share of the server's lock table
(:func:`jobq.daemon.presence.lock_budget`), whatever the size here.

A batch also tells whether its jobs keep the CPU busy: if its thread blocked (gave up
its CPU to wait: a socket, a sleep, a lock) fewer times than it ran jobs, the next
batches of short jobs are run holding one of the supervisor's tokens
(:mod:`jobq.daemon.boards.cores`): no more workers run such batches at once than there
are cores. Jobs that wait on I/O need none. Counted in waits, not in the share of the
batch's time spent on the CPU: on a loaded machine a CPU-bound job also waits for a
core, but without blocking. A batch whose jobs blocked and spent WAITING_JOB seconds
each or more neither on a CPU nor waiting for one is one that more workers would run
more of at once (:attr:`Pace.waited`: the supervisor may grow its pool,
:mod:`jobq.daemon.pool`); so is a job that ran DEFER_RUNNING seconds, not counting its
waits for a CPU (:meth:`Pace.long_by_itself`). On a loaded machine a short CPU-bound
job can take that long waiting for a core: more workers would only wait too.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

DEFER_RUNNING = 0.05  # a job running longer than this is marked running, and its batch handed back
# Seconds an outcome may wait in the buffer while the batch goes on. Each write is a
# commit the worker waits for: at 5 ms a batch of 500 noop jobs (about 15 ms) waited for
# three, at 20 ms for one (with its next claim). What it costs: after a whole host is
# lost, up to 20 ms of its finished jobs run again (a worker's death alone loses none:
# the finished area), and a job's outcome shows up to 20 ms after its handler returned.
FLUSH_AFTER = 0.02
SHORT_JOB = DEFER_RUNNING  # a batch of jobs all shorter than this grows the next claim
CLAIM_WORK = 0.1  # seconds of handler time a claim may hold in line, judged by the last batch
LINE_HOLD = 0.5  # seconds a batch may run before the jobs still in its line go back
WAITING_JOB = 0.001  # seconds a job that blocks takes at least, on average, to be worth another worker


def blocking_waits() -> int:
    """How many times the calling thread has blocked: its voluntary context switches."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


# Where threads' waits are not counted (RUSAGE_THREAD is Linux's), no batch is CPU-bound.
THREAD_WAITS: Callable[[], int] | None = blocking_waits if hasattr(resource, "RUSAGE_THREAD") else None

SCHEDSTAT = "/proc/thread-self/schedstat"


class ThreadSchedule:
    """One thread's seconds on a CPU and seconds runnable but waiting for one, so far
    (Linux's schedstat of the thread); None where the kernel does not say. The first
    call, from the thread measured, opens the file; any thread may read it after."""

    __slots__ = ("_fd", "_absent")

    def __init__(self) -> None:
        self._fd: int | None = None
        self._absent = False

    def __call__(self) -> tuple[float, float] | None:
        if self._fd is None:
            if self._absent:
                return None
            try:
                self._fd = os.open(SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._absent = True
                return None
        try:
            on_cpu, waiting = os.pread(self._fd, 64, 0).split()[:2]
            return int(on_cpu) / 1e9, int(waiting) / 1e9
        except (OSError, ValueError):  # not as Linux writes it: the clock alone judges
            return None


def next_size(size: int, *, ran: int, seconds: float, all_short: bool, cap: int) -> int:
    """The size of the next claim after a batch of ``size`` whose ``ran`` jobs took
    ``seconds`` of handler time (see the module's docstring)."""
    if not all_short:
        return 1
    grown = min(size * 2, cap)
    if ran and seconds > 0:
        return max(1, min(grown, int(CLAIM_WORK * ran / seconds)))
    return grown


class Pace:
    """The claim size of one worker, the clocks of the batch it runs, and whether its
    last batch kept the CPU busy."""

    __slots__ = ("cap", "size", "cpu_bound", "waited", "_clock", "_waits", "_schedule", "_started", "_waits_before",
                 "_schedule_before", "_ran", "_seconds", "_all_short")

    def __init__(self, cap: int, clock: Callable[[], float] = time.monotonic,
                 waits: Callable[[], int] | None = THREAD_WAITS,
                 schedule: Callable[[], tuple[float, float] | None] | None = None) -> None:
        """``waits``: the running thread's count of blocking waits; ``schedule``: its
        seconds on a CPU and waiting for one (by default :class:`ThreadSchedule`, opened
        at the first batch: by the thread that runs the batches)."""
        self.cap = cap
        self._clock = clock
        self._waits = waits
        self._schedule = schedule if schedule is not None else ThreadSchedule()
        self._schedule_before: tuple[float, float] | None = None
        self.size = 1
        self.cpu_bound = False
        self.waited = False  # the last batch's jobs blocked, WAITING_JOB seconds each or more
        self._started = 0.0
        self._waits_before = 0
        self._ran, self._seconds, self._all_short = 0, 0.0, True

    @property
    def wants_a_core(self) -> bool:
        """Whether the next batch is one of short jobs that keep the CPU busy (run
        holding a token of :mod:`jobq.daemon.boards.cores`); a claim of one job is not."""
        return self.size > 1 and self.cpu_bound

    def batch_started(self) -> None:
        self._started = self._clock()
        self._waits_before = self._waits() if self._waits else 0
        self._schedule_before = self._schedule()
        self._ran, self._seconds, self._all_short = 0, 0.0, True

    def ran(self, seconds: float) -> bool:
        """Count a job of the batch that ran ``seconds``; whether the batch may go on
        (False once it has run LINE_HOLD seconds: give back what is in line)."""
        self._ran += 1
        self._seconds += seconds
        self._all_short = self._all_short and seconds < SHORT_JOB
        return self._clock() - self._started < LINE_HOLD

    def batch_over(self) -> None:
        self.cpu_bound = self._waits is not None and self._waits() - self._waits_before < self._ran
        self.waited = not self.cpu_bound and self._ran > 0 and self._blocked() >= self._ran * WAITING_JOB
        self.size = next_size(self.size, ran=self._ran, seconds=self._seconds, all_short=self._all_short, cap=self.cap)

    def long_by_itself(self, elapsed: float) -> bool:
        """Whether a job of this batch that has run ``elapsed`` seconds ran DEFER_RUNNING
        of them on a CPU or blocked, not counting the batch thread's waits for a CPU since
        the batch started (more than the job's own: a job that ran long by itself may be
        judged short on a loaded machine, never the other way). Any thread."""
        _, waiting = self._since_batch_started()
        return elapsed - waiting >= DEFER_RUNNING

    def _blocked(self) -> float:
        """Seconds the batch's jobs spent blocked: their handlers' time less the batch
        thread's time on a CPU and waiting for one since the batch started."""
        on_cpu, waiting = self._since_batch_started()
        return self._seconds - on_cpu - waiting

    def _since_batch_started(self) -> tuple[float, float]:
        """The batch thread's seconds on a CPU and waiting for one since the batch
        started; none where the kernel does not say (the clock alone judges)."""
        before = self._schedule_before
        now = self._schedule() if before is not None else None
        if before is None or now is None:
            return 0.0, 0.0
        return now[0] - before[0], now[1] - before[1]
