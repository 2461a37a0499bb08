"""A worker's turns at the cores: its side of :mod:`jobq.daemon.boards.cores`.

Before each claim the loop asks :meth:`Turns.take` whether to claim now. A batch of short
jobs that keep the CPU busy (:attr:`jobq.daemon.worker.pacing.Pace.wants_a_core`) is
claimed and run holding a token; any other claim goes without one (a token held is given
back). With no token free, the outcomes the worker has buffered are written first (no job
waits on its turn), and it looks again after TURN_WAIT seconds, then less and less often
(up to TURN_WAIT_MAX), woken early by a signal, until it has one or is stopping. A
worker's first claim goes without a token while one is free, as a claim of one job does;
while every token is held it waits for one too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from jobq.daemon.boards.cores import CoreTokens
from jobq.daemon.boards.idle import IdleBoard
from jobq.daemon.wakeup import SelfPipe

# Seconds between two looks for a free token: the first after TURN_WAIT, each next one
# twice as long up to TURN_WAIT_MAX. Six workers waiting behind two tokens looked 200
# times a second each at a steady 5 ms, 10 ms of CPU a second each; a token given back
# when a job turns out long (it has run DEFER_RUNNING, 50 ms) is taken at most 40 ms later.
TURN_WAIT = 0.005
TURN_WAIT_MAX = 0.04


class Turns:
    def __init__(self, cores: CoreTokens, slot: int, *, wakeup: SelfPipe, stopping: threading.Event,
                 after_wait: Callable[[], None], board: IdleBoard | None = None) -> None:
        """``after_wait`` is the loop's check after any wait (a worker whose supervisor is
        gone stops); a wait for a turn shows on ``board`` (the pool may do without it)."""
        self.cores = cores
        self.slot = slot
        self.board = board
        self.first = slot % max(cores.tokens, 1)  # workers try the tokens in different orders
        self.wakeup = wakeup
        self.stopping = stopping
        self.after_wait = after_wait

    def take(self, wants_a_core: bool, flush: Callable[[], object], *, first: bool = False) -> bool:
        """Whether to claim now (False: the worker is stopping); ``flush`` writes the
        buffered outcomes before a wait. ``first``: the worker's first claim, which goes
        without a token while one is free, and waits for one while every token is held
        (other workers run short jobs of these queues: its first is likely one too)."""
        if first and not wants_a_core:
            if self.cores.take(self.first):
                self.cores.give_back()
                return True
            wants_a_core = True
        if not wants_a_core:
            self.cores.give_back()
            return True
        if self.cores.take(self.first):
            return True
        flush()
        if self.board is not None:
            self.board.waiting(self.slot)
        try:
            wait = TURN_WAIT
            while not self.stopping.is_set():
                self.wakeup.wait(wait)
                wait = min(wait * 2, TURN_WAIT_MAX)
                self.after_wait()
                if not self.stopping.is_set() and self.cores.take(self.first):
                    return True
            return False
        finally:
            if self.board is not None:
                self.board.mark(self.slot, False)

    def give_back(self) -> None:
        self.cores.give_back()
