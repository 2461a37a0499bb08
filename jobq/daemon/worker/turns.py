"""A worker's turns at the cores: its side of :mod:`jobq.daemon.boards.cores`.

Before each claim the loop asks :meth:`Turns.take` whether to claim now. A batch of short
jobs that keep the CPU busy (:attr:`jobq.daemon.worker.pacing.Pace.wants_a_core`) is
claimed and run holding a token; any other claim goes without one (a token held is given
back). With no token free, the outcomes the worker has buffered are written first (no job
waits on its turn), and it looks again every TURN_WAIT seconds, woken early by a signal,
until it has one or is stopping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from jobq.daemon.boards.cores import CoreTokens
from jobq.daemon.wakeup import SelfPipe

TURN_WAIT = 0.005  # seconds between two looks for a free token


class Turns:
    def __init__(self, cores: CoreTokens, slot: int, *, wakeup: SelfPipe, stopping: threading.Event,
                 after_wait: Callable[[], None]) -> None:
        """``after_wait`` is the loop's check after any wait (a worker whose supervisor is
        gone stops)."""
        self.cores = cores
        self.first = slot % max(cores.tokens, 1)  # workers try the tokens in different orders
        self.wakeup = wakeup
        self.stopping = stopping
        self.after_wait = after_wait

    def take(self, wants_a_core: bool, flush: Callable[[], object]) -> bool:
        """Whether to claim now (False: the worker is stopping); ``flush`` writes the
        buffered outcomes before a wait."""
        if not wants_a_core:
            self.cores.give_back()
            return True
        if self.cores.take(self.first):
            return True
        flush()
        while not self.stopping.is_set():
            self.wakeup.wait(TURN_WAIT)
            self.after_wait()
            if not self.stopping.is_set() and self.cores.take(self.first):
                return True
        return False

    def give_back(self) -> None:
        self.cores.give_back()
