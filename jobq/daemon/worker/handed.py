"""The jobs handed to a waiting worker by their enqueue (schema 28, ``JOBQ_HAND_OFF``):
claimed in its name, under a lease, in the enqueue's transaction, and named to it by a
notification on the hand-off channel, which its listener keeps
(:meth:`jobq.daemon.listener.Listener.take_handed`). The worker takes them by id and
lease instead of claiming; after a wait that no notification ended it also looks for
any claimed in its name that it does not hold (a hand-off it could not hear); leaving,
it says it waits no more and gives back what was handed meanwhile.
"""

from __future__ import annotations

import psycopg

from jobq.daemon import presence
from jobq.daemon.listener import Listener
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.session import ClaimSession
from jobq.jobs import leases
from jobq.jobs.leases import Claim


class HandedJobs:
    """What a worker takes of the jobs handed to it."""

    def __init__(self, session: ClaimSession, listener: Listener, in_flight: InFlight, *, lock_base: int) -> None:
        """``listener``: the worker's, whose ``hand_to`` is the worker's id (None: it takes
        no hand-offs, ``JOBQ_HAND_OFF=0``)."""
        self.session = session
        self.listener = listener
        self.in_flight = in_flight
        self.worker_id = listener.hand_to or ""
        self.lock_base = lock_base
        self.enabled = listener.hand_to is not None
        self.unheard = False  # a wait that no notification ended: look for unheard hand-offs

    def waited(self) -> None:
        """After a wait for work: whether a notification of ours ended it."""
        self.unheard = self.enabled and not self.listener.heard

    def take(self) -> bool | None:
        """Take the jobs handed to this worker: those the notifications named, by id and
        lease, or after a wait that none ended, any claimed in its name that it does not
        hold. They are in flight, in line, as a claim's; those whose advisory lock another
        session holds are given back (never run here). Whether any is to run here; None
        when there were none (claim as usual)."""
        claimed, refused = self._take()
        if refused:
            self.session.give_back(refused)
        return len(refused) < len(claimed) if claimed else None

    def leave(self) -> None:
        """No more hand-offs to this worker (an enqueue handing it a job now is waited
        for); the jobs handed meanwhile are in flight, in line, given back with the rest."""
        if self.enabled:
            self.session.run(lambda conn, _: presence.stop_waiting(conn, self.worker_id))
            self.unheard = True
            self.take()

    def _take(self) -> tuple[list[Claim], list[Claim]]:
        handed = self.listener.take_handed()
        unheard, self.unheard = self.unheard, False
        if not handed and not unheard:
            return [], []
        held = [claim.job_id for claim in self.in_flight.held()] if unheard else None

        def take(conn: psycopg.Connection, _: object) -> list[Claim]:
            return leases.take_handed(conn, handed, worker_id=self.worker_id, lock_base=self.lock_base,
                                      unheard=held).result()

        # In flight before the session's lock is let go, as a claim's jobs (WorkerLoop.exchange).
        with self.session.lock:
            claimed = self.session.run(take)
            return claimed, self.in_flight.hold(claimed)
