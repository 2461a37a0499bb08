"""How many workers a supervisor holds now: from ``JOBQ_MIN_WORKERS`` up to its
concurrency, as the jobs need them.

More worker processes than cores pay off only for jobs that wait (on I/O, a lock, a
sleep) or run long: while one waits, another runs. For short CPU-bound jobs they only
share the cores, each with a process to boot and two server sessions to open: eight
workers on two cores drained noop jobs about 12 % slower than two (benchmark/README.md,
"A pool that grows"), and an idle pool of eight holds 16 connections where a pool of
two holds four. So a supervisor starts ``least`` workers (by default the CPU
count), and doubles the pool, up to ``most``, whenever one of its workers reports that
its jobs block or run long (:class:`jobq.daemon.messages.Blocked`) while none of the
others waits idle for work. Beyond ``least``, one worker is retired a tick when one has
waited idle, or for a turn at the cores (others run short jobs: it is not needed while
they do), for IDLE_RETIRE seconds, or when no worker has reported jobs that wait or run
long for that long (the reason the pool grew is gone; short jobs keep every worker
busy now and then, none idle for a minute). ``least`` equal to ``most`` is a fixed pool.
"""

from __future__ import annotations

IDLE_RETIRE = 60.0  # seconds idle (or without a job that waits or runs long) before a worker beyond the least goes


class PoolSize:
    def __init__(self, least: int, most: int, now: float) -> None:
        """``now``: the supervisor's start (monotonic), when the pool is as it should be."""
        self.least = least
        self.most = most
        self.now = min(least, most)
        self.reported_at = now  # when a worker last reported jobs that wait or run long

    def reported(self, at: float, *, none_idle: bool) -> bool:
        """A worker reported jobs that wait or run long at ``at``: double, up to the most,
        if none of the workers waits idle; whether it grew."""
        self.reported_at = at
        grown = min(self.most, self.now * 2)
        if not none_idle or grown == self.now:
            return False
        self.now = grown
        return True

    def quiet(self, at: float) -> bool:
        """Whether no worker has reported such jobs for IDLE_RETIRE seconds at ``at``."""
        return at - self.reported_at >= IDLE_RETIRE

    def shrink(self) -> bool:
        """A worker beyond the least is not needed (idle, or no report for IDLE_RETIRE
        seconds): one fewer; whether it may go."""
        if self.now <= min(self.least, self.most):
            return False
        self.now -= 1
        return True

    def one_more(self) -> None:
        """TTIN: one worker more, now and at most."""
        self.most += 1
        self.now += 1

    def one_fewer(self) -> None:
        """TTOU: one worker fewer, now and at most (never none)."""
        if self.most > 1:
            self.most -= 1
        self.now = max(1, min(self.now - 1, self.most))
