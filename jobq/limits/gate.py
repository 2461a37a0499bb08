"""Whether a worker claims under limits: asked of the database at most once a second.

With no limit on its queues and no rule on keys, a worker claims with the plain claim
(:func:`jobq.jobs.leases.claim`), which costs nothing for flow control; the moment a
limit applies, within a second, it claims with :func:`jobq.limits.claims.claim`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.store.connections import Connection
from jobq.store.sql.limits import LIMITS_APPLY

RECHECK_SECONDS = 1.0
HELD_RECHECK_MAX = 0.4  # seconds: the longest an idle worker waits to look again at jobs held back
# A claim under rules on keys that finds every due job held back has re-decided every key it
# read (its walk of the keys' index: 2.4 ms a claim with 100 keys held, 8.8 ms with 1,000), and
# each notification of a new job woke an idle worker to make one: 100 enqueues a second of
# jobs whose keys were full kept PostgreSQL 1.2-1.4 cores busy with 1,000 keys held (0.13
# with the queue paused instead). After such a claim, a notification makes the worker claim
# again no sooner than HELD_WAKE_FACTOR times that claim's duration after it, and no sooner
# than HELD_WAKE_MIN (at most HELD_RECHECK_MAX): one claim answers the notifications of that
# gap, such claims take at most a tenth of a worker's time and come at most 20 times a
# second, and a job of a free key waits at most the gap.
HELD_WAKE_FACTOR = 9
HELD_WAKE_MIN = 0.05
# Most jobs a claim under limits takes while a rule on keys exists. A key's slot is held
# until its batch's outcomes are written, so the workers that hold keys are the ones that
# run: claims of up to 500 (JOBQ_CLAIM_BATCH then) let one worker take every free key, and
# 100 keys at concurrency 1 drained at 2,900-3,500 jobs/s against 8,900-9,400 at 50.
KEYED_CLAIM = 50
# Seconds a worker passes the keys it holds on to their next jobs (jobq.limits.claims.claim,
# ``pass_on``) before a claim of its frees them and leaves every key to the claim's
# decision again: no worker keeps a key longer than that.
PASS_FOR = 0.1


class Gate:
    """The answer for some queues, cached for RECHECK_SECONDS. Not thread-safe: one
    owner (the worker's loop)."""

    def __init__(self, *, every: float = RECHECK_SECONDS) -> None:
        self.every = every
        self.limited = False
        self.keyed = False  # a rule on keys exists: claims under limits take at most KEYED_CLAIM
        self.rated = False  # one of the queues has a rate: a claim asks when a full one opens
        self.checked = float("-inf")
        self.empty_claims = 0  # claims under limits in a row that took nothing
        self.empty_claim_ended = float("-inf")  # when the last of them came back (monotonic)
        self.empty_claim_seconds = 0.0  # and how long it took
        self.rate_opens_in: float | None = None  # seconds, as the last claim under limits left it
        self.whole_claim_at = float("-inf")  # when a claim last looked at every due job (PASS_FOR)

    def claimed(self, n: int, seconds: float = 0.0) -> None:
        """What the last claim took (counted only under limits), and how long it took."""
        self.empty_claims = 0 if n or not self.limited else self.empty_claims + 1
        if self.empty_claims:
            self.empty_claim_ended = time.monotonic()
            self.empty_claim_seconds = seconds

    def held_wake_gap(self) -> float:
        """Seconds an idle worker woken by a notification waits before it claims, taking the
        notifications that arrive meanwhile: while its last claim under rules on keys took
        nothing, until the gap HELD_WAKE_FACTOR and HELD_WAKE_MIN make of that claim's
        duration has passed since it (see there); 0 otherwise."""
        if not (self.keyed and self.empty_claims):
            return 0.0
        gap = min(max(HELD_WAKE_FACTOR * self.empty_claim_seconds, HELD_WAKE_MIN), HELD_RECHECK_MAX)
        return max(0.0, self.empty_claim_ended + gap - time.monotonic())

    def recheck_after(self, seconds: float) -> float:
        """How soon an idle worker whose due jobs were all held back looks again: ``seconds``
        after a claim that took something, doubling with each claim in a row that took
        nothing, up to HELD_RECHECK_MAX (idle workers polling a full key or queue would
        take the database's time from the workers that run its jobs); sooner when a
        queue's full rate lets a job start again (a 50/s queue starts its next 50 when
        its window opens, not up to 0.4 s after)."""
        wait = min(seconds * 2 ** min(self.empty_claims, 8), max(seconds, HELD_RECHECK_MAX))
        if self.limited and self.rate_opens_in is not None:
            wait = min(wait, max(self.rate_opens_in, 0.0))  # a full rate's window opens then
        return wait

    def due(self) -> bool:
        """Whether the cached answer is older than ``every``."""
        return time.monotonic() - self.checked >= self.every

    def check(self, conn: Connection, queues: Sequence[str]) -> bool:
        """Ask again for ``queues`` (one small read), and return the answer."""
        row = conn.execute(LIMITS_APPLY, {"queues": list(queues)}).fetchone()
        self.limited = bool(row and row[0])
        self.keyed = bool(row and row[1])
        self.rated = bool(row and row[2])
        if not self.rated:
            self.rate_opens_in = None  # no queue's rate to wait for
        self.checked = time.monotonic()
        return self.limited

    def claim_for(
        self, session: Any, queues: Sequence[str], *, hand_off: bool = False
    ) -> Callable[..., leases.Deferred[list[leases.Claim]]]:
        """The claim a worker makes next for ``queues``: the plain one (saying on the
        worker's row whether it waits for a hand-off, with ``hand_off``), or the one under
        limits (which asks when a full rate opens only while one of the queues has a
        rate, and passes keys on for PASS_FOR seconds at a time); asked again through
        ``session`` (its ``run(fn)``) when the answer is due. Either takes ``freed``, the
        claims whose slots the caller's transaction frees."""
        if self.due():
            session.run(lambda conn, _: self.check(conn, queues))
        if not self.limited:
            return functools.partial(_freeing_first, functools.partial(leases.claim, hand_off=hand_off))
        now = time.monotonic()
        pass_on = self.keyed and now - self.whole_claim_at < PASS_FOR
        if not pass_on:
            self.whole_claim_at = now
        return functools.partial(
            limited.claim, rate_opens_in=self._rate_opens if self.rated else None,
            most=KEYED_CLAIM if self.keyed else None, pass_on=pass_on,
        )

    def _rate_opens(self, seconds: float | None) -> None:
        self.rate_opens_in = seconds


def _freeing_first(
    claim: Callable[..., leases.Deferred[list[leases.Claim]]], conn: Connection, *args: Any,
    freed: Sequence[leases.Leased] = (), **kwargs: Any,
) -> leases.Deferred[list[leases.Claim]]:
    """The plain claim after freeing ``freed`` (slots of jobs claimed while a limit
    applied, written in the same transaction; usually none)."""
    limited.release_slots(conn, freed)
    return claim(conn, *args, **kwargs)
