"""Which job types the live workers have handlers for, as each worker announces on its
row (``workers.handler_types``, schema 17): jobs of any other type would sit pending
until they are dead-lettered, so operators see them as "no handler" (``jobq inspect``,
the dashboard) and ``JOBQ_UNKNOWN_TYPES=reject`` refuses to enqueue them.

Nothing can be judged while no worker is live, or while a live worker of an older
release (which does not announce its types) is about: then every type passes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import jobq.settings
from jobq.errors import UnhandledType
from jobq.store.connections import Connection, connection
from jobq.store.sql.workers import WORKER_LIST_HANDLER_TYPES


@dataclass(frozen=True)
class Declared:
    """The job types the live workers have handlers for; ``judged`` False when that
    cannot tell a type apart (no live worker, or one that did not say)."""

    types: frozenset[str]
    judged: bool

    def without_handler(self, types: Iterable[str]) -> list[str]:
        """Of ``types``, those no live worker has a handler for (none when not judged), sorted."""
        return sorted(t for t in set(types) if self.judged and t not in self.types)


def pending_without_handler(pending_by_type: dict[str, int], found: Declared) -> dict[str, int]:
    """Of the pending jobs per type (``counts().types``' "pending"), the types no live
    worker has a handler for, with how many jobs of each wait."""
    return {t: pending_by_type[t] for t in found.without_handler(t for t, n in pending_by_type.items() if n)}


def declared(*, stale_seconds: float | None = None, conn: Connection | None = None) -> Declared:
    """What the workers whose heartbeat is younger than ``stale_seconds`` (default
    JOBQ_STALE_THRESHOLD) announced. Raises DatabaseUnavailable."""
    if stale_seconds is None:
        stale_seconds = jobq.settings.current().stale_threshold
    with connection(conn) as c:
        types, silent, live = c.execute(WORKER_LIST_HANDLER_TYPES, {"stale_seconds": stale_seconds}).fetchone()  # type: ignore[misc]
    return Declared(frozenset(types), judged=live > 0 and silent == 0)


def check(job_type: str, policy: str, *, conn: Connection | None = None) -> str | None:
    """Before enqueueing a job of ``job_type``: None when a live worker has a handler for
    it (or nothing can be judged); else, with ``policy`` "accept", a warning to show, and
    with "reject" (JOBQ_UNKNOWN_TYPES), :class:`UnhandledType` naming the known types."""
    found = declared(conn=conn)
    if not found.without_handler([job_type]):
        return None
    if policy == "reject":
        raise UnhandledType(job_type, sorted(found.types))
    return f"no live worker has a handler for job type {job_type!r}: it waits until one does"
