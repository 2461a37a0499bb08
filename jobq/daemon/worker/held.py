"""An idle worker's wait when its last claim under rules on keys found every due job held
back: woken by a notification meanwhile (or to take over one left to a worker that slept),
it goes on listening until the gap the gate gives after that claim has passed
(jobq.limits.gate.HELD_WAKE_FACTOR), so that one claim answers every notification of the
gap instead of one claim each."""

from __future__ import annotations

from jobq.daemon.boards.idle import Seat
from jobq.daemon.listener import Listener
from jobq.daemon.wakeup import SelfPipe
from jobq.limits.gate import Gate


def gather_wake_ups(listener: Listener, gate: Gate, wakeup: SelfPipe, seat: Seat) -> None:
    """Listen on, idle (taking the notifications that arrive), while the gate's gap lasts.
    A wake-up on ``wakeup`` (a stop, a message from the supervisor) or a job handed to
    this worker ends it at once. ``listener.woken_by`` is left as the first wake-up set it."""
    woken_by = listener.woken_by
    while (gap := gate.held_wake_gap()) > 0 and not listener.handed and not wakeup.pending():
        listener.wait(gap, [wakeup.read_fd], seat)
        woken_by = woken_by or listener.woken_by
    listener.woken_by = woken_by
