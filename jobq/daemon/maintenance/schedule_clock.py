"""When the maintenance leader fires periodic jobs (:func:`jobq.daemon.maintenance.firing.fire_due`).

The leader does not poll every second for a schedule whose next slot is an hour away:
after each firing it asks the database how long until the next slot of a schedule
that would fire, and sleeps until then or RECHECK, whichever is sooner (RECHECK also
bounds how long a schedule that became live again, its worker back, waits). A resume,
a new or changed schedule wakes it at once: a ``schedules`` notification on the
``jobq_control`` channel (:meth:`ScheduleClock.wake`).
"""

from __future__ import annotations

import time

from jobq.daemon.maintenance import firing
from jobq.store.connections import Connection
from jobq.settings import Settings

CONTROL_PAYLOAD = "schedules"  # on jobq_control: a schedule was created, changed or resumed
RECHECK = 5.0  # seconds: the longest the leader goes without looking
SOON = 0.01  # seconds: the shortest wait (a slot that came due while firing)
ELSEWHERE = 1.0  # seconds: a due schedule this leader could not take (another one, in a failover, holds it)


class ScheduleClock:
    """Owned by the maintenance process's loop (not thread-safe)."""

    def __init__(self, settings: Settings) -> None:
        self.stale_seconds = settings.stale_threshold
        self.catch_up_max = settings.catch_up_max
        self.next_at = 0.0  # time.monotonic() of the next look

    def wake(self) -> None:
        """Look at the next chance (a notification said something changed)."""
        self.next_at = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def wait_seconds(self) -> float:
        """How long the loop may sleep before it must look again."""
        return max(0.0, self.next_at - time.monotonic())

    def run_once(self, conn: Connection) -> int:
        """Fire what is due; schedule the next look. Returns the jobs enqueued."""
        self.next_at = time.monotonic() + RECHECK  # should this fail, the next try is not at once
        fired = firing.fire_due(conn, stale_seconds=self.stale_seconds, catch_up_max=self.catch_up_max)
        until = firing.seconds_until_due(conn, stale_seconds=self.stale_seconds)
        if until is not None:
            wait = until if until > 0 else SOON if fired.schedules else ELSEWHERE
            self.next_at = time.monotonic() + min(RECHECK, max(SOON, wait))
        return fired.jobs
