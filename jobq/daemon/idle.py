"""Which of a supervisor's workers wait idle on LISTEN, so that a notification for n
new jobs wakes n of them and not all (the thundering herd).

A small shared memory board, made by the supervisor before it forks, one byte per
worker slot: 1 while the worker waits on a working LISTEN connection. A worker takes
a notification for n jobs when fewer than n idle workers sit in lower slots. A race
costs at most an extra claim (two wake) or one poll interval (a worker that was
counted idle had just left the wait); the poll bounds every wait anyway.
"""

from __future__ import annotations

import mmap

SLOTS = 1024


class IdleBoard:
    def __init__(self, slots: int = SLOTS) -> None:
        self._board = mmap.mmap(-1, slots)  # anonymous and shared: inherited by every fork

    @property
    def slots(self) -> int:
        return len(self._board)

    def mark(self, slot: int, idle: bool) -> None:
        self._board[slot] = 1 if idle else 0

    def wakes(self, slot: int, jobs: int) -> bool:
        """Whether the worker in ``slot`` should take a notification for ``jobs`` jobs."""
        return self._board[:slot].count(1) < jobs


def parse(payload: str) -> tuple[str, int]:
    """``"queue n"`` -> (queue, n). A payload without a count (raw NOTIFY by hand)
    counts as many jobs: everyone wakes."""
    queue, _, count = payload.rpartition(" ")
    if queue and count.isdigit():
        return queue, int(count)
    return payload, SLOTS
