"""A stand-in for a worker thread's count of blocking waits, for tests of
:class:`jobq.daemon.worker.pacing.Pace`."""

from __future__ import annotations


class Waits:
    """A thread's count of blocking waits, moved by hand."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n
