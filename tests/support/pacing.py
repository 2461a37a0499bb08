"""Stand-ins for a worker thread's count of blocking waits and for its times on a CPU
and waiting for one, for tests of :class:`jobq.daemon.worker.pacing.Pace`."""

from __future__ import annotations


class Waits:
    """A thread's count of blocking waits, moved by hand."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n


class Schedule:
    """A thread's seconds on a CPU and seconds waiting for one, moved by hand."""

    def __init__(self) -> None:
        self.on_cpu = 0.0
        self.waiting = 0.0

    def __call__(self) -> tuple[float, float]:
        return self.on_cpu, self.waiting
