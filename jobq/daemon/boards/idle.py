"""Which of a supervisor's workers wait idle on LISTEN, so that a notification for n
new jobs wakes n of them and not all (the thundering herd).

A small shared memory board, made by the supervisor before it forks, two bytes per
worker slot: IDLE while the worker waits on a working LISTEN connection (else BUSY),
and a count of the times it has read that connection. A worker takes a notification
for n jobs when fewer than n idle workers sit in lower slots; otherwise it leaves it to the
n lowest, which are idle, so that their next claim comes after the job's commit.

Every idle worker's connection gets the notification, but they do not all read it at
once: a lower worker may still be asleep (not yet scheduled, or its server process
not yet through) when a higher one reads it. So a worker that left a notification to
lower ones looks again TAKE_OVER seconds later, and if one of them is still idle and
has not read its connection since, and no other awake worker below is in line to do
so, it takes the notification itself and marks the sleeper COVERED (not counted idle
until it reads): a job does not wait for a worker that was not woken. That costs an
extra claim when the sleeper then wakes and claims too. A race costs at most an extra
claim or one poll interval; the poll bounds every wait anyway.
"""

from __future__ import annotations

import mmap
import time

SLOTS = 1024
# A slot's first byte. WAITING: waiting for a turn at the cores (jobq.daemon.worker.turns):
# not idle for a notification, and not needed by the pool while it lasts (jobq.daemon.pool).
BUSY, IDLE, COVERED, WAITING = 0, 1, 2, 3
_IDLE_BYTE = bytes([IDLE])
TAKE_OVER = 0.001  # seconds a lower idle worker has to read a notification left to it


class IdleBoard:
    def __init__(self, slots: int = SLOTS) -> None:
        # Anonymous and shared: inherited by every fork. [slot]: idle; [slots + slot]: reads.
        self._board = mmap.mmap(-1, 2 * slots)
        self._slots = slots

    @property
    def slots(self) -> int:
        return self._slots

    def mark(self, slot: int, idle: bool) -> None:
        self._board[slot] = IDLE if idle else BUSY

    def idle(self, slot: int) -> bool:
        return self._board[slot] == IDLE

    def waiting(self, slot: int) -> None:
        """The worker in ``slot`` waits for a turn at the cores (until it marks itself again)."""
        self._board[slot] = WAITING

    def spare(self, slot: int) -> bool:
        """Whether the worker in ``slot`` waits idle or for a turn at the cores: one the
        pool could do without while it lasts."""
        return self._board[slot] in (IDLE, WAITING)

    def cover(self, slot: int) -> None:
        """Another worker took over a notification left to the (idle, asleep) worker in
        ``slot``: others no longer count it idle until it reads its connection."""
        if self._board[slot] == IDLE:
            self._board[slot] = COVERED

    def wakes(self, slot: int, jobs: int) -> bool:
        """Whether the worker in ``slot`` should take a notification for ``jobs`` jobs."""
        return self._board[:slot].count(IDLE) < jobs

    def lowest_idle(self, below: int, n: int) -> list[int]:
        """The ``n`` lowest idle slots under ``below``."""
        found: list[int] = []
        at = self._board.find(_IDLE_BYTE, 0, below)
        while at >= 0 and len(found) < n:
            found.append(at)
            at = self._board.find(_IDLE_BYTE, at + 1, below)
        return found

    def reads(self, slot: int) -> int:
        """How many times (modulo 256) the worker in ``slot`` has read its connection."""
        return self._board[self._slots + slot]

    def count_read(self, slot: int) -> None:
        at = self._slots + slot
        self._board[at] = (self._board[at] + 1) & 0xFF
        if self._board[slot] == COVERED:
            self._board[slot] = IDLE

    def seat(self, slot: int) -> Seat:
        """The worker in ``slot``'s side of the board (made in that worker's process)."""
        return Seat(self, slot)


class Seat:
    """One worker's place on the board, as its listener uses it (:class:`jobq.daemon.listener.Waking`)."""

    def __init__(self, board: IdleBoard, slot: int) -> None:
        self.board = board
        self.slot = slot
        # Lower idle slots a notification was left to: their reads then, and when.
        self._left_to: dict[int, tuple[int, float]] = {}

    def reading(self) -> None:
        self.board.count_read(self.slot)

    def deaf(self) -> None:
        """Not listening any more (its connection broke): not idle for the others."""
        self.board.mark(self.slot, False)

    def forget(self) -> None:
        """The wait is over (the claim that follows covers every job notified so far)."""
        self._left_to.clear()

    def wakes(self, jobs: int) -> bool:
        """Take a notification for ``jobs`` jobs, or leave it to lower idle workers (noted)."""
        if self.board.wakes(self.slot, jobs):
            return True
        now = time.monotonic()
        for other in self.board.lowest_idle(self.slot, jobs):
            self._left_to.setdefault(other, (self.board.reads(other), now))
        return False

    def next_look(self) -> float | None:
        """When (monotonic) to look again whether a worker left a notification woke."""
        return min(at for _, at in self._left_to.values()) + TAKE_OVER if self._left_to else None

    def take_over(self, now: float) -> bool:
        """Whether to take, after all, a notification left TAKE_OVER ago or more to
        workers of which some are still idle and have not read their connection since
        (asleep): yes when fewer idle workers below this one are awake than are asleep,
        and then the lowest sleeper is covered, so that the workers above do not take it
        over too. Forgets those looked at."""
        due = {other: reads for other, (reads, at) in self._left_to.items() if at + TAKE_OVER <= now}
        for other in due:
            del self._left_to[other]
        asleep = [other for other, reads in sorted(due.items()) if self.board.idle(other) and self.board.reads(other) == reads]
        if not asleep:
            return False
        awake = [other for other in self.board.lowest_idle(self.slot, self.slot) if other not in asleep]
        if len(awake) >= len(asleep):
            return False
        self.board.cover(asleep[0])
        return True


def parse(payload: str) -> tuple[str, int]:
    """``"queue n"`` -> (queue, n). A payload without a count (raw NOTIFY by hand)
    counts as many jobs: everyone wakes."""
    queue, _, count = payload.rpartition(" ")
    if queue and count.isdigit():
        return queue, int(count)
    return payload, SLOTS
